"""Rules → SQL: each rule as a conjunctive query, and all rules as one *rule program* (data).

Two views of the same compilation:

* :func:`rule_sql` gives one rule's left-hand side as a standalone conjunctive query over the
  ``enode`` table: one alias per pattern node joined child-class = class, integer literals as
  filters, a repeated variable as an equality; a multi-pattern rule is **one** join of its
  patterns on their shared variables (a cross product when they share none; symmetric pairs once;
  never a match with itself). These queries are what the tests snapshot and what the batched
  engine is checked against.
* :func:`compile_rules` turns the whole rule set into rows of three tables (``pnode``: pattern
  nodes; ``tnode``: right-hand-side templates; ``rguard``: guards). The engine then runs the same
  few hand-written statements every iteration (``sql/search``, ``sql/apply``) whatever the number of
  rules: matching proceeds height by height (one recursive query) over all rules' pattern nodes at
  once, and right-hand sides are instantiated by joining matches with their templates. This is the
  batching of DESIGN.md ("Batch"): a UNION ALL of one query per rule costs ~1.5 ms per rule per
  iteration in DuckDB even when nothing matches, the rule program costs a fixed handful of
  statements.

Integer arguments of a pattern node map to the ``enode`` columns ``p0…`` in TENSAT's argument
order and tensor arguments to ``c0…``, so ``(conv2d 1 1 0 2 ?x ?w)`` is ``op = 'conv2d' AND p0 = 1
AND p1 = 1 AND p2 = 0 AND p3 = 2`` with ``?x = c0`` and ``?w = c1``. An ONNX operator relsat keeps
opaque, ``(onnx.IsNaN ?x)``, is ``op = 'opaque' AND p0 = <the key of IsNaN>``
(:func:`relsat.graph.ops.opaque_key`, stored when the e-node is written): a literal like any
other, so the search's statements do not change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from relsat.engine.egraph import MAX_CHILDREN
from relsat.errors import RuleError
from relsat.graph.ops import OPAQUE_INT_ATTRS, opaque_key
from relsat.rewrite.exprs import (
    BOUNDS,
    FACTS,
    INDEX_FACTS,
    LIST,
    Cond,
    Expr,
    Param,
    expr_type,
    params_of,
    subexprs,
)
from relsat.rewrite.rules import (
    COMMUTATIVE,
    OPERATORS,
    Pattern,
    Rule,
    Term,
    Var,
    canonical,
    onnx_type,
    signature,
)

__all__ = ["MAX_LHS_INTS", "MAX_VARS", "Program", "compile_rules", "expr_sql", "rule_sql"]

#: Variable slots per rule, tensors and parameters (columns v0…v11 of the match tables; TASO's
#: rules use at most 4 tensors, the merges of fused convs 5 tensors and 4 parameters, the packed
#: attention 8 tensors and 3 parameters).
MAX_VARS = 12
#: Integer literals a left-hand-side node can test (enode columns p0…p3).
MAX_LHS_INTS = 4
#: Tensor children of a node created or matched by a rule: as many as an e-node has (enode
#: columns c0…c7; pattern columns x0…x7, template columns k0…k7 and r0…r7: a batchnorm has five).
MAX_RULE_CHILDREN = MAX_CHILDREN
#: Sub-patterns of one left-hand-side node, at any of its child positions (attention's q, kt and
#: v: three).
MAX_SUBPATTERNS = 3

NONE, VAR, TEMPLATE = 0, 1, 2  # kinds of a template child


@dataclass(frozen=True)
class Program:
    """A rule set compiled to rows: what ``sql/search`` and ``sql/apply`` run on."""

    rules: tuple[Rule, ...]
    rule_info: pa.Table
    pnode: pa.Table
    tnode: pa.Table
    rguard: pa.Table
    lhs_height: int
    rhs_height: int
    #: Generated statements (None: no rule needs one): refuse the matches whose conditions
    #: (``where`` expressions) do not hold; append the values a right-hand side computes
    #: (arithmetic on parameter variables) to each match's slots.
    cond_sql: str | None = None
    derive_sql: str | None = None
    #: The rules whose conditions read facts of values (``finite(?m)``, ``halves(?c)``, …):
    #: table ``fact`` is brought up to date before their matches are checked.
    value_rules: tuple[int, ...] = ()
    #: What the generated statements are made of, per rule (:meth:`cond_for`, :meth:`derive_for`).
    conds: tuple[_Case, ...] = ()
    derives: tuple[_Case, ...] = ()
    #: The operators each multi-pattern (True) and single-pattern (False) rule's left-hand
    #: side(s) need in the e-graph, as ``search/operators.sql`` reads the e-graph's: ``(op,
    #: key)``, the key of an opaque ONNX type matched as a literal, else None (a phase none of
    #: whose rules finds them all is not searched: :mod:`relsat.engine.phase`).
    lhs_ops: dict[bool, tuple[frozenset[tuple[str, int | None]], ...]] = field(
        default_factory=lambda: {True: (), False: ()}
    )

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    def cond_for(self, rules: Iterable[int]) -> str | None:
        """:attr:`cond_sql` for the matches of ``rules`` only: the same statement with only their
        cases and the joins they read. DuckDB plans a statement anew at every run, and the whole
        rule set's conditions take ~40 ms to plan while a phase's matches are of a few rules."""
        return _cond_statement(*_cases_of(self.conds, rules))

    def derive_for(self, rules: Iterable[int]) -> str | None:
        """:attr:`derive_sql` for the matches of ``rules`` only (see :meth:`cond_for`)."""
        return _derive_statement(*_cases_of(self.derives, rules))


@dataclass(frozen=True)
class _Case:
    """One rule's part of a generated statement: its SQL (the condition; or the values, their
    texts and whether they are whole) and the slots it reads an e-class and a list of."""

    rule: int
    sql: tuple[str, ...]
    facts: frozenset[int]
    lists: frozenset[int]


def _cases_of(cases: Iterable[_Case], rules: Iterable[int] | None = None) -> tuple[list[Any], str]:
    """The cases of ``rules`` (None: all) as :func:`_cond_statement` and
    :func:`_derive_statement` take them, and the joins they read."""
    wanted = None if rules is None else set(rules)
    chosen = [c for c in cases if wanted is None or c.rule in wanted]
    facts = set().union(*(c.facts for c in chosen))
    lists = set().union(*(c.lists for c in chosen))
    return [(c.rule, *c.sql) for c in chosen], _joins(facts, lists)


# ---------------------------------------------------------------------------------------------
# Standalone SQL per rule


def rule_sql(rule: Rule) -> str:
    """One rule's left-hand side(s) as a single SQL query returning ``root0[, root1], v0…``.

    >>> from relsat.rewrite.rulefile import parse_rules
    >>> r = parse_rules("# name: r\\n(relu (relu ?x)) => (relu ?x)\\n")["r"]
    >>> print(rule_sql(r))  # doctest: +NORMALIZE_WHITESPACE
    -- r: (relu (relu ?x))
    SELECT DISTINCT n0.class AS root0, n1.c0 AS v0
    FROM enode n0
    JOIN enode n1 ON n1.class = n0.c0
    WHERE n0.op = 'relu' AND n0.arity = 1 AND NOT n0.filtered
      AND n1.op = 'relu' AND n1.arity = 1 AND NOT n1.filtered
    """
    slots = _slots(rule)
    aliases: list[tuple[str, Pattern, str | None]] = []  # alias, pattern, join condition
    binding: dict[str, str] = {}
    where: list[str] = []

    def visit(p: Pattern, join: str | None) -> str:
        alias = f"n{len(aliases)}"
        aliases.append((alias, p, join))
        ints, tensors = _split_args(p)
        conds = [f"{alias}.op = '{engine_op(p.op)}'"]
        for i, v in enumerate(ints):
            if isinstance(v, Param) and v.wild:
                continue
            if isinstance(v, Param):
                if v.name in binding:
                    conds.append(f"{alias}.p{i} = {binding[v.name]}")
                else:
                    binding[v.name] = f"{alias}.p{i}"
            else:
                conds.append(f"{alias}.p{i} = {v}")
        items = _list_arg(p)
        if isinstance(items, Param) and items.wild:
            pass
        elif isinstance(items, Param):  # a list variable binds the list's key
            key = f"skey({alias}.s)"
            if items.name in binding:
                conds.append(f"{key} = {binding[items.name]}")
            else:
                binding[items.name] = key
        elif isinstance(items, tuple):
            conds.append(f"{alias}.s = '{_text(items)}'")
        conds.append(f"{alias}.arity = {len(tensors)}")
        conds.append(f"NOT {alias}.filtered")
        where.append(" AND ".join(conds))
        for pos, arg in enumerate(tensors):
            col = f"{alias}.c{pos}"
            if isinstance(arg, Var):
                if arg.name in binding:
                    where.append(f"{col} = {binding[arg.name]}")
                else:
                    binding[arg.name] = col
            else:
                visit(arg, f"class = {col}")
        return alias

    roots = [visit(p, None) for p in rule.lhs]
    facts = sorted({v.name for g in rule.guards if isinstance(g, Cond) for v in _fact_vars(g.expr)})
    for g in rule.guards:
        if isinstance(g, Cond):
            where.append(
                expr_sql(
                    g.expr,
                    lambda p: f"ilist({binding[p.name]})" if p.type == "ints" else binding[p.name],
                    lambda v: f"g_{v.name}",
                )
            )
    select = [f"{r}.class AS root{i}" for i, r in enumerate(roots)]
    select += [f"{binding[v.name]} AS v{slots[v.name]}" for v in rule.slots]

    def table(p: Pattern) -> str:  # a commutative op matches either operand order
        return "enode_either" if p.op in COMMUTATIVE and not rule.ordered else "enode"

    lines = [
        f"-- {rule.name}: " + " ; ".join(str(p) for p in rule.lhs),
        "SELECT DISTINCT " + ", ".join(select),
        f"FROM {table(aliases[0][1])} {aliases[0][0]}",
    ]
    for alias, p, join in aliases[1:]:
        lines.append(
            f"JOIN {table(p)} {alias} ON {alias}.{join}"
            if join
            else f"CROSS JOIN {table(p)} {alias}"
        )
    lines += [f"JOIN eclass g_{n} ON g_{n}.id = {binding[n]}" for n in facts]
    if rule.is_multi:
        where.append(f"{roots[0]}.class {'<' if _symmetric(rule) else '<>'} {roots[1]}.class")
    lines.append("WHERE " + "\n  AND ".join(where))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The rule program


def rule_key(rule: Rule, *, guards: bool = True) -> str:
    """What a rule does, as a short fingerprint: its sides, symmetry and (when ``guards``) its
    guards as written; not its name, documentation or place. An e-graph explored before
    remembers the names and keys of the rules it was explored with (`rule_info`), so that a rule
    new to it searches the whole e-graph (relsat/phase.py); a rule that only renames a variable
    counts as new too, which costs one full search and nothing else."""
    text = [f"{lhs} => {rhs}" for lhs, rhs in zip(rule.lhs, rule.rhs, strict=True)]
    text += ["symmetric"] if rule.symmetric else []
    text += ["ordered"] if rule.ordered else []
    text += [f"where {g}" for g in rule.guards] if guards else []
    return hashlib.sha256("\n".join(text).encode()).hexdigest()[:16]


def compile_rules(rules: Iterable[Rule], *, guards: bool = True) -> Program:
    """Compile ``rules`` (in order; rule id = position) into a :class:`Program`."""
    rules = tuple(rules)
    _opaque_keys(rules)
    info_rows: list[dict[str, Any]] = []
    prows: list[dict[str, Any]] = []
    trows: list[dict[str, Any]] = []
    grows: list[dict[str, Any]] = []
    # per rule: its values and their texts as SQL lists, whether its lists have every item
    derives: list[_Case] = []
    conds_sql: list[_Case] = []  # per rule: its conditions as one SQL expression
    value_rules: list[int] = []  # rules whose conditions read facts of values
    for rid, rule in enumerate(rules):
        if len(rule.lhs) > 2:
            raise RuleError("at most two left-hand sides are supported", rule=rule.name)
        slots = _slots(rule)
        roots = [_add_pattern(rid, i, p, slots, prows, rule) for i, p in enumerate(rule.lhs)]
        jslot = slots[rule.shared[0].name] if rule.is_multi and rule.shared else -1
        for pid in roots:  # pids and tids are row positions
            prows[pid]["is_root"] = True
            prows[pid]["jslot"] = jslot
        derived: dict[Expr, int] = {}  # a right-hand side's arithmetic -> its slot
        for p in rule.rhs:
            for e in p.exprs():
                derived.setdefault(e, MAX_VARS + len(derived))
        if derived:
            values = ", ".join(_derived_sql(e, slots) for e in derived)
            texts = ", ".join(
                _list_text(e, slots) if expr_type(e) == "ints" else "CAST(NULL AS VARCHAR)"
                for e in derived
            )
            whole = [w for w in (_whole_sql(e, slots) for e in derived) if w is not None]
            parts = (f"[{values}]", f"[{texts}]", " AND ".join(whole) or "true")
            derives.append(_Case(rid, parts, *_read_slots(derived, slots)))
        conds = [g.expr for g in rule.guards if isinstance(g, Cond)] if guards else []
        conds += _implicit(derived)
        if conds:
            cond = " AND ".join(_cond_sql(c, slots) for c in conds)
            conds_sql.append(_Case(rid, (cond,), *_read_slots(conds, slots)))
            if any(t.op in VALUE_FACTS for c in conds for t in subexprs(c)):
                value_rules.append(rid)
        memo: dict[Pattern, int] = {}
        for i, p in enumerate(rule.rhs):
            tid = _add_template(rid, p, slots, trows, memo, rule, derived)
            trows[tid]["root_of"] |= 1 << i  # a bit per right-hand side it is the root of
        for g in (g for g in rule.guards if not isinstance(g, Cond)) if guards else ():
            args = [slots[a.name] for a in g.args] + [-1] * (4 - len(g.args))
            grows.append(
                {
                    "rule": rid,
                    "name": g.name,
                    "a0": args[0],
                    "a1": args[1],
                    "a2": args[2],
                    "a3": args[3],
                }
            )
        info_rows.append(
            {
                "rule": rid,
                "name": rule.name,
                "multi": rule.is_multi,
                "symmetric_pairs": _symmetric(rule),
                "pid0": roots[0],
                "pid1": roots[1] if len(roots) > 1 else -1,
                "key": rule_key(rule, guards=guards),
                "conds": bool(conds),
                "derives": bool(derived),
            }
        )
    return Program(
        rules,
        pa.Table.from_pylist(info_rows, schema=_INFO),
        pa.Table.from_pylist(prows, schema=_PNODE),
        pa.Table.from_pylist(trows, schema=_TNODE),
        pa.Table.from_pylist(grows, schema=_GUARD),
        max((r["height"] for r in prows), default=0),
        max((r["height"] for r in trows), default=0),
        _cond_statement(*_cases_of(conds_sql)),
        _derive_statement(*_cases_of(derives)),
        tuple(value_rules),
        tuple(conds_sql),
        tuple(derives),
        _lhs_operators(prows),
    )


def _lhs_operators(prows: list[dict[str, Any]]) -> dict[bool, tuple[frozenset, ...]]:
    """:attr:`Program.lhs_ops` of the pattern rows ``prows``."""
    ops: dict[int, set[tuple[str, int | None]]] = {}
    multi: dict[int, bool] = {}
    for r in prows:
        key = r["l0"] if r["op"] == "opaque" and r["y0"] < 0 else None
        ops.setdefault(r["rule"], set()).add((r["op"], key))
        multi[r["rule"]] = r["multi"]
    return {
        kind: tuple(frozenset(o) for rule, o in ops.items() if multi[rule] == kind)
        for kind in (True, False)
    }


def _slots(rule: Rule) -> dict[str, int]:
    """Variable slots: tensors and parameters alike, in order of first appearance."""
    slots = {v.name: i for i, v in enumerate(rule.slots)}
    if len(slots) > MAX_VARS:
        raise RuleError(
            f"{len(slots)} variables (tensors and parameters); the engine supports {MAX_VARS}",
            rule=rule.name,
        )
    return slots


# ---------------------------------------------------------------------------------------------
# Values: conditions and right-hand-side arithmetic as SQL over a match's slots (match.v)

_SQL_OPS = {"==": "=", "!=": "<>", "and": "AND", "or": "OR", "%": "%"}


def expr_sql(term: object, value: Any, klass: Any) -> str:
    """``term`` (relsat.rewrite.exprs) as SQL: ``value(param)`` gives a parameter's column (a
    float parameter's float32 bits are read as a DOUBLE with the macro ``f32``; a list
    variable's value is the list), ``klass(var)`` the alias of a tensor variable's ``eclass``
    row (its facts of values are read from table ``fact`` by class)."""
    if isinstance(term, bool):
        return "true" if term else "false"
    if isinstance(term, int):
        return str(term)
    if isinstance(term, float):
        return f"CAST({term!r} AS DOUBLE)"
    if isinstance(term, tuple):
        return f"CAST([{', '.join(map(str, term))}] AS BIGINT[])"
    if isinstance(term, Param):  # value(): a column; for a list variable, the list itself
        col = value(term)
        return f"f32({col})" if term.type == "float" else col
    assert isinstance(term, Expr)
    op, args = term.op, term.args
    sub = [expr_sql(a, value, klass) if not isinstance(a, Var) else "" for a in args]
    if op in VALUE_FACTS:
        row = f"(SELECT {VALUE_FACTS[op]} FROM fact f WHERE f.class = {klass(args[0])}.id)"
        known = op in BOUNDS or op in INDEX_FACTS  # a bound, an index's list: NULL if unknown
        return row if known else f"coalesce({row}, false)"
    if op == "shape":
        return f"CAST({klass(args[0])}.shape AS BIGINT[])"
    if op == "defined":  # a list computed with every item (compose within the permutation)
        return f"coalesce(list_count({sub[0]}) = len({sub[0]}), false)"
    if op == "len":
        return f"len({sub[0]})"
    if op == "iota":
        return f"range(0, {sub[0]})"
    if op == "at":
        return _item_sql(sub[0], sub[1])
    if op == "take":  # the first n items (n < 0: all but the last -n); NULL past the list
        n, items = sub[1], sub[0]
        return (
            f"CASE WHEN abs({n}) <= len({items}) THEN list_slice({items}, 1, "
            f"CASE WHEN {n} >= 0 THEN {n} ELSE len({items}) + {n} END) END"
        )
    if op == "drop":  # all but the first n items (n < 0: the last -n); NULL past the list
        n, items = sub[1], sub[0]
        return (
            f"CASE WHEN abs({n}) <= len({items}) THEN list_slice({items}, "
            f"CASE WHEN {n} >= 0 THEN {n} + 1 ELSE len({items}) + {n} + 1 END, len({items})) END"
        )
    if op == "append":
        return f"list_append({sub[0]}, {sub[1]})"
    if op == "prod":
        return f"CAST(coalesce(list_aggregate({sub[0]}, 'product'), 1) AS BIGINT)"
    if op == "squeeze":
        return f"list_filter({sub[0]}, lambda n: n <> 1)"
    if op == "ones":  # NULL for a negative count
        n = sub[0]
        ones = f"CAST(list_transform(range(0, {n}), lambda i: 1) AS BIGINT[])"
        return f"CASE WHEN {n} >= 0 THEN {ones} END"
    if op == "broadcast":  # NumPy's rule: right-aligned, each pair equal or one of them 1
        n = f"greatest(len({sub[0]}), len({sub[1]}))"
        pad = lambda x: (  # noqa: E731
            f"list_concat(CAST(list_transform(range(0, {n} - len({x})), lambda i: 1) "
            f"AS BIGINT[]), {x})"
        )
        pairs = f"list_zip({pad(sub[0])}, {pad(sub[1])})"
        each = "lambda t: t[1] = t[2] OR t[1] = 1 OR t[2] = 1"
        ok = f"list_bool_and(list_transform({pairs}, {each}))"
        return (
            f"CASE WHEN coalesce({ok}, true) THEN "
            f"CAST(list_transform({pairs}, lambda t: greatest(t[1], t[2])) AS BIGINT[]) END"
        )
    if op == "+" and expr_type(term) == "ints":
        return f"list_concat({sub[0]}, {sub[1]})"
    if op == LIST:
        return f"CAST(list_value({', '.join(sub)}) AS BIGINT[])"
    if op == "compose":  # compose(p, q)[i] = p[q[i]]; NULL items where q points past p
        return (  # (no subquery inside a lambda: list_select; index 0 reads as NULL)
            f"list_select({sub[0]}, "
            f"list_transform({sub[1]}, lambda i: CASE WHEN i >= 0 THEN i + 1 ELSE 0 END))"
        )
    if op == "rank":
        return f"len({klass(args[0])}.shape)"
    if op == "size":
        return f"coalesce(list_aggregate({klass(args[0])}.shape, 'product'), 1)"  # a scalar: 1
    if op == "weights":
        return f"{klass(args[0])}.all_weights"
    if op == "dim":
        return _item_sql(f"{klass(args[0])}.shape", sub[1])
    if op == "chain":
        return f"({sub[0]} AND {sub[1]})"
    if op == "not":
        return f"(NOT {sub[0]})"
    if op == "neg":
        return f"(-{sub[0]})"
    if op == "/" and expr_type(term) == "int":
        return f"({sub[0]} // {sub[1]})"
    if op == "/":
        return f"(CAST({sub[0]} AS DOUBLE) / {sub[1]})"
    return f"({sub[0]} {_SQL_OPS.get(op, op)} {sub[1]})"


#: Facts of values (relsat.graph.facts) as SQL over a ``fact`` row ``f``: conditions, and the
#: bounds (``lo``, ``hi``: NULL where unknown, so that a condition comparing one fails).
VALUE_FACTS = {
    "finite": "f.lo IS NOT NULL AND f.hi IS NOT NULL",
    "nonneg": "f.lo >= 0",
    "halves": "f.halves",
    "pairs": "f.pairs",
    "lo": "f.lo",
    "hi": "f.hi",
    "grid": "f.grid",
    "rows": "f.rows",
}


def _item_sql(items: str, index: str) -> str:
    """Item ``index`` of the list ``items`` (0-based; a negative index counts from the last)."""
    i = f"({index})"
    return f"{items}[CASE WHEN {i} < 0 THEN len({items}) + {i} ELSE {i} END + 1]"


def _value_sql(term: object, slots: dict[str, int]) -> str:
    """``term`` over the match row ``m`` (slot k is ``m.v[k + 1]``; its e-class ``g<k>``, its
    list ``l<k>.v``: joined by the generated statements, :func:`_joins`)."""
    return expr_sql(
        term,
        lambda p: f"l{slots[p.name]}.v" if p.type == "ints" else f"m.v[{slots[p.name] + 1}]",
        lambda v: f"g{slots[v.name]}",
    )


def _derived_sql(e: Expr, slots: dict[str, int]) -> str:
    """A right-hand side's value as a slot: an integer, a float's float32 bits (macro
    ``f32bits``), or a list's key."""
    kind = expr_type(e)
    if kind == "ints":
        return f"skey({_list_text(e, slots)})"
    if kind == "float":
        return f"CAST(f32bits({_value_sql(e, slots)}) AS BIGINT)"
    return f"CAST({_value_sql(e, slots)} AS BIGINT)"


