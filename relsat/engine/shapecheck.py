"""The shape check of rule-built e-nodes: TASO's validity rules, as TENSAT applies them.

Before anything is inserted, every e-node a right-hand side would create is type-checked from its
children's classes (SEMANTICS.md §5.1). The check reuses the graph layer's own shape inference
(:func:`relsat.graph.ops.infer`), so the e-graph and the graph builder can never disagree about
what is
valid, plus TENSAT's two rule-specific conditions: a rule-built ``concat`` needs both inputs of
rank ``ndim``, and a ``split`` must cut strictly inside its axis. New nodes are checked one height
at a time over Arrow and NumPy (one query in, one batch out): nodes with the same op, parameters
and child types share one check, so the Python work grows with the distinct types, not the nodes.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from relsat.engine.db import Database, sql_text
from relsat.graph.ops import ACTIVATIONS, PADDINGS, OpError, Params, TensorType, infer, int_params

#: Children an e-node can have (``c0`` … ``c7``; relsat.engine.egraph.MAX_CHILDREN, which
#: imports this module's callers: not imported here).
MAX_CHILDREN = 8

__all__ = ["check_new", "enode_params", "infer_enode", "shape_disagreements"]

_INTS = pa.list_(pa.int32())
_NEWNODE = pa.schema(
    [
        ("class", pa.int64()),
        ("op", pa.string()),
        *[(f"p{i}", pa.int32()) for i in range(6)],
        ("arity", pa.int32()),
        ("c0", pa.int64()),
        ("c1", pa.int64()),
        ("kind", pa.string()),
        ("shape", pa.list_(pa.int32())),
        ("shape2", pa.list_(pa.int32())),
        ("splits", pa.list_(pa.list_(pa.int32()))),
        ("all_weights", pa.bool_()),
        ("valid", pa.bool_()),
        ("rule", pa.int32()),
        ("c2", pa.int64()),
        ("c3", pa.int64()),
        ("s", pa.string()),
        *[(f"c{j}", pa.int64()) for j in range(4, 8)],
    ]
)


def infer_enode(
    op: str,
    p: list[int],
    children: list[tuple[str, TensorType, TensorType | None]],
    s: str = "",
) -> tuple[str, TensorType, TensorType | None]:
    """``(kind, type, type of piece 1 for a pair)`` of a rule-built e-node; raises OpError.

    ``children`` are ``(kind, type, type2)`` of the child classes in order; ``s`` the list
    parameter of a shape operator (``"0_2_1_3"``).

    >>> infer_enode("matmul", [0], [("tensor", TensorType((2, 3)), None),
    ...                            ("tensor", TensorType((3, 4)), None)])[1].shape
    (2, 4)
    """
    if op in ("split_0", "split_1"):
        kind, first, second = children[0]
        if kind != "pair" or second is None:
            raise OpError(f"{op} needs a split")
        return "tensor", first if op == "split_0" else second, None
    if any(kind != "tensor" for kind, _, _ in children):
        raise OpError(f"{op} needs tensor inputs")
    types = [t for _, t, _ in children]
    if op == "split":
        (x,) = types
        axis, cut = p[0], p[1]
        if not 0 <= axis < x.rank or not 0 < cut < x.shape[axis]:
            raise OpError(f"cannot split dim {axis} of {list(x.shape)} at {cut}")
        first, second = infer("split", Params(axis=axis, sizes=(cut, x.shape[axis] - cut)), types)
        return "pair", first, second
    if op == "concat" and any(t.rank != p[1] for t in types):
        raise OpError(f"concat of rank {p[1]} built from inputs of other ranks")
    (out,) = infer(op, enode_params(op, p, s), types)
    return "tensor", out, None


def enode_params(op: str, p: list[int], s: str = "") -> Params:
    """An e-node's parameters from its columns ``p0…p5`` and ``s`` (as the graph layer names
    them)."""
    floats = int_params(op, p)  # an op with a float parameter (float32 bits in p0)
    if floats is not None:
        return floats
    if op in ("matmul", "matmul_bias"):
        return Params(activation=ACTIVATIONS[p[0]])
    if op in ("conv2d", "conv2d_bias"):
        return Params(stride=(p[0], p[1]), padding=PADDINGS[p[2]], activation=ACTIVATIONS[p[3]])
    if op == "concat":
        return Params(axis=p[0])
    if op == "merge":
        return Params(count=p[0])
    if op in ("transpose", "reshape", "expand"):
        try:
            items = tuple(int(v) for v in s.split("_")) if s else ()
        except ValueError:
            raise OpError(f"bad list parameter {s!r}") from None
        if op in ("reshape", "expand"):
            return Params(shape=items)
        return Params(perm=items, shuffle=bool(p[0]))
    return Params()


def _type(shape: list[int] | None, splits: list[list[int]] | None) -> TensorType | None:
    if shape is None:
        return None
    return TensorType(tuple(shape), tuple(tuple(s) for s in splits) if splits else ())


_Analysis = tuple[str | None, TensorType | None, TensorType | None, bool, bool]
#: A type as the check sees it: kind, type, type of piece 1, valid. Interned: one id per value.
_Type = tuple[str | None, TensorType | None, TensorType | None, bool]
#: What a child class neither in the e-graph nor built by a lower level of the phase reads as.
_UNKNOWN: _Type = (None, None, None, True)


class _Types:
    """Types interned by value: equal types, one id (so that a node's check key is a row of
    integers, and nodes with the same op, parameters and child types are checked once)."""

    def __init__(self) -> None:
        self.values: list[_Type] = []
        self.ids: dict[_Type, int] = {}
        self.id(_UNKNOWN)

    def id(self, value: _Type) -> int:
        found = self.ids.get(value)
        if found is None:
            found = self.ids[value] = len(self.values)
            self.values.append(value)
        return found


def check_new(db: Database) -> int:
    """Shape-check every e-node the phase's right-hand sides would create, lowest height first,
    and store the results in ``newnode``; returns how many.

    Set-at-a-time over NumPy, one height at a time: a node's check key is its op, parameters and
    child types (interned ids); each distinct key is checked once (by :func:`infer_enode`) and
    the verdict is spread back to its nodes. A child is an existing class (its analysis comes
    with the row) or a node of a lower height of the phase."""
    rows = db.run_arrow("apply/fresh")
    n = rows.num_rows
    if n == 0:
        return 0
    types = _Types()
    arity = rows["arity"].to_numpy()
    child = np.stack([rows[f"c{j}"].to_numpy() for j in range(MAX_CHILDREN)], axis=1)
    ctype, cweights, built = _existing_children(db, child, arity, types)
    ops = pc.dictionary_encode(rows["op"]).combine_chunks()
    op_names = ops.dictionary.to_pylist()
    lists = pc.dictionary_encode(rows["s"]).combine_chunks()  # shape operators' list parameters
    list_texts = lists.dictionary.to_pylist()
    fixed = np.stack(
        [ops.indices.to_numpy(), arity, *[rows[f"p{i}"].to_numpy() for i in range(6)]], axis=1
    ).astype(np.int64)
    text = lists.indices.to_numpy().astype(np.int64)[:, None]
    result = np.zeros(n, dtype=np.int64)  # type id of each new node
    weights = np.ones(n, dtype=bool)
    done = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, bool))  # lower heights
    height, cls = rows["height"].to_numpy(), rows["class"].to_numpy()
    bounds = [0, *(np.flatnonzero(np.diff(height)) + 1).tolist(), n]
    checked = 0
    for lo, hi in itertools.pairwise(bounds):
        for j in range(MAX_CHILDREN):  # children built at a lower height of the phase
            idx = lo + np.flatnonzero(built[lo:hi, j])
            ctype[idx, j], cweights[idx, j] = _lookup(done, child[idx, j])
        keys, inverse = np.unique(  # op, arity, p0…p5, child types, list parameter
            np.concatenate([fixed[lo:hi], ctype[lo:hi], text[lo:hi]], axis=1),
            axis=0,
            return_inverse=True,
        )
        verdicts = np.empty(len(keys), dtype=np.int64)
        for k, key in enumerate(keys.tolist()):
            checked += 1
            if checked % 4096 == 0:  # a long phase stops at the time limit (Database.deadline)
                db.check_deadline()
            kids = [types.values[t] for t in key[8 : 8 + key[1]]]
            verdicts[k] = types.id(
                _check(
                    op_names[key[0]],
                    key[2:8],
                    [(kd, t, t2, True, ok) for kd, t, t2, ok in kids],
                    list_texts[key[-1]],
                )
            )
        result[lo:hi] = verdicts[inverse.ravel()]
        present = arity[lo:hi, None] > np.arange(MAX_CHILDREN)
        weights[lo:hi] = np.all(cweights[lo:hi] | ~present, axis=1)
        merged = np.concatenate([done[0], cls[lo:hi]])
        order = np.argsort(merged, kind="stable")
        done = (
            merged[order],
            np.concatenate([done[1], result[lo:hi]])[order],
            np.concatenate([done[2], weights[lo:hi]])[order],
        )
    db.insert_arrow("newnode", _newnodes(rows, result, weights, types))
    return n


def _existing_children(
    db: Database, child: np.ndarray, arity: np.ndarray, types: _Types
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node and child position: the child's type id (0, unknown, for a child built in the
    phase or past the arity), whether it computes from weights only, and whether it is built in
    the phase. The analyses of the existing child classes are read in one query, each class
    once (sql/apply/fresh_children.sql), and each one's type is built once."""
    present = arity[:, None] > np.arange(child.shape[1])
    ids = np.unique(child[present])
    with db.registered("relsat_children", pa.table({"id": pa.array(ids, pa.int64())})):
        found = db.run_arrow("apply/fresh_children")
    known = found["id"].to_numpy()
    rows = found.to_pylist()
    type_of = np.array(
        [
            types.id((r["kind"], _type(r["shape"], r["splits"]), _type(r["shape2"], None), True))
            for r in rows
        ],
        dtype=np.int64,
    )
    weights_of = np.array([bool(r["all_weights"]) for r in rows], dtype=bool)
    ctype = np.zeros(child.shape, dtype=np.int64)
    cweights = np.ones(child.shape, dtype=bool)
    if len(known):
        pos = np.minimum(np.searchsorted(known, child), len(known) - 1)
        existing = present & (known[pos] == child)
        ctype[existing] = type_of[pos[existing]]
        cweights[existing] = weights_of[pos[existing]]
    else:
        existing = np.zeros(child.shape, dtype=bool)
    return ctype, cweights, present & ~existing


