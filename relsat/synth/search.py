"""Goal-directed search: spellings of a goal's value put together top-down from a table of terms
enumerated bottom-up modulo values.

Bottom-up, :class:`~relsat.synth.terms.Terms` holds one term per value (observational
equivalence) up to a small size: the *table*. Top-down, a *target* (a value vector; the first is
the goal's) is inverted through an operator into the target of its operand: through a unary
operator (``sqrt``: t², ``reciprocal``: 1/t, ``neg``: -t, ``tanh``: atanh t, ``sigmoid``: logit t)
or through a binary one whose other operand is a small term, a *sibling* (a table term of at most
``siblings`` operators, or a variable kept out of the table): ``t - a`` under an addition,
``t / a`` under a product, ``t + a`` or ``a - t`` under a subtraction, ``t * a`` or ``a / t``
under a division, ``t ^ (1/a)`` under a power by a constant. A target is kept once per value
(its cheapest ways, and those within ``slack`` operators of it), so targets grow like the table's
classes, not like terms. Targets are settled in order of cost (operators spent on the way down)
and each is looked up among the table's values (``sql/synth/goal_hits.sql``: a range join on a
random projection, then the values compared within a tolerance relative to the target's largest
magnitude): a hit is a spelling of the goal whose size is that cost plus the hit's. The first
hits are the smallest spellings; the search goes on ``slack`` operators further for other
spellings (the exporters' variants), expanding targets only ``slack`` costs past the first hit
(spellings of the same size with less in the table and more top-down are not looked for: they
would cost most of the targets).

``erf`` has no inverse here (SciPy is no dependency) and ``reducemean`` none at all: such an
operator enters a spelling only inside a table term.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from relsat.graph.ops import from_f32_bits
from relsat.rewrite.rules import COMMUTATIVE, Pattern, Var
from relsat.synth.terms import Terms

__all__ = ["Search", "Way", "canonical_text"]

#: Unary inverses: the operand's values from the result's, and where they are defined.
_UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "sqrt": (np.square, lambda t: t >= 0),
    "reciprocal": (np.reciprocal, lambda t: t != 0),
    "neg": (np.negative, lambda t: np.ones(t.shape, bool)),
    "tanh": (np.arctanh, lambda t: np.abs(t) < 1),
    "sigmoid": (lambda t: np.log(t / (1 - t)), lambda t: (t > 0) & (t < 1)),
}
#: Binary inverses (operator, sibling on the left?): the other operand from target t, sibling a.
_BINARY: dict[tuple[str, bool], Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    ("ewadd", False): lambda t, a: t - a,
    ("ewmul", False): lambda t, a: t / a,
    ("ewsub", False): lambda t, a: t + a,
    ("ewsub", True): lambda t, a: a - t,
    ("ewdiv", False): lambda t, a: t * a,
    ("ewdiv", True): lambda t, a: a / t,
}
#: Targets compared in one batch of (frontier x siblings) rows.
_CHUNK = 1 << 20
#: Targets looked up in one batch (the time limit is looked at between batches).
_LOOKUP = 1 << 16
#: Quantization of a target's values for its key (mantissa bits).
_KEY_BITS = 20
#: The largest magnitude a target may have, between these (the tolerance is relative to it).
_SCALE = (1e-4, 1e4)


@dataclass(frozen=True)
class Way:
    """How a target is reached from target ``parent``: the parent's value is ``op`` of this
    target (``sibling`` None) or of this target and sibling number ``sibling`` (``left``: the
    sibling is the left operand); ``cost``: operators spent from the goal down to here."""

    parent: int
    op: str
    sibling: int | None
    left: bool
    cost: int


def canonical_text(term: Pattern | Var) -> str:
    """``term`` as text with the operands of commutative operators sorted (the rule compiler
    matches either order: two spellings that differ only there are one rule)."""
    if not isinstance(term, Pattern):
        return str(term)
    args = [canonical_text(a) if isinstance(a, Pattern | Var) else str(a) for a in term.args]
    if term.op in COMMUTATIVE:
        args = sorted(args)
    return "(" + " ".join([term.op, *args]) + ")"


def _keys(values: np.ndarray) -> np.ndarray:
    """A 64-bit key per row of ``values``: its entries quantized (tiny ones as 0), mixed."""
    with np.errstate(all="ignore"):
        mant, expo = np.frexp(values)
        small = np.abs(values) < 1e-9
        q = np.where(small, 0, np.round(mant * (1 << _KEY_BITS))).astype(np.int64)
        e = np.where(small, 0, expo).astype(np.int64)
        code = ((q << 8) ^ (e & 0xFF)).view(np.uint64)
        return (code * _MIX[: values.shape[1]]).sum(axis=1, dtype=np.uint64)


_MIX = np.random.default_rng(41).integers(1, 1 << 62, size=4096, dtype=np.uint64) | np.uint64(1)


class Search:
    """The top-down search of the module docstring for ``goal`` (its values, at the shape every
    table term is broadcast to) over ``terms`` (grown to ``table`` operators) and the binary and
    unary operators of ``ops``; ``extra``: variables kept out of the table, siblings only."""

    def __init__(
        self,
        terms: Terms,
        goal: np.ndarray,
        ops: Sequence[str],
        *,
        table: int,
        siblings: int,
        slack: int = 0,
        extra: Sequence[str] = (),
        seed: int = 0,
        rtol: float = 1e-5,
        atol: float = 1e-8,
    ) -> None:
        self.terms, self.shape, self.slack = terms, goal.shape, slack
        self.rtol, self.atol = rtol, atol
        self.unary = [op for op in ops if op in _UNARY]
        self.binary = [k for k in _BINARY if k[0] in ops]
        self.power = "ewpow" in ops
        ids, sizes, rows = [], [], []
        for id_, size in terms.db.run("synth/representatives", size=table):
            full = self._full(terms.pattern[int(id_)])
            if full is not None:
                ids.append(int(id_))
                sizes.append(int(size))
                rows.append(full)
        self.ids = np.array(ids, dtype=np.int64)
        self.sizes = np.array(sizes, dtype=np.int64)
        self.values = np.stack(rows) if rows else np.zeros((0, goal.size))
        self.row = {i: k for k, i in enumerate(ids)}
        self.mix = np.random.default_rng(seed).standard_normal(goal.size)
        terms.db.script("synth/goal_schema")
        proj = self.values @ self.mix
        data = {"id": self.ids, "size": self.sizes.astype(np.int32), "proj": proj}
        terms.db.insert_arrow("synth_value", pa.table(data))
        # Siblings: small table terms and the variables kept out of the table.
        self.sib_terms: list[Pattern | Var] = [
            terms.pattern[i] for i, s in zip(ids, sizes, strict=True) if s <= siblings
        ]
        self.sib_sizes = [s for s in sizes if s <= siblings]
        sib_rows = [r for r, s in zip(rows, sizes, strict=True) if s <= siblings]
        for name in extra:
            full = self._full(Var(name))
            if full is not None:
                self.sib_terms.append(Var(name))
                self.sib_sizes.append(0)
                sib_rows.append(full)
        self.sib_values = np.stack(sib_rows) if sib_rows else np.zeros((0, goal.size))
        self.sib_scalar = [
            float(from_f32_bits(p.args[0]))
            if isinstance(p, Pattern) and p.op == "scalar" and isinstance(p.args[0], int)
            else None
            for p in self.sib_terms
        ]
        # Targets: values, cheapest cost, ways; by key; by cost (not yet settled).
        self.tv = np.zeros((1024, goal.size))
        self.best: list[int] = []
        self.ways: list[list[Way]] = []
        self.key: dict[int, int] = {}
        self.bucket: dict[int, list[int]] = {}
        self.hits: list[tuple[int, int]] = []  # (target, table term id)
        self.looked = 0
        self.top = float("inf")  # the smallest spelling's size so far
        self.first: int | None = None  # the cost at which the first hit came
        self._add(goal.reshape(1, -1), None, [0])

    def _full(self, term: Pattern | Var) -> np.ndarray | None:
        """``term``'s values broadcast to the goal's shape, flat; None if not finite or not
        broadcastable."""
        value = self.terms.evaluator.floats_of(term)
        if value is None:
            return None
        try:
            full = np.broadcast_to(value, self.shape).ravel()
        except ValueError:
            return None
        return full if np.all(np.isfinite(full)) else None

    @property
    def targets(self) -> int:
        return len(self.best)

    def _add(self, values: np.ndarray, ways: list[Way] | None, costs: Sequence[int]) -> None:
        """Add rows of target values, reached by ``ways`` (None: the goal) at ``costs``."""
        scale = np.abs(values).max(axis=1, initial=0.0)
        keys = _keys(values)
        for k in range(len(values)):
            if not _SCALE[0] <= scale[k] <= _SCALE[1]:
                continue  # all but zero, or huge: a power's inverse run away, no spelling
            cost = int(costs[k])
            key = int(keys[k])
            t = self.key.get(key)
            if t is None:
                t = len(self.best)
                if t == len(self.tv):
                    self.tv = np.concatenate([self.tv, np.zeros_like(self.tv)])
                self.tv[t] = values[k]
                self.key[key] = t
                self.best.append(cost)
                self.ways.append([] if ways is None else [ways[k]])
                self.bucket.setdefault(cost, []).append(t)
            elif ways is not None and t in (0, ways[k].parent):
                continue  # back to the goal, or a step that changes nothing (x * 1)
            elif ways is not None and cost <= self.best[t] + self.slack:
                self.ways[t].append(ways[k])
                if cost < self.best[t]:
                    self.best[t] = cost
                    self.bucket.setdefault(cost, []).append(t)
                    self.ways[t] = [w for w in self.ways[t] if w.cost <= cost + self.slack]

    def run(self, max_size: int, deadline: float, max_targets: int) -> str:
        """Settle targets cost by cost up to ``max_size`` operators (and ``slack`` beyond the
        first hit); why it stopped."""
        for c in range(max_size + 1):
            limit = int(min(max_size, self.top + self.slack))
            if c > limit:
                return "done"
            frontier = sorted({t for t in self.bucket.pop(c, []) if self.best[t] == c})
            if not frontier:
                continue
            found = self.top
            for lo in range(0, len(frontier), _LOOKUP):
                if time.perf_counter() > deadline:
                    return f"time limit: looking up the targets of cost {c}"
                self._lookup(frontier[lo : lo + _LOOKUP], limit - c)
            if self.top < found and self.first is None:
                self.first = c
            limit = int(min(max_size, self.top + self.slack))
            if c + 1 > limit or (self.first is not None and c >= self.first + self.slack):
                continue  # past the first hit: the targets made so far are looked up, no more
            if time.perf_counter() > deadline:
                return f"time limit: at cost {c}"
            if self.targets > max_targets:
                return f"target limit: {self.targets} targets at cost {c}"
            self._expand(frontier, c, limit, deadline)
        return "done"

    def _lookup(self, frontier: list[int], room: int) -> None:
        """Look the ``frontier`` targets up among the table terms of at most ``room``
        operators (``sql/synth/goal_hits.sql``), keep the hits whose values agree."""
        vals = self.tv[frontier]
        proj = vals @ self.mix
        atol = self.atol * np.abs(vals).max(axis=1, keepdims=True)
        tol = (self.rtol * np.abs(vals) + atol) @ np.abs(self.mix)
        db = self.terms.db
        data = {
            "tid": np.array(frontier, dtype=np.int64),
            "lo": proj - tol,
            "hi": proj + tol,
        }
        db.insert_arrow("synth_target", pa.table(data))
        rows = db.run("synth/goal_hits", room=room)
        db.execute("DELETE FROM synth_target")
        self.looked += len(frontier)
        for tid, id_ in rows:
            tid, id_ = int(tid), int(id_)
            t = self.tv[tid]
            atol = self.atol * float(np.abs(t).max())
            if np.allclose(self.values[self.row[id_]], t, self.rtol, atol):
                self.hits.append((tid, id_))
                self.top = min(self.top, self.best[tid] + int(self.sizes[self.row[id_]]))

    def _expand(self, frontier: list[int], c: int, limit: int, deadline: float) -> None:
        """The targets one operator below each of ``frontier`` (cost ``c``), up to ``limit``."""
        f = self.tv[frontier]
        parents = np.array(frontier)
        with np.errstate(all="ignore"):
            for op in self.unary:
                inverse, domain = _UNARY[op]
                ok = np.all(domain(f), axis=1)
                x = inverse(f[ok])
                fine = np.all(np.isfinite(x), axis=1)
                ways = [Way(int(p), op, None, False, c + 1) for p in parents[ok][fine]]
                self._add(x[fine], ways, [c + 1] * len(ways))
            sizes = np.array(self.sib_sizes, dtype=np.int64)
            usable = np.flatnonzero(c + 1 + sizes <= limit)
            if not len(usable):
                return
            a = self.sib_values[usable]
            step = max(1, _CHUNK // max(1, len(usable)))
            for lo in range(0, len(frontier), step):
                if time.perf_counter() > deadline:
                    return
                part, fp = f[lo : lo + step], parents[lo : lo + step]
                for (op, left), binary in _BINARY.items():
                    if (op, left) in self.binary:
                        x = binary(part[:, None, :], a[None, :, :])
                        self._add_grid(x, fp, usable, op, left, c)
                if self.power:
                    self._powers(part, fp, usable, c)

    def _add_grid(
        self, x: np.ndarray, parents: np.ndarray, sibs: np.ndarray, op: str, left: bool, c: int
    ) -> None:
        """Add the finite rows of ``x`` (parents x siblings x values) as targets."""
        fine = np.all(np.isfinite(x), axis=2)
        pi, si = np.nonzero(fine)
        if not len(pi):
            return
        sib = sibs[si]
        costs = c + 1 + np.array(self.sib_sizes)[sib]
        ways = [
            Way(int(p), op, int(s), left, int(k))
            for p, s, k in zip(parents[pi], sib, costs, strict=True)
        ]
        self._add(x[pi, si], ways, costs)

    def _powers(self, f: np.ndarray, parents: np.ndarray, sibs: np.ndarray, c: int) -> None:
        """Targets under a power by a constant sibling: x ^ a = t, x = t ^ (1/a) (positive t,
        or any t for an odd integer a)."""
        for s in sibs:
            a = self.sib_scalar[s]
            if not a:
                continue
            odd = float(a).is_integer() and int(a) % 2 == 1
            ok = np.ones(len(f), bool) if odd else np.all(f > 0, axis=1)
            x = np.sign(f[ok]) * np.abs(f[ok]) ** (1.0 / a)
            fine = np.all(np.isfinite(x), axis=1)
            cost = c + 1 + self.sib_sizes[s]
            ways = [Way(int(p), "ewpow", int(s), False, cost) for p in parents[ok][fine]]
            self._add(x[fine], ways, [cost] * len(ways))

    def spellings(self, limit: int) -> Iterator[tuple[Pattern | Var, int]]:
        """Each spelling of at most ``limit`` operators (term, size), from each hit up through
        every way of its targets (the hit spelled each way its class holds at its size:
        :meth:`~relsat.synth.terms.Terms.variants`)."""
        for tid, id_ in self.hits:
            size = int(self.sizes[self.row[id_]])
            for term in self.terms.variants(id_):
                yield from self._up(tid, term, size, limit)

    def _up(
        self, t: int, term: Pattern | Var, acc: int, limit: int
    ) -> Iterator[tuple[Pattern | Var, int]]:
        if t == 0:
            yield term, acc
            return
        for w in self.ways[t]:
            step = 1 + (0 if w.sibling is None else self.sib_sizes[w.sibling])
            if acc + step + self.best[w.parent] > limit:
                continue
            if w.sibling is None:
                up = Pattern(w.op, (term,))
            else:
                sib = self.sib_terms[w.sibling]
                up = Pattern(w.op, (sib, term) if w.left else (term, sib))
            yield from self._up(w.parent, up, acc + step, limit)