def _whole_sql(e: Expr, slots: dict[str, int]) -> str | None:
    """What a computed value needs to be a parameter, checked as it is derived: a list every
    item (``compose`` past the end of a permutation has not), a float a float32 value (not NaN,
    infinite or past float32's range); None for an integer (see :func:`_implicit`)."""
    kind = expr_type(e)
    if kind == "ints":
        return _value_sql(Expr("defined", (e,)), slots)
    if kind == "float":
        return f"({_derived_sql(e, slots)} IS NOT NULL)"
    return None


def _list_text(e: Expr, slots: dict[str, int]) -> str:
    """A list value's text, as a shape operator's ``s`` column holds it ("0_2_1_3")."""
    return f"array_to_string({_value_sql(e, slots)}, '_')"


def _read_slots(
    terms: Iterable[object], slots: dict[str, int]
) -> tuple[frozenset[int], frozenset[int]]:
    """The slots ``terms`` read an e-class of (facts) and a list of."""
    facts = frozenset(slots[t.name] for e in terms for t in _fact_vars(e))
    lists = frozenset(slots[p.name] for e in terms for p in params_of(e) if p.type == "ints")
    return facts, lists


def _joins(facts: set[int], lists: set[int]) -> str:
    """The e-classes and lists the generated statements read, joined to the match row ``m``
    (left joins: one statement serves every rule, and a slot is a class or a list for some
    rules only)."""
    out = [f"\n    LEFT JOIN eclass g{k} ON g{k}.id = m.v[{k + 1}]" for k in sorted(facts)]
    out += [f"\n    LEFT JOIN lists l{k} ON l{k}.h = m.v[{k + 1}]" for k in sorted(lists)]
    return "".join(out)


