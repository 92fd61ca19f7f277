"""Rule files: relsat's ``.rules`` format and TENSAT's rule text, parsed into the rule IR.

The rule format
---------------

``rules/<family>.rules`` is plain text that reads like a table of equations, one named rule per
block, blocks separated by blank lines::

    # name: matmul-assoc-right
    # from: converted.txt:1
    # (x @ a) @ b -> x @ (a @ b)
    (matmul 0 (matmul 0 ?x ?a) ?b) => (matmul 0 ?x (matmul 0 ?a ?b))

    # name: conv-pair-shared-input-to-weight-concat
    # from: converted_multi.txt:23, converted_multi.txt:24
    # two convs of one input become one conv with the weights stacked, then split
    (conv2d 1 1 0 0 ?x ?w1) => (split_0 (split 1 (conv2d 1 1 0 0 ?x (concat 0 4 ?w1 ?w2))))
    (conv2d 1 1 0 0 ?x ?w2) => (split_1 (split 1 (conv2d 1 1 0 0 ?x (concat 0 4 ?w1 ?w2))))
    symmetric
    where ungrouped(?x, ?w1)
    where ungrouped(?x, ?w2)

* **Header.** ``# name: <kebab-case-name>`` starts a rule (names are unique over every loaded file);
  then optionally ``# from: file:line, …`` (provenance: every source line the rule came from) and
  ``# <text>`` lines (the rule's ``doc``). A block of comments with no ``# name:`` (a file header)
  is ignored.
* **Body.** One line ``lhs => rhs`` is a single-pattern rule. Several consecutive lines make a
  **multi-pattern** rule: the left-hand sides are matched together, joined on their shared
  ``?vars``, and ``rhs_i`` is added to the e-class of ``lhs_i``; a right-hand side may use a
  variable bound by any left-hand side.
* ``symmetric`` (multi-pattern rules only): TENSAT's symmetric mode. When the source patterns are
  identical up to renaming, a pair of matches is tried once (unordered), not in both orders.
* ``where <guard>(?a, ?b, …)``: a side condition from the closed vocabulary :data:`GUARDS`
  (``ungrouped``, ``same-shape``, ``same-group-width``). Guards are data; the engine decides
  whether to apply them (TENSAT mode ignores them).
* **Patterns** are s-expressions with TENSAT's operator names and argument orders
  (:data:`OPERATORS`): integer arguments first, as literal leaves that must match exactly
  (``(conv2d 1 1 0 2 ?x ?w)`` is a stride-1, SAME-padded, ReLU-fused conv), then tensor
  arguments, each a pattern or a ``?variable``. A variable used twice binds the same e-class.
  ``(onnx.<Type> …)`` on a left-hand side matches an ONNX operator of the default domain that
  relsat keeps opaque (``(onnx.Where (onnx.IsNaN ?x) ?z ?x)``): its arguments are the node's
  tensor inputs in order, as many as written. An unknown type (``onnx.defs``) or one on a
  right-hand side is a :class:`RuleError` at ``file:line:col``.

Syntax errors raise :class:`RuleSyntaxError` citing ``file:line:col``; semantic problems (unknown
operator or guard, wrong arity, a right-hand-side variable no left-hand side binds, duplicate
names, …) raise :class:`RuleError` naming the rule and the line.

TENSAT's own files (``converted.txt``, ``predefined_rules.txt``, ``converted_multi.txt``,
``predefined_multi.txt``: one ``lhs=>rhs`` per line, multi-pattern files two lines per rule) are
read as-is by :func:`parse_tensat` and :func:`load_tensat`.

>>> rs = parse_rules("# name: relu-of-relu\\n(relu (relu ?x)) => (relu ?x)\\n")
>>> str(rs["relu-of-relu"].lhs[0])
'(relu (relu ?x))'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from relsat.errors import RuleError, RuleSyntaxError
from relsat.graph.ops import OPAQUE_INT_ATTRS, f32_bits
from relsat.paths import data_dir
from relsat.rewrite.exprs import (
    ARITH,
    COMPARE,
    FACTS,
    FUNCS,
    LIST,
    PARAM_TYPES,
    Cond,
    Expr,
    Param,
    expr_type,
)
from relsat.rewrite.rules import (
    _KIND_TEXT,
    GUARDS,
    OPERATORS,
    Guard,
    Location,
    Pattern,
    Rule,
    RuleSet,
    Term,
    Var,
    _format_rule,
    _kind,
    _sig_text,
    check_onnx,
    onnx_type,
    param_type,
    signature,
)

__all__ = ["RULES_DIR", "format_rules", "load_rules", "load_tensat", "parse_rules", "parse_tensat"]

#: The shipped rule files, ``rules/*.rules`` at the repository root.
RULES_DIR = data_dir("rules")

# ---------------------------------------------------------------------------------------------
# S-expressions

_TOKEN = re.compile(
    r"(?P<lp>\()|(?P<rp>\))|(?P<lb>\[)|(?P<rb>\])|(?P<arrow>=>)"
    r"|(?P<float>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+))(?=[\s()\[\]]|=>|$)"
    r"|(?P<int>-?\d+)(?=[\s()\[\]]|=>|$)"
    r"|(?P<var>\?[A-Za-z_][A-Za-z0-9_]*(?::[A-Za-z]+)?)(?=[\s()\[\]]|=>|$)"
    r"|(?P<sym>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)(?=[\s()\[\]]|=>|$)"
    r"|(?P<arith>[-+*/%])(?=\s)"
)
_BAD = re.compile(r"[^\s()\[\]]+")


@dataclass
class _Frame:
    op: str
    col: int
    args: list[tuple[Term | float, int]]


@dataclass(frozen=True)
class _Float:
    """A float literal being read: float32 bits at an operator's parameter, a float in
    arithmetic."""

    value: float


class _Line:
    """One body line being parsed: raises errors at this line's file:line:col."""

    def __init__(
        self,
        text: str,
        path: str | None,
        line: int,
        rule: str | None,
        types: dict[str, str] | None = None,
    ) -> None:
        self.text, self.path, self.line, self.rule = text, path, line, rule
        self.types = {} if types is None else types  # parameter variable -> type, per rule
        self.side = "left"  # the side being read: an ONNX operator only on the left
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, 1-based col)
        pos = 0
        while pos < len(text):
            if text[pos].isspace():
                pos += 1
                continue
            m = _TOKEN.match(text, pos)
            if m is None or m.lastgroup is None:
                bad = _BAD.match(text, pos)
                self.syntax(f"bad token {bad.group() if bad else text[pos]!r}", pos + 1)
                break  # pragma: no cover (syntax raises)
            self.tokens.append((m.lastgroup, m.group(), pos + 1))
            pos = m.end()
        self.i = 0

    def syntax(self, message: str, col: int) -> None:
        raise RuleSyntaxError(message, path=self.path, line=self.line, col=col, rule=self.rule)

    def semantic(self, message: str, col: int | None = None) -> None:
        raise RuleError(message, path=self.path, line=self.line, col=col, rule=self.rule)

    def end_col(self) -> int:
        return len(self.text.rstrip()) + 1

    def term(self) -> Term:
        """Parse one term (iteratively: nesting depth is not limited by Python's stack)."""
        stack: list[_Frame] = []
        while True:
            if self.i >= len(self.tokens):
                where = (
                    f"'(' at col {stack[-1].col} is never closed" if stack else "expected a term"
                )
                self.syntax(f"unbalanced parentheses: {where}" if stack else where, self.end_col())
            kind, text, col = self.tokens[self.i]
            self.i += 1
            value: Term
            if kind == "lp":
                op_tok = self.tokens[self.i] if self.i < len(self.tokens) else None
                if op_tok is not None and op_tok[0] == "arith":
                    self.i += 1
                    stack.append(_Frame(op_tok[1], col, []))
                    continue
                if op_tok is None or op_tok[0] != "sym":
                    found = "')'" if op_tok and op_tok[0] == "rp" else "nothing"
                    if op_tok and op_tok[0] != "rp":
                        found = repr(op_tok[1])
                    self.syntax(f"expected an operator name after '(', found {found}", col + 1)
                assert op_tok is not None
                self.i += 1
                if op_tok[1] not in FUNCS and op_tok[1] not in FACTS and op_tok[1] != LIST:
                    self._check_op(op_tok[1], op_tok[2])  # else a list or a function
                stack.append(_Frame(op_tok[1], col, []))
                continue
            if kind == "lb":
                value = self._list(col)
                if not stack:
                    return value
                stack[-1].args.append((value, col))
                continue
            if kind == "rp":
                if not stack:
                    self.syntax("unbalanced parentheses: unexpected ')'", col)
                value = self._close(stack.pop())
            elif kind == "int":
                value = int(text)
            elif kind == "float":  # a float parameter: its float32 bits (relsat.graph.ops.f32_bits)
                value = _Float(float(text))  # type: ignore[assignment]
            elif kind == "var":
                value = self._var(text, col)
            elif kind == "arrow":
                self.syntax("unexpected '=>' (unbalanced parentheses?)", col)
                raise AssertionError  # pragma: no cover
            else:
                self.syntax(f"expected '(', a ?variable or an integer, found {text!r}", col)
                raise AssertionError  # pragma: no cover
            if not stack:
                if isinstance(value, _Float):
                    return f32_bits(value.value)
                return value
            stack[-1].args.append((value, col))

    def _list(self, col: int) -> tuple[int, ...]:
        """``[0 2 1 3]``: an ``ints`` literal (the ``[`` at ``col`` taken)."""
        items: list[int] = []
        while True:
            if self.i >= len(self.tokens):
                self.syntax(f"'[' at col {col} is never closed", self.end_col())
            kind, text, tcol = self.tokens[self.i]
            self.i += 1
            if kind == "rb":
                return tuple(items)
            if kind != "int":
                self.syntax(f"a list holds integers, found {text!r}", tcol)
            items.append(int(text))

    def _var(self, text: str, col: int) -> Var | Param:
        """``?x`` (a tensor, or a parameter already typed in this rule) or ``?x:type``."""
        name, _, typ = text[1:].partition(":")
        if not typ:
            return Var(name)
        if name.startswith("_"):  # a wildcard binds nothing: each one is its own
            if typ not in PARAM_TYPES:
                self.semantic(f"unknown type {typ!r} of ?{name} (known: int, float, ints)", col)
            return Param(name, typ)
        if typ not in PARAM_TYPES:
            self.semantic(f"unknown type {typ!r} of ?{name} (known: int, float, ints)", col)
        if self.types.setdefault(name, typ) != typ:
            self.semantic(f"?{name} is used as {self.types[name]} and as {typ}", col)
        return Param(name, typ)

    def _param(self, arg: object, want: str, col: int) -> object:
        """An argument at a parameter position: a float literal as its bits, an untyped ?x as a
        parameter of the position's type (or the type it was declared with)."""
        if isinstance(arg, _Float):
            return f32_bits(arg.value)
        if isinstance(arg, Var) and arg.name in self.types:  # declared ?x:type before
            return Param(arg.name, self.types[arg.name])
        if isinstance(arg, Var) and arg.name.startswith("_"):  # a wildcard: the place's type
            return Param(arg.name, want)
        return arg

    def _value(self, arg: object, col: int) -> object:
        """An argument of arithmetic: floats stay floats, ?x is a parameter."""
        if isinstance(arg, _Float):
            return arg.value
        if isinstance(arg, Var):
            return Param(arg.name, self.types.get(arg.name, "int"))
        if isinstance(arg, Pattern):
            self.semantic(f"arithmetic takes numbers and ?variables, not {arg}", col)
        return arg

    def _check_op(self, op: str, col: int) -> None:
        if onnx_type(op) is not None:
            if self.side == "right":
                self.semantic("an opaque operator cannot be built by a rule", col)
            try:
                check_onnx(op, 1 + len(OPAQUE_INT_ATTRS.get(onnx_type(op) or "", ())))  # the type
            except RuleError as err:
                self.semantic(err.reason, col)
            return
        sig = OPERATORS.get(op)
        if sig is None:
            self.semantic(f"unknown operator {op!r}", col)
        elif not sig.in_rules:
            self.semantic(f"operator {op!r} takes string arguments and cannot be in rules", col)

    def _close(self, frame: _Frame) -> Pattern | Expr:
        if frame.op == LIST:  # (list (dim ?x 1) 1): a list of computed items
            return Expr(LIST, tuple(self._value(a, c) for a, c in frame.args))
        if frame.op in FUNCS or frame.op in FACTS:  # (compose ?p ?q), (shape ?x), (dim ?x 0)
            fn = FUNCS.get(frame.op) or FACTS[frame.op]
            if len(frame.args) != len(fn.params):
                self.semantic(
                    f"{frame.op} takes {len(fn.params)} arguments, got {len(frame.args)}",
                    frame.col,
                )
            values = tuple(
                a if kind == "tensor" and isinstance(a, Var) else self._value(a, c)
                for kind, (a, c) in zip(fn.params, frame.args, strict=True)
            )
            return Expr(frame.op, values)
        if frame.op in ARITH:
            nums = tuple(self._value(a, c) for a, c in frame.args)
            if frame.op == "-" and len(nums) == 1:
                return Expr("neg", nums)
            if len(nums) != 2:
                self.semantic(f"'{frame.op}' takes 2 arguments, got {len(nums)}", frame.col)
            return Expr(frame.op, nums)
        if onnx_type(frame.op) is not None:
            try:
                check_onnx(frame.op, len(frame.args))
            except RuleError as err:
                self.semantic(err.reason, frame.col)
        sig = signature(frame.op, len(frame.args))
        if len(frame.args) != sig.arity:
            self.semantic(
                f"{frame.op} takes {sig.arity} arguments ({_sig_text(sig)}), got {len(frame.args)}",
                frame.col,
            )
        args: list[tuple[Term, int]] = []
        index = 0
        for (_, kind), (arg, col) in zip(sig.params, frame.args, strict=True):
            if kind == "int":
                arg = self._param(arg, param_type(frame.op, index), col)  # type: ignore[assignment]
                index += 1
            elif kind == "ints":
                arg = self._param(arg, "ints", col)  # type: ignore[assignment]
            elif isinstance(arg, Var) and arg.name in self.types:
                self.semantic(
                    f"?{arg.name} is a number ({self.types[arg.name]}), used as a tensor", col
                )
            args.append((arg, col))  # type: ignore[arg-type]
        for (pname, kind), (arg, col) in zip(sig.params, args, strict=True):
            if _kind(arg) != kind:
                got = "a tensor" if _kind(arg) == "tensor" else "a number"
                self.syntax(
                    f"{frame.op} argument {pname!r} must be {_KIND_TEXT[kind]}, got {got}", col
                )
        return Pattern(frame.op, tuple(a for a, _ in args))

    def equation(self) -> tuple[Pattern, Pattern]:
        """``lhs => rhs``, both operator patterns, and nothing after; a right-hand side that is a
        tensor variable, ``?x``, is the pattern ``(same ?x)``: the match is that tensor."""
        sides: list[Pattern] = []
        for side in ("left", "right"):
            self.side = side
            col = self.tokens[self.i][2] if self.i < len(self.tokens) else self.end_col()
            term = self.term()
            if side == "right" and isinstance(term, Var) and term.name not in self.types:
                term = Pattern("same", (term,))
            if not isinstance(term, Pattern):
                self.syntax(f"the {side}-hand side must be an operator pattern, not {term}", col)
            assert isinstance(term, Pattern)
            sides.append(term)
            if side == "left":
                if self.i >= len(self.tokens):
                    self.syntax("missing '=>' after the left-hand side", self.end_col())
                kind, text, tcol = self.tokens[self.i]
                if kind != "arrow":
                    self.syntax(f"expected '=>' after the left-hand side, found {text!r}", tcol)
                self.i += 1
        if self.i < len(self.tokens):
            _, text, col = self.tokens[self.i]
            self.syntax(f"unexpected {text!r} after the right-hand side", col)
        return sides[0], sides[1]


