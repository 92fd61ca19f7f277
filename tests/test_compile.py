"""Rules → SQL: the per-rule queries (snapshots) and the rule program."""

from __future__ import annotations

import pytest

from relsat.engine.compile import MAX_VARS, compile_rules, rule_sql
from relsat.errors import RuleError
from relsat.rewrite.rulefile import load_rules, parse_rules

RULES = load_rules()


@pytest.mark.parametrize("name", [r.name for r in RULES])
def test_rule_sql(name: str, snapshot) -> None:  # type: ignore[no-untyped-def]
    assert rule_sql(RULES[name]) == snapshot


def test_multi_pattern_rule_is_one_join_on_shared_variables() -> None:
    sql = rule_sql(RULES["matmul-pair-shared-lhs-to-concat"])
    assert sql.count("FROM enode") == 1 and sql.count("JOIN enode") == 1
    assert "n1.c0 = n0.c0" in sql  # the shared ?x
    assert "n0.class < n1.class" in sql  # symmetric: each unordered pair once
    cross = rule_sql(RULES["relu-pair-to-relu-of-concat-cols"])
    assert "CROSS JOIN enode n1" in cross
    enlarge = rule_sql(RULES["conv-pair-shared-input-enlarge-merge"])
    assert "n0.class <> n1.class" in enlarge  # not symmetric: ordered pairs, never self-pairs


def test_program_tables() -> None:
    program = compile_rules(RULES)
    # 135 TENSAT, 104 relsat's own (one rule per computation: parameters are variables)
    assert program.rule_info.num_rows == len(RULES) == 242
    assert program.lhs_height == 10  # GPT-2's attention: q, k, v cut from one projection
    assert program.rhs_height == 8  # conv-bias-batchnorm-fold's bias
    info = program.rule_info.to_pylist()
    assert sum(r["multi"] for r in info) == 15 + 3
    # 13 of TENSAT's rules are marked symmetric; pairs are halved for the 8 whose two sources are
    # equal up to renaming (TENSAT's condition), e.g. not for matmul(matmul(a,b),a) /
    # matmul(b,matmul(a,b)); and for the 2 symmetric bias-aware pair merges
    assert sum(r.symmetric for r in RULES) == 13 + 2
    assert sum(r["symmetric_pairs"] for r in info) == 8 + 2
    # a split's cut comes from the first concat operand: dim 1 of ?w1 for the matmul pair
    rid = next(r["rule"] for r in info if r["name"] == "matmul-pair-shared-lhs-to-concat")
    (split,) = [t for t in program.tnode.to_pylist() if t["rule"] == rid and t["op"] == "split"]
    assert (split["p0"], split["cut_slot"], split["cut_dim"]) == (1, 1, 1)
    # shared sub-terms of the two right-hand sides are one template
    assert (
        sum(t["rule"] == rid for t in program.tnode.to_pylist()) == 5
    )  # concat matmul split _0 _1
    assert compile_rules(RULES, guards=False).rguard.num_rows == 0
    assert compile_rules(RULES).rguard.num_rows > 30


def test_slot_sources_say_where_each_binding_comes_from() -> None:
    """The search reads slot k of a pattern node from its source ``w{k}`` (child j, integer
    argument 8 + i, list parameter 12, -1: unbound) and tests repeated slots only where ``dup``."""
    rules = parse_rules(
        "# name: twice\n(ewadd ?x ?x) => (ewmul ?x (scalar 2.0))\n"
        "# name: perm\n(transpose ?a ?p:ints ?s:int) => (transpose ?a ?p ?s)\n"
        "# name: eps\n(layernorm ?e:float ?x ?g ?b) => (layernorm ?e ?x ?g ?b)\n"
    )
    rows = {r["rule"]: r for r in compile_rules(rules).pnode.to_pylist()}
    twice, perm, eps = (rows[i] for i in range(3))
    assert (twice["w0"], twice["w1"], twice["dup"]) == (0, -1, True)
    assert (perm["x0"], perm["w0"], perm["dup"]) == (0, 0, False)
    # the perm list binds from the list parameter (12), the shuffle flag from argument 0 (8)
    assert sorted(perm[f"w{k}"] for k in range(MAX_VARS) if perm[f"w{k}"] >= 0) == [0, 8, 12]
    assert sorted(eps[f"w{k}"] for k in range(MAX_VARS) if eps[f"w{k}"] >= 0) == [0, 1, 2, 8]
    assert not eps["dup"]


def test_rules_the_engine_cannot_run_are_refused() -> None:
    many = parse_rules(
        "# name: many\n"
        "(ewadd (ewadd ?a (ewadd ?f ?g)) (ewadd (ewadd ?i ?j) (ewadd ?k (ewadd ?c (ewadd ?d "
        "(ewadd ?e (ewadd ?h (ewadd ?l (ewadd ?m ?n))))))))) => (ewadd ?a ?c)\n"
    )
    with pytest.raises(RuleError, match=f"13 variables .*; the engine supports {MAX_VARS}"):
        compile_rules(many)
    nested_bias = parse_rules(  # a sub-pattern at any position: here the third
        "# name: nested-bias\n(conv2d_bias 1 1 0 0 ?x ?w (relu ?b)) => (relu ?x)\n"
    )
    assert compile_rules(nested_bias).pnode.num_rows == 2
    four = parse_rules(
        "# name: four\n(attention 1.0 (relu ?q) (relu ?k) (relu ?v) (relu ?m)) => (relu ?q)\n"
    )
    with pytest.raises(RuleError, match="more than 3 sub-patterns"):
        compile_rules(four)
    lost = parse_rules("# name: lost-split\n(relu ?x) => (split_0 (split 1 (relu ?x)))\n")
    with pytest.raises(RuleError, match="cannot tell where"):
        compile_rules(lost)