def _cond_sql(c: Expr, slots: dict[str, int]) -> str:
    return f"({_value_sql(c, slots)})"


def _fact_vars(term: object) -> list[Var]:
    if not isinstance(term, Expr):
        return []
    found = [term.args[0]] if term.op in FACTS and isinstance(term.args[0], Var) else []
    return found + [v for a in term.args for v in _fact_vars(a)]


def _implicit(derived: dict[Expr, int]) -> list[Expr]:
    """What a right-hand side's arithmetic needs to be a parameter: an integer division that
    divides exactly, a value that fits an e-node's 32-bit parameter. (A list must have every
    item, which ``compose`` past the end of a permutation has not: :func:`_derive_statement`
    refuses the match.)"""
    out: list[Expr] = []
    for e in derived:
        if expr_type(e) in ("ints", "float"):  # checked as it is derived: _whole_sql
            continue
        stack: list[object] = [e]
        while stack:
            t = stack.pop()
            if isinstance(t, Expr):
                if t.op in ("/", "%"):
                    out.append(Expr("!=", (t.args[1], 0)))
                if t.op == "/":
                    out.append(Expr("==", (Expr("%", t.args), 0)))
                stack.extend(t.args)
        out.append(Expr("chain", (Expr("<=", (-(2**31), e)), Expr("<=", (e, 2**31 - 1)))))
    return out


