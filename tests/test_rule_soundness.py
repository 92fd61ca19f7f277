"""Every shipped rule, checked numerically: left- and right-hand sides agree on random shapes.

Shapes come from :mod:`relsat.rewrite.shapes` (a small constraint solver: ranks inferred from where
each variable is used, dims unified through both sides, conv groups that divide, odd kernels, a
near miss now and then) and each instance is built and compared by :mod:`relsat.rewrite.check`, the
check ``relsat rules check`` runs on a user's rule file. Hypothesis drives the draws, so a
failure shrinks to small shapes.

Guards: each guarded rule is wrong somewhere with all its guards dropped; the guards that are
needed on their own (dropped one at a time, the others kept) are pinned in
:data:`NEEDED_ALONE`. The others are redundant alone (``bench/guards.py`` lists them, 5000 draws
each): a pair such as ``ungrouped(?x, ?w1)``, ``ungrouped(?x, ?w2)`` over a weight concat guards
together, since the concat forces both weights to one input-channel width.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from relsat.graph.execute import compare
from relsat.rewrite.check import (
    ATOL,
    MIN_INSTANCES,
    RTOL,
    SEARCH_NEAR_MISSES,
    Instance,
    draw,
    find_counterexample,
)
from relsat.rewrite.instantiate import guard_holds, guards_hold, rule_instance
from relsat.rewrite.params import specialize
from relsat.rewrite.rulefile import RULES_DIR, load_rules
from relsat.rewrite.rules import Guard, Pattern, Rule, Term

RULES = list(load_rules()) + list(load_rules(RULES_DIR / "extra"))  # shipped + off by default
#: Rules with guards of the closed vocabulary (shape guards a rule is unsound without). A rule's
#: conditions over parameter variables (``where 0 < ?eps < 0.01``) say what it is meant for;
#: those that soundness needs are tested where the rule is (tests/test_rule_language.py).
GUARDED = [r for r in RULES if any(isinstance(g, Guard) for g in r.guards)]
BY_NAME = {r.name: r for r in RULES}

#: The guards needed on their own: dropped alone (the rule's other guards kept), the sides differ
#: somewhere (``python bench/guards.py``, 5000 draws per guard). The other 64 guards of the 32
#: multi-guard rules are redundant alone: the two ``ungrouped`` guards of each shared-input conv
#: merge (the weight concat makes ?w1 and ?w2 one input-channel width, so either guard implies
#: the other) and the two ``same-shape`` guards of each concat-of-element-wise rule (the
#: right-hand side's concats type only when the shapes match). Dropping both is unsound.
NEEDED_ALONE = {
    ("ewadd-of-convs-to-conv-of-concats", "ungrouped(?x1, ?w1)"),
    ("ewadd-of-convs-to-conv-of-concats", "ungrouped(?x2, ?w2)"),
    *(
        (name, "odd-kernels(?w1, ?w2)")
        for name in (
            "conv-pair-shared-input-enlarge-merge",
            "conv-relu-pair-shared-input-enlarge-merge",
            "conv-bias-pair-shared-input-enlarge-merge",
            "concat-channels-of-conv-bias-shared-input-enlarge",
        )
    ),
}


# ---------------------------------------------------------------------------------------------
# Tests


def _has_free_conv(rule: Rule) -> bool:
    """Some left-hand conv can be grouped: input and weight differ and no guard forbids it."""
    if any(isinstance(g, Guard) and g.name == "ungrouped" for g in rule.guards):
        return False
    stack: list[Term] = list(rule.lhs)
    while stack:
        t = stack.pop()
        if isinstance(t, Pattern):
            if t.op == "conv2d" and t.args[4] != t.args[5]:
                return True
            stack.extend(t.args)
    return False


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_rule_is_sound_with_its_guards(rule: Rule) -> None:
    """Where the rule applies and its guards hold, both sides compute the same values."""
    seen: list[Instance] = []

    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    @given(st.data())
    def one(data: st.DataObject) -> None:
        outcome = draw(rule, lambda seq: data.draw(st.sampled_from(seq)))
        assume(outcome.equal is not None)
        seen.append(outcome)
        assert outcome.equal, f"{rule.name} at {outcome.shapes}: {outcome.detail}"

    one()
    assert len(seen) >= MIN_INSTANCES, f"{rule.name}: only {len(seen)} valid instances"
    if _has_free_conv(rule):
        assert any(o.grouped for o in seen), f"{rule.name}: no grouped conv was tried"


@pytest.mark.parametrize("rule", GUARDED, ids=[r.name for r in GUARDED])
def test_guard_is_needed(rule: Rule) -> None:
    """Each guarded rule is wrong somewhere without its guards (else the guard is unneeded)."""
    found = find_counterexample(rule, guards=[g for g in rule.guards if not isinstance(g, Guard)])
    assert found is not None, f"{rule.name}: no counterexample without guards; guard unneeded?"
    assert not guards_hold(rule, found.shapes)


@pytest.mark.parametrize(
    ("name", "guard"), sorted(NEEDED_ALONE), ids=[f"{n}-{g}" for n, g in sorted(NEEDED_ALONE)]
)
def test_guard_is_needed_alone(name: str, guard: str) -> None:
    """Dropped alone, with the rule's other guards kept, this guard is still needed."""
    rule = BY_NAME[name]
    (dropped,) = [g for g in rule.guards if str(g) == guard]
    others = [g for g in rule.guards if g != dropped]
    found = find_counterexample(rule, guards=others, even_kernels=dropped.name == "odd-kernels")
    assert found is not None, f"{name}: no counterexample without {guard}; now redundant?"
    assert not guard_holds(dropped, found.shapes)


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("conv-pair-shared-input-to-weight-concat", "ungrouped(?x, ?w2)"),
        ("concat-channels-of-ewadds-to-ab-bc", "same-shape(?b, ?c)"),
    ],
)
def test_a_guard_redundant_alone_is_implied_by_its_twin(name: str, kept: str) -> None:
    """Why most guards are redundant alone: wherever the kept guard holds and the right-hand
    side builds with the left-hand side's type (what the engine requires at firing), the dropped
    guard holds too."""
    rule = BY_NAME[name]
    (keep,) = [g for g in rule.guards if str(g) == kept]
    (dropped,) = [g for g in rule.guards if g != keep]
    rng = random.Random(0)
    typed = 0
    for _ in range(300):
        inst = draw(rule, rng.choice, guards=[keep], near_misses=SEARCH_NEAR_MISSES, numeric=False)
        if inst.kind == "typed":
            typed += 1
            assert guard_holds(dropped, inst.shapes), inst.shapes
    assert typed >= 20


