"""The shape check of rule-built e-nodes: TASO's validity rules, as TENSAT applies them.

Before anything is inserted, every e-node a right-hand side would create is type-checked from its
children's classes (SEMANTICS.md §5.1). The check reuses the graph layer's own shape inference
(:func:`relsat.ops.infer`), so the e-graph and the graph builder can never disagree about what is
valid, plus TENSAT's two rule-specific conditions: a rule-built ``concat`` needs both inputs of
rank ``ndim``, and a ``split`` must cut strictly inside its axis. New nodes are checked one level
of the phase at once, over Arrow: one query in, one batch out.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from relsat.db import Database, sql_text
from relsat.ops import ACTIVATIONS, PADDINGS, OpError, Params, TensorType, infer

__all__ = ["check_new", "infer_enode", "shape_disagreements"]

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
    ]
)


def infer_enode(
    op: str,
    p: list[int],
    children: list[tuple[str, TensorType, TensorType | None]],
) -> tuple[str, TensorType, TensorType | None]:
    """``(kind, type, type of piece 1 for a pair)`` of a rule-built e-node; raises OpError.

    ``children`` are ``(kind, type, type2)`` of the child classes in order.

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
    (out,) = infer(op, _params(op, p), types)
    return "tensor", out, None


def _params(op: str, p: list[int]) -> Params:
    if op in ("matmul", "matmul_bias"):
        return Params(activation=ACTIVATIONS[p[0]])
    if op in ("conv2d", "conv2d_bias"):
        return Params(stride=(p[0], p[1]), padding=PADDINGS[p[2]], activation=ACTIVATIONS[p[3]])
    if op == "concat":
        return Params(axis=p[0])
    if op == "merge":
        return Params(count=p[0])
    return Params()


def _type(shape: list[int] | None, splits: list[list[int]] | None) -> TensorType | None:
    if shape is None:
        return None
    return TensorType(tuple(shape), tuple(tuple(s) for s in splits) if splits else ())


_Analysis = tuple[str | None, TensorType | None, TensorType | None, bool, bool]


def check_new(db: Database) -> int:
    """Shape-check every e-node the phase's right-hand sides would create, lowest height first,
    and store the results in ``newnode``; returns how many. Nodes with the same op, parameters and
    child types are checked once."""
    rows = db.run("apply/fresh", columns=True)
    new: dict[int, _Analysis] = {}  # class -> kind, type, type of piece 1, all_weights, valid
    memo: dict[tuple, tuple[str | None, TensorType | None, TensorType | None, bool]] = {}
    out: list[dict[str, Any]] = []
    for r in rows:
        children: list[_Analysis] = []
        for side, col in (("a", "c0"), ("b", "c1"), ("c", "c2"))[: r["arity"]]:
            if r[col] in new:
                children.append(new[r[col]])
            else:
                children.append(
                    (
                        r[f"{side}_kind"],
                        _type(r[f"{side}_shape"], r[f"{side}_splits"]),
                        _type(r[f"{side}_shape2"], None),
                        bool(r[f"{side}_weights"]),
                        True,
                    )
                )
        p = [r[f"p{i}"] for i in range(6)]
        key = (r["op"], *p, *[(k, t, t2, ok) for k, t, t2, _, ok in children])
        if key not in memo:
            memo[key] = _check(r["op"], p, children)
        kind, t, t2, valid = memo[key]
        weights = all(c[3] for c in children)
        new[r["class"]] = (kind, t, t2, weights, valid)
        out.append(
            {
                **{k: r[k] for k in ("class", "op", "arity", "c0", "c1", "c2", "rule")},
                **{f"p{i}": p[i] for i in range(6)},
                "kind": kind,
                "shape": None if t is None else list(t.shape),
                "shape2": None if t2 is None else list(t2.shape),
                "splits": None if t is None else [list(x) for x in t.splits],
                "all_weights": weights,
                "valid": valid,
            }
        )
    if out:
        db.insert_arrow("newnode", pa.Table.from_pylist(out, schema=_NEWNODE))
    return len(out)


def _check(
    op: str,
    p: list[int],
    children: list[_Analysis],
) -> tuple[str | None, TensorType | None, TensorType | None, bool]:
    """The analysis of one new e-node: kind, type, type of piece 1, valid."""
    if not all(ok and t is not None for _, t, _, _, ok in children):
        return None, None, None, False
    try:
        kind, t, t2 = infer_enode(op, p, [(k, t, t2) for k, t, t2, _, _ in children])  # type: ignore[misc]
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
            kind, t, t2 = infer_enode(r["op"], p, children)  # type: ignore[arg-type]
        except OpError as exc:
            bad.append((r["id"], r["op"], f"invalid: {exc}"))
            continue
        got = (kind, list(t.shape), None if t2 is None else list(t2.shape))
        want = (r["kind"], r["shape"], r["shape2"])
        if got != want:
            bad.append((r["id"], r["op"], f"computes {got}, class has {want}"))
    return bad
