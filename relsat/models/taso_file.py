"""Reading TASO's serialized-graph ``.model`` files the way TENSAT reads them.

A file is a list of 4-line records (guid, op type, dependencies ``guid:index,…``, parameters) in
topological order; ``reference/models/FORMAT.md`` §1 describes it. :func:`parse_model` replays the
records through :class:`~relsat.graph.graph.GraphBuilder` with TENSAT's loading rules (FORMAT.md
§1.4):

* inputs and weights are named ``input_<k>`` and ``w_<k>``, ``k`` counting them in file order, so
  equal-shaped weights stay distinct;
* dependencies are taken in the listed order, even where an old exporter sorted them by guid;
* a pool's activation code is dropped (TENSAT builds ``(poolmax … 0)``) and its kernel weight
  ignored; a reshape's optional second dependency is ignored too;
* the output is the last record, and only what it reaches is kept: biases, pool kernels and
  other unused weights never enter TENSAT's e-graph, so they are not in the graph either.

Every record's declared dims are checked against the shapes its inputs really have. Anything wrong
raises :class:`~relsat.errors.ModelFormatError` with the path and the 1-based line of the offending
field.

>>> g = parse_model("100\\n0\\n10:0\\n1,4\\n101\\n8\\n100:0\\n1,4\\n")
>>> dict(g.op_counts()), g.output_shapes
({'relu': 1}, [(1, 4)])
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn

from relsat.errors import GraphError, ModelFormatError
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph
from relsat.graph.ops import ACTIVATIONS, PADDINGS

#: The activation codes TASO's files use (0 none, 1 sigmoid, 2 ReLU, 3 tanh; not relsat's ReLU6).
TASO_ACTIVATIONS = ACTIVATIONS[:4]

__all__ = ["BATCHNORM_EPSILON", "load_model", "parse_model"]

#: The files do not store batchnorm's epsilon; TASO's kernel uses cuDNN's minimum, 1e-5.
BATCHNORM_EPSILON = 1e-5

_INPUT_SOURCE, _WEIGHT_SOURCE = 10, 11
_INT = re.compile(r"-?[0-9]+")

# Field offsets inside a record: the line of a field is record.line + offset.
_GUID, _TYPE, _DEPS, _PARAMS = 0, 1, 2, 3


@dataclass(frozen=True)
class _Record:
    line: int  # 1-based line of the guid
    guid: int
    type: int
    deps: tuple[tuple[int, int], ...]
    params: tuple[int, ...]


class _Reader:
    """Builds the graph record by record; knows the path for error messages."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.builder = GraphBuilder()
        self.tensors: dict[int, Tensor] = {}
        self.counts = {"input": 0, "weight": 0}

    def fail(self, rec: _Record | int, field: int, message: str) -> NoReturn:
        line = rec.line if isinstance(rec, _Record) else rec
        raise ModelFormatError(message, path=self.path, line=line + field)

    # --- parameter helpers ----------------------------------------------------------------

    def count(self, rec: _Record, n: int) -> None:
        if len(rec.params) != n:
            self.fail(
                rec, _PARAMS, f"{_name(rec.type)} takes {n} parameters, got {len(rec.params)}"
            )

    def dims(self, rec: _Record, declared: Sequence[int], actual: Tensor, what: str) -> None:
        if tuple(declared) != actual.shape:
            self.fail(
                rec,
                _PARAMS,
                f"{_name(rec.type)} declares {what} dims {list(declared)}, "
                f"but its {what} has shape {list(actual.shape)}",
            )

    def code(self, rec: _Record, index: int, names: tuple[str, ...], what: str) -> str:
        value = rec.params[index]
        if not 0 <= value < len(names):
            choices = ", ".join(f"{i} {n}" for i, n in enumerate(names))
            self.fail(
                rec, _PARAMS, f"{what} code {value} (parameter {index}) is not one of {choices}"
            )
        return names[value]

    def positive(self, rec: _Record, what: str) -> tuple[int, ...]:
        if not rec.params or any(d < 1 for d in rec.params):
            self.fail(rec, _PARAMS, f"{what} dims {list(rec.params)} must be positive")
        return rec.params


