"""Enumeration: terms as rows of ``synth_term``, grown one size at a time.

Size 0 holds the typed variables and the constants; size ``n`` applies every operator template
to representative terms whose sizes add up to ``n - 1`` (``sql/synth/enumerate.sql``: a filtered
join of templates with the terms so far). Each new term is built and evaluated
(:class:`~relsat.synth.values.Evaluator`), its fingerprints stored, and ``sql/synth/classify.sql``
puts it in the class of the smallest term of equal type (shape and split history) and
fingerprint (Ruler's enumeration:
only one term per class is built upon). Every non-representative term of size ``n`` is then a
candidate equation beside its class's representative (``sql/synth/candidates.sql``).

>>> t = Terms([("a", (2, 2)), ("b", (2, 2))], ["ewadd"])
>>> t.grow(1, deadline=float("inf"))
True
>>> [(str(t.pattern[i]), str(t.pattern[j])) for i, j, _ in t.candidates(1)]
[('(ewadd ?b ?a)', '(ewadd ?a ?b)')]
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import pyarrow as pa

from relsat.engine.db import Database
from relsat.rewrite.rules import Pattern, Term, Var
from relsat.synth.values import Evaluated, Evaluator
from relsat.synth.vocab import CONSTANTS, templates

__all__ = ["Terms"]

#: Terms built between two looks at the clock.
_CLOCK_EVERY = 64


class Terms:
    """The enumerated terms over ``vars`` (name, shape) and the templates of ``ops`` (convolutions
    of each of ``strides``, the scalar ``constants``, element-wise operators that ``broadcast``
    or not: :func:`~relsat.synth.vocab.templates`); the variables named in ``weights`` are
    weights (a convolution's weight, what enlarge pads); ``values``: variables' values given
    (:class:`~relsat.synth.values.Evaluator`); ``hidden``: variables the evaluator knows but the
    enumeration does not use (a goal's scale vector, joined top-down)."""

    def __init__(
        self,
        vars: Sequence[tuple[str, tuple[int, ...]]],
        ops: Sequence[str],
        seed: int = 0,
        weights: Collection[str] = (),
        strides: Sequence[int] = (1,),
        *,
        constants: Sequence[float] = CONSTANTS,
        broadcast: bool = False,
        values: Mapping[str, np.ndarray] | None = None,
        hidden: Collection[str] = (),
    ) -> None:
        self.db = Database()
        self.db.script("synth/schema")
        self.evaluator = Evaluator(vars, seed, values=values)
        self.pattern: dict[int, Pattern | Var] = {}
        self.vars = dict(vars)
        self._variants: dict[int, list[Pattern | Var]] = {}
        ts = templates(ops, strides, constants=constants, broadcast=broadcast)
        rows = [(t.op, t.kind, t.arity, *(list(t.params) + [None] * 4)[:4]) for t in ts]
        self.db.con.executemany("INSERT INTO synth_op VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        leaves: list[tuple[Pattern | Var, tuple[object, ...], bool]] = [
            (Var(n), ("var",), n in weights) for n in self.vars if n not in hidden
        ]
        leaves += [(Pattern(t.op, t.params), (t.op, *t.params), False) for t in ts if not t.arity]
        self._insert(0, [(p, cols, None, None, w) for p, cols, w in leaves])

    def grow(self, size: int, deadline: float) -> bool:
        """Enumerate the terms of ``size`` operators; False when ``deadline`` (a
        ``time.perf_counter()`` value) passed first (the terms of this size are then partial)."""
        combos = self.db.run("synth/enumerate", size=size)
        built: list[_Built] = []
        done = True
        for k, (op, p0, p1, p2, p3, c0, c1, weight) in enumerate(combos):
            if k % _CLOCK_EVERY == 0 and time.perf_counter() > deadline:
                done = False
                break
            params = tuple(p for p in (p0, p1, p2, p3) if p is not None)
            children = [self.pattern[c] for c in (c0, c1) if c is not None]
            built.append((_term(op, params, children), (op, p0, p1, p2, p3), c0, c1, weight))
        self._insert(size, built)
        return done

    def _insert(self, size: int, built: Sequence[_Built]) -> None:
        cols: dict[str, list] = {k: [] for k in _COLUMNS}
        next_id = len(self.pattern)
        for term, (op, *params), c0, c1, weight in built:
            ev = self._evaluate(term)
            if ev is None:
                continue
            self.pattern[next_id] = term
            params = (list(params) + [None] * 4)[:4]
            splits = [list(s) for s in ev.splits]
            row = [next_id, size, op, *params, c0, c1, list(ev.shape), splits, bool(weight)]
            row += [ev.fp, ev.fpx]
            for k, v in zip(_COLUMNS, row, strict=True):
                cols[k].append(v)
            next_id += 1
        table = pa.table({k: pa.array(v, type=_TYPES[k]) for k, v in cols.items()})
        self.db.insert_arrow("synth_term", table)
        self.db.run("synth/classify")

    def _evaluate(self, term: Pattern | Var) -> Evaluated | None:
        return self.evaluator.add(term)

    def candidates(self, size: int) -> list[tuple[int, int, bool]]:
        """``(term, representative, collision)`` for each candidate equation of ``size``."""
        return [(int(a), int(b), bool(c)) for a, b, c in self.db.run("synth/candidates", size=size)]

    def split_pairs(self, size: int) -> list[tuple[int, int, int, int]]:
        """``(piece0, piece1, rep0, rep1)`` for each two-output candidate of ``size``
        (``sql/synth/split_pairs.sql``): the split pieces of one term, each equal to a smaller
        term."""
        rows = self.db.run("synth/split_pairs", size=size)
        return [(int(p0), int(p1), int(r0), int(r1)) for _, _, p0, p1, r0, r1 in rows]

    def concat_pairs(self, size: int) -> list[tuple[int, int, int]]:
        """``(concat, term, axis)`` for each equation of ``size`` between a concat and a term
        that is no concat (``sql/synth/concat_pairs.sql``)."""
        rows = self.db.run("synth/concat_pairs", size=size)
        return [(int(c), int(u), int(axis)) for c, u, axis in rows]

    def variants(self, id_: int, most: int = 8) -> list[Pattern | Var]:
        """The spellings of representative ``id_``'s value at its size (at most ``most``): the
        members of its class of that size (``sql/synth/class_members.sql``), each with its
        children's variants in turn (only representatives are built upon, so ``pow(d, 2)``
        beside the representative ``d * d`` appears only here), the representative first."""
        if id_ in self._variants:
            return self._variants[id_]
        out: list[Pattern | Var] = []
        for m, c0, c1 in self.db.run("synth/class_members", id=id_):
            term = self.pattern[int(m)]
            kids = [int(c) for c in (c0, c1) if c is not None]
            if not isinstance(term, Pattern) or not kids or term.op in _OPAQUE:
                out.append(term)
                continue
            n = len(term.args) - len(kids)  # the template's parameters come first
            combos: list[list[Pattern | Var]] = [[]]
            for c in kids:
                combos = [[*a, v] for a in combos for v in self.variants(c, most)][:most]
            out += [Pattern(term.op, (*term.args[:n], *args)) for args in combos]
            if len(out) >= most:
                break
        self._variants[id_] = out[:most]
        return self._variants[id_]

    def counts(self, size: int) -> tuple[int, int]:
        """(terms, classes) of ``size``."""
        ((terms, classes),) = self.db.run("synth/size_counts", size=size)
        return int(terms), int(classes)

    def close(self) -> None:
        self.db.close()


def _term(op: str, params: tuple[int, ...], children: list[Pattern | Var]) -> Pattern:
    """The pattern of a template applied to children (a split piece wraps its split; merge takes
    its count after the weight)."""
    if op in ("split_0", "split_1"):
        return Pattern(op, (Pattern("split", (*params, *children)),))
    if op == "merge":
        return Pattern(op, (*children, *params))
    args: tuple[Term, ...] = (*params, *children)
    return Pattern(op, args)


#: Operators whose pattern does not end with its children (:func:`_term`).
_OPAQUE = frozenset({"split_0", "split_1", "merge"})
#: A term to insert: pattern, (op, p0…p3), children, whether it is computed from weights alone.
_Built = tuple[Pattern | Var, tuple, int | None, int | None, bool]
_COLUMNS = (
    "id", "size", "op", "p0", "p1", "p2", "p3", "c0", "c1", "shape", "splits", "weight",
    "fp", "fpx",
)  # fmt: skip
_TYPES = {
    "id": pa.int64(), "size": pa.int32(), "op": pa.string(),
    "p0": pa.int32(), "p1": pa.int32(), "p2": pa.int32(), "p3": pa.int32(),
    "c0": pa.int64(), "c1": pa.int64(), "shape": pa.list_(pa.int32()), "weight": pa.bool_(),
    "splits": pa.list_(pa.list_(pa.int32())),
    "fp": pa.int64(), "fpx": pa.int64(),
}  # fmt: skip