def _cond_statement(cases: list[tuple[int, str]], joins: str) -> str | None:
    """One statement for every rule's conditions: a match whose condition is false or unknown
    (a dim past the rank, a value not computable) is refused."""
    if not cases:
        return None
    rules = ", ".join(str(rid) for rid, _ in cases)
    body = "\n            ".join(f"WHEN {rid} THEN {sql}" for rid, sql in cases)
    return (
        "-- generated (relsat.engine.compile): the rules' 'where' conditions\n"
        "UPDATE match SET ok = false\n"
        "WHERE mid IN (\n"
        f"    SELECT m.mid FROM match m{joins}\n"
        f"    WHERE m.ok AND m.rule IN ({rules}) AND NOT coalesce(CASE m.rule\n"
        f"            {body}\n"
        "        END, false)\n"
        ")"
    )


def _derive_statement(cases: list[tuple[int, str, str, str]], joins: str) -> str | None:
    """One statement appending every match's computed right-hand-side parameters to its slots
    (after the MAX_VARS variable slots; a list as its key), with their texts in ``sv`` (a
    list's, NULL for a number) for instantiation to write; a match whose computed list lacks an
    item is refused."""
    if not cases:
        return None
    rules = ", ".join(str(rid) for rid, _, _, _ in cases)

    def case(k: int) -> str:
        return "\n            ".join(f"WHEN {c[0]} THEN {c[k]}" for c in cases)

    return (
        "-- generated (relsat.engine.compile): right-hand sides' parameter arithmetic\n"
        "UPDATE match SET v = list_concat(match.v, d.nv), sv = d.texts, ok = d.whole\n"
        "FROM (\n"
        "    SELECT m.mid,\n"
        f"        CASE m.rule\n            {case(1)}\n        END AS nv,\n"
        f"        CASE m.rule\n            {case(2)}\n        END AS texts,\n"
        f"        coalesce(CASE m.rule\n            {case(3)}\n        END, false) AS whole\n"
        f"    FROM match m{joins}\n"
        f"    WHERE m.ok AND m.rule IN ({rules})\n"
        ") d\n"
        "WHERE match.mid = d.mid"
    )