# ---------------------------------------------------------------------------------------------
# relsat's .rules format

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_GUARD = re.compile(r"where\s+(?P<name>[A-Za-z0-9_-]+)\s*\((?P<args>[^()]*)\)\s*$")
_GUARD_ARG = re.compile(r"\?[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class _Draft:
    """A rule being read: its parts and the line each part came from."""

    name: str
    line: int
    sources: list[str] = field(default_factory=list)
    doc: list[str] = field(default_factory=list)
    eqs: list[tuple[Pattern, Pattern, int]] = field(default_factory=list)
    guards: list[tuple[Guard | Cond, int]] = field(default_factory=list)
    flag_line: int | None = None
    ordered_line: int | None = None
    runtime_line: int | None = None
    types: dict[str, str] = field(default_factory=dict)  # parameter variables' types

    @property
    def has_body(self) -> bool:
        return bool(
            self.eqs or self.guards or self.flag_line or self.ordered_line or self.runtime_line
        )


def parse_rules(text: str, *, path: str | Path | None = None) -> RuleSet:
    """Read relsat's rule format (see the module docstring) into a :class:`RuleSet`."""
    src = None if path is None else str(path)
    rules: list[Rule] = []
    draft: _Draft | None = None

    def finish() -> None:
        nonlocal draft
        if draft is not None:
            rules.append(_build(draft, src))
        draft = None

    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        col = len(raw) - len(raw.lstrip()) + 1
        rule_name = draft.name if draft else None
        if not stripped:
            finish()
        elif stripped.startswith("#"):
            body = stripped[1:].strip()
            key, _, value = body.partition(":")
            if key.strip() == "name":
                finish()
                name = value.strip()
                if not _NAME.fullmatch(name):
                    raise RuleSyntaxError(
                        f"rule name {name!r} is not kebab-case (a-z, 0-9, '-')",
                        path=src,
                        line=lineno,
                        col=col,
                        rule=name or None,
                    )
                draft = _Draft(name, lineno)
            elif draft is None:
                continue  # a comment outside any rule: file or section header
            elif draft.has_body:
                raise RuleSyntaxError(
                    "comment inside a rule body (put comments above the rule, or a blank line "
                    "before the next block)",
                    path=src,
                    line=lineno,
                    col=col,
                    rule=rule_name,
                )
            elif key.strip() == "from":
                draft.sources.extend(s.strip() for s in value.split(",") if s.strip())
            else:
                draft.doc.append(body)
        elif draft is None:
            raise RuleSyntaxError(
                "rule without a '# name: <name>' header", path=src, line=lineno, col=col
            )
        elif stripped == "symmetric":
            if draft.flag_line is not None:
                raise RuleSyntaxError(
                    "'symmetric' given twice", path=src, line=lineno, col=col, rule=rule_name
                )
            draft.flag_line = lineno
        elif stripped == "ordered":
            if draft.ordered_line is not None:
                raise RuleSyntaxError(
                    "'ordered' given twice", path=src, line=lineno, col=col, rule=rule_name
                )
            draft.ordered_line = lineno
        elif stripped == "runtime":
            if draft.runtime_line is not None:
                raise RuleSyntaxError(
                    "'runtime' given twice", path=src, line=lineno, col=col, rule=rule_name
                )
            draft.runtime_line = lineno
        elif stripped.split(None, 1)[0] == "where":
            draft.guards.append((_parse_where(raw, src, lineno, rule_name, draft.types), lineno))
        else:
            if draft.guards or draft.flag_line or draft.ordered_line or draft.runtime_line:
                raise RuleSyntaxError(
                    "'lhs => rhs' lines must come before 'symmetric', 'ordered', 'runtime' and "
                    "'where' lines",
                    path=src,
                    line=lineno,
                    col=col,
                    rule=rule_name,
                )
            lhs, rhs = _Line(raw, src, lineno, rule_name, draft.types).equation()
            draft.eqs.append((lhs, rhs, lineno))
    finish()
    return RuleSet(rules)


def _parse_where(
    raw: str, path: str | None, lineno: int, rule: str | None, types: dict[str, str]
) -> Guard | Cond:
    """A ``where`` line: a guard of the closed vocabulary (``where ungrouped(?x, ?w)``) or a
    condition (relsat.rewrite.exprs)."""
    head = re.match(r"where\s+([A-Za-z0-9_-]+)", raw.strip())
    if head is not None and head.group(1) in GUARDS:
        return _parse_guard(raw, path, lineno, rule)
    return _CondParser(raw, path, lineno, rule, types).parse()


_COND_TOKEN = re.compile(
    r"(?P<num>\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)"
    r"|(?P<var>\?[A-Za-z_][A-Za-z0-9_]*(?::[A-Za-z]+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*)"
    r"|(?P<op><=|>=|==|!=|<|>|[-+*/%(),\[\]])"
)


class _CondParser:
    """``where <condition>``: precedence climbing over or, and, not, comparisons (chained:
    ``0 < ?eps < 1e-3``), + -, * / %, unary minus, facts ``name(args)``."""

    def __init__(
        self, raw: str, path: str | None, line: int, rule: str | None, types: dict[str, str]
    ) -> None:
        self.raw, self.path, self.line, self.rule, self.types = raw, path, line, rule, types
        start = raw.index("where") + len("where")
        self.toks: list[tuple[str, str, int]] = []
        pos = start
        while pos < len(raw):
            if raw[pos].isspace():
                pos += 1
                continue
            m = _COND_TOKEN.match(raw, pos)
            if m is None or m.lastgroup is None:
                self.fail(f"bad token {raw[pos:].split()[0]!r} in a condition", pos + 1)
            assert m is not None and m.lastgroup is not None
            self.toks.append((m.lastgroup, m.group(), pos + 1))
            pos = m.end()
        self.i = 0

    def fail(self, message: str, col: int | None = None, *, syntax: bool = True) -> None:
        cls = RuleSyntaxError if syntax else RuleError
        raise cls(message, path=self.path, line=self.line, col=col, rule=self.rule)

    def peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, text: str | None = None) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            self.fail(
                f"expected {text or 'a value'} at the end of the condition", len(self.raw) + 1
            )
        assert tok is not None
        if text is not None and tok[1] != text:
            self.fail(f"expected {text!r}, found {tok[1]!r}", tok[2])
        self.i += 1
        return tok

    def parse(self) -> Cond:
        if not self.toks:
            self.fail("expected a condition after 'where'", len(self.raw.rstrip()) + 1)
        expr = self.disjunction()
        tok = self.peek()
        if tok is not None:
            self.fail(f"unexpected {tok[1]!r} in the condition", tok[2])
        try:
            if expr_type(expr) != "bool":
                self.fail("a 'where' line must be a condition, not a number", self.toks[0][2])
        except RuleError as err:
            if isinstance(err, RuleSyntaxError) or err.line is not None:
                raise
            self.fail(err.reason, self.toks[0][2], syntax=False)
        return Cond(expr)  # type: ignore[arg-type]

    def disjunction(self) -> object:
        left = self.conjunction()
        while (tok := self.peek()) is not None and tok[1] == "or":
            self.i += 1
            left = Expr("or", (left, self.conjunction()))
        return left

    def conjunction(self) -> object:
        left = self.negation()
        while (tok := self.peek()) is not None and tok[1] == "and":
            self.i += 1
            left = Expr("and", (left, self.negation()))
        return left

    def negation(self) -> object:
        tok = self.peek()
        if tok is not None and tok[1] == "not":
            self.i += 1
            return Expr("not", (self.negation(),))
        return self.comparison()

    def comparison(self) -> object:
        left = self.sum()
        tok = self.peek()
        if tok is None or tok[1] not in COMPARE:
            return left
        self.i += 1
        right = self.sum()
        first = Expr(tok[1], (left, right))
        nxt = self.peek()
        if nxt is not None and nxt[1] in COMPARE:  # a chain: a < b < c
            self.i += 1
            second = Expr(nxt[1], (right, self.sum()))
            after = self.peek()
            if after is not None and after[1] in COMPARE:
                self.fail("at most two comparisons in a chain", after[2])
            return Expr("chain", (first, second))
        return first

    def sum(self) -> object:
        left = self.product()
        while (tok := self.peek()) is not None and tok[1] in ("+", "-"):
            self.i += 1
            left = Expr(tok[1], (left, self.product()))
        return left

    def product(self) -> object:
        left = self.unary()
        while (tok := self.peek()) is not None and tok[1] in ("*", "/", "%"):
            self.i += 1
            right = self.unary()
            if isinstance(right, int | float) and right == 0 and tok[1] in ("/", "%"):
                self.fail("division by zero", tok[2], syntax=False)
            left = Expr(tok[1], (left, right))
        return left

    def unary(self) -> object:
        tok = self.peek()
        if tok is not None and tok[1] == "-":
            self.i += 1
            value = self.unary()
            return -value if isinstance(value, int | float) else Expr("neg", (value,))
        return self.atom()

    def arguments(self) -> list[object]:
        """``(a, b, …)`` after a function's or a fact's name."""
        self.take("(")
        args = [self.disjunction()]
        while (tok := self.peek()) is not None and tok[1] == ",":
            self.i += 1
            args.append(self.disjunction())
        self.take(")")
        return args

    def _computed_list(self) -> bool:
        """After ``[``: a list with a computed item (anything but integers, signs and commas
        before its ``]``)? Its items are then expressions between commas."""
        j = self.i
        while j < len(self.toks) and self.toks[j][1] != "]":
            kind, text = self.toks[j][0], self.toks[j][1]
            if not (kind == "num" and text.isdigit()) and text not in ("-", ","):
                return True
            j += 1
        return False

    def atom(self) -> object:
        kind, text, col = self.take()
        if kind == "num":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "var":
            name, _, typ = text[1:].partition(":")
            if typ and self.types.get(name, typ) != typ:
                self.fail(f"?{name} is used as {self.types[name]} and as {typ}", col, syntax=False)
            if name in self.types:
                return Param(name, self.types[name])
            return Var(name)  # a tensor: a fact's argument (else expr_type says it is no number)
        if text == "(":
            inner = self.disjunction()
            self.take(")")
            return inner
        if text == "[" and self._computed_list():  # [dim(?x, 0) * dim(?x, 1), dim(?x, 2)]
            parts = [self.sum()]
            while (tok := self.peek()) is not None and tok[1] == ",":
                self.i += 1
                parts.append(self.sum())
            self.take("]")
            return Expr(LIST, tuple(parts))
        if text == "[":  # an ints literal: [0, 2, 1, 3] or [0 2 1 3]
            items: list[int] = []
            while (tok := self.peek()) is not None and tok[1] != "]":
                self.i += 1
                if tok[1] == ",":
                    continue
                sign = 1
                if tok[1] == "-" and (nxt := self.peek()) is not None:
                    self.i, sign, tok = self.i + 1, -1, nxt
                if tok[0] != "num" or not tok[1].isdigit():
                    self.fail(f"a list holds integers, found {tok[1]!r}", tok[2])
                items.append(sign * int(tok[1]))
            self.take("]")
            return tuple(items)
        if kind == "name" and text in FUNCS:
            return Expr(text, tuple(self.arguments()))
        if kind == "name":
            if text not in FACTS:
                self.fail(
                    f"unknown guard {text!r} (guards: {', '.join(GUARDS)}; facts of a condition: "
                    f"{', '.join(FACTS)}; functions: {', '.join(FUNCS)})",
                    col,
                    syntax=False,
                )
            args = self.arguments()
            fact = FACTS[text]
            if len(args) != len(fact.params):
                self.fail(f"{text} takes {len(fact.params)} arguments", col, syntax=False)
            if not isinstance(args[0], Var):
                self.fail(f"{text}'s first argument must be a tensor ?variable", col, syntax=False)
            return Expr(text, tuple(args))
        self.fail(f"unexpected {text!r} in the condition", col)
        raise AssertionError  # pragma: no cover