# --- one function per op type: (reader, record, inputs in listed order) -> tensor -----------


def _leaf(r: _Reader, rec: _Record, xs: list[Tensor]) -> Tensor:
    kind = "input" if rec.type == 0 else "weight"
    dims = r.positive(rec, kind)
    name = f"{'input' if kind == 'input' else 'w'}_{r.counts[kind]}"
    r.counts[kind] += 1
    if kind == "input":
        return r.builder.input(dims, name=name)
    return r.builder.weight(dims, name=name)


def _conv2d(r: _Reader, rec: _Record, xs: list[Tensor]) -> Tensor:
    r.count(rec, 14)
    x, w = xs
    p = rec.params
    r.dims(rec, p[0:4], x, "input")
    r.dims(rec, p[4:8], w, "weight")
    padding = r.code(rec, 10, PADDINGS, "padding")
    activation = r.code(rec, 11, TASO_ACTIVATIONS, "activation")
    return r.builder.conv2d(x, w, stride=(p[8], p[9]), padding=padding, activation=activation)


def _pool(r: _Reader, rec: _Record, xs: list[Tensor]) -> Tensor:
    r.count(rec, 13)
    x, p = xs[0], rec.params
    r.dims(rec, p[0:4], x, "input")
    if p[4] != rec.type:
        r.fail(rec, _PARAMS, f"pool type parameter {p[4]} differs from the op type {rec.type}")
    padding = r.code(rec, 9, PADDINGS, "padding")
    r.code(rec, 10, TASO_ACTIVATIONS, "activation")  # checked, then dropped as TENSAT does
    pool = r.builder.maxpool2d if rec.type == 6 else r.builder.avgpool2d
    return pool(x, kernel=(p[5], p[6]), stride=(p[7], p[8]), padding=padding, activation="NONE")


def _same_shape(op: str) -> Callable[[_Reader, _Record, list[Tensor]], Tensor]:
    """ReLU, Sigmoid, Tanh, Dropout, EW add/mul, BatchNorm: the parameters are the input's dims."""

    def build(r: _Reader, rec: _Record, xs: list[Tensor]) -> Tensor:
        r.dims(rec, rec.params, xs[0], "input")
        if op == "batchnorm":
            x, scale, bias, mean, var = xs
            return r.builder.batchnorm(x, scale, bias, mean, var, epsilon=BATCHNORM_EPSILON)
        return r.builder.add_node(op, xs)[0]

    return build


def _concat(r: _Reader, rec: _Record, xs: list[Tensor]) -> Tensor:
    r.count(rec, 1)
    return r.builder.concat(rec.params[0], xs)


def _reshape(r: _Reader, rec: _Record, xs: list[Tensor]) -> Tensor:
    return r.builder.reshape(xs[0], r.positive(rec, "reshape output"))


def _transpose(r: _Reader, rec: _Record, xs: list[Tensor]) -> Tensor:
    """``ndim, perm…, shuffle`` (vgg.model) or the older ``perm…, shuffle`` (bts.model)."""
    x, p, rank = xs[0], rec.params, xs[0].rank
    if len(p) == rank + 2:
        if p[0] != rank:
            r.fail(
                rec,
                _PARAMS,
                f"Transpose declares ndim {p[0]}, but its input has shape {list(x.shape)}",
            )
        perm = p[1:-1]
    elif len(p) == rank + 1:
        perm = p[:-1]
    else:
        r.fail(
            rec,
            _PARAMS,
            f"Transpose of a rank-{rank} input takes {rank + 2} parameters "
            f"(ndim, perm, shuffle) or {rank + 1} (perm, shuffle), got {len(p)}",
        )
    if p[-1] not in (0, 1):
        r.fail(rec, _PARAMS, f"Transpose shuffle flag {p[-1]} is not 0 or 1")
    return r.builder.transpose(x, perm, shuffle=bool(p[-1]))


