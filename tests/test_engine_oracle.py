"""The batched rule program finds exactly the matches of the per-rule conjunctive queries."""

from __future__ import annotations

import pytest

from relsat import models
from relsat.engine.compile import rule_sql
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Limits, explore, find_matches
from relsat.rewrite.rulefile import load_rules

RULES = load_rules()


def _oracle(eg: EGraph, multi: bool) -> set[tuple]:
    found = set()
    for rule in RULES:
        if rule.is_multi != multi:
            continue
        for row in eg.db.execute(rule_sql(rule)):
            roots = row[:2] if multi else (row[0], -1)
            found.add((rule.name, *roots, tuple(row[2 if multi else 1 :])))
    return found


def _engine(eg: EGraph, multi: bool) -> set[tuple]:
    table = find_matches(eg, RULES, multi=multi).to_pylist()
    out = set()
    for r in table:
        n = len(RULES[r["rule"]].slots)  # tensor and parameter variables
        out.add((r["rule"], r["root0"], r["root1"], tuple(r["v"][:n])))
    assert len(out) == len(table), "the engine reported a match twice"
    return out


@pytest.mark.parametrize("name", ["nasrnn", "resnext50", "squeezenet", "bert", "inceptionv3"])
@pytest.mark.parametrize("iterations", [0, 2])
def test_engine_matches_equal_per_rule_sql(name: str, iterations: int) -> None:
    eg = EGraph.from_graph(models.load(name))
    if iterations:
        explore(eg, RULES, limits=Limits(iterations=iterations))
    found = 0
    for multi in (False, True):
        engine, oracle = _engine(eg, multi), _oracle(eg, multi)
        assert engine == oracle, (sorted(engine - oracle)[:5], sorted(oracle - engine)[:5])
        found += len(engine)
    assert found > 0
