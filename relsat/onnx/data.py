"""External tensor data: reading it when a model is imported, writing it beside a model too big
for one protobuf file.

ONNX keeps a tensor's bytes outside the model file when the tensor says so
(``data_location = EXTERNAL``, with ``location``, ``offset`` and ``length`` entries), the location
relative to the model file's folder — what ``onnx.load(path, load_external_data=True)`` reads and
what exporters write for models over 2 GB. On import (:func:`resolve`), every external file must
exist (else one :class:`~relsat.onnx.OnnxError` naming the file and the tensor); small tensors,
non-float ones and Constant values are read into the model at once (shape inference and opaque
nodes need their values), large float initializers are read once, straight into an array, when
the importer takes them (:func:`read_array`). On export (:func:`write_model`) a model whose
serialized size exceeds :data:`MAX_INLINE_BYTES` is written as ``NAME`` plus ``NAME.data``
beside it, both renamed into place from a temporary folder after ``onnx.checker`` accepted them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_tensor

from relsat.onnx.errors import OnnxError

__all__ = [
    "INLINE_BYTES",
    "MAX_INLINE_BYTES",
    "read_array",
    "resolve",
    "save_beside",
    "write_model",
]

#: Serialized models above this size are written with external data (protobuf's limit is 2 GiB).
MAX_INLINE_BYTES = 2_000_000_000
#: External tensors up to this size are read into the model on import (shape constants, ...).
INLINE_BYTES = 1 << 16
#: When a model is written with external data, tensors below this size stay in the model file.
EXTERNAL_MIN_BYTES = 1024


def _stored_tensors(model: onnx.ModelProto) -> Iterator[tuple[TensorProto, bool]]:
    """Every tensor stored in the main graph: ``(tensor, is_initializer)``."""
    for tensor in model.graph.initializer:
        yield tensor, True
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t, False
            elif attr.type == onnx.AttributeProto.TENSORS:
                for t in attr.tensors:
                    yield t, False


def _external(tensor: TensorProto) -> bool:
    return tensor.data_location == TensorProto.EXTERNAL


def resolve(model: onnx.ModelProto, data_dir: str | None, path: str | None) -> bool:
    """Check ``model``'s external data files (relative to ``data_dir``, the model file's folder)
    and read the small, non-float and Constant-value tensors into ``model``; returns whether
    large float initializers remain external (:func:`read_array` reads them)."""
    remaining = False
    for tensor, is_init in _stored_tensors(model):
        if not _external(tensor):
            continue
        location = ExternalDataInfo(tensor).location
        if data_dir is None:
            raise OnnxError(
                f"the data is in the external file {location!r}: load the model from its path "
                "so that the file can be found",
                path=path,
                tensor=tensor.name,
            )
        if not os.path.isfile(os.path.join(data_dir, location)):
            raise OnnxError(
                f"external data file {location!r} is missing (looked in {data_dir})",
                path=path,
                tensor=tensor.name,
            )
        size = ExternalDataInfo(tensor).length or (1 << 62)
        if is_init and tensor.data_type == TensorProto.FLOAT and size > INLINE_BYTES:
            remaining = True
            continue
        try:
            load_external_data_for_tensor(tensor, data_dir)
        except Exception as exc:
            raise _read_error(exc, location, path, tensor.name) from None
    return remaining


def read_array(tensor: TensorProto, data_dir: str | None, path: str | None) -> np.ndarray:
    """A tensor's values, read from its external file when it has one."""
    try:
        return numpy_helper.to_array(tensor, data_dir or "")
    except Exception as exc:
        location = ExternalDataInfo(tensor).location if _external(tensor) else "the model"
        raise _read_error(exc, location, path, tensor.name) from None


def _read_error(exc: BaseException, location: str, path: str | None, name: str) -> OnnxError:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return OnnxError(f"cannot read external data from {location!r}: {text}", path=path, tensor=name)


def save_beside(model: onnx.ModelProto, folder: str, name: str) -> str:
    """Save ``model`` as ``folder/name``, with external data in ``folder/name.data`` when it is
    too big for one file; returns the model file's path."""
    target = os.path.join(folder, name)
    if model.ByteSize() <= MAX_INLINE_BYTES:
        with open(target, "wb") as f:
            f.write(model.SerializeToString())
        return target
    copy = onnx.ModelProto()  # onnx.save_model moves the data out of the model it writes
    copy.CopyFrom(model)
    onnx.save_model(
        copy,
        target,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=f"{name}.data",
        size_threshold=EXTERNAL_MIN_BYTES,
    )
    return target


def write_model(model: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
    """Write ``model`` to ``path`` (with ``path.data`` beside it when too big for one file):
    first into a temporary folder beside ``path``, then renamed into place, so a failure
    (:class:`OnnxError` naming the path) leaves no partial file."""
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    name = os.path.basename(target)
    tmp = None
    try:
        tmp = tempfile.mkdtemp(prefix=".relsat-", suffix=".tmp", dir=folder)
        written = save_beside(model, tmp, name)
        data = f"{written}.data"
        if os.path.exists(data):
            onnx.checker.check_model(written)  # the data file is where the model says
            os.replace(data, os.path.join(folder, f"{name}.data"))
        os.replace(written, target)
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        raise OnnxError(
            f"cannot write: {getattr(exc, 'strerror', None) or exc}", path=target
        ) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