def _matmul(r: _Reader, rec: _Record, xs: list[Tensor]) -> Tensor:
    r.count(rec, 2)
    activation = r.code(rec, 0, TASO_ACTIVATIONS, "activation")
    if rec.params[1] != xs[0].rank:
        r.fail(
            rec,
            _PARAMS,
            f"MatMul declares output rank {rec.params[1]}, but its first "
            f"operand has shape {list(xs[0].shape)}",
        )
    return r.builder.matmul(xs[0], xs[1], activation=activation)


_Build = Callable[[_Reader, _Record, list[Tensor]], Tensor]

#: TASO op type -> (TASO name, fewest and most dependencies, builder). The dependencies beyond
#: the ones a builder uses (a pool's kernel, a reshape's shape tensor) are checked, then ignored.
_OPS: dict[int, tuple[str, int, int | None, _Build]] = {
    0: ("Input", 1, 1, _leaf),
    1: ("Weight", 1, 1, _leaf),
    3: ("Conv2D", 2, 2, _conv2d),
    4: ("Dropout", 1, 1, _same_shape("dropout")),
    6: ("MaxPool2D", 1, 2, _pool),
    7: ("AvgPool2D", 1, 2, _pool),
    8: ("ReLU", 1, 1, _same_shape("relu")),
    9: ("Sigmoid", 1, 1, _same_shape("sigmoid")),
    10: ("Tanh", 1, 1, _same_shape("tanh")),
    11: ("BatchNorm", 5, 5, _same_shape("batchnorm")),
    12: ("Concat", 2, None, _concat),
    14: ("Reshape", 1, 2, _reshape),
    15: ("Transpose", 1, 1, _transpose),
    16: ("EW add", 2, 2, _same_shape("ewadd")),
    17: ("EW mul", 2, 2, _same_shape("ewmul")),
    18: ("MatMul", 2, 2, _matmul),
}
#: TASO op types that TENSAT's loader does not handle either.
_UNSUPPORTED = {2: "Any", 5: "Linear", 13: "Split", 19: "Mul", 20: "Enlarge", 21: "MergeGConv"}


def _name(op_type: int) -> str:
    return _OPS[op_type][0] if op_type in _OPS else f"op type {op_type}"


# --- reading --------------------------------------------------------------------------------


def _lines(text: str, r: _Reader) -> list[str]:
    if not text.strip():
        r.fail(1, 0, "empty file: no records")
    lines = text.split("\n")
    if lines[-1] == "":  # the newline after the last line; a blank line is an error, as it
        lines.pop()  # could be an empty field
    if len(lines) % 4:
        start = len(lines) - len(lines) % 4 + 1
        r.fail(
            start,
            0,
            f"{len(lines)} lines is not a multiple of 4: the record starting at "
            f"line {start} is incomplete",
        )
    return [line.rstrip("\r") for line in lines]


def _int(r: _Reader, text: str, line: int, what: str) -> int:
    text = text.strip()
    if not _INT.fullmatch(text):
        r.fail(line, 0, f"{what} {text!r} is not an integer")
    return int(text)


def _records(lines: list[str], r: _Reader) -> list[_Record]:
    """Every record with its fields as integers; duplicate and reserved guids refused."""
    records: list[_Record] = []
    seen: dict[int, int] = {}
    for start in range(1, len(lines) + 1, 4):
        guid_text, type_text, deps_text, params_text = lines[start - 1 : start + 3]
        guid = _int(r, guid_text, start, "guid")
        if guid in (_INPUT_SOURCE, _WEIGHT_SOURCE):
            r.fail(
                start,
                _GUID,
                f"guid {guid} is reserved for the graph's "
                f"{'inputs' if guid == _INPUT_SOURCE else 'weights'}",
            )
        if guid in seen:
            r.fail(start, _GUID, f"duplicate guid {guid} (first defined at line {seen[guid]})")
        seen[guid] = start
        op_type = _int(r, type_text, start + _TYPE, "op type")
        deps = []
        for item in deps_text.split(","):
            src, colon, index = item.partition(":")
            if not colon:
                r.fail(start, _DEPS, f"dependency {item.strip()!r} is not <guid>:<index>")
            deps.append(
                (
                    _int(r, src, start + _DEPS, "dependency guid"),
                    _int(r, index, start + _DEPS, "dependency index"),
                )
            )
        params = tuple(_int(r, p, start + _PARAMS, "parameter") for p in params_text.split(","))
        records.append(_Record(start, guid, op_type, tuple(deps), params))
    return records


