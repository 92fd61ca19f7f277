"""relsat.synth: tiny operator sets and depths, assertions on the rules found (no timings)."""

from __future__ import annotations

import re

import pytest

from relsat.cli import main
from relsat.errors import SettingsError
from relsat.rewrite.rulefile import load_rules, parse_rules
from relsat.rewrite.rules import Pattern, Var
from relsat.synth import Settings, synthesize
from relsat.synth.candidates import Seen
from relsat.synth.derive import derive_rules
from relsat.synth.verify import verify
from relsat.synth.vocab import environment, parse_counts

EQ = "{} => {}"


def _texts(rules):
    return {EQ.format(r.lhs[0], r.rhs[0]) for r in rules}


@pytest.fixture(scope="module")
def addmul():
    return synthesize(Settings(ops=("ewadd", "ewmul"), depth=3))


def test_addmul_finds_commutativity_associativity_distributivity(addmul):
    found = _texts(addmul.rules)
    assert "(ewadd ?b ?a) => (ewadd ?a ?b)" in found
    assert "(ewmul ?b ?a) => (ewmul ?a ?b)" in found
    assert "(ewadd (ewadd ?a ?b) ?c) => (ewadd ?a (ewadd ?b ?c))" in found
    assert "(ewmul (ewmul ?a ?b) ?c) => (ewmul ?a (ewmul ?b ?c))" in found
    assert "(ewadd (ewmul ?a ?b) (ewmul ?a ?c)) => (ewmul ?a (ewadd ?b ?c))" in found
    assert addmul.stop.startswith("done")
    assert [d.depth for d in addmul.depths] == [1, 2, 3]
    assert all(r.sources == ("synthesized",) and "rules check ok" in r.doc for r in addmul.rules)


def test_addmul_rules_derive_tensat_elementwise_rules(addmul):
    shipped = load_rules()
    tensat = [
        r
        for r in shipped
        if any(s.startswith("converted") for s in r.sources)
        and set(re.findall(r"\((\w+)", " ".join(map(str, r.lhs + r.rhs)))) <= {"ewadd", "ewmul"}
        and len(r.lhs) == 1
    ][:6]
    assert tensat
    result = derive_rules(tensat, addmul.rules)
    assert all(d.derived for d in result.derivations)


def test_written_file_parses_back(addmul, tmp_path):
    out = tmp_path / "syn.rules"
    addmul.write(out)
    again = load_rules([out])
    assert [r.name for r in again] == [r.name for r in addmul.rules]
    assert "# from: synthesized" in out.read_text()


def test_wrong_candidate_is_rejected_by_verification():
    # On 1x1 matrices matmul commutes: the fingerprints agree, the check refutes it.
    s = synthesize(Settings(ops=("matmul",), depth=1, vars=(("a", (1, 1)), ("b", (1, 1)))))
    assert s.rules == ()
    assert any(str(r.lhs[0]) == "(matmul 0 ?b ?a)" for r, _ in s.dropped)
    bad = parse_rules("# name: bad\n(ewadd ?a ?b) => (ewmul ?a ?b)\n")["bad"]
    assert verify(bad).status == "dropped"


def test_prunes_renamings_and_one_sided_variables():
    seen = Seen()
    a, b, c = Var("a"), Var("b"), Var("c")
    assert seen.prune(Pattern("ewadd", (a, b)), Pattern("ewadd", (b, a))) is None
    assert seen.prune(Pattern("ewadd", (c, a)), Pattern("ewadd", (a, c))) == "renaming"
    assert seen.prune(Pattern("ewadd", (a, a)), Pattern("ewmul", (b, b))) == "one-sided variable"
    assert seen.prune(Pattern("relu", (a,)), a) == "variable side"


def test_derive_says_derived_and_not_derived():
    comm = parse_rules("# name: comm\n(ewadd ?a ?b) => (ewadd ?b ?a)\n")
    goal = parse_rules(
        "# name: swap\n(ewadd ?x ?y) => (ewadd ?y ?x)\n\n"
        "# name: assoc\n(ewadd (ewadd ?x ?y) ?z) => (ewadd ?x (ewadd ?y ?z))\n"
    )
    result = derive_rules(goal, comm)
    assert [d.derived for d in result.derivations] == [True, False]
    assert result.derivations[0].iteration == 1


