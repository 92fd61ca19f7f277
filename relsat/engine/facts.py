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
from relsat.graph.facts import OPS, Facts, transfer
from relsat.graph.ops import INT_PARAMS, OpError, Params, int_params

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
    }
    table = pa.table(rows, schema=_SCHEMA)
    with db.registered("fact_new", table):
        db.execute("DELETE FROM fact WHERE class IN (SELECT class FROM fact_new)")
        db.execute("INSERT INTO fact SELECT * FROM fact_new")


def read_facts(db: Database, classes: list[int] | None = None) -> dict[int, Facts]:
    """The stored facts (of ``classes``, or all)."""
    sql = "SELECT class, lo, hi, halves, pairs, digest FROM fact"
    rows = (
        db.execute(sql)
        if classes is None
        else db.execute(f"{sql} WHERE list_contains($ids, class)", {"ids": classes})
    )
    return {int(c): Facts(lo, hi, bool(h), bool(p), d) for c, lo, hi, h, p, d in rows}


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
            key = (
                op,
                *p,
                s,
                *(tuple(shapes.get(c) or ()) for c in kids),
                *(stored.get(c) for c in kids),
                len(set(kids)) == 1 and arity == 2,
                tuple(shapes.get(cls) or ()),
            )
            if key not in memo:
                memo[key] = _transfer(op, p, s, kids, shapes, stored, tuple(shapes.get(cls) or ()))
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
    p: list[int],
    s: str,
    kids: tuple[int, ...],
    shapes: Mapping[int, Any],
    known: Mapping[int, Facts],
    out: tuple[int, ...],
) -> Facts | None:
    """One e-node's facts from its children's shapes and facts."""
    try:
        params = _params(op, p, s)
    except (OpError, ValueError):
        return None
    child_shapes = [tuple(shapes.get(c) or ()) for c in kids]
    same = len(kids) == 2 and kids[0] == kids[1]
    return transfer(op, params, child_shapes, out, [known.get(c) for c in kids], same)


def _params(op: str, p: list[int], s: str) -> Params:
    """The parameters :func:`~relsat.graph.facts.transfer` reads, from an e-node's columns."""
    if op in ("concat", "split"):
        return Params(axis=p[0])
    if op == "transpose":
        return Params(perm=tuple(int(v) for v in s.split("_")) if s else ())
    if op == "scalar" or op in INT_PARAMS:
        return int_params(op, p) or Params()
    return Params()