def _inputs(r: _Reader, rec: _Record, defined_at: dict[int, int]) -> list[Tensor]:
    """The record's dependencies as tensors, in the listed order."""
    name, fewest, most, _ = _OPS[rec.type]
    n = len(rec.deps)
    if n < fewest or (most is not None and n > most):
        wanted = f"{fewest}" if fewest == most else f"{fewest} to {most}" if most else f"{fewest}+"
        r.fail(rec, _DEPS, f"{name} takes {wanted} dependencies, got {n}")
    for src, index in rec.deps:
        if index != 0:
            r.fail(
                rec,
                _DEPS,
                f"dependency {src}:{index}: source index {index} is not 0 "
                "(no multi-output operator exists in this format)",
            )
    if rec.type in (0, 1):
        source = _INPUT_SOURCE if rec.type == 0 else _WEIGHT_SOURCE
        if rec.deps[0][0] != source:
            r.fail(rec, _DEPS, f"{name} must depend on {source}:0, not {rec.deps[0][0]}:0")
        return []
    xs = []
    for src, _ in rec.deps:
        if src not in r.tensors:
            if src in (_INPUT_SOURCE, _WEIGHT_SOURCE):
                why = "is a reserved source that only Input/Weight records may use"
            elif src == rec.guid:
                why = "is the record itself"
            elif src in defined_at:
                why = f"is defined later, at line {defined_at[src]} (forward reference)"
            else:
                why = "is not defined in the file"
            r.fail(rec, _DEPS, f"dependency guid {src} {why}")
        xs.append(r.tensors[src])
    return xs


def _reason(exc: GraphError) -> str:
    if exc.shapes is None:
        return exc.reason
    shapes = ", ".join("[" + ",".join(map(str, s)) + "]" for s in exc.shapes)
    return f"{exc.reason} (input shapes {shapes})"


def parse_model(
    text: str, *, path: str | None = None, outputs: Literal["last", "sinks"] = "last"
) -> Graph:
    """The graph of a ``.model`` file's text, restricted to what its outputs reach.

    ``outputs="last"`` makes the last record the output, as TENSAT does; ``outputs="sinks"``
    makes every operator record that nothing reads an output, in file order (``bts.model`` has
    nine). ``path`` only labels errors.
    """
    if outputs not in ("last", "sinks"):
        raise ValueError(f"outputs must be 'last' or 'sinks', not {outputs!r}")
    r = _Reader(path)
    records = _records(_lines(text, r), r)
    defined_at = {rec.guid: rec.line for rec in records}
    used: set[int] = set()
    for rec in records:
        if rec.type not in _OPS:
            what = (
                f"op type {rec.type} ({_UNSUPPORTED[rec.type]}) is not supported"
                if rec.type in _UNSUPPORTED
                else f"unknown op type {rec.type}"
            )
            r.fail(rec, _TYPE, what)
        name, _, _, build = _OPS[rec.type]
        xs = _inputs(r, rec, defined_at)
        try:
            r.tensors[rec.guid] = build(r, rec, xs)
        except GraphError as exc:  # keep the builder's reason and shapes, add path and line
            r.fail(rec, _PARAMS, f"{name} record {rec.guid}: {_reason(exc)}")
        used.update(x.ref.node for x in xs)
    if outputs == "last":
        outs = [r.tensors[records[-1].guid]]
    else:
        outs = [
            r.tensors[rec.guid]
            for rec in records
            if rec.type not in (0, 1) and r.tensors[rec.guid].ref.node not in used
        ]
        if not outs:
            r.fail(1, 0, "no operator records, so no sinks")
    return r.builder.build(outs).reachable()


def load_model(
    path: str | os.PathLike[str], *, outputs: Literal["last", "sinks"] = "last"
) -> Graph:
    """Read and parse the ``.model`` file at ``path`` (see :func:`parse_model`)."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ModelFormatError("not ASCII text", path=str(path), line=line) from None
    return parse_model(text, path=str(path), outputs=outputs)