def test_cli_derive(tmp_path, capsys):
    goal = tmp_path / "goal.rules"
    goal.write_text("# name: swap\n(ewmul ?x ?y) => (ewmul ?y ?x)\n")
    using = tmp_path / "using.rules"
    using.write_text("# name: comm\n(ewmul ?a ?b) => (ewmul ?b ?a)\n")
    assert main(["rules", "derive", str(goal), "--from", str(using)]) == 0
    out = capsys.readouterr().out
    assert "derived      swap" in out and "1 of 1 rules derived" in out


def test_cli_derive_malformed_file_is_a_located_error(tmp_path, capsys):
    bad = tmp_path / "bad.rules"
    bad.write_text("# name: r\n(ewadd ?a ?b => (ewadd ?b ?a)\n")
    assert main(["rules", "derive", str(bad), "--from", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2:" in err
    assert main(["optimize", "--model", "nasrnn", "--rules", str(bad)]) == 1
    assert capsys.readouterr().err == err


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--ops", "ewadd,nosuchop"], "--ops"),
        (["--depth", "0"], "--depth"),
        (["--time-limit", "0"], "--time-limit"),
        (["--time-limit", "-3"], "--time-limit"),
    ],
)
def test_cli_bad_options_exit_2(args, option, tmp_path, capsys):
    out = tmp_path / "x.rules"
    with pytest.raises(SystemExit) if option != "--ops" else _no_raise() as exc:
        code = main(["rules", "synthesize", "--out", str(out), *args])
    code = exc.value.code if exc is not None and hasattr(exc, "value") else code
    assert code == 2
    assert option in capsys.readouterr().err
    assert not out.exists()


class _no_raise:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_settings_refuse_bad_values():
    for kw in ({"ops": ("nosuch",)}, {"depth": 0}, {"time_limit": 0}):
        with pytest.raises(SettingsError):
            Settings(**kw)