def _parse_guard(raw: str, path: str | None, lineno: int, rule: str | None) -> Guard:
    indent = len(raw) - len(raw.lstrip())
    m = _GUARD.match(raw.strip())
    if m is None:
        raise RuleSyntaxError(
            "expected 'where <guard>(?a, ?b, …)'", path=path, line=lineno, col=indent + 1, rule=rule
        )
    args: list[Var] = []
    offset = indent + m.start("args")
    for piece in m.group("args").split(","):
        arg = piece.strip()
        col = offset + len(piece) - len(piece.lstrip()) + 1
        if not _GUARD_ARG.fullmatch(arg):
            raise RuleSyntaxError(
                f"guard arguments are ?variables, found {arg!r}",
                path=path,
                line=lineno,
                col=col,
                rule=rule,
            )
        args.append(Var(arg[1:]))
        offset += len(piece) + 1
    try:
        return Guard(m.group("name"), tuple(args))
    except RuleError as err:
        raise err.located(path, lineno, indent + m.start("name") + 1, rule) from None


def _build(draft: _Draft, path: str | None) -> Rule:
    if not draft.eqs:
        raise RuleSyntaxError(
            "rule has no 'lhs => rhs' line", path=path, line=draft.line, col=1, rule=draft.name
        )
    lines = {
        "eq": [line for _, _, line in draft.eqs],
        "guard": [line for _, line in draft.guards],
        "flag": [draft.flag_line or draft.line],
    }
    try:
        return Rule(
            name=draft.name,
            lhs=tuple(lhs for lhs, _, _ in draft.eqs),
            rhs=tuple(rhs for _, rhs, _ in draft.eqs),
            symmetric=draft.flag_line is not None,
            ordered=draft.ordered_line is not None,
            runtime=draft.runtime_line is not None,
            guards=tuple(g for g, _ in draft.guards),
            sources=tuple(draft.sources),
            doc="\n".join(draft.doc),
            location=Location(path, draft.line),
        )
    except RuleError as err:
        line = lines[err.part[0]][err.part[1]] if err.part else draft.line
        raise err.located(path, line) from None


