# ruff: noqa: E501
"""relsat.rewrite.check, the loader's type check and ``relsat rules check``: a user's rule that
changes
a type or a value is flagged, the shipped rules pass."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from relsat.cli import main
from relsat.errors import RuleError
from relsat.rewrite.check import Verdict, check_rule, check_types, evaluate
from relsat.rewrite.rulefile import RULES_DIR, load_rules, parse_rules
from relsat.rewrite.shapes import SIDES, Unsolvable, draw_shapes

BAD = """\
# name: bad-concat
(ewadd ?a ?b) => (concat 0 2 ?a ?b)

# name: bad-relu
(matmul 0 ?a ?b) => (relu ?b)

# name: fine
(relu (relu ?x)) => (relu ?x)

# name: wrong-distribution
(ewadd ?a (ewmul ?b ?c)) => (ewmul ?a (ewadd ?b ?c))

# name: never-builds
(relu ?x) => (split_0 (split 0 (relu ?x)))

# name: unmodelled
(noop ?a ?b) => (noop ?b ?a)
"""
EXPECTED = {
    "bad-concat": "type-mismatch",
    "bad-relu": "type-mismatch",
    "fine": "ok",
    "wrong-distribution": "numeric-mismatch",
    "never-builds": "type-mismatch",
    "unmodelled": "untested",
}


def _one(text: str) -> Verdict:
    (rule,) = parse_rules(text)
    return check_rule(rule)


def test_each_kind_of_rule_gets_its_verdict() -> None:
    verdicts = {r.name: check_rule(r) for r in parse_rules(BAD, path="bad.rules")}
    assert {n: v.status for n, v in verdicts.items()} == EXPECTED
    assert "computes [" in verdicts["bad-concat"].detail  # the two types and the shapes
    assert "?a [" in verdicts["bad-relu"].detail
    assert "never builds" in verdicts["never-builds"].detail
    assert "noop" in verdicts["unmodelled"].detail
    line = verdicts["wrong-distribution"].line()
    assert line.startswith("numeric-mismatch wrong-distribution (bad.rules:10): sides differ at")
    assert "\n" not in line
    assert verdicts["fine"].line().startswith("ok               fine (bad.rules:7): ")


def test_verdicts_are_deterministic_and_seeded() -> None:
    (rule,) = parse_rules("# name: r\n(ewadd ?a ?b) => (ewadd ?b ?a)\n")
    assert check_rule(rule) == check_rule(rule)
    assert check_rule(rule, seed=1).ok


def test_a_rule_is_checked_on_its_equations_not_its_name() -> None:
    one = _one("# name: one\n(ewadd ?a (ewmul ?b ?c)) => (ewmul ?a (ewadd ?b ?c))\n")
    two = _one("# name: two\n(ewadd ?p (ewmul ?q ?r)) => (ewmul ?p (ewadd ?q ?r))\n")
    assert one.shapes is not None and two.shapes is not None  # the same shapes, renamed
    assert list(one.shapes.values()) == list(two.shapes.values())


def test_guards_are_respected() -> None:
    """Unguarded, merging two convs of one input through a weight concat is wrong for grouped
    convs; with its ungrouped guards the rule is ok."""
    rule = "(conv2d 1 1 0 0 ?x ?w1) => (split_0 (split 1 (conv2d 1 1 0 0 ?x (concat 0 4 ?w1 ?w2))))"
    rule2 = (
        "(conv2d 1 1 0 0 ?x ?w2) => (split_1 (split 1 (conv2d 1 1 0 0 ?x (concat 0 4 ?w1 ?w2))))"
    )
    text = f"# name: pair\n{rule}\n{rule2}\nsymmetric\n"
    assert _one(text).status == "numeric-mismatch"
    assert _one(text + "where ungrouped(?x, ?w1)\nwhere ungrouped(?x, ?w2)\n").ok


def test_a_weights_condition_holds_on_drawn_values() -> None:
    """The checker draws every variable's value: ``weights(?x)`` holds there (a rule guarded by
    it, the batch-norm fold, is checked, not left untested), and a wrong rule is still caught."""
    fold = load_rules()["conv-batchnorm-fold"]
    assert fold.guards and check_rule(fold).ok
    assert _one("# name: w\n(relu (relu ?x)) => (relu ?x)\nwhere weights(?x)\n").ok
    bad = "# name: w\n(tanh (relu ?x)) => (relu ?x)\nwhere weights(?x)\n"
    assert _one(bad).status == "numeric-mismatch"


def test_evaluate_names_each_outcome() -> None:
    (rule,) = parse_rules("# name: r\n(matmul 0 ?a ?b) => (relu ?b)\n")
    assert evaluate(rule, {"a": (2, 3), "b": (3, 4)}).kind == "type-mismatch"
    assert evaluate(rule, {"a": (3, 3), "b": (3, 4)}).kind == "different"
    assert evaluate(rule, {"a": (2, 3), "b": (2, 4)}).kind == "lhs-invalid"
    assert evaluate(rule, {"a": (3, 3), "b": (3, 4)}, numeric=False).kind == "typed"
    assert evaluate(rule, {"a": (64, 64), "b": (64, 64)}).kind == "too-big"


@pytest.mark.parametrize("sides", SIDES)
def test_shapes_solve_the_left_hand_side(sides: str) -> None:
    import random

    (rule,) = parse_rules("# name: r\n(matmul 0 (matmul 0 ?x ?a) ?b) => (relu ?x)\n")
    rng = random.Random(0)
    for _ in range(20):
        s = draw_shapes(rule, rng.choice, near_misses=(0,), sides=sides)
        assert s["x"][-1] == s["a"][-2] and s["a"][-1] == s["b"][-2]


def test_a_rule_the_solver_cannot_model_is_unsolvable_not_a_crash() -> None:
    import random

    for text in ("(noop ?a ?b) => (noop ?b ?a)", "(relu (split 0 ?x)) => (relu ?x)"):
        (rule,) = parse_rules(f"# name: r\n{text}\n")
        with pytest.raises(Unsolvable):
            draw_shapes(rule, random.Random(0).choice)


SAMPLE = list(load_rules())[::4] + list(load_rules(RULES_DIR / "extra"))


PINNED = """\
# name: flatten-right
(reshape (matmul 0 (reshape ?x ?f:ints) ?w) ?u:ints) => (linear ?x ?w)
where rank(?x) == 3 and ?f == [dim(?x, 0) * dim(?x, 1), dim(?x, 2)] and ?u == append(take(shape(?x), -1), dim(?w, -1))

