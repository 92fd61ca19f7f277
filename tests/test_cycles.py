"""Cycle filtering: the pre-filter of multi-pattern matches and the post-pass."""

from __future__ import annotations

import pytest

from relsat import GraphBuilder, models
from relsat.engine.compile import compile_rules
from relsat.engine.cycles import _cycle_nodes, prefilter, ranks, remove_cycles
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Limits, Schedule, explore
from relsat.engine.phase import Phases
from relsat.rewrite.rulefile import load_rules

RULES = load_rules()


def cycles_left(eg: EGraph) -> set[int]:
    rows = eg.sql(
        "SELECT e.id, e.class, t.child, e.born FROM enode e, "
        "unnest([e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7]) AS t(child) "
        "WHERE NOT e.filtered AND t.child >= 0"
    )
    outputs = [r[0] for r in eg.db.execute("SELECT class FROM output")]
    return _cycle_nodes(
        rows["id"].to_numpy(),
        rows["class"].to_numpy(),
        rows["child"].to_numpy(),
        rows["born"].to_numpy(),
        outputs,
        set(),
    )


@pytest.mark.parametrize("k_multi", [1, 2])
def test_efficient_filtering_leaves_no_cycle(k_multi: int) -> None:
    eg = EGraph.from_graph(models.load("nasrnn"))
    result = explore(
        eg, RULES, limits=Limits(iterations=4), audit=True, schedule=Schedule(k_multi=k_multi)
    )
    assert not cycles_left(eg)
    multi = [s for s in result.iterations if s.phase == "multi"]
    assert multi[0].rejected_cycle > 0  # ReLU pairs across time steps would close cycles
    assert eg.db.scalar("SELECT sum(rejected_cycle) FROM rule_stats") == sum(
        s.rejected_cycle for s in result.iterations
    )


def test_without_filtering_cycles_appear() -> None:
    eg = EGraph.from_graph(models.load("nasrnn"))
    explore(eg, RULES, limits=Limits(iterations=2), schedule=Schedule(cycle_filter="off"))
    assert cycles_left(eg)


def test_vanilla_and_efficient_refuse_the_same_matches() -> None:
    verdicts = {}
    for mode in ("efficient", "vanilla"):
        eg = EGraph.from_graph(models.load("nasrnn"))
        runner = Phases(eg, compile_rules(RULES), 1, mode)
        runner.search(multi=True, since=0)
        prefilter(eg.db, mode)
        verdicts[mode] = eg.sql("SELECT mid, cycle FROM match ORDER BY mid").to_pylist()
    assert verdicts["efficient"] == verdicts["vanilla"]
    assert any(r["cycle"] for r in verdicts["efficient"])
    assert not all(r["cycle"] for r in verdicts["efficient"])


@pytest.mark.parametrize("mode", ["efficient", "vanilla"])
def test_the_prefilter_gives_the_same_verdicts_chunk_by_chunk(mode: str) -> None:
    """A phase pre-filters its matches a chunk at a time against one ranking of the class
    graph: the verdicts are those of one pass over all matches."""
    verdicts = []
    for chunk in (None, 97):
        eg = EGraph.from_graph(models.load("nasrnn"))
        Phases(eg, compile_rules(RULES), 1, mode).search(multi=True, since=0)
        if chunk is None:
            prefilter(eg.db, mode)
        else:
            ranks(eg.db)
            for lo in range(1, eg.db.scalar("SELECT count(*) FROM match") + 1, chunk):
                prefilter(eg.db, mode, (lo, lo + chunk - 1))
        verdicts.append(eg.sql("SELECT mid, ok, cycle FROM match ORDER BY mid").to_pylist())
    assert verdicts[0] == verdicts[1]
    assert len(verdicts[0]) > 97 and any(r["cycle"] for r in verdicts[0])


def _two_relus() -> EGraph:
    b = GraphBuilder()
    x = b.input([2, 2], name="x")
    return EGraph.from_graph(b.build(b.relu(b.relu(x))))


def test_post_pass_filters_self_loops_and_the_newest_node() -> None:
    eg = _two_relus()  # classes: 0 x, 1 relu(x), 2 relu(relu(x))
    # a rule-made self-loop (born 1) in class 2, and a 2-cycle 1 -> 2 -> 1 through two new nodes
    eg.db.execute(
        "INSERT INTO enode SELECT 10, 'tanh', -1, -1, -1, -1, -1, -1, '', 1, 2, -1, -1, "
        "-1, -1, -1, -1, -1, 2, 1, 1, 'test', false"
    )
    eg.db.execute(
        "INSERT INTO enode SELECT 11, 'sigmoid', -1, -1, -1, -1, -1, -1, '', 1, 2, -1, "
        "-1, -1, -1, -1, -1, -1, 1, 2, 2, 'test', false"
    )
    assert cycles_left(eg)
    assert remove_cycles(eg.db) == 2
    filtered = [r[0] for r in eg.db.execute("SELECT id FROM enode WHERE filtered ORDER BY id")]
    assert filtered == [10, 11]  # the self-loop, and the newest node of 1 -> 2 -> 1
    assert not cycles_left(eg)


def test_input_graph_nodes_are_never_filtered() -> None:
    eg = EGraph.from_graph(models.load("squeezenet"))
    explore(eg, RULES, limits=Limits(iterations=3))
    assert eg.db.scalar("SELECT count(*) FROM enode WHERE filtered AND born = 0") == 0


def test_ranks_are_longest_paths_and_cycles_unranked() -> None:
    """The vectorized Kahn peeling against a plain recursive longest path, on random class
    graphs with cycles and self-loops."""
    import numpy as np

    from relsat.engine.cycles import _longest_path

    rng = np.random.default_rng(7)
    for _ in range(30):
        n = int(rng.integers(1, 40))
        m = int(rng.integers(0, 3 * n))
        parent, child = rng.integers(0, n, m), rng.integers(0, n, m)
        classes = rng.permutation(n) * 3 + 5  # ids need not be dense or sorted
        kids: dict[int, set[int]] = {i: set() for i in range(n)}
        for p, c in zip(parent.tolist(), child.tolist(), strict=True):
            kids[p].add(c)

        got = _longest_path(classes, classes[parent], classes[child])
        assert got.tolist() == [_reference_rank(kids, i, frozenset()) for i in range(n)]


def _reference_rank(kids: dict[int, set[int]], i: int, path: frozenset[int]) -> int:
    """Longest path from ``i`` down to a leaf; UNRANKED when a cycle is reachable."""
    from relsat.engine.cycles import UNRANKED

    if i in path:
        return UNRANKED
    ranks = [_reference_rank(kids, k, path | {i}) for k in kids[i]]
    return UNRANKED if UNRANKED in ranks else 1 + max(ranks, default=-1)


def test_the_incremental_post_pass_filters_what_the_full_one_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import relsat.engine.phase as ex

    tables = []
    for incremental in (True, False):
        if not incremental:
            monkeypatch.setattr(ex, "remove_cycles", lambda db, epoch=None: remove_cycles(db))
        eg = EGraph.from_graph(models.load("nasrnn"))
        explore(eg, RULES, limits=Limits(iterations=3), schedule=Schedule(k_multi=2))
        assert not cycles_left(eg)
        tables.append(eg.sql("SELECT id, class, filtered FROM enode ORDER BY id"))
    assert tables[0].equals(tables[1])