def format_rules(rules: Iterable[Rule], *, header: str = "") -> str:
    """Write rules in relsat's format; ``parse_rules(format_rules(rs)) == rs``.

    ``header`` (may span lines) becomes a comment block at the top of the file.
    """
    blocks = ["\n".join(f"# {line}".rstrip() for line in header.splitlines())] if header else []
    blocks += [_format_rule(r) for r in rules]
    return "\n\n".join(blocks) + "\n"


def load_rules(
    paths: str | Path | Sequence[str | Path] | None = None, *, check: bool | None = None
) -> RuleSet:
    """Load ``.rules`` files: by default every ``rules/*.rules`` of the repository (sorted by
    name); else a folder (its ``*.rules``, sorted), one file, or a list of files and folders.

    With ``check`` the loader also instantiates each rule on a few random shapes and refuses (a
    :class:`RuleError` at the rule's line) one whose right-hand side computes another type than
    its left-hand side (:func:`relsat.rewrite.check.check_types`; ``relsat rules check`` checks
    values too). ``check=None``: check files other than the shipped ones (which the test suite
    checks thoroughly).
    """
    if paths is None:
        paths = RULES_DIR
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    files: list[Path] = []
    for item in map(Path, items):
        files += sorted(item.glob("*.rules")) if item.is_dir() else [item]
    rules: list[Rule] = []
    checked: list[Rule] = []
    for f in files:
        parsed = parse_rules(_read_text(f), path=f)
        rules += parsed
        if check or (check is None and not _shipped(f)):
            checked += parsed
    ruleset = RuleSet(rules)
    if checked:
        from relsat.rewrite.check import check_types  # imports the graph layer: only when needed

        check_types(checked)
    return ruleset