# name: unflatten-wrong
(reshape (matmul 0 (reshape ?x ?f:ints) ?w) ?u:ints) => (linear ?x ?w)
where rank(?x) == 3 and ?f == [dim(?x, 0) * dim(?x, 1), dim(?x, 2)] and ?u == append(take(shape(?x), -2), dim(?w, -1))

# name: heads-kept
(reshape (matmul 0 (reshape ?x ?f:ints) ?w) ?h:ints) => (reshape (linear ?x ?w) ?h)
where rank(?x) == 3 and ?f == [dim(?x, 0) * dim(?x, 1), dim(?x, 2)] and len(?h) == 4 and at(?h, 0) == dim(?x, 0)

# name: heads-swapped
(transpose (reshape (matmul 0 (reshape ?x ?f:ints) ?w) ?h:ints) [0 2 1 3] ?_) => (reshape (linear ?x ?w) ?h)
where rank(?x) == 3 and ?f == [dim(?x, 0) * dim(?x, 1), dim(?x, 2)] and len(?h) == 4 and at(?h, 0) == dim(?x, 0)
"""


def test_lists_pinned_by_conditions_are_drawn_with_the_shapes() -> None:
    """A reshape's list that the conditions tie to the shapes (a flatten, a head split) is drawn
    from them: the sound rules are compared on instances, the wrong ones fail with the list in
    the counterexample."""
    rules = parse_rules(PINNED)
    verdicts = {r.name: check_rule(r) for r in rules}
    assert verdicts["flatten-right"].ok and verdicts["heads-kept"].ok
    assert verdicts["unflatten-wrong"].status == "type-mismatch"
    assert "?u = [" in verdicts["unflatten-wrong"].line()
    assert verdicts["heads-swapped"].status in ("type-mismatch", "numeric-mismatch")


@pytest.mark.parametrize("rule", SAMPLE, ids=[r.name for r in SAMPLE])
def test_shipped_rules_pass_the_check(rule: object) -> None:
    """A quarter of the shipped rules (all of them: ``relsat rules check``, about 10 s)."""
    verdict = check_rule(rule)  # type: ignore[arg-type]
    assert verdict.ok, verdict.line()


# --- the loader ------------------------------------------------------------------------------


def test_loader_refuses_a_user_rule_that_changes_a_type(tmp_path: Path) -> None:
    path = tmp_path / "mine.rules"
    path.write_text("# name: fine\n(relu (relu ?x)) => (relu ?x)\n\n" + BAD.split("\n\n")[0])
    with pytest.raises(RuleError) as err:
        load_rules(path)
    assert (err.value.path, err.value.line, err.value.rule) == (str(path), 4, "bad-concat")
    assert "right-hand side computes" in str(err.value)
    assert len(load_rules(path, check=False)) == 2


def test_check_types_flags_a_bad_rule_and_passes_the_shipped_ones() -> None:
    rules = list(parse_rules(BAD))
    with pytest.raises(RuleError, match="bad-concat"):
        check_types(rules)
    check_types(load_rules())  # the shipped rules are well typed


# --- the command line ------------------------------------------------------------------------


def test_cli_flags_bad_rules_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "bad.rules"
    path.write_text(BAD)
    assert main(["rules", "check", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == list(EXPECTED.values())
    assert lines[-1] == "6 rules: 1 ok, 3 type-mismatch, 1 numeric-mismatch, 1 untested"


def test_cli_passes_shipped_rules(capsys: pytest.CaptureFixture) -> None:
    assert main(["rules", "check", str(RULES_DIR / "merge.rules")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "4 rules: 4 ok"


def test_cli_bad_file_is_one_typed_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "syntax.rules"
    path.write_text("# name: x\n(relu ?x => (relu ?x)\n")
    assert main(["rules", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"relsat: error: {path}:2:")
    assert main(["rules", "check", str(tmp_path / "missing.rules")]) == 1
    assert "cannot read the rule file" in capsys.readouterr().err


def test_cli_optimize_refuses_a_rule_file_with_a_type_changing_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "bad.rules"
    path.write_text(BAD)
    assert main(["optimize", "--model", "nasrnn", "--rules", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rule 'bad-concat'" in err and f"{path}:1" in err


# --- rules over ONNX operators kept opaque ------------------------------------------------------

GUARDS = """\
# name: other-tensor
(onnx.Where (onnx.IsNaN ?x) ?z ?y) => (nanzero ?x)
where lo(?z) == 0 and hi(?z) == 0 and size(?z) == 1 and rank(?z) <= rank(?x)

