"""Writing outputs atomically: into a temporary file beside the target, then renamed into place,
with the permissions a plain ``open`` gives; a failure (a :class:`~relsat.errors.RelsatError`
naming the path) leaves no partial file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from relsat.errors import RelsatError

__all__ = ["has_external_data", "temp_beside", "write_atomic"]


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    tmp = temp_beside(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise RelsatError(f"{path}: cannot write the output ({exc.strerror})") from None
    finally:
        if tmp.exists():
            tmp.unlink()


def temp_beside(path: Path) -> Path:
    """A temporary file in the output's folder (so the final rename is atomic), with the
    permissions a plain ``open`` would give (``0o666`` less the umask; ``mkstemp`` makes it
    owner-only); fails early, as a RelsatError, when the folder cannot be written."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    except OSError as exc:
        raise RelsatError(f"{path}: cannot write the output ({exc.strerror})") from None
    os.close(fd)
    os.chmod(name, 0o666 & ~_umask())
    return Path(name)


def _umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def has_external_data(onnx_bytes: bytes) -> bool:
    """Does the serialized ONNX model keep tensors in external files?"""
    import onnx

    tensors = onnx.load_from_string(onnx_bytes).graph.initializer
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in tensors)