def _shipped(path: Path) -> bool:
    """Whether ``path`` is one of relsat's own rule files (``rules/`` and its folders)."""
    try:
        return path.resolve().is_relative_to(Path(RULES_DIR).resolve())
    except OSError:
        return False


def _read_text(path: Path) -> str:
    """A rule file's text; a missing or unreadable file is a :class:`RuleError` and a byte that
    is not UTF-8 a :class:`RuleSyntaxError` at its line and column, both naming the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RuleError(f"cannot read the rule file ({exc.strerror})", path=str(path)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise RuleSyntaxError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x})", path=str(path), line=line, col=col
        ) from None


# ---------------------------------------------------------------------------------------------
# TENSAT's text format


def parse_tensat(
    text: str,
    *,
    path: str | Path | None = None,
    multi: bool = False,
    symmetric: bool = True,
    prefix: str | None = None,
    start: int = 0,
) -> RuleSet:
    """Read TENSAT's ``lhs=>rhs`` lines as-is; empty lines are skipped.

    Rules are named ``{prefix}{start}``, ``{prefix}{start+1}``, … (prefix ``rule``, or ``multi``
    when ``multi``). With ``multi`` every two lines form one rule, marked ``symmetric`` if asked.
    Each rule's ``sources`` names its lines as ``file:line``.
    """
    src = None if path is None else str(path)
    label = Path(src).name if src else "<string>"
    prefix = prefix if prefix is not None else ("multi" if multi else "rule")
    eqs = [
        (*_Line(raw, src, n, None).equation(), n)
        for n, raw in enumerate(text.split("\n"), start=1)
        if raw.strip()
    ]
    size = 2 if multi else 1
    rules: list[Rule] = []
    for k in range(0, len(eqs), size):
        group = eqs[k : k + size]
        name = f"{prefix}{start + k // size}"
        if len(group) < size:
            raise RuleError(
                "multi-pattern rule has one line; TENSAT's multi files have two lines per rule",
                path=src,
                line=group[0][2],
                rule=name,
            )
        try:
            rules.append(
                Rule(
                    name=name,
                    lhs=tuple(lhs for lhs, _, _ in group),
                    rhs=tuple(rhs for _, rhs, _ in group),
                    symmetric=multi and symmetric,
                    ordered=True,  # TENSAT matches operands in the order written
                    sources=tuple(f"{label}:{n}" for _, _, n in group),
                    location=Location(src, group[0][2]),
                )
            )
        except RuleError as err:
            line = group[err.part[1]][2] if err.part and err.part[0] == "eq" else None
            raise err.located(src, line) from None
    return RuleSet(rules)


def load_tensat(reference_rules_dir: str | Path) -> RuleSet:
    """TENSAT's rule set as TENSAT loads it: ``converted.txt`` then ``predefined_rules.txt``
    (``rule0`` … ``rule123``), ``converted_multi.txt`` (symmetric, ``multi0`` … ``multi12``) and
    ``predefined_multi.txt`` (non-symmetric, ``multi13``, ``multi14``). Accepts the folder holding
    the four files or its parent (``reference/``)."""
    folder = Path(reference_rules_dir)
    if not (folder / "converted.txt").exists() and (folder / "rules" / "converted.txt").exists():
        folder = folder / "rules"

    def read(name: str, **kw: object) -> RuleSet:
        f = folder / name
        return parse_tensat(_read_text(f), path=f, **kw)  # type: ignore[arg-type]

    single = read("converted.txt")
    single += read("predefined_rules.txt", start=len(single))
    multi = read("converted_multi.txt", multi=True)
    multi += read("predefined_multi.txt", multi=True, symmetric=False, start=len(multi))
    return single + multi