# name: fill-one
(onnx.Where (onnx.IsNaN ?x) ?z ?x) => (nanzero ?x)
where lo(?z) == 1 and hi(?z) == 1 and size(?z) == 1 and rank(?z) <= rank(?x)

# name: isinf
(onnx.Where (onnx.IsInf ?x) ?z ?x) => (nanzero ?x)
where lo(?z) == 0 and hi(?z) == 0 and size(?z) == 1 and rank(?z) <= rank(?x)

# name: broadcast-zero
(onnx.Where (onnx.IsNaN ?x) ?z ?x) => (nanzero ?x)
where lo(?z) == 0 and hi(?z) == 0

# name: where-as-arithmetic
(onnx.Where ?c ?a ?b) => (ewadd ?b (ewmul ?c (ewsub ?a ?b)))

# name: abs-square
(ewmul (onnx.Abs ?x) (onnx.Abs ?x)) => (ewmul ?x ?x)

# name: unmodelled-onnx
(onnx.Softmax ?x) => (softmax ?x)
"""


def test_the_nan_guard_rule_is_checked_on_nans() -> None:
    verdict = check_rule(load_rules(RULES_DIR / "transformer.rules")["nanzero-guard"])
    assert verdict.status == "ok" and verdict.instances >= 10
    # the zero: one element, of the guarded tensor's rank or less (rank 0 is not drawn)
    assert all(
        math.prod(e.shapes["z"]) == 1 and len(e.shapes["z"]) <= len(e.shapes["x"])
        for e in verdict.examples
    )


@pytest.mark.parametrize(
    ("name", "status", "detail"),
    [
        ("other-tensor", "numeric-mismatch", "sides differ"),
        ("fill-one", "numeric-mismatch", "with NaN and infinities in ?x"),  # finite: equal
        ("isinf", "numeric-mismatch", "with NaN and infinities in ?x"),
        ("broadcast-zero", "type-mismatch", "the right-hand side computes"),
        ("where-as-arithmetic", "ok", ""),  # only with the condition drawn 0 and 1
        ("abs-square", "ok", ""),
        ("unmodelled-onnx", "untested", "does not model 'onnx.Softmax'"),
    ],
)
def test_rules_over_onnx_operators_are_checked(name: str, status: str, detail: str) -> None:
    verdict = check_rule(parse_rules(GUARDS)[name])
    assert verdict.status == status and detail in verdict.detail, verdict.detail


def test_edge_values_of_onnx_operators() -> None:
    from relsat.rewrite import inputs
    from relsat.rewrite.check import sides

    rule = parse_rules(GUARDS)["where-as-arithmetic"]
    lhs, _, _ = sides(rule, {"c": (2, 3), "a": (2, 3), "b": (2, 3)})
    values = inputs.onnx_values(rule, lhs, None)
    assert values is not None and set(np.unique(values["c"])) == {0.0, 1.0}
    assert inputs.special(rule, lhs, values) is None
    guard = load_rules(RULES_DIR / "transformer.rules")["nanzero-guard"]
    lhs, _, _ = sides(guard, {"x": (2, 4), "z": (1,)})
    names, edges = inputs.special(guard, lhs, None) or ([], {})
    x = edges["x"].reshape(-1)
    assert names == ["x"] and np.isnan(x[0::4]).all() and np.isposinf(x[1::4]).all()
    assert np.isneginf(x[2::4]).all() and np.isfinite(x[3::4]).all()


# --- rules over a gather's index facts --------------------------------------------------------

GRID = "# name: g\n(onnx.GatherND 0 ?m ?i) => (reshape {m} (take (shape ?i) -1))\nwhere {cond}\n"


def test_an_index_rule_is_checked_on_drawn_grids() -> None:
    """A rule reading ``grid(?i)`` is tried on a data tensor and an index drawn together
    (:mod:`relsat.rewrite.indices`): the shipped view is ok, a wrong right-hand side is caught,
    and without an index fact the shape solver says it cannot model the gather."""
    assert _one(GRID.format(m="?m", cond="grid(?i) == shape(?m)")).ok
    wrong = _one(GRID.format(m="(relu ?m)", cond="grid(?i) == shape(?m)"))
    assert wrong.status == "numeric-mismatch", wrong.line()
    unguarded = _one(GRID.format(m="?m", cond="rank(?m) >= 1"))
    assert unguarded.status == "untested" and "onnx.GatherND" in unguarded.detail


def test_the_index_check_covers_the_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The facts of a drawn index are the importer's analysis of it: an analysis that took
    every index for a grid (swapped components, a shifted one) makes the view's sides differ."""
    from relsat.onnx import affine

    def everything_a_grid(array: np.ndarray, dims: object = None) -> tuple[object, object]:
        return tuple(array.shape[:-1][i] for i in range(array.shape[-1])), None

    assert _one(GRID.format(m="?m", cond="grid(?i) == grid(?i)")).ok
    monkeypatch.setattr(affine, "index_facts", everything_a_grid)
    verdict = _one(GRID.format(m="?m", cond="grid(?i) == grid(?i)"))
    assert verdict.status in ("numeric-mismatch", "type-mismatch"), verdict.line()


