"""The bench's one way to turn a torch module into an ONNX file, cached under a folder.

Two exporters (``EXPORTERS``):

* ``legacy``: the TorchScript exporter, ``torch.onnx.export(dynamo=False)``, opset 17,
  constant folding on — what most users' tutorials call;
* ``dynamo``: today's default, ``torch.onnx.export(dynamo=True)`` (torch.export, then
  onnxscript's optimizer), at its default opset; weights inside the file (``external_data=False``)
  so that a cached export is one file.

Both in eval mode, batch 1; static shapes unless ``dynamic`` names dynamic axes (legacy:
``dynamic_axes``, the output getting the first input's; dynamo: ``dynamic_shapes`` with
``torch.export.Dim.DYNAMIC``, which names the dims itself: ``s21``, ``s35``, ...).
:func:`export` writes ``<directory>/<name>.onnx`` with
its example inputs in ``<name>.inputs.npz`` and a ``<name>.json`` that records the exporter and
the versions (torch, transformers, onnxscript, the opset, a hash of the bench's model sources);
a later call with the same versions reuses the files. Importing this module does not import
torch; :func:`export` does.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata as md
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

EXPORTERS = ("legacy", "dynamo")
#: The legacy exporter's opset (relsat writes opset 17 too).
LEGACY_OPSET = 17
HERE = Path(__file__).resolve().parent
#: The files whose code decides what a cached export contains.
SOURCES = (
    "exports.py",
    "architectures.py",
    "hfmodels.py",
    "corpus.py",
    "groupnorm.py",
    "hffamilies.py",
)


@dataclass(frozen=True)
class Export:
    """An ONNX file, its example inputs by name, and how it was made (one line)."""

    path: Path
    inputs: dict[str, np.ndarray]
    exporter: str


def versions(exporter: str) -> dict[str, str]:
    """What a cached export depends on."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((HERE / name).read_bytes())
    out = {"exporter": exporter, "source": digest.hexdigest()[:16]}
    for package in ("torch", "transformers", "onnxscript"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[package] = md.version(package)
    if exporter == "legacy":
        out["opset"] = str(LEGACY_OPSET)
    return out


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 sent to stderr: exporters and simplifiers print progress to stdout,
    which is the bench's table."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def torch_export(
    model: Any,
    example: Sequence[Any],
    path: Path,
    input_names: Sequence[str],
    exporter: str,
    dynamic: Mapping[str, Mapping[int, str]] | None = None,
    opset: int | None = None,
) -> str:
    """Write ``model`` called on ``example`` to ``path`` with ``exporter`` (``dynamic``: input
    name → {axis: dim name} of its dynamic axes; ``opset``: dynamo's opset instead of its
    default); a one-line description of the export."""
    import inspect

    import torch

    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    options: dict[str, Any] = {"input_names": list(input_names), "output_names": ["output"]}
    if exporter == "legacy":
        options |= {"dynamo": False, "opset_version": LEGACY_OPSET, "do_constant_folding": True}
        what = f"opset {LEGACY_OPSET}"
        if dynamic:
            first = dict(dynamic[input_names[0]])
            options["dynamic_axes"] = {**{k: dict(v) for k, v in dynamic.items()}, "output": first}
    else:
        options |= {"dynamo": True, "external_data": False}
        what = "default opset" if opset is None else f"opset {opset}"
        if opset is not None:
            options["opset_version"] = opset
        if dynamic:
            shapes = tuple(
                {axis: _dynamo_dim(dim, dynamic) for axis, dim in dynamic.get(name, {}).items()}
                for name in input_names
            )
            params = inspect.signature(model.forward).parameters.values()
            varargs = [p.kind is p.VAR_POSITIONAL for p in params]
            if any(varargs):  # ``forward(a, b, *rest)``: the rest's shapes as one tuple
                i = varargs.index(True)
                options["dynamic_shapes"] = (*shapes[:i], shapes[i:])
            else:
                options["dynamic_shapes"] = shapes
    if dynamic:
        what += ", dynamic axes " + ", ".join(f"{k}{sorted(v.items())}" for k, v in dynamic.items())
    with warnings.catch_warnings(), torch.no_grad(), stdout_to_stderr():
        warnings.simplefilter("ignore")  # TorchScript's deprecation, tracer warnings
        torch.onnx.export(model.eval(), tuple(example), str(path), **options)
    return f"torch {torch.__version__} torch.onnx.export(dynamo={exporter == 'dynamo'}), {what}"


def _dynamo_dim(dim: str, dynamic: Mapping[str, Mapping[int, str]]) -> Any:
    """torch.export's dim for a dim named ``dim``: ``Dim.DYNAMIC`` (the exporter names it),
    or, for a dim another dim is spelled with (``past`` of ``past + 1``), a named ``Dim``, and
    for ``name + k`` that ``Dim`` plus ``k`` (a derived dim: the exporter writes the sum)."""
    import torch

    base, _, plus = dim.partition(" + ")
    named = [d for axes in dynamic.values() for d in axes.values()]
    spelled = {d.partition(" + ")[0] for d in named if " + " in d}
    if base not in spelled:
        return torch.export.Dim.DYNAMIC
    dim_ = torch.export.Dim(base, min=1, max=1 << 16)
    return dim_ + int(plus) if plus else dim_


def export(
    name: str,
    build: Callable[[], tuple[Any, Sequence[Any], Sequence[str]]],
    directory: Path,
    exporter: str = "legacy",
    dynamic: Mapping[str, Mapping[int, str]] | None = None,
    opset: int | None = None,
) -> Export:
    """``directory/<name>.onnx``: ``build()``'s ``(module, example inputs, input names)``
    exported with ``exporter``, ``dynamic`` axes and (dynamo) ``opset`` (reused from an earlier
    call with the same :func:`versions`)."""
    directory.mkdir(parents=True, exist_ok=True)
    path, npz, meta = (directory / f"{name}{ext}" for ext in (".onnx", ".inputs.npz", ".json"))
    wanted = versions(exporter)
    if dynamic:
        wanted["dynamic"] = repr(sorted((k, sorted(v.items())) for k, v in dynamic.items()))
    if opset is not None:
        wanted["opset"] = str(opset)
    if path.exists() and npz.exists() and meta.exists():
        stored = json.loads(meta.read_text())
        if stored.get("versions") == wanted:
            with np.load(npz) as data:
                return Export(path, {k: data[k] for k in data.files}, stored["exporter"])
    model, example, names = build()
    tmp = path.with_name(path.name + ".tmp")
    described = torch_export(model, example, tmp, names, exporter, dynamic, opset)
    tmp.replace(path)
    inputs = {n: t.numpy() for n, t in zip(names, example, strict=True)}
    np.savez(npz, **inputs)
    meta.write_text(json.dumps({"versions": wanted, "exporter": described}, indent=1))
    return Export(path, inputs, described)
