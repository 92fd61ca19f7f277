"""Verification beyond the fingerprint: ``relsat rules check`` on every rule kept.

A candidate rule is checked by :func:`relsat.rewrite.check.check_rule` (several shapes drawn
from the rule itself, near misses, broadcasting, grouped convolutions where they apply; types,
then values). A rule that fails is tried once more with the guards that make such rules sound
in relsat's vocabulary: ``same-shape`` for the variables an element-wise operator combines
(broadcasting) and ``ungrouped`` for a convolution's variables. It is kept with those guards if
it then passes, else dropped; the :class:`Outcome` says which.

>>> from relsat.rewrite.rulefile import parse_rules
>>> verify(parse_rules("# name: r\\n(ewadd ?a ?b) => (ewmul ?a ?b)\\n")["r"]).status
'dropped'
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from relsat.rewrite.check import check_rule
from relsat.rewrite.rules import Guard, Pattern, Rule, Var

__all__ = ["Outcome", "verify"]

_ELEMENTWISE = frozenset({"ewadd", "ewmul", "ewsub", "ewdiv", "ewpow"})


@dataclass(frozen=True)
class Outcome:
    """``status``: ``ok``, ``guarded`` (kept with guards) or ``dropped``; ``rule`` as kept (with
    its checks in its doc); ``detail``: the check's verdict in words."""

    rule: Rule
    status: str
    detail: str

    @property
    def kept(self) -> bool:
        return self.status != "dropped"


def _guards(rule: Rule) -> list[Guard]:
    """The guards that could make ``rule`` sound: same-shape and ungrouped on its variables."""
    out: dict[Guard, None] = {}
    stack: list[object] = list(rule.lhs)
    while stack:
        p = stack.pop()
        if not isinstance(p, Pattern):
            continue
        tensors = [a for a in p.args if isinstance(a, Var)]
        if p.op in _ELEMENTWISE and len(tensors) == 2 and tensors[0] != tensors[1]:
            out.setdefault(Guard("same-shape", tuple(sorted(tensors, key=str))))
        if p.op == "conv2d" and len(tensors) == 2:
            out.setdefault(Guard("ungrouped", tuple(tensors)))
        stack.extend(p.args)
    return list(out)


def verify(rule: Rule, *, seed: int = 0) -> Outcome:
    """Check ``rule`` (and, failing that, ``rule`` with guards); the outcome."""
    verdict = check_rule(rule, seed=seed)
    if verdict.ok:
        doc = f"checked: fingerprint, relsat rules check ok ({verdict.instances} instances)"
        return Outcome(replace(rule, doc=doc), "ok", verdict.line())
    guards = _guards(rule)
    if guards and verdict.status != "untested":
        guarded = replace(rule, guards=tuple(guards))
        second = check_rule(guarded, seed=seed)
        if second.ok:
            doc = (
                f"checked: fingerprint, relsat rules check ok with guards ({second.instances} "
                f"instances); without them: {verdict.status}"
            )
            return Outcome(replace(guarded, doc=doc), "guarded", second.line())
    return Outcome(rule, "dropped", verdict.line())