FLAT = (
    "# name: f\n(onnx.Gather 0 (onnx.Flatten ?f:int ?m) ?i) => "
    "(reshape {m} (append (shape ?i) 1))\nwhere {cond}rows(?i) == squeeze(shape(?m))\n"
)


def test_an_attribute_a_rule_names_is_matched_and_drawn() -> None:
    """``(onnx.Flatten ?f:int ?m)`` binds Flatten's axis: the view of a mask flattened to
    ``[size, 1]`` holds where ``?f == rank(?m)`` (the checker sets ``?f`` from the equation),
    and without that guard its sides have two types (another axis flattens otherwise)."""
    assert _one(FLAT.format(m="?m", cond="?f == rank(?m) and ")).ok
    unguarded = _one(FLAT.format(m="?m", cond=""))
    assert unguarded.status == "type-mismatch" and "?f = " in unguarded.detail
    wrong = _one(FLAT.format(m="(relu ?m)", cond="?f == rank(?m) and "))
    assert wrong.status == "numeric-mismatch"


@pytest.mark.parametrize(
    ("variant", "grid", "rows"),
    [
        ("grid", (2, 5), None),
        ("swapped", None, None),
        ("shifted", None, None),
        ("row-major", None, (2, 5)),
        ("column-major", None, None),
    ],
)
def test_index_facts_of_grids_and_near_misses(variant, grid, rows) -> None:
    from relsat.onnx.affine import index_facts

    b, _, k = np.indices((2, 1, 5))
    array = {
        "grid": np.stack([b, k], -1),
        "swapped": np.stack([k, b], -1),
        "shifted": np.stack([b, (k + 1) % 5], -1),
        "row-major": 5 * b + k,
        "column-major": b + 2 * k,
    }[variant]
    assert index_facts(array) == (grid, rows)


