"""Which rules can pay under a cost model: the *neutral* rules, whose two sides every cost model
prices alike, and which explode on graphs with long sums and products.

Every :class:`~relsat.cost.CostModel` prices an e-node by its operator signature (op, literal
parameters, input and output shapes, which inputs are weights). A rule is **neutral** when its
two sides hold the same operators with the same literals (a permutation: associativity,
commutativity) and every one of them is an element-wise broadcasting operator
(:data:`NEUTRAL_OPS`): whenever the matched operands share one shape, every node on either side
has that shape, so both sides have the same multiset of signatures and the same price under any
cost model. Such a rewrite pays only through a broadcast or weight operand (a bias folded into a
constant) or by enabling another rule; on the residual stream of a transformer (hundreds of
same-shaped adds) its closure is exponential: TASO's ``ewadd`` associativity filled the 50,000
e-node limit of a 4-layer GPT-2 in 7 iterations, with nothing to gain.

:func:`relsat.engine.explore.explore` runs the neutral rules in the first ``k_neutral``
iterations only (as TENSAT runs its multi-pattern rules in the first ``k_multi``): their growth is
then bounded by the graph's size, not exponential in the number of iterations.

>>> from relsat.rewrite.rulefile import parse_rules
>>> rules = parse_rules(
...     "# name: assoc\\n(ewadd ?c (ewadd ?a ?b)) => (ewadd ?a (ewadd ?b ?c))\\n"
...     "# name: factor\\n(ewadd (ewmul ?a ?b) (ewmul ?a ?c)) => (ewmul ?a (ewadd ?b ?c))\\n"
... )
>>> [rule.name for rule in rules if neutral(rule)]
['assoc']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from relsat.rewrite.rules import Pattern, Rule, Term

__all__ = ["NEUTRAL_OPS", "neutral", "neutral_rules"]

#: Element-wise operators whose output has the broadcast shape of their inputs: a permutation of
#: them over operands of one shape leaves every node's signature unchanged.
NEUTRAL_OPS = frozenset({"ewadd", "ewmul", "ewsub", "ewdiv", "ewpow"})


def neutral(rule: Rule) -> bool:
    """Whether ``rule``'s sides hold the same element-wise operators (with the same literals):
    priced alike by every cost model when the operands share a shape (see the module doc)."""
    lhs, rhs = _ops(rule.lhs), _ops(rule.rhs)
    return bool(lhs) and lhs == rhs and all(op in NEUTRAL_OPS for op, *_ in lhs)


def neutral_rules(rules: Iterable[Rule]) -> list[int]:
    """The positions (rule ids of a compiled program) of the neutral rules among ``rules``."""
    return [i for i, rule in enumerate(rules) if neutral(rule)]


def _ops(patterns: Iterable[Term]) -> Counter[tuple[object, ...]]:
    """The operators of ``patterns`` with their integer literals, counted."""
    out: Counter[tuple[object, ...]] = Counter()
    stack = list(patterns)
    while stack:
        term = stack.pop()
        if isinstance(term, Pattern):
            out[(term.op, *(a for a in term.args if isinstance(a, int)))] += 1
            stack.extend(term.args)
    return out