def _symmetric(rule: Rule) -> bool:
    """TENSAT's symmetric mode applies only when the two sources are equal up to renaming."""
    return (
        rule.symmetric and len(rule.lhs) == 2 and canonical(rule.lhs[0]) == canonical(rule.lhs[1])
    )


def engine_op(op: str) -> str:
    """The ``enode.op`` a pattern's operator matches: ``opaque`` for an ONNX one (whose type is
    the literal key in ``p0``: :func:`_split_args`), else the operator itself."""
    return "opaque" if onnx_type(op) is not None else op


def _opaque_keys(rules: Iterable[Rule]) -> None:
    """Refuse two ONNX types of the rules' left-hand sides with one key (odds about 1 in 2**31
    per pair; no two operators ONNX defines share one): a rule would match the other type."""
    seen: dict[int, str] = {}
    for rule in rules:
        for p in rule.lhs:
            for op in p.ops():
                kind = onnx_type(op)
                if kind is None:
                    continue
                other = seen.setdefault(opaque_key(kind), kind)
                if other != kind:
                    raise RuleError(
                        f"ONNX types {other} and {kind} share the key {opaque_key(kind)} "
                        "(relsat.graph.ops.opaque_key): a rule of one would match the other",
                        rule=rule.name,
                    )


def _split_args(p: Pattern) -> tuple[list[Any], list[Pattern | Var]]:
    """A pattern's integer arguments (literals, parameter variables, arithmetic) and tensor
    arguments, each in order."""
    ints: list[int] = []
    tensors: list[Pattern | Var] = []
    kind_of = onnx_type(p.op)
    if kind_of is not None:  # an opaque e-node: its type's key in p0, its attributes, its inputs
        named = len(OPAQUE_INT_ATTRS.get(kind_of, ()))
        attrs: list[Any] = [opaque_key(kind_of), *p.args[:named]]
        return attrs, [a for a in p.args[named:] if isinstance(a, Pattern | Var)]
    for arg, (_, kind) in zip(p.args, OPERATORS[p.op].params, strict=True):
        if kind == "int":
            ints.append(arg)  # type: ignore[arg-type]  # a literal, a Param or an Expr
        elif isinstance(arg, Pattern | Var):
            tensors.append(arg)
    return ints, tensors