@pytest.mark.parametrize(
    ("op", "attrs", "shapes"),
    [
        ("GatherND", {}, [(2, 3, 4), (2, 1, 2)]),
        ("Gather", {}, [(6, 1), (2, 3)]),
        ("Gather", {"axis": 1}, [(2, 6), (4,)]),
        ("Flatten", {}, [(2, 3, 4)]),
        ("Flatten", {"axis": 3}, [(2, 3, 4)]),
    ],
)
def test_the_gather_kernels_agree_with_onnx(op, attrs, shapes) -> None:
    """The NumPy kernels the checker runs the index rules with, against ONNX's reference."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from relsat.graph.onnx_kernels import KERNELS

    rng = np.random.default_rng(0)
    data = rng.standard_normal(shapes[0]).astype(np.float32)
    feeds = {"x": data}
    names = ["x"]
    if len(shapes) > 1:
        axis = attrs.get("axis", 0)
        top = shapes[0][: shapes[1][-1]] if op == "GatherND" else (shapes[0][axis],)
        index = rng.integers(0, min(top), size=shapes[1]).astype(np.int64)
        feeds["i"], names = index, ["x", "i"]
    node = helper.make_node(op, names, ["y"], **attrs)
    ins = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT if n == "x" else TensorProto.INT64, None)
        for n in names
    ]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    model = helper.make_model(helper.make_graph([node], "k", ins, out))
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    (got,) = KERNELS[op](attrs, *feeds.values())
    np.testing.assert_array_equal(got, want)
