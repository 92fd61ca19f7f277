"""Exploration: rewriting, soundness of what it adds, stats, limits, transactions, batching."""

from __future__ import annotations

import pytest

from relsat import GraphBuilder, compare, models
from relsat.decode import decode, random_choice
from relsat.egraph import EGraph
from relsat.errors import AuditError, DatabaseError
from relsat.explore import Limits, StopReason, explore
from relsat.rulefile import load_rules, parse_rules

RULES = load_rules()


def figure2() -> EGraph:
    """The paper's Figure 2: two matmuls that share their input."""
    b = GraphBuilder()
    x = b.input([64, 32], name="x")
    y1 = b.matmul(x, b.weight([32, 16], name="w1"))
    y2 = b.matmul(x, b.weight([32, 24], name="w2"))
    return EGraph.from_graph(b.build(b.relu(y1), b.relu(y2)))


def tsv(eg: EGraph, query: str) -> str:
    """A table as sorted TSV with e-class and e-node ids renumbered 0, 1, … in id order."""
    table = eg.sql(query).to_pylist()
    classes = {
        c: i for i, c in enumerate(sorted(r[0] for r in eg.db.execute("SELECT id FROM eclass")))
    }
    lines = []
    for row in table:
        cells = [
            str(classes.get(v, v)) if k in ("class", "c0", "c1") and v >= 0 else str(v)
            for k, v in row.items()
        ]
        lines.append("\t".join(cells))
    return "\t".join(table[0].keys()) + "\n" + "\n".join(sorted(lines)) + "\n"


ENODES = "SELECT op, p0, p1, s, c0, c1, class, born FROM enode"
ECLASSES = "SELECT id AS class, kind, shape, shape2 FROM eclass"


def test_figure2_fuses_the_shared_input_matmuls(snapshot) -> None:  # type: ignore[no-untyped-def]
    eg = figure2()
    rules = [RULES["matmul-pair-shared-lhs-to-concat"]]
    assert tsv(eg, ENODES) == snapshot(name="enodes-before")
    result = explore(eg, rules, limits=Limits(iterations=1))
    assert result.stop is StopReason.ITERATION_LIMIT
    assert tsv(eg, ENODES) == snapshot(name="enodes-after-1")
    assert tsv(eg, ECLASSES) == snapshot(name="eclasses-after-1")
    # the outputs' matmul classes now also hold split_0 / split_1 of one fused matmul
    rows = eg.sql(
        "SELECT e.op, c.shape FROM enode e JOIN eclass c ON c.id = e.class "
        "WHERE e.class IN (SELECT c0 FROM enode WHERE op = 'relu') "
        "ORDER BY e.op, c.shape"
    ).to_pylist()
    assert [(r["op"], r["shape"]) for r in rows] == [
        ("matmul", [64, 16]),
        ("matmul", [64, 24]),
        ("split_0", [64, 16]),
        ("split_1", [64, 24]),
    ]
    (fused,) = eg.db.execute(
        "SELECT c.shape FROM enode e JOIN eclass c ON c.id = e.class "
        "WHERE e.op = 'matmul' AND e.rule IS NOT NULL"
    )
    assert fused[0] == [64, 40]
    assert not any(eg.audit().values())


def test_stats_rows(snapshot) -> None:  # type: ignore[no-untyped-def]
    eg = figure2()
    result = explore(eg, RULES, limits=Limits(iterations=3))
    assert len(result.iterations) == eg.db.scalar("SELECT count(*) FROM iteration_stats")
    assert [s.phase for s in result.iterations[:2]] == ["multi", "single"]
    per_rule = eg.sql(
        "SELECT iteration, sum(matches) AS m, sum(applied) AS a, "
        "sum(new_enodes) AS n FROM rule_stats GROUP BY iteration ORDER BY 1"
    )
    total = {}
    for s in result.iterations:
        m, a, n = total.get(s.iteration, (0, 0, 0))
        total[s.iteration] = (m + s.matches, a + s.applied, n + s.new_enodes)
    for row in per_rule.to_pylist():
        assert total[row["iteration"]] == (row["m"], row["a"], row["n"])
    for s in result.iterations:
        assert s.statements > 0 and s.exec_s > 0 and s.plan_s >= 0
        assert s.matches == s.applied + s.rejected + s.rejected_cycle
    assert eg.db.scalar("SELECT stop FROM run") == result.stop.value


@pytest.mark.parametrize("name", ["nasrnn", "resnext50", "squeezenet", "inceptionv3", "bert"])
def test_everything_added_is_equivalent(name: str) -> None:
    """Any acyclic choice of e-nodes computes what the input graph computes."""
    graph = models.load(name)
    eg = EGraph.from_graph(graph)
    result = explore(eg, RULES, limits=Limits(iterations=3), audit=True)
    assert result.enodes > len(graph)
    assert not any(eg.audit().values())
    for seed in range(1 if name == "bert" else 2):
        choice = random_choice(eg, seed=seed)
        other = decode(eg, choice)
        outcome = compare(graph, other, rtol=1e-5, atol=1e-6)
        assert outcome.ok, outcome.report()


