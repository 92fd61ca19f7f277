"""From candidate equations to candidate rules, pruned as TASO prunes.

An equation ``t = r`` (equal fingerprints) becomes the rules the rule language can say:

* a side that is a bare variable cannot be a rule side (``variable side``);
* variables: both directions when both sides use the same variables; one direction (the side
  with more variables on the left) when one side's variables include the other's; none when each
  side uses a variable the other does not (``one-sided variable``);
* ``renaming``: an equation equal to an earlier one up to renaming variables and swapping sides;
* ``common sub-term``: replacing a sub-term that both sides contain by a fresh variable gives an
  equation seen before (the smaller one derives this one).

A two-output candidate (TASO's multi-output graphs: two terms ``t0``, ``t1`` equal to the split
pieces ``s0``, ``s1`` of one term) becomes the multi-pattern rule ``t0, t1 => s0, s1``
(:func:`merge_rule`): two computations done as one and split. Its other direction is two
single-pattern rules ``s_i => t_i``, found as ordinary equations.

>>> from relsat.rewrite.rules import Pattern, Var
>>> seen = Seen()
>>> ab, ba = Pattern("ewadd", (Var("a"), Var("b"))), Pattern("ewadd", (Var("b"), Var("a")))
>>> [str(r) for r in orient(ab, ba, "syn-1")]
['# name: syn-1\\n# from: synthesized\\n(ewadd ?a ?b) => (ewadd ?b ?a)']
>>> ca, ac = Pattern("ewadd", (Var("c"), Var("a"))), Pattern("ewadd", (Var("a"), Var("c")))
>>> seen.prune(ab, ba), seen.prune(ca, ac)
(None, 'renaming')
"""

from __future__ import annotations

from collections.abc import Iterator

from relsat.engine.compile import compile_rules
from relsat.errors import RuleError
from relsat.rewrite.rules import Pattern, Rule, Term, Var, canonical

__all__ = ["PRUNE_REASONS", "Seen", "key", "merge_rule", "orient", "size_of"]

#: Why an equation makes no rule, in the order a summary lists them.
PRUNE_REASONS = ("variable side", "one-sided variable", "renaming", "common sub-term")


def size_of(term: Term) -> int:
    """Operators in ``term`` (a split piece and its split count as one)."""
    if not isinstance(term, Pattern):
        return 0
    own = 0 if term.op == "split" else 1
    return own + sum(size_of(a) for a in term.args)


def key(lhs: Pattern | Var, rhs: Pattern | Var) -> str:
    """The equation up to renaming and side order: the smaller of its two canonical texts."""

    def text(a: Pattern | Var, b: Pattern | Var) -> str:
        return str(canonical(Pattern("noop", (a, b))))

    return min(text(lhs, rhs), text(rhs, lhs))


def _vars(term: Term) -> set[Var]:
    return (
        set(term.vars())
        if isinstance(term, Pattern)
        else {term}
        if isinstance(term, Var)
        else set()
    )


def _subterms(term: Term) -> Iterator[Pattern]:
    if isinstance(term, Pattern):
        if term.op != "split":
            yield term
        for a in term.args:
            yield from _subterms(a)


def _all(term: Term) -> Iterator[Pattern]:
    """Every pattern node of ``term``, a ``split`` included."""
    if isinstance(term, Pattern):
        yield term
        for a in term.args:
            yield from _all(a)


def _self_concats(term: Term) -> set[Pattern]:
    """The sub-terms of ``term`` that concatenate a variable with itself."""
    return {
        p
        for p in _subterms(term)
        if p.op == "concat" and isinstance(p.args[-1], Var) and p.args[-1] == p.args[-2]
    }


def _replace(term: Term, old: Pattern, new: Var) -> Term:
    if term == old:
        return new
    if isinstance(term, Pattern):
        return Pattern(term.op, tuple(_replace(a, old, new) for a in term.args))
    return term