def _list_arg(p: Pattern) -> tuple[int, ...] | Param | Expr | None:
    """A shape operator's list parameter (a literal, a variable or a list function); None for
    an operator without one."""
    for arg, (_, kind) in zip(p.args, signature(p.op, len(p.args)).params, strict=True):
        if kind == "ints":
            return arg  # type: ignore[return-value]
    return None


#: The slot a wildcard parameter (``?_``) is given: none of the match's, so that the literal is
#: not tested and nothing is bound.
WILD = 99


def _slot_of(term: object, slots: dict[str, int]) -> int:
    """The slot a left-hand side's parameter binds: its variable's, :data:`WILD` for a
    wildcard, -1 for a literal."""
    if isinstance(term, Param):
        return WILD if term.wild else slots[term.name]
    return -1


def _text(items: tuple[int, ...]) -> str:
    """A list literal as the e-node column ``s`` holds it: ``0_2_1_3``."""
    return "_".join(map(str, items))


def _add_pattern(
    rid: int, lhs: int, p: Pattern, slots: dict[str, int], rows: list[dict], rule: Rule
) -> int:
    ints, tensors = _split_args(p)
    sig = signature(p.op, len(p.args))
    if len(ints) > MAX_LHS_INTS or len(tensors) > MAX_RULE_CHILDREN or not sig.in_rules:
        raise RuleError(f"operator {p.op} cannot be matched by the engine", rule=rule.name)
    if sum(isinstance(a, Pattern) for a in tensors) > MAX_SUBPATTERNS:
        raise RuleError(
            f"{p.op} has more than {MAX_SUBPATTERNS} sub-patterns in a left-hand side: bind one "
            "to a ?variable and match it in a second left-hand side",
            rule=rule.name,
        )
    subs = [
        (pos, _add_pattern(rid, lhs, a, slots, rows, rule))
        for pos, a in enumerate(tensors)
        if isinstance(a, Pattern)
    ]
    xs = [slots[a.name] if isinstance(a, Var) else -1 for a in tensors]
    xs += [-1] * (MAX_RULE_CHILDREN - len(xs))
    heights = [rows[pid]["height"] for _, pid in subs]
    # The deep sub-pattern (the first of height h - 1: the search finds a node of height h from
    # it) and the others, as (position, pattern node), (-1, -1) for none.
    deep = heights.index(max(heights)) if heights else -1
    dpos, dpid = subs[deep] if subs else (-1, -1)
    others = [s for i, s in enumerate(subs) if i != deep] + [(-1, -1), (-1, -1)]
    (spos, spid), (tpos, tpid) = others[0], others[1]
    names = [a.name for a in ints if isinstance(a, Param) and not a.wild]
    if len(set(names)) < len(names):
        raise RuleError(
            f"a parameter variable twice in one {p.op}: bind another and say 'where ?a == ?b'",
            rule=rule.name,
        )
    ys = [_slot_of(a, slots) for a in ints] + [-1] * MAX_LHS_INTS
    if p.op == "split":  # its cut (p1) is no argument of the language: any cut matches (as in
        ys[1] = WILD  # rule_sql); what reads the pieces (a reshape's shape) constrains them
    items = _list_arg(p)
    lits = [a if isinstance(a, int) else -1 for a in ints] + [-1] * MAX_LHS_INTS
    row = {
        "rule": rid,
        "pid": len(rows),
        "lhs": lhs,
        "is_root": False,
        "height": 1 + max(heights) if heights else 0,
        "op": engine_op(p.op),
        "l0": lits[0],
        "l1": lits[1],
        "l2": lits[2],
        "l3": lits[3],
        "arity": len(tensors),
        "x0": xs[0],
        "x1": xs[1],
        "jslot": -1,
        "multi": rule.is_multi,
        "x2": xs[2],
        "x3": xs[3],
        **{f"x{i}": xs[i] for i in range(4, MAX_RULE_CHILDREN)},
        "dpid": dpid,
        "dpos": dpos,
        "spid": spid,
        "spos": spos,
        "tpid": tpid,
        "tpos": tpos,
        **{f"y{i}": ys[i] for i in range(MAX_LHS_INTS)},
        "comm": p.op in COMMUTATIVE and not rule.ordered,
        "ls": _text(items) if isinstance(items, tuple) else None,
        "ys": _slot_of(items, slots),
        **_slot_sources(xs, ys[:MAX_LHS_INTS], _slot_of(items, slots)),
    }
    rows.append(row)
    return len(rows) - 1