def test_needed_alone_names_real_guards() -> None:
    multi = {(r.name, str(g)) for r in RULES if len(r.guards) > 1 for g in r.guards}
    assert NEEDED_ALONE <= multi
    # 71 and the 2 guards of rules/bias.rules' conv-bias-batchnorm-fold (two where lines)
    assert len(multi) == 73


ENLARGE = [r for r in RULES if "enlarge" in str(r)]


@pytest.mark.parametrize("rule", ENLARGE, ids=[r.name for r in ENLARGE])
def test_enlarge_rule_with_even_kernels(rule: Rule) -> None:
    """Outside the soundness test's domain (odd kernels, as in TENSAT): even kernels.

    Unguarded, the enlarge rules are wrong when ?w2's kernel is even and ?w1's odd (the zero
    padding is centred one row off SAME's padding); the odd-kernels guard refuses those shapes.
    """
    wrong = 0
    for k1, k2 in [(1, 2), (1, 4), (3, 4), (2, 3), (2, 4), (1, 3), (3, 5)]:
        shapes = {"x": (1, 2, 5, 5), "w1": (2, 2, k1, k1), "w2": (3, 2, k2, k2)}
        shapes |= {"b1": (1, 2, 1, 1), "b2": (1, 3, 1, 1)}  # the bias-aware merges
        shapes = {v.name: shapes[v.name] for v in rule.bound}
        if rule.params:  # the fused units' activation: none
            rule = specialize(rule, dict.fromkeys((p.name for p in rule.params), 0))[0]
        pair = rule_instance(rule, shapes)
        assert pair is not None
        ok = compare(*pair, rtol=RTOL, atol=ATOL).ok
        wrong += not ok
        if guards_hold(rule, shapes):
            assert ok, f"kernels {k1} then {k2}"
    assert wrong == 3  # (1, 2), (1, 4), (3, 4): what the guard is for
