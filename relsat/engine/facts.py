"""Facts of values kept per e-class (table ``fact``; :mod:`relsat.graph.facts` says what they are).

The input graph's facts are loaded with it (:meth:`relsat.engine.egraph.EGraph.load`). After each
phase, :func:`propagate` computes the facts of the e-nodes the phase built or re-canonicalized,
and of the readers of classes whose facts changed, with the same transfer functions
(:func:`relsat.graph.facts.transfer`), until nothing changes: like the shape analysis, computed
where e-nodes are made, so that a guard of the next search reads them. Unions merge the facts of
the classes they join (``sql/rebuild/merge_facts.sql``). Facts only grow (bounds tighten, layout
facts are added), so the rounds end; :data:`MAX_ROUNDS` bounds them all the same.
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
_SIDES = "abcd"
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
    rows = db.execute("SELECT class, lo, hi, halves, pairs, digest FROM fact")
    wanted = None if classes is None else set(classes)
    return {
        int(c): Facts(lo, hi, bool(h), bool(p), d)
        for c, lo, hi, h, p, d in rows
        if wanted is None or c in wanted
    }


def propagate(db: Database, epoch: int) -> int:
    """Compute the facts the e-nodes stamped ``epoch`` and the readers of changed classes give
    their classes, to a fixpoint; returns how many classes' facts changed."""
    ops = sorted(OPS)
    changed_total = 0
    if not db.scalar(
        "SELECT EXISTS (SELECT 1 FROM fact) OR EXISTS (SELECT 1 FROM enode "
        "WHERE stamp = $epoch AND op = 'scalar')",
        {"epoch": epoch},
    ):
        return 0  # nothing known, nothing new to know (TENSAT's graphs): no join to run
    for _ in range(MAX_ROUNDS):
        rows = db.run_arrow("analysis/fact_inputs", epoch=epoch, ops=ops).to_pylist()
        db.execute("DELETE FROM fact_changed")
        if not rows:
            break
        found: dict[int, Facts] = {}
        memo: dict[tuple[Any, ...], Facts | None] = {}
        for r in rows:
            key = tuple(
                tuple(v) if isinstance(v, list) else v for k, v in r.items() if k != "class"
            )
            if key not in memo:
                memo[key] = _transfer(r)
            f = memo[key]
            if f is not None:
                found[r["class"]] = f.merge(found.get(r["class"]))
        stored = read_facts(db, list(found))
        new = {
            c: f.merge(stored.get(c))
            for c, f in found.items()
            if f.merge(stored.get(c)) != stored.get(c)
        }
        if not new:
            break
        insert_facts(db, new)
        db.insert_arrow("fact_changed", pa.table({"class": pa.array(list(new), pa.int64())}))
        changed_total += len(new)
        epoch = -1  # later rounds: only the readers of what changed
    return changed_total


def _transfer(r: dict[str, Any]) -> Facts | None:
    """One e-node's facts from its row of ``analysis/fact_inputs``."""
    op, arity = r["op"], r["arity"]
    try:
        params = _params(op, [r[f"p{i}"] for i in range(6)], r["s"])
    except (OpError, ValueError):
        return None
    sides = _SIDES[:arity]
    shapes = [tuple(r[f"{s}_shape"] or ()) for s in sides]
    facts = [
        None
        if r[f"{s}_halves"] is None
        else Facts(r[f"{s}_lo"], r[f"{s}_hi"], r[f"{s}_halves"], r[f"{s}_pairs"])
        for s in sides
    ]
    same = arity == 2 and r["c0"] == r["c1"]
    return transfer(op, params, shapes, tuple(r["out"] or ()), facts, same)


def _params(op: str, p: list[int], s: str) -> Params:
    """The parameters :func:`~relsat.graph.facts.transfer` reads, from an e-node's columns."""
    if op in ("concat", "split"):
        return Params(axis=p[0])
    if op == "transpose":
        return Params(perm=tuple(int(v) for v in s.split("_")) if s else ())
    if op == "scalar" or op in INT_PARAMS:
        return int_params(op, p) or Params()
    return Params()