def _slot_sources(xs: list[int], ys: list[int], ys_list: int) -> dict[str, Any]:
    """Where a pattern node's bindings come from, for the search's SQL: ``w{k}`` the first
    source of slot k (child j as j, integer parameter i as 8 + i, the list parameter as 12; -1:
    the node binds no slot k), and ``dup`` whether one slot is bound at two children (whose
    classes must then be equal)."""
    sources = [*xs, *ys, ys_list]
    first = {slot: src for src, slot in reversed(list(enumerate(sources))) if slot >= 0}
    bound = [x for x in xs if x >= 0]
    return {
        **{f"w{k}": first.get(k, -1) for k in range(MAX_VARS)},
        "dup": len(set(bound)) < len(bound),
    }


def _add_template(
    rid: int,
    p: Pattern,
    slots: dict[str, int],
    rows: list[dict],
    memo: dict[Pattern, int],
    rule: Rule,
    derived: dict[Expr, int],
) -> int:
    if p in memo:
        return memo[p]
    ints, tensors = _split_args(p)
    if onnx_type(p.op) is not None or not OPERATORS[p.op].in_rules:
        raise RuleError(f"operator {p.op} cannot be built by the engine", rule=rule.name)
    if len(tensors) > MAX_RULE_CHILDREN:
        raise RuleError(f"operator {p.op} cannot be built by the engine", rule=rule.name)
    kinds, refs, heights = [], [], []
    for a in tensors:
        if isinstance(a, Var):
            kinds.append(VAR)
            refs.append(slots[a.name])
        else:
            tid = _add_template(rid, a, slots, rows, memo, rule, derived)
            kinds.append(TEMPLATE)
            refs.append(tid)
            heights.append(rows[tid]["height"])
    kinds += [NONE] * (MAX_RULE_CHILDREN - len(kinds))
    refs += [-1] * (MAX_RULE_CHILDREN - len(refs))
    params = [a if isinstance(a, int) else -1 for a in ints] + [-1] * 6
    qs = [  # a parameter from a slot: a variable's, or the value its arithmetic was given
        slots[a.name] if isinstance(a, Param) else derived[a] if isinstance(a, Expr) else -1
        for a in ints
    ] + [-1] * 6
    items = _list_arg(p)
    cut_slot = cut_dim = -1
    if p.op == "split":
        source = _size_source(_last_boundary(tensors[0], ints[0]), slots)
        if source is None:
            raise RuleError(
                f"cannot tell where {p} cuts: its operand must build the concat "
                "whose boundary it splits at",
                rule=rule.name,
            )
        cut_slot, cut_dim = source
    row = {
        "rule": rid,
        "tid": len(rows),
        "height": 1 + max(heights) if heights else 0,
        "op": p.op,
        **{f"p{i}": params[i] for i in range(6)},
        "arity": len(tensors),
        "k0": kinds[0],
        "r0": refs[0],
        "k1": kinds[1],
        "r1": refs[1],
        "cut_slot": cut_slot,
        "cut_dim": cut_dim,
        "root_of": 0,
        **{f"q{i}": qs[i] for i in range(6)},
        "k2": kinds[2],
        "r2": refs[2],
        "k3": kinds[3],
        "r3": refs[3],
        **{f"k{i}": kinds[i] for i in range(4, MAX_RULE_CHILDREN)},
        **{f"r{i}": refs[i] for i in range(4, MAX_RULE_CHILDREN)},
        # the first template child of height h - 1 (instantiation builds a node of height h
        # after it), or -1
        "dref": next(
            (
                r
                for k, r in zip(kinds, refs, strict=True)
                if k == TEMPLATE and rows[r]["height"] == max(heights)
            ),
            -1,
        ),
        "s": _text(items) if isinstance(items, tuple) else "",
        "qs": (
            slots[items.name]
            if isinstance(items, Param)
            else derived[items]
            if isinstance(items, Expr)
            else -1
        ),
    }
    rows.append(row)
    memo[p] = len(rows) - 1
    return len(rows) - 1


