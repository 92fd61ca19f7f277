"""Facts of values kept per e-class (table ``fact``; :mod:`relsat.graph.facts` says what they are).

The input graph's facts are loaded with it (:meth:`relsat.engine.egraph.EGraph.load`).
:func:`propagate` computes the facts of the e-nodes built or re-canonicalized since it last ran,
and of the readers of classes whose facts changed, with the same transfer functions
(:func:`relsat.graph.facts.transfer`), until nothing changes. It runs before the matches of a
rule whose guard reads a fact of values are checked, and at the end of an exploration
(:meth:`relsat.engine.phase.Phases.refresh_facts`): up to date wherever it is read, and a
phase that no such guard reads (every phase on TENSAT's graphs) runs no fact query. Unions
merge the facts of the classes they join (``sql/rebuild/merge_facts.sql``). Facts only grow
(bounds tighten, layout facts are added), so the rounds end; :data:`MAX_ROUNDS` bounds them
all the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from relsat.engine.db import Database
from relsat.engine.shapecheck import enode_params
from relsat.graph.facts import OPS, Facts, transfer
from relsat.graph.ops import OpError, Params

__all__ = ["MAX_ROUNDS", "insert_facts", "propagate", "read_facts"]

#: Rounds of :func:`propagate` after one phase (a chain of readers one class deeper per round).
MAX_ROUNDS = 32
_SCHEMA = pa.schema(
    [
        ("class", pa.int64()),
        ("lo", pa.float64()),
        ("hi", pa.float64()),
        ("halves", pa.bool_()),
        ("pairs", pa.bool_()),
        ("digest", pa.string()),
        ("affine", pa.string()),
        ("grid", pa.list_(pa.int64())),
        ("rows", pa.list_(pa.int64())),
    ]
)


def insert_facts(db: Database, facts: Mapping[int, Facts]) -> None:
    """Store ``facts`` (class → facts) in table ``fact``, replacing those classes' rows."""
    rows = {
        "class": list(facts),
        "lo": [f.lo for f in facts.values()],
        "hi": [f.hi for f in facts.values()],
        "halves": [f.halves for f in facts.values()],
        "pairs": [f.pairs for f in facts.values()],
        "digest": [f.digest for f in facts.values()],
        "affine": [f.affine for f in facts.values()],
        "grid": [None if f.grid is None else list(f.grid) for f in facts.values()],
        "rows": [None if f.rows is None else list(f.rows) for f in facts.values()],
    }
    table = pa.table(rows, schema=_SCHEMA)
    with db.registered("fact_new", table):
        db.execute("DELETE FROM fact WHERE class IN (SELECT class FROM fact_new)")
        db.execute("INSERT INTO fact SELECT * FROM fact_new")


def read_facts(db: Database, classes: list[int] | None = None) -> dict[int, Facts]:
    """The stored facts (of ``classes``, or all)."""
    sql = "SELECT class, lo, hi, halves, pairs, digest, affine, grid, rows FROM fact"
    rows = (
        db.execute(sql)
        if classes is None
        else db.execute(f"{sql} WHERE list_contains($ids, class)", {"ids": classes})
    )
    return {
        int(c): Facts(lo, hi, bool(h), bool(p), d, a, _ints(g), _ints(r))
        for c, lo, hi, h, p, d, a, g, r in rows
    }


def _ints(items: list[int] | None) -> tuple[int, ...] | None:
    return None if items is None else tuple(int(n) for n in items)


def propagate(db: Database, since: int, *, known: bool = True) -> bool:
    """Compute the facts the e-nodes stamped ``since`` or later and the readers of changed
    classes give their classes, to a fixpoint; returns whether any fact is known now.
    ``known``: whether any was before (if not, only a scalar built since can bring one)."""
    if not known and not db.scalar(
        "SELECT EXISTS (SELECT 1 FROM enode WHERE stamp >= $since AND op = 'scalar')",
        {"since": since},
    ):
        return False
    ops = sorted(OPS)
    for _ in range(MAX_ROUNDS):
        rows = db.run("analysis/fact_inputs", since=since, ops=ops)
        db.execute("DELETE FROM fact_changed")
        if not rows:
            break
        classes = sorted({c for r in rows for c in (r[0], *r[10:14]) if c >= 0})
        shapes = dict(
            db.execute(
                "SELECT id, shape FROM eclass WHERE list_contains($ids, id)", {"ids": classes}
            )
        )
        stored = read_facts(db, classes)
        found: dict[int, Facts] = {}
        memo: dict[tuple[Any, ...], Facts | None] = {}
        for r in rows:
            cls, op, *p, s, arity = r[:10]
            kids = r[10 : 10 + arity]
            key = (  # what the transfer reads: op, parameters, the children's shapes and facts
                op,
                tuple(p),
                s,
                tuple(tuple(shapes.get(c) or ()) for c in kids),
                tuple(stored.get(c) for c in kids),
                arity == 2 and kids[0] == kids[1],
                tuple(shapes.get(cls) or ()),
            )
            if key not in memo:
                memo[key] = _transfer(*key)
            f = memo[key]
            if f is not None:
                found[cls] = f.merge(found.get(cls))
        new = {
            c: f.merge(stored.get(c))
            for c, f in found.items()
            if f.merge(stored.get(c)) != stored.get(c)
        }
        if not new:
            break
        insert_facts(db, new)
        db.insert_arrow("fact_changed", pa.table({"class": pa.array(list(new), pa.int64())}))
        since = 1 << 62  # later rounds: only the readers of what changed
    return bool(db.scalar("SELECT EXISTS (SELECT 1 FROM fact)"))


def _transfer(
    op: str,
    p: tuple[int, ...],
    s: str,
    shapes: tuple[tuple[int, ...], ...],
    facts: tuple[Facts | None, ...],
    same: bool,
    out: tuple[int, ...],
) -> Facts | None:
    """One e-node's facts from its children's shapes and facts (``same``: its first two children
    are one class)."""
    try:  # the e-graph's split keeps its axis where the graph's keeps it (p0)
        params = Params(axis=p[0]) if op == "split" else enode_params(op, list(p), s)
    except (OpError, ValueError):
        return None
    return transfer(op, params, shapes, out, facts, same)