def test_saturation_and_semi_naive_search() -> None:
    eg = figure2()
    result = explore(eg, RULES)
    assert result.stop is StopReason.SATURATED
    last = result.iterations[-1]
    assert (last.matches, last.new_enodes, last.unions) == (0, 0, 0)
    before = eg.counts()
    again = explore(eg, RULES, k_multi=0)  # everything is found again, nothing is new
    assert again.stop is StopReason.SATURATED and eg.counts() == before


@pytest.mark.parametrize(
    ("limits", "stop"),
    [
        (Limits(nodes=200), StopReason.NODE_LIMIT),
        (Limits(iterations=1), StopReason.ITERATION_LIMIT),
        (Limits(seconds=0.0), StopReason.TIME_LIMIT),
    ],
)
def test_limits_end_with_a_stop_reason(limits: Limits, stop: StopReason) -> None:
    eg = EGraph.from_graph(models.load("nasrnn"))
    result = explore(eg, RULES, limits=limits, audit=True)
    assert result.stop is stop
    assert not any(eg.audit().values())


def test_failed_iteration_rolls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    eg = EGraph.from_graph(models.load("squeezenet"))
    explore(eg, RULES, limits=Limits(iterations=1))
    before = eg.sql("SELECT * FROM enode ORDER BY id"), eg.sql("SELECT * FROM eclass ORDER BY id")
    calls = {"n": 0}
    import relsat.explore as ex

    real = ex.check_new

    def failing(db):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            raise DatabaseError("disk full (simulated)")
        return real(db)

    monkeypatch.setattr(ex, "check_new", failing)
    with pytest.raises(DatabaseError, match="simulated"):
        explore(eg, RULES, limits=Limits(iterations=3))
    after = eg.sql("SELECT * FROM enode ORDER BY id"), eg.sql("SELECT * FROM eclass ORDER BY id")
    assert before[0].equals(after[0]) and before[1].equals(after[1])


def test_statements_per_phase_do_not_grow_with_rules() -> None:
    """DESIGN.md "Batch": 10 rules or all of them, one phase issues the same statements."""
    probe = EGraph.from_graph(models.load("bert"))
    explore(probe, RULES, limits=Limits(iterations=3))
    busy = [
        r[0]
        for r in probe.db.execute(
            "SELECT rule FROM rule_stats GROUP BY rule ORDER BY sum(matches) DESC, rule LIMIT 10"
        )
    ]
    counts = {}
    for label, rules in (("ten", [RULES[n] for n in busy]), ("all", list(RULES))):
        eg = EGraph.from_graph(models.load("bert"))
        result = explore(eg, rules, limits=Limits(iterations=3))
        assert all(s.matches for s in result.iterations)
        counts[label] = max(s.statements for s in result.iterations)
    assert len(RULES) == 196  # TENSAT's 135 and relsat's 61 fusion rules
    assert counts["all"] <= counts["ten"] + 8  # only the number of rebuild rounds may differ


def test_audit_failure_is_reported_and_rolled_back(monkeypatch: pytest.MonkeyPatch) -> None:
    eg = figure2()
    before = eg.counts()
    monkeypatch.setattr(EGraph, "audit", lambda self: {"dangling_ids": 2})
    with pytest.raises(AuditError, match=r"after iteration 0 \(multi\): dangling_ids \(2 rows\)"):
        explore(eg, RULES, audit=True)
    assert eg.counts() == before


def test_a_rule_that_changes_a_shape_is_refused_when_it_fires() -> None:
    """A user rule whose right side computes another type than the matched class is never
    applied (counted as rejected per rule), so no e-class mixes shapes and no wrong graph can be
    extracted."""
    bad = parse_rules(
        "# name: bad-concat\n(ewadd ?a ?b) => (concat 0 2 ?a ?b)\n\n"
        "# name: bad-relu\n(matmul 0 ?a ?b) => (relu ?b)\n"
    )
    eg = EGraph.from_graph(models.load("nasrnn"))
    before = eg.counts()
    explore(eg, list(bad))
    stats = {
        r["rule"]: (int(r["a"]), int(r["r"]))
        for r in eg.sql(
            "SELECT rule, sum(applied) AS a, sum(rejected) AS r FROM rule_stats GROUP BY rule"
        ).to_pylist()
    }
    assert stats == {"bad-concat": (0, 55), "bad-relu": (0, 80)}
    assert eg.counts() == before and not any(eg.audit().values())