# Where a rule-built split cuts (SEMANTICS.md §4): at the most recent concat boundary of its
# operand. TENSAT reads it from the e-class's stored history; relsat derives it from the template
# when the rule is compiled (the safer design SEMANTICS.md recommends), as "dim d of variable v".


def _last_boundary(t: Term, axis: int) -> tuple[Term, int] | None:
    """The (term, dim) whose size is the last concat boundary of ``t`` on ``axis``."""
    if not isinstance(t, Pattern):
        return None
    ints, tensors = _split_args(t)
    if t.op == "concat":
        return (tensors[0], axis) if ints[0] == axis else None
    if t.op in ("relu", "relu6", "tanh", "sigmoid"):
        return _last_boundary(tensors[0], axis)
    if t.op in ("matmul", "matmul_bias"):  # rule matmuls are 2-D: dim 0 from a, dim 1 from b
        return _last_boundary(tensors[0] if axis == 0 else tensors[1], axis)
    if t.op in ("conv2d", "conv2d_bias"):  # dim 1 comes from the weight's dim 0
        return _last_boundary(tensors[1], 0) if axis == 1 else _last_boundary(tensors[0], axis)
    return None


def _size_source(found: tuple[Term, int] | None, slots: dict[str, int]) -> tuple[int, int] | None:
    """Follow ``(term, dim)`` down to a variable's dim, through size-preserving ops."""
    while found is not None:
        t, dim = found
        if isinstance(t, Var):
            return slots[t.name], dim
        if not isinstance(t, Pattern):
            return None
        _, tensors = _split_args(t)
        if (t.op == "enlarge" and dim < 2) or (
            t.op in ("relu", "tanh", "sigmoid", "merge") and dim != 1
        ):
            found = (tensors[0], dim)
        else:
            return None
    return None


_INFO = pa.schema(
    [
        ("rule", pa.int32()),
        ("name", pa.string()),
        ("multi", pa.bool_()),
        ("symmetric_pairs", pa.bool_()),
        ("pid0", pa.int32()),
        ("pid1", pa.int32()),
        ("key", pa.string()),
        ("conds", pa.bool_()),
        ("derives", pa.bool_()),
    ]
)
_PNODE = pa.schema(
    [
        ("rule", pa.int32()),
        ("pid", pa.int32()),
        ("lhs", pa.int32()),
        ("is_root", pa.bool_()),
        ("height", pa.int32()),
        ("op", pa.string()),
        *[(f"l{i}", pa.int32()) for i in range(4)],
        ("arity", pa.int32()),
        ("x0", pa.int32()),
        ("x1", pa.int32()),
        ("jslot", pa.int32()),
        ("multi", pa.bool_()),
        ("x2", pa.int32()),
        ("x3", pa.int32()),
        ("dpid", pa.int32()),
        ("dpos", pa.int32()),
        ("spid", pa.int32()),
        ("spos", pa.int32()),
        ("tpid", pa.int32()),
        ("tpos", pa.int32()),
        *[(f"y{i}", pa.int32()) for i in range(4)],
        ("comm", pa.bool_()),
        ("ls", pa.string()),
        ("ys", pa.int32()),
        *[(f"x{i}", pa.int32()) for i in range(4, MAX_RULE_CHILDREN)],
        *[(f"w{k}", pa.int32()) for k in range(MAX_VARS)],
        ("dup", pa.bool_()),
    ]
)
_TNODE = pa.schema(
    [
        ("rule", pa.int32()),
        ("tid", pa.int32()),
        ("height", pa.int32()),
        ("op", pa.string()),
        *[(f"p{i}", pa.int32()) for i in range(6)],
        ("arity", pa.int32()),
        ("k0", pa.int32()),
        ("r0", pa.int32()),
        ("k1", pa.int32()),
        ("r1", pa.int32()),
        ("cut_slot", pa.int32()),
        ("cut_dim", pa.int32()),
        ("root_of", pa.int32()),
        *[(f"q{i}", pa.int32()) for i in range(6)],
        ("k2", pa.int32()),
        ("r2", pa.int32()),
        ("k3", pa.int32()),
        ("r3", pa.int32()),
        ("dref", pa.int32()),
        ("s", pa.string()),
        ("qs", pa.int32()),
        *[(f"{c}{i}", pa.int32()) for i in range(4, MAX_RULE_CHILDREN) for c in "kr"],
    ]
)
_GUARD = pa.schema(
    [("rule", pa.int32()), ("name", pa.string()), *[(f"a{i}", pa.int32()) for i in range(4)]]
)