def test_time_limit_writes_a_complete_file(tmp_path, capsys):
    out = tmp_path / "x.rules"
    code = main(
        ["rules", "synthesize", "--ops", "ewadd", "--depth", "3", "--time-limit", "1e-9",
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    text = out.read_text()
    assert "stop: time limit" in text
    load_rules([out])  # complete: it parses
    assert "stop: time limit" in capsys.readouterr().out


def test_edge_cases_drop_a_rule_that_fails_at_zero():
    rules = parse_rules(
        "# name: one\n(ewpow (scalar 1.0) ?a) => (ewdiv ?a ?a)\n\n"
        "# name: div\n(ewmul ?a (reciprocal ?b)) => (ewdiv ?a ?b)\n"
    )
    shapes = {"a": (2, 2), "b": (2, 2)}
    one, div = (verify(r, shapes=shapes) for r in rules)
    assert one.status == "dropped" and "edge case" in one.detail
    assert div.status == "ok"


def test_two_output_candidates_make_multi_pattern_rules():
    # Two relus are one relu of a concat, split: TASO's multi-output graphs.
    s = synthesize(
        Settings(ops=("relu", "concat", "split"), depth=3, vars=(("a", (3, 3)), ("b", (3, 3))))
    )
    multi = [r for r in s.rules if r.is_multi]
    texts = {tuple(f"{a} => {b}" for a, b in zip(r.lhs, r.rhs, strict=True)) for r in multi}
    assert (
        "(relu ?a) => (split_0 (split 0 (relu (concat 0 2 ?a ?b))))",
        "(relu ?b) => (split_1 (split 0 (relu (concat 0 2 ?a ?b))))",
    ) in texts
    assert all(r.symmetric and "rules check ok" in r.doc for r in multi)
    assert sum(d.merges_kept for d in s.depths) == len(multi)


def test_split_history_is_part_of_a_terms_type():
    # concat(concat(a, b), c) and concat(a, concat(b, c)) agree in value, not in split history:
    # no candidate, so nothing for the check to refute.
    s = synthesize(Settings(ops=("concat",), depth=2, vars=(("a", (3, 3)), ("b", (3, 3)))))
    assert s.dropped == () and s.rules == ()


def test_merge_is_enumerated_on_a_grouped_conv():
    vars, weights = environment({"gimage": 1, "gweight": 1})
    s = synthesize(Settings(ops=("conv2d", "merge"), depth=2, vars=tuple(vars), weights=weights))
    assert "(conv2d 1 1 0 0 ?xg ?wg) => (conv2d 1 1 0 0 ?xg (merge ?wg 2))" in _texts(s.rules)
    merge = [r for r in load_rules() if r.name == "conv-merge-groups"]
    assert derive_rules(merge, s.rules).derivations[0].derived


def test_environment_counts():
    vars, weights = environment(parse_counts("matrix=2,weight=1"))
    assert vars == [("a", (3, 3)), ("b", (3, 3)), ("w", (3, 3, 3, 3))] and weights == ("w",)
    for bad in ("matrix", "nosuch=1", "matrix=99"):
        with pytest.raises(ValueError):
            parse_counts(bad)


@pytest.mark.parametrize("text", ["nosuch=1", "matrix=-1", "matrix", "matrix=0"])
def test_cli_bad_vars_exit_2(text, tmp_path, capsys):
    out = tmp_path / "x.rules"
    assert main(["rules", "synthesize", "--ops", "ewadd", "--vars", text, "--out", str(out)]) == 2
    assert "--vars" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("text", ["0", "a", "1,-2"])
def test_cli_bad_strides_exit_2(text, tmp_path, capsys):
    out = tmp_path / "x.rules"
    assert main(["rules", "synthesize", "--strides", text, "--out", str(out)]) == 2
    assert "--strides" in capsys.readouterr().err
    assert not out.exists()


def test_derive_in_chunks_answers_as_one_egraph():
    comm = parse_rules("# name: comm\n(ewadd ?a ?b) => (ewadd ?b ?a)\n")
    goal = parse_rules(
        "# name: swap\n(ewadd ?x ?y) => (ewadd ?y ?x)\n\n"
        "# name: assoc\n(ewadd (ewadd ?x ?y) ?z) => (ewadd ?x (ewadd ?y ?z))\n\n"
        "# name: swap2\n(ewadd ?p ?q) => (ewadd ?q ?p)\n"
    )
    whole = [d.derived for d in derive_rules(goal, comm).derivations]
    assert [d.derived for d in derive_rules(goal, comm, chunk=1).derivations] == whole
    assert whole == [True, False, True]


def test_cli_vars_names_the_variables(tmp_path):
    out = tmp_path / "x.rules"
    args = ["rules", "synthesize", "--ops", "ewadd", "--depth", "1", "--vars", "matrix=2"]
    assert main([*args, "--out", str(out)]) == 0
    assert "# variables: ?a [3, 3], ?b [3, 3]" in out.read_text()


def test_orient_leaves_out_what_the_engine_cannot_use():
    from relsat.synth.candidates import orient

    a, b, c = Var("a"), Var("b"), Var("c")
    piece = Pattern(
        "split_0", (Pattern("split", (0, Pattern("relu", (Pattern("concat", (0, 2, a, b)),)))),)
    )
    relu = Pattern("relu", (a,))
    # A split on the left never matches (the engine matches a split with its cut).
    assert orient(piece, relu, "p") == []
    # a @ c => split(concat(a, a) @ c): twice the work on every match; only the other way.
    mm = Pattern("matmul", (0, a, c))
    doubled = Pattern(
        "split_0",
        (Pattern("split", (0, Pattern("matmul", (0, Pattern("concat", (0, 2, a, a)), c)))),),
    )
    assert orient(mm, doubled, "m") == []


def test_equation_with_a_concat_gives_the_enlarge_merge_pair():
    # concat(conv(x, k), conv(x, w)) = conv(x, concat(enlarge(k, w), w)): the two convs as one.
    vars, weights = environment({"image": 1, "weight": 1, "kernel": 1})
    s = synthesize(
        Settings(
            ops=("conv2d", "concat", "split", "enlarge"),
            depth=3,
            vars=tuple(vars),
            weights=weights,
            strides=(1,),
        )
    )
    tensat = [r for r in load_rules() if r.name == "conv-pair-shared-input-enlarge-merge"]
    assert any(r.is_multi and "enlarge" in str(r.rhs[0]) for r in s.rules)
    assert derive_rules(tensat, s.rules).derivations[0].derived


# Goal mode (relsat rules synthesize --goals): the spelled-out forms of fused kernels.


def _goal_rules(goal, **kw):
    from relsat.synth.goals import GoalSettings, spell

    return spell(GoalSettings(goals=(goal,), **kw))


def _same(rule_text, rules):
    """Whether ``rule_text``'s left side is among ``rules``' up to commutative operand order."""
    from relsat.synth.search import canonical_text

    want = canonical_text(parse_rules(f"# name: w\n{rule_text}\n")["w"].lhs[0])
    return any(canonical_text(r.lhs[0]) == want for r in rules)


def test_goal_gelu_finds_the_erf_spellings():
    s = _goal_rules("gelu", table=2, slack=0)
    (st,) = s.goals
    assert st.smallest == 5
    x_s2 = "(erf (ewdiv ?x (scalar 1.4142135)))"
    assert _same(
        f"(ewmul (ewmul ?x (ewadd {x_s2} (scalar 1.0))) (scalar 0.5)) => (gelu ?x)", s.rules
    )
    assert _same(
        f"(ewmul (ewmul ?x (scalar 0.5)) (ewadd {x_s2} (scalar 1.0))) => (gelu ?x)", s.rules
    )
    inv = "(erf (ewmul ?x (scalar 0.70710677)))"
    assert _same(
        f"(ewmul (ewmul ?x (ewadd {inv} (scalar 1.0))) (scalar 0.5)) => (gelu ?x)", s.rules
    )
    assert all(r.sources == ("synthesized",) and "rules check ok" in r.doc for r in s.rules)
    assert all(str(r.rhs[0]) == "(gelu ?x)" for r in s.rules)


def test_goal_silu_finds_swish_as_quickgelu_at_alpha_one():
    s = _goal_rules("silu")
    assert s.goals[0].smallest == 2
    (rule,) = s.rules
    assert f"{rule.lhs[0]} => {rule.rhs[0]}" == "(ewmul ?x (sigmoid ?x)) => (quickgelu 1.0 ?x)"
    assert "onnxruntime ok (4 instances: QuickGelu)" in rule.doc  # a fused kernel: run there


@pytest.fixture(scope="module")
def rmsnorm():
    """The rmsnorm goal's spellings at slack 0, searched once for the tests that read them."""
    return _goal_rules("rmsnorm", slack=0)


def test_goal_rmsnorm_finds_a_spelling_with_epsilon_a_float_variable(rmsnorm, tmp_path):
    s = rmsnorm
    assert s.goals[0].smallest == 6
    ms = "(ewadd (reducemean (ewmul ?x ?x)) (scalar ?eps:float))"
    assert _same(f"(ewmul ?g (ewdiv ?x (sqrt {ms}))) => (rmsnorm ?eps ?x ?g)", s.rules)
    assert _same(
        f"(ewmul ?g (ewmul ?x (ewpow {ms} (scalar -0.5)))) => (rmsnorm ?eps ?x ?g)", s.rules
    )
    out = tmp_path / "goals.rules"
    s.write(out)
    again = load_rules([out])
    assert [r.name for r in again] == [r.name for r in s.rules]
    assert "?eps:float" in out.read_text()
    assert main(["rules", "check", str(out)]) == 0


def test_goal_layernorm_with_the_shared_difference_finds_the_hand_written_spelling(tmp_path):
    # d = x - mean(x) is let-bound: the table is over d, the rules spell it out (twice).
    s = _goal_rules("layernorm", slack=0)  # table 3: 20 s (table 2: 90 s, more targets)
    assert s.goals[0].smallest == 7  # d counted as a variable: 11 operators spelled out
    d = "(ewsub ?x (reducemean ?x))"
    var = f"(ewadd (reducemean (ewpow {d} (scalar 2.0))) (scalar ?eps:float))"
    # layernorm-fuse, literally (pow(d, 2) is a member of d * d's class at its size)
    assert _same(
        f"(ewadd (ewmul (ewdiv {d} (sqrt {var})) ?g) ?b) => (layernorm ?eps ?x ?g ?b)", s.rules
    )
    square = f"(ewadd (reducemean (ewmul {d} {d})) (scalar ?eps:float))"
    assert _same(
        f"(ewadd (ewmul (ewdiv {d} (sqrt {square})) ?g) ?b) => (layernorm ?eps ?x ?g ?b)", s.rules
    )
    assert all(str(r.rhs[0]) == "(layernorm ?eps ?x ?g ?b)" for r in s.rules)
    out = tmp_path / "layernorm.rules"
    s.write(out)
    assert main(["rules", "check", str(out)]) == 0


def test_goal_rmsnorm_spells_the_square_as_a_power_too(rmsnorm):
    s = rmsnorm
    ms = "(ewadd (reducemean (ewpow ?x (scalar 2.0))) (scalar ?eps:float))"
    assert _same(f"(ewmul ?g (ewdiv ?x (sqrt {ms}))) => (rmsnorm ?eps ?x ?g)", s.rules)


def test_goal_rsqrt_finds_pow_and_the_edge_case_refutes_it():
    # pow(-0.0, -0.5) is +inf, reciprocal(sqrt(-0.0)) is -inf: found, then dropped.
    s = _goal_rules("rsqrt")
    assert s.goals[0].smallest == 1
    assert any(
        str(r.lhs[0]) == "(ewpow ?y (scalar -0.5))" and "edge" in why for r, why in s.dropped
    )
    # sqrt(y)'s class is represented by pow(y, 0.5) (enumerated first): 1 / sqrt is spelled so.
    assert _same("(ewdiv (scalar 1.0) (ewpow ?y (scalar 0.5))) => (reciprocal (sqrt ?y))", s.rules)


def test_cli_goals_writes_the_rules(tmp_path, capsys):
    out = tmp_path / "q.rules"
    assert main(["rules", "synthesize", "--goals", "quickgelu", "--out", str(out)]) == 0
    assert "goal quickgelu" in capsys.readouterr().out
    (rule,) = load_rules([out])
    assert str(rule.rhs[0]) == "(quickgelu ?alpha ?x)"


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--goals", "rmsnorm,bogus"], "--goals"),
        (["--goals", ","], "--goals"),
        (["--goals", "gelu", "--goal-slack", "-1"], "--goal-slack"),
        (["--goals", "gelu", "--goal-size", "0"], "--goal-size"),
    ],
)
def test_cli_bad_goals_exit_2(args, option, tmp_path, capsys):
    out = tmp_path / "x.rules"
    with pytest.raises(SystemExit) if option == "--goal-size" else _no_raise() as e:
        code = main(["rules", "synthesize", "--out", str(out), *args])
    code = e.value.code if option == "--goal-size" else code
    assert code == 2
    assert option in capsys.readouterr().err
    assert not out.exists()


def test_goal_settings_refuse_bad_values():
    from relsat.synth.goals import GoalSettings

    with pytest.raises(SettingsError):
        GoalSettings(goals=("bogus",))
    with pytest.raises(SettingsError):
        GoalSettings(goals=("gelu",), slack=-1)


def test_broadcast_templates_pair_a_row_mean_with_its_row():
    from relsat.synth.terms import Terms

    t = Terms([("x", (2, 3))], ["ewsub", "reducemean"], broadcast=True)
    t.grow(1, deadline=float("inf"))
    t.grow(2, deadline=float("inf"))
    texts = {str(p) for p in t.pattern.values()}
    t.close()
    assert "(ewsub ?x (reducemean ?x))" in texts