def _lookup(
    done: tuple[np.ndarray, np.ndarray, np.ndarray], classes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Type ids and weights flags of ``classes`` among the nodes checked so far (``done``:
    sorted classes, their type ids and flags); unknown (0, False) for a class not among them."""
    sorted_cls, type_ids, flags = done
    if not len(sorted_cls) or not len(classes):
        return np.zeros(len(classes), np.int64), np.zeros(len(classes), bool)
    pos = np.minimum(np.searchsorted(sorted_cls, classes), len(sorted_cls) - 1)
    hit = sorted_cls[pos] == classes
    return np.where(hit, type_ids[pos], 0), hit & flags[pos]


def _newnodes(rows: pa.Table, result: np.ndarray, weights: np.ndarray, types: _Types) -> pa.Table:
    """The ``newnode`` rows: the fresh nodes with the analysis of their type ids ``result``."""
    take = pa.array(result)
    values = types.values

    def column(items: list[Any], kind: pa.DataType) -> pa.Array:
        return pa.array(items, kind).take(take)

    analysis = {
        "kind": column([v[0] for v in values], pa.string()),
        "shape": column([None if v[1] is None else list(v[1].shape) for v in values], _INTS),
        "shape2": column([None if v[2] is None else list(v[2].shape) for v in values], _INTS),
        "splits": column(
            [None if v[1] is None else [list(x) for x in v[1].splits] for v in values],
            pa.list_(_INTS),
        ),
        "all_weights": pa.array(weights),
        "valid": column([v[3] for v in values], pa.bool_()),
    }
    return pa.table(
        {name: analysis[name] if name in analysis else rows[name] for name in _NEWNODE.names}
    ).cast(_NEWNODE)


def _check(
    op: str,
    p: list[int],
    children: list[_Analysis],
    s: str = "",
) -> tuple[str | None, TensorType | None, TensorType | None, bool]:
    """The analysis of one new e-node: kind, type, type of piece 1, valid."""
    if not all(ok and t is not None for _, t, _, _, ok in children):
        return None, None, None, False
    try:
        kind, t, t2 = infer_enode(op, p, [(k, t, t2) for k, t, t2, _, _ in children], s)  # type: ignore[misc]
    except OpError:
        return None, None, None, False
    return kind, t, t2, True


def shape_disagreements(db: Database) -> list[tuple[int, str, str]]:
    """E-nodes whose own inferred type differs from their class's (``(id, op, why)``).

    An audit: every e-node of a class must compute a tensor of the class's shape.
    """
    bad = []
    for r in db.arrow(sql_text("analysis/enode_types")).to_pylist():
        p = [r[f"p{i}"] for i in range(6)]
        children = [
            (r[f"{s}_kind"], _type(r[f"{s}_shape"], None), _type(r[f"{s}_shape2"], None))
            for s in ("a", "b", "c")[: r["arity"]]
        ]
        try:
            kind, t, t2 = infer_enode(r["op"], p, children, r["s"])  # type: ignore[arg-type]
        except OpError as exc:
            bad.append((r["id"], r["op"], f"invalid: {exc}"))
            continue
        got = (kind, list(t.shape), None if t2 is None else list(t2.shape))
        want = (r["kind"], r["shape"], r["shape2"])
        if got != want:
            bad.append((r["id"], r["op"], f"computes {got}, class has {want}"))
    return bad
