"""Rule files: the shipped set equals TENSAT's, the format's syntax and semantic errors."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relsat.errors import RelsatError, RuleError, RuleSyntaxError
from relsat.rewrite.rulefile import (
    RULES_DIR,
    format_rules,
    load_rules,
    load_tensat,
    parse_rules,
    parse_tensat,
)
from relsat.rewrite.rules import Guard, Pattern, Rule, RuleSet, Var, canonical


@pytest.fixture(scope="module")
def shipped() -> RuleSet:
    return load_rules()


@pytest.fixture(scope="module")
def tensat(reference: Path) -> RuleSet:
    return load_tensat(reference / "rules")


def equation(rule: Rule) -> tuple[object, ...]:
    c = canonical(rule)
    return (c.lhs, c.rhs, c.symmetric)


# --- the shipped rules ----------------------------------------------------------------------


FUSION = "bias.rules"  # relsat's fusion-aware rules; every other file is TENSAT's set
TRANSFORMER = "transformer.rules"  # relsat's transformer rules (LayerNorm, GELU, fused kernels)
DECODER = "decoder.rules"  # relsat's LLM decoder rules (RMSNorm, rotary embedding)
LAYOUT = "layout.rules"  # relsat's rules over shape operators (transpose and reshape chains)
NORM = "norm.rules"  # relsat's normalization rules (GroupNorm)
MASKS = "masks.rules"  # relsat's rules over masks' logic (a settled operand dropped)


def _tensat_part(shipped: RuleSet) -> RuleSet:
    return RuleSet(
        [
            r
            for r in shipped
            if r.location is None
            or Path(r.location.path or "").name
            not in (FUSION, TRANSFORMER, DECODER, LAYOUT, NORM, MASKS)
        ]
    )


def test_shipped_counts(shipped: RuleSet) -> None:
    tensat_part = _tensat_part(shipped)
    assert len(tensat_part.single) == 120  # 116 distinct learned + 4 predefined
    assert len(tensat_part.multi) == 15
    assert sum(r.symmetric for r in tensat_part.multi) == 13
    fusion = load_rules(RULES_DIR / FUSION)
    assert len(fusion.single) == 24 and len(fusion.multi) == 3  # see rules/bias.rules
    transformer = load_rules(RULES_DIR / TRANSFORMER)
    assert len(transformer.single) == 37 and not transformer.multi  # see rules/transformer.rules
    decoder = load_rules(RULES_DIR / DECODER)
    assert len(decoder.single) == 22 and not decoder.multi  # see rules/decoder.rules
    layout = load_rules(RULES_DIR / LAYOUT)
    assert len(layout.single) == 10 and not layout.multi  # see rules/layout.rules
    norm = load_rules(RULES_DIR / NORM)
    assert len(norm.single) == 2 and not norm.multi  # see rules/norm.rules
    masks = load_rules(RULES_DIR / MASKS)
    assert len(masks.single) == 9 and not masks.multi  # see rules/masks.rules
    own = len(fusion) + len(transformer) + len(decoder) + len(layout) + len(norm) + len(masks)
    assert len(shipped) == len(tensat_part) + own == 242
    assert len(load_rules(RULES_DIR / "extra")) == 2  # bias un-fusing, off by default
    assert sorted(p.name for p in RULES_DIR.glob("*.rules")) == [
        f"{f}.rules"
        for f in (
            "bias",
            "concat",
            "conv",
            "decoder",
            "elementwise",
            "enlarge",
            "layout",
            "masks",
            "matmul",
            "merge",
            "multi",
            "norm",
            "relu",
            "transformer",
        )
    ]


def test_shipped_equals_tensat(shipped: RuleSet, tensat: RuleSet) -> None:
    shipped = _tensat_part(shipped)
    assert len(tensat.single) == 124 and len(tensat.multi) == 15
    assert {equation(r) for r in shipped.single} == {equation(r) for r in tensat.single}
    assert {equation(r) for r in shipped.multi} == {equation(r) for r in tensat.multi}
    # no rule shipped twice: TENSAT's 4 duplicate lines are one rule each, citing both lines
    assert len({equation(r) for r in shipped}) == len(shipped) - 1  # multi 1 = multi 2 renamed
    assert len({equation(r) for r in shipped.single}) == 120


def test_sources_cover_every_reference_line(shipped: RuleSet, tensat: RuleSet) -> None:
    by_source = {s: r for r in shipped for s in r.sources}
    assert set(by_source) == {s for r in tensat for s in r.sources}
    for ref in tensat:  # each cited line holds that very rule
        assert all(equation(by_source[s]) == equation(ref) for s in ref.sources)
    dups = {r.sources for r in shipped if len(r.sources) == 2 and not r.is_multi}
    assert dups == {
        (f"converted.txt:{a}", f"converted.txt:{b}")
        for a, b in ((70, 85), (91, 98), (92, 118), (93, 119))
    }


def test_names_unique_and_kebab(shipped: RuleSet) -> None:
    names = [r.name for r in shipped]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", n) for n in names)
    assert not any(re.fullmatch(r"[a-z]+-?\d+", n) for n in names)


def _guards(shipped: RuleSet) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for rule in shipped:
        for g in rule.guards:
            for s in rule.sources:
                out.setdefault(s, set()).add(g.name)
    return out


def test_guards_where_semantics_says(shipped: RuleSet) -> None:
    guards = _guards(shipped)
    conv = "converted.txt:{}".format
    for line in (115, 116, 117, 91, 98):
        assert guards[conv(line)] == {"ungrouped"}, line
    for line in (92, 118, 93, 119):
        assert guards[conv(line)] == {"same-group-width"}, line
    for line in (59, 60, 61, 62):
        assert guards[conv(line)] == {"same-shape"}, line
    for src in ("converted_multi.txt:23", "converted_multi.txt:25"):
        assert guards[src] == {"ungrouped"}, src
    # enlarge is exact only for odd kernels (tests/test_rule_soundness.py shows the even case)
    for src in ("predefined_multi.txt:1", "predefined_multi.txt:3"):
        assert guards[src] == {"ungrouped", "odd-kernels"}, src
    # ungrouped names the conv's own input and weight, for both convs of the shared-input merge
    rule = next(r for r in shipped if conv(115) in r.sources)
    assert [str(g) for g in rule.guards] == ["ungrouped(?x, ?w1)", "ungrouped(?x, ?w2)"]
    # every guarded rule is one of the SEMANTICS §7 families (same-shape also on concat-of-ew)
    ungrouped = {s for s, g in guards.items() if "ungrouped" in g}
    assert ungrouped == {conv(n) for n in (91, 98, 115, 116, 117)} | {
        f"{f}:{n}"
        for f, ns in (
            ("converted_multi.txt", (23, 24, 25, 26)),
            ("predefined_multi.txt", (1, 2, 3, 4)),
        )
        for n in ns
    }


def test_round_trip(shipped: RuleSet) -> None:
    text = format_rules(shipped)
    assert parse_rules(text) == shipped
    for path in RULES_DIR.glob("*.rules"):  # the files are in the writer's canonical layout
        text = path.read_text()
        written = format_rules(parse_rules(text, path=path))
        assert written[written.index("# name:") :] == text[text.index("# name:") :]


def test_load_rules_accepts_folder_file_and_list(shipped: RuleSet) -> None:
    assert load_rules(RULES_DIR) == shipped
    one = load_rules(RULES_DIR / "merge.rules")
    assert one.names == (
        "conv-merge-groups",
        "conv-merge-groups-relu",
        "conv-stride2-merge-groups",
        "conv-stride2-merge-groups-relu",
    )
    assert len(load_rules([RULES_DIR / "merge.rules", RULES_DIR / "enlarge.rules"])) == 6
    assert one[0].location is not None and one[0].location.line > 1
    assert "conv-merge-groups" in one and one["conv-merge-groups"] is one[0]


# --- TENSAT's format ------------------------------------------------------------------------


def test_tensat_as_is(tensat: RuleSet) -> None:
    assert tensat.names[:2] == ("rule0", "rule1") and "rule123" in tensat
    assert [r.symmetric for r in tensat.multi] == [True] * 13 + [False] * 2
    m4 = tensat["multi4"]
    assert m4.sources == ("converted_multi.txt:9", "converted_multi.txt:10")
    assert m4.shared == (Var("input_1"),)
    assert tensat["multi1"].shared == ()
    assert equation(tensat["rule69"]) == equation(tensat["rule84"])  # lines 70 = 85


def test_parse_tensat_text() -> None:
    text = (
        "(relu ?input_1)=>(relu ?input_1)\n\n(ewadd ?input_1 ?input_2)=>(ewadd ?input_2 ?input_1)\n"
    )
    rs = parse_tensat(text, prefix="t", start=5)
    assert rs.names == ("t5", "t6") and rs[1].sources == ("<string>:3",)
    with pytest.raises(RuleError, match="one line") as err:
        parse_tensat(text + "(relu ?input_3)=>(relu ?input_3)", multi=True, path="x/odd.txt")
    assert err.value.line == 4 and err.value.path == "x/odd.txt"
    with pytest.raises(RuleError, match=r"\?input_9") as err:
        parse_tensat(
            "(relu ?input_1)=>(relu ?input_1)\n(relu ?input_2)=>(relu ?input_9)", multi=True
        )
    assert err.value.line == 2


def test_canonical() -> None:
    p = Pattern("ewadd", (Var("b"), Pattern("relu", (Var("a"),))))
    assert str(canonical(p)) == "(ewadd ?v0 (relu ?v1))"
    rule = parse_rules(
        "# name: r\n(conv2d 1 1 0 0 ?x ?w) => (relu ?w)\n(relu ?x) => (relu ?x)\n"
        "where ungrouped(?x, ?w)\n"
    )["r"]
    c = canonical(rule)
    assert str(c.guards[0]) == "ungrouped(?v0, ?v1)" and c.name == "r"


# --- errors ---------------------------------------------------------------------------------

RULE = "# name: r\n"


@pytest.mark.parametrize(
    ("body", "line", "col", "message"),
    [
        ("(relu ?x => (relu ?x)", 2, 10, "unexpected '=>'"),
        ("(relu ?x)) => (relu ?x)", 2, 10, "expected '=>'"),
        ("(relu ?x) => (relu ?x", 2, 22, "never closed"),
        ("(relu ?x)", 2, 10, "missing '=>'"),
        ("(relu ?x) (relu ?x)", 2, 11, "expected '=>'"),
        ("(relu ?x) => (relu ?x) ?y", 2, 24, "after the right-hand side"),
        ("(relu ?x) => (relu x$)", 2, 20, "bad token 'x$'"),
        ("(relu ?x) => (relu 1x)", 2, 20, "bad token"),
        ("(relu ?x) => ()", 2, 15, "expected an operator name"),
        ("(relu ?x) => (?x)", 2, 15, "expected an operator name"),
        ("?x => (relu ?x)", 2, 1, "must be an operator pattern"),
        ("(relu ?x) => 3", 2, 14, "must be an operator pattern"),
        ("(conv2d 1 1 0 0 ?x 2) => (relu ?x)", 2, 20, "'weight' must be a tensor"),
        ("(matmul ?a ?b ?c) => (relu ?a)", 2, 9, "'activation' must be an integer"),
        ("  (relu ?x) => (relu 0)", 2, 22, "'x' must be a tensor"),
        ("(relu ?x) => (relu ?x)\nwhere ungrouped(?x ?w)", 3, 17, "guard arguments"),
        ("(relu ?x) => (relu ?x)\nwhere ungrouped", 3, 1, "expected 'where"),
        ("(relu ?x) => (relu ?x)\nsymmetric\n(relu ?x) => (relu ?x)", 4, 1, "must come before"),
        ("(relu ?x) => (relu ?x)\n# late comment", 3, 1, "comment inside a rule body"),
        ("(relu ?x) => (relu ?x)\nsymmetric\nsymmetric", 4, 1, "given twice"),
    ],
)
def test_syntax_errors(body: str, line: int, col: int, message: str) -> None:
    with pytest.raises(RuleSyntaxError, match=re.escape(message)) as err:
        parse_rules(RULE + body, path="f.rules")
    e = err.value
    assert (e.path, e.line, e.col, e.rule) == ("f.rules", line, col, "r")
    assert str(e).startswith(f"f.rules:{line}:{col}: rule 'r': ")
    assert isinstance(e, RuleError) and isinstance(e, RelsatError)


def test_syntax_errors_outside_rules() -> None:
    with pytest.raises(RuleSyntaxError, match="without a '# name") as err:
        parse_rules("# a file comment\n\n(relu ?x) => (relu ?x)\n")
    assert (err.value.line, err.value.col, err.value.rule) == (3, 1, None)
    with pytest.raises(RuleSyntaxError, match="kebab-case") as err:
        parse_rules("# name: Bad_Name\n(relu ?x) => (relu ?x)\n")
    assert err.value.line == 1
    with pytest.raises(RuleSyntaxError, match="no 'lhs => rhs'") as err:
        parse_rules("# name: empty\n# just a comment\n\n# name: next\n(relu ?x) => (relu ?x)")
    assert (err.value.line, err.value.rule) == (1, "empty")
    deep = "(relu " * 5000 + "?x" + ")" * 5000
    assert len(parse_rules(f"# name: deep\n{deep} => (relu ?x)\n")) == 1


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("(relu ?x) => (frobnicate ?x)", 2, "unknown operator 'frobnicate'"),
        ("(relu ?x ?y) => (relu ?x)", 2, "relu takes 1 arguments"),
        ("(concat 1 ?a ?b) => (relu ?a)", 2, "concat takes 4 arguments (axis ndim a b), got 3"),
        ("(relu ?x) => (input ?x)", 2, "cannot be in rules"),
        ("(relu ?x) => (transpose ?x 1 0)", 2, "argument 'perm' must be a list [0 2 1 3]"),
        ("(relu ?x) => (ewadd ?x ?y)", 2, "uses ?y, which no left-hand side binds"),
        ("(relu ?x) => (relu ?x)\n(relu ?y) => (relu ?z)", 3, "uses ?z"),
        ("(relu ?x) => (relu ?x)\nwhere grouped(?x, ?x)", 3, "unknown guard 'grouped'"),
        ("(relu ?x) => (relu ?x)\nwhere same-shape(?x)", 3, "takes 2 variables"),
        ("(relu ?x) => (relu ?x)\n\nwhere same-shape(?x, ?y)", 4, "without a '# name"),
        ("(relu ?x) => (relu ?x)\nwhere same-shape(?x, ?y)", 3, "guard same-shape uses ?y"),
        ("(relu ?x) => (relu ?x)\nsymmetric", 3, "multi-pattern rules only"),
    ],
)
def test_semantic_errors(body: str, line: int, message: str) -> None:
    with pytest.raises(RuleError, match=re.escape(message)) as err:
        parse_rules(RULE + body, path="f.rules")
    e = err.value
    assert (e.path, e.line) == ("f.rules", line)
    assert e.rule == ("r" if "name" not in message else None)


def test_duplicate_names_name_both_places(tmp_path: Path) -> None:
    text = "# name: r\n(relu ?x) => (relu ?x)\n\n# name: r\n(relu ?y) => (relu ?y)\n"
    with pytest.raises(RuleError, match=r"first defined at f.rules:1") as err:
        parse_rules(text, path="f.rules")
    assert (err.value.line, err.value.rule) == (4, "r")
    (tmp_path / "a.rules").write_text("# name: r\n(relu ?x) => (relu ?x)\n")
    (tmp_path / "b.rules").write_text("\n# name: r\n(relu ?x) => (relu ?x)\n")
    with pytest.raises(RuleError, match=r"a\.rules:1") as err:
        load_rules(tmp_path)
    assert err.value.path is not None and err.value.path.endswith("b.rules")
    assert err.value.line == 2


def test_unreadable_rule_files_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.rules"
    bad.write_bytes(b"# name: r\n(relu ?x) => \xff(relu ?x)\n")
    with pytest.raises(RuleSyntaxError, match=r"bad\.rules:2:14: not UTF-8 text \(byte 0xff\)"):
        load_rules(bad)
    with pytest.raises(RuleError, match=r"missing\.rules: cannot read the rule file"):
        load_rules(tmp_path / "missing.rules")


def test_rule_construction_checks() -> None:
    relu = Pattern("relu", (Var("x"),))
    with pytest.raises(RuleError, match="2 left-hand sides but 1 right-hand sides"):
        Rule("r", (relu, relu), (relu,))
    with pytest.raises(RuleError, match="unknown operator"):
        Pattern("frobnicate", (Var("x"),))
    with pytest.raises(RuleError, match="must be an integer"):
        Pattern("split", (Var("x"), 0))
    with pytest.raises(RuleError, match="unknown guard"):
        Guard("nope", (Var("x"),))
    rule = Rule("r", (relu,), (relu,), guards=(Guard("same-shape", (Var("x"), Var("x"))),))
    assert str(rule) == "# name: r\n(relu ?x) => (relu ?x)\nwhere same-shape(?x, ?x)"


_PIECES = [
    "(",
    ")",
    " ",
    "=>",
    "?x",
    "?y",
    "relu",
    "conv2d",
    "0",
    "1",
    "\n",
    "\n\n",
    "# name: r",
    "# from: a:1",
    "where ",
    "same-shape",
    ",",
    "symmetric",
    "concat",
    "#",
    "?",
    "split_0",
    "x$",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_fuzz_only_rule_errors(text: str) -> None:
    for parse in (parse_rules, parse_tensat, lambda t: parse_tensat(t, multi=True)):
        with contextlib.suppress(RuleError):  # anything else (IndexError, …) fails the test
            parse(text)


def test_no_family_of_own_rules_differs_only_in_numbers() -> None:
    """Issue 39: what varies between spellings is a variable, not a copy of the rule. Among
    relsat's own rules (TENSAT's converted ones stay as they are), no two are the same rule
    with other numbers: each rule's text (sides and conditions) with every number replaced by
    a placeholder is unique."""
    import re

    seen: dict[str, str] = {}
    for name in (FUSION, TRANSFORMER, DECODER, LAYOUT):
        for rule in load_rules(RULES_DIR / name):
            sides = " ; ".join(f"{a} => {b}" for a, b in zip(rule.lhs, rule.rhs, strict=True))
            text = sides + " where " + " and ".join(map(str, rule.guards))
            skeleton = re.sub(r"(?<![?\w])-?\d+(\.\d+)?(e-?\d+)?", "#", text)
            assert skeleton not in seen, f"{rule.name} is {seen.get(skeleton)} with other numbers"
            seen[skeleton] = rule.name
