"""The shape check of rule-built e-nodes: TASO's validity rules, as TENSAT applies them.

Before anything is inserted, every e-node a right-hand side would create is type-checked from its
children's classes (SEMANTICS.md §5.1). The check reuses the graph layer's own shape inference
(:func:`relsat.ops.infer`), so the e-graph and the graph builder can never disagree about what is
valid, plus TENSAT's two rule-specific conditions: a rule-built ``concat`` needs both inputs of
rank ``ndim``, and a ``split`` must cut strictly inside its axis. New nodes are checked one level
of the right-hand sides at a time, over Arrow: one query in, one batch out.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from relsat.db import Database, sql_text
from relsat.ops import ACTIVATIONS, PADDINGS, OpError, Params, TensorType, infer

__all__ = ["check_level", "infer_enode"]

_SIGTYPE = pa.schema(
    [
        ("sig", pa.int64()),
        ("kind", pa.string()),
        ("shape", pa.list_(pa.int32())),
        ("shape2", pa.list_(pa.int32())),
        ("splits", pa.list_(pa.list_(pa.int32()))),
        ("valid", pa.bool_()),
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
    if op == "matmul":
        return Params(activation=ACTIVATIONS[p[0]])
    if op == "conv2d":
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


def check_level(db: Database, h: int) -> int:
    """Shape-check the new e-nodes of right-hand-side height ``h``, once per distinct type
    signature (op, parameters, child types); returns the number of signatures."""
    out: list[dict[str, Any]] = []
    for r in db.run("apply/fresh_level", h=h, columns=True):
        p = [r[f"p{i}"] for i in range(6)]
        kind = shape = shape2 = splits = None
        valid = all(r[f"{side}_valid"] for side in ("a", "b")[: r["arity"]])
        if valid:
            children = [
                (
                    r[f"{side}_kind"],
                    _type(r[f"{side}_shape"], r[f"{side}_splits"]),
                    _type(r[f"{side}_shape2"], None),
                )
                for side in ("a", "b")[: r["arity"]]
            ]
            try:
                kind, t, t2 = infer_enode(r["op"], p, children)  # type: ignore[arg-type]
                shape, splits = list(t.shape), [list(s) for s in t.splits]
                shape2 = list(t2.shape) if t2 is not None else None
            except OpError:
                valid = False
        out.append(
            {
                "sig": r["sig"],
                "kind": kind,
                "shape": shape,
                "shape2": shape2,
                "splits": splits,
                "valid": valid,
            }
        )
    if out:
        db.insert_arrow("sigtype", pa.Table.from_pylist(out, schema=_SIGTYPE))
        db.run("apply/typed_level")
    return len(out)


def shape_disagreements(db: Database) -> list[tuple[int, str, str]]:
    """E-nodes whose own inferred type differs from their class's (``(id, op, why)``).

    An audit: every e-node of a class must compute a tensor of the class's shape.
    """
    bad = []
    for r in db.arrow(sql_text("analysis/enode_types")).to_pylist():
        p = [r[f"p{i}"] for i in range(6)]
        children = [
            (r[f"{s}_kind"], _type(r[f"{s}_shape"], None), _type(r[f"{s}_shape2"], None))
            for s in ("a", "b")[: r["arity"]]
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