class Seen:
    """The equations met so far (by :func:`key`), for the renaming and sub-term prunes."""

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def prune(self, lhs: Pattern | Var, rhs: Pattern | Var) -> str | None:
        """Why this equation is pruned (one of :data:`PRUNE_REASONS`), or None; an equation that
        is not pruned is remembered."""
        if not isinstance(lhs, Pattern) or not isinstance(rhs, Pattern):
            return "variable side"
        left, right = _vars(lhs), _vars(rhs)
        if not (left <= right or right <= left):
            return "one-sided variable"
        k = key(lhs, rhs)
        if k in self.keys:
            return "renaming"
        fresh = Var("_common")
        shared = set(_subterms(lhs)) & set(_subterms(rhs)) - {lhs, rhs}
        for sub in shared:
            a, b = _replace(lhs, sub, fresh), _replace(rhs, sub, fresh)
            if (
                isinstance(a, Pattern | Var)
                and isinstance(b, Pattern | Var)
                and key(a, b) in self.keys
            ):
                return "common sub-term"
        self.keys.add(k)
        return None


def orient(t: Pattern, r: Pattern, name: str) -> list[Rule]:
    """The rules of ``t = r``: ``t => r`` when ``r``'s variables are among ``t``'s, ``r => t``
    (named ``name-rev``, or ``name`` when it is the only one) when ``t``'s are among ``r``'s.
    A direction the rule language or the engine's compiler refuses is left out (a right-hand
    ``split`` whose cut the engine cannot trace to a concat, say), and so is one with a ``split``
    on its left: the engine matches a split e-node with its cut, which a pattern cannot state
    (TENSAT's rules have none there either; such an equation's other direction, and the
    multi-pattern rule of its two-output candidate, are kept). Left out too: one whose right-hand
    side contains its left-hand side (``relu(x) => relu(relu(x))``: it applies to its own
    output) or builds a concat of a variable with itself that its left-hand side does not have
    (``a @ b => split(concat(a, a) @ b)``: twice the work, on every match)."""
    out: list[Rule] = []
    tv, rv = _vars(t), _vars(r)
    for lhs, rhs, ok in ((t, r, rv <= tv), (r, t, tv <= rv)):
        if not ok or lhs in _subterms(rhs):  # x => f(x, …) would grow the e-graph forever
            continue
        if _self_concats(rhs) - _self_concats(lhs) or any(p.op == "split" for p in _all(lhs)):
            continue
        rule = _rule(name if not out else f"{name}-rev", (lhs,), (rhs,))
        if rule is None:
            continue
        if out and _same(out[0], rule):  # a + b => b + a reversed is itself, renamed
            continue
        out.append(rule)
    return out


def _same(a: Rule, b: Rule) -> bool:
    ca, cb = canonical(a), canonical(b)
    return (ca.lhs, ca.rhs) == (cb.lhs, cb.rhs)


def merge_rule(
    t: tuple[Pattern | Var, Pattern | Var],
    s: tuple[Pattern | Var, Pattern | Var],
    name: str,
    seen: Seen,
) -> Rule | None:
    """The multi-pattern rule ``t0, t1 => s0, s1`` (``s`` the split pieces of one term), or None:
    a side that is a bare variable or twice the same term, a piece using a variable neither
    ``t`` binds, a piece concatenating a variable with itself (twice the work), or a rule seen
    before up to renaming and the order of the pairs."""
    t0, t1 = t
    if not isinstance(t0, Pattern) or not isinstance(t1, Pattern) or t0 == t1:
        return None
    if _self_concats(s[0]) - _self_concats(t0) - _self_concats(t1):
        return None
    if not _vars(s[0]) | _vars(s[1]) <= _vars(t0) | _vars(t1):
        return None
    texts = [
        str(canonical(Pattern("noop", (Pattern("noop", (a, b)), Pattern("noop", (c, d))))))
        for a, b, c, d in ((t0, t1, *s), (t1, t0, s[1], s[0]))
    ]
    k = "multi " + min(texts)
    if k in seen.keys:
        return None
    seen.keys.add(k)
    s0, s1 = s
    assert isinstance(s0, Pattern) and isinstance(s1, Pattern)
    return _rule(name, (t0, t1), (s0, s1), symmetric=True)


def _rule(
    name: str, lhs: tuple[Pattern, ...], rhs: tuple[Pattern, ...], symmetric: bool = False
) -> Rule | None:
    """The synthesized rule, or None when the rule language or the engine refuses it."""
    try:
        rule = Rule(name, lhs, rhs, symmetric=symmetric, sources=("synthesized",))
        compile_rules([rule])
    except RuleError:
        return None
    return rule
