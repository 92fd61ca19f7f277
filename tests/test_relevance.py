"""Neutral rules (priced alike on both sides by every cost model) run in the first ``k_neutral``
iterations only: the e-graph of a long sum stays the size of the graph instead of filling the
e-node limit; the other rules run on; the window holds under the backoff scheduler and across a
continued exploration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_explore import EXPLODING, sum_chain

from relsat import GraphBuilder, Options
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Backoff, Limits, Schedule, StopReason, explore
from relsat.engine.relevance import neutral, neutral_rules
from relsat.errors import SettingsError
from relsat.rewrite.rulefile import RULES_DIR, load_rules, parse_rules

RULES = load_rules()


def residual_stream(layers: int = 8) -> EGraph:
    """A transformer's residual stream in miniature: h + (mlp(h) + bias), ``layers`` times."""
    b = GraphBuilder()
    h = b.input([8, 16], name="x")
    for i in range(layers):
        up = b.relu(b.matmul(h, b.weight([16, 32], name=f"w{i}")))
        y = b.matmul(up, b.weight([32, 16], name=f"v{i}"))
        h = b.add(h, b.add(y, b.weight([16], name=f"b{i}")))
    return EGraph.from_graph(b.build(h))


def test_the_shipped_neutral_rules_are_the_elementwise_permutations() -> None:
    neutral_names = {r.name for r in RULES if neutral(r)}
    elementwise = load_rules(Path(RULES_DIR) / "elementwise.rules")
    assert neutral_names <= set(elementwise.names)
    assert sorted(n for n in elementwise.names if n not in neutral_names) == [  # op counts change
        "ewmul-distribute-abc-to-ab-ac",
        "ewmul-distribute-abc-to-ac-ab",
        "ewmul-distribute-bac-to-ab-bc",
        "ewmul-distribute-bac-to-bc-ab",
        "ewmul-distribute-cab-to-ac-bc",
        "ewmul-distribute-cab-to-bc-ac",
        "ewmul-distribute-cbab-to-bc-abc",
        "ewmul-factor-a-from-ab-plus-cab",
        "ewmul-factor-b-from-ab-plus-cab",
    ]
    assert len(neutral_names) == 18
    assert all(neutral(r) for r in EXPLODING)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(ewadd ?a ?b) => (ewadd ?b ?a)", True),
        ("(ewmul ?a (ewmul ?b ?c)) => (ewmul (ewmul ?a ?b) ?c)", True),
        ("(matmul 0 ?a (matmul 0 ?b ?c)) => (matmul 0 (matmul 0 ?a ?b) ?c)", False),  # shapes
        ("(ewmul ?a (ewadd ?b ?c)) => (ewadd (ewmul ?a ?b) (ewmul ?a ?c))", False),  # one more op
        ("(relu (relu ?x)) => (relu ?x)", False),
    ],
)
def test_a_rule_is_neutral_when_it_permutes_elementwise_ops(text: str, expected: bool) -> None:
    rule = parse_rules(f"# name: r\n{text}\n")["r"]
    assert neutral(rule) is expected


def test_a_long_sum_stays_small_with_the_neutral_window() -> None:
    """Under associativity and commutativity a sum of 24 terms has 2^24 subset sums; with the
    neutral rules in the first iterations only, the e-graph saturates at a few times its size."""
    counts = {}
    for k in (0, 1, 2, 3):
        eg = sum_chain(24)
        result = explore(
            eg, list(EXPLODING), limits=Limits(iterations=1000), schedule=Schedule(k_neutral=k)
        )
        assert result.stop is StopReason.SATURATED
        assert len({s.iteration for s in result.iterations}) == k + 1
        counts[k] = result.enodes
        assert not any(eg.audit().values())
    assert counts == {0: 70, 1: 93, 2: 181, 3: 681}
    eg = sum_chain(24)
    whole = explore(eg, list(EXPLODING), limits=Limits(nodes=5000, iterations=1000))
    assert whole.stop is StopReason.NODE_LIMIT


def test_the_other_rules_run_on_past_the_window() -> None:
    eg = residual_stream()
    bounded = explore(eg, RULES, limits=Limits(nodes=5000), schedule=Schedule(k_neutral=1))
    assert bounded.stop is StopReason.SATURATED and bounded.enodes < 500
    late = eg.db.execute(
        "SELECT DISTINCT rule FROM rule_stats WHERE iteration >= 1 AND matches > 0"
    )
    assert late and not any(neutral(RULES[r]) for (r,) in late)  # the others searched on
    full = explore(residual_stream(), RULES, limits=Limits(nodes=5000))
    assert full.stop is StopReason.NODE_LIMIT


def test_a_continued_exploration_keeps_the_window() -> None:
    whole = sum_chain(24)
    explore(whole, list(EXPLODING), limits=Limits(iterations=1000), schedule=Schedule(k_neutral=2))
    eg = sum_chain(24)
    first = explore(
        eg, list(EXPLODING), limits=Limits(iterations=1), schedule=Schedule(k_neutral=2)
    )
    assert first.stop is StopReason.ITERATION_LIMIT
    rest = explore(
        eg, list(EXPLODING), limits=Limits(iterations=1000), schedule=Schedule(k_neutral=2)
    )
    assert rest.stop is StopReason.SATURATED
    assert eg.counts() == whole.counts() == (181, 114)
    (settings,) = eg.db.execute("SELECT settings FROM run ORDER BY started DESC LIMIT 1")
    assert json.loads(settings[0])["k_neutral"] == 2


def test_the_window_holds_under_the_backoff_scheduler() -> None:
    """Bans lifted at saturation rewrite the loaded rules' schedule; a neutral rule past the
    window is still not searched."""
    eg = sum_chain(24)
    result = explore(
        eg,
        list(EXPLODING),
        limits=Limits(iterations=1000),
        schedule=Schedule(k_neutral=2, scheduler=Backoff(match_limit=10, ban_length=1)),
    )
    assert result.stop is StopReason.SATURATED
    assert sum(s.banned for s in result.iterations) > 0
    searched = eg.db.execute("SELECT count(*) FROM rule_stats WHERE iteration >= 2")
    assert searched == [(0,)]


def test_neutral_rule_ids_are_program_positions() -> None:
    rules = [RULES["matmul-pair-shared-lhs-to-concat"], *EXPLODING, RULES["conv-relu-fuse"]]
    assert neutral_rules(rules) == [1, 2, 3, 4]


@pytest.mark.parametrize("k", [-1, 1.5, "1", True])
def test_a_bad_k_neutral_is_refused(k: object) -> None:
    with pytest.raises(SettingsError) as err:
        Options(k_neutral=k)  # type: ignore[arg-type]  # checked once, where the value is built
    assert err.value.option == "k_neutral"
