"""Terms built and evaluated on random inputs: the value vectors the fingerprints hash.

Every term is built once with one shared :class:`~relsat.graph.builder.GraphBuilder` (equal
sub-terms share a node; the builder's shape checks decide whether a term is valid) and evaluated
with relsat's own NumPy kernels twice over:

* in float64 on random inputs (mixed signs, so ``relu(x) = x`` is refuted);
* for a term of exact operators only (:data:`relsat.synth.vocab.EXACT`), modulo the prime
  :data:`PRIME` on random residues: the kernels run on int64 and every result is reduced, and
  division is multiplication by the modular inverse; equal there means equal as polynomials
  (up to a chance of about degree / prime per input).

A fingerprint is an int64 hash of the values: exact residues as they are; floats quantized to
24 mantissa bits (magnitudes below 1e-9 count as 0, NaN and infinities as themselves), so terms
that agree up to rounding share it.

>>> from relsat.rewrite.rules import Pattern, Var
>>> ev = Evaluator([("a", (2, 2)), ("b", (2, 2))])
>>> ab, ba = (ev.add(Pattern("ewadd", (Var(p), Var(q)))) for p, q in ("ab", "ba"))
>>> ab.fp == ba.fp and ab.fpx == ba.fpx and ab.fpx is not None
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from relsat.errors import ExecutionError, GraphError
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Node, Ref
from relsat.graph.kernels import Lazy, apply
from relsat.rewrite.instantiate import Memo, instantiate
from relsat.rewrite.rules import Pattern, Var
from relsat.synth.vocab import EXACT

__all__ = ["EDGE_VALUES", "PRIME", "Evaluated", "Evaluator", "float_fingerprint"]

#: Inputs of the edge-case evaluation (:mod:`relsat.synth.verify`): zero, signs, one, halves.
EDGE_VALUES = (0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0)
#: The modulus of exact evaluation: products of two residues and their short sums fit in int64.
PRIME = 1_000_003


@dataclass(frozen=True)
class Evaluated:
    """A built term: its shape, float fingerprint ``fp`` and exact one ``fpx`` (None: the term
    has an inexact operator); ``splits``: its split history, per dimension the concat boundaries
    recorded there (part of its type: TENSAT's ``split`` cuts at the last one)."""

    shape: tuple[int, ...]
    fp: int
    fpx: int | None
    splits: tuple[tuple[int, ...], ...] = ()


def _hash(*parts: bytes) -> int:
    digest = hashlib.blake2b(b"|".join(parts), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def float_fingerprint(values: np.ndarray) -> int:
    """The hash of ``values`` quantized to 24 mantissa bits (tiny magnitudes as 0)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    finite = np.isfinite(v)
    small = finite & (np.abs(v) < 1e-9)
    mant, expo = np.frexp(np.where(finite & ~small, v, 1.0))
    q = np.where(finite & ~small, np.round(mant * (1 << 24)), 0).astype(np.int64)
    code = np.where(finite, 0, np.where(np.isnan(v), 1, np.where(v > 0, 2, 3)))
    expo = np.where(finite & ~small, expo, 0).astype(np.int64)
    return _hash(q.tobytes(), expo.tobytes(), code.astype(np.int8).tobytes())


def _exact_node(node: Node) -> bool:
    if node.op not in EXACT:
        return False
    act = node.params.get("activation")
    return act in (None, "NONE")


def _modinv(x: np.ndarray) -> np.ndarray:
    """Element-wise inverse modulo :data:`PRIME` (0 stays 0: a chance of 1 in PRIME per entry)."""
    flat = [pow(int(e), PRIME - 2, PRIME) for e in np.asarray(x).ravel()]
    return np.array(flat, dtype=np.int64).reshape(np.shape(x))


def _residue(value: float) -> int:
    """A float32 constant as a residue: its exact fraction num / den taken modulo the prime."""
    f = Fraction(value)
    return f.numerator * pow(f.denominator, PRIME - 2, PRIME) % PRIME


class Evaluator:
    """Builds terms over the variables ``vars`` (name, shape) and keeps each node's values."""

    def __init__(
        self,
        vars: Sequence[tuple[str, tuple[int, ...]]],
        seed: int = 0,
        *,
        edge: bool = False,
        values: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """``values``: the float values of some variables, given (a positive epsilon, say), in
        place of the random draw."""
        self.builder = GraphBuilder()
        self.memo: Memo = {}
        rng = np.random.default_rng(seed)
        self.env: dict[str, Tensor] = {}
        self.floats: dict[Ref, np.ndarray | Lazy] = {}
        self.exact: dict[Ref, np.ndarray | None] = {}
        for name, shape in vars:
            t = self.builder.input(shape, name=name)
            self.env[name] = t
            floats = rng.uniform(-2.0, 2.0, size=shape)
            if edge:  # the values where division, roots and powers have edges
                floats = rng.choice(EDGE_VALUES, size=shape)
            if values is not None and name in values:
                floats = np.broadcast_to(np.asarray(values[name], dtype=np.float64), shape)
            self.floats[t.ref] = floats
            self.exact[t.ref] = rng.integers(1, PRIME, size=shape, dtype=np.int64)

    def add(self, term: Pattern | Var) -> Evaluated | None:
        """Build and evaluate ``term``; None when the builder or a kernel refuses it."""
        try:
            t = instantiate(self.builder, term, self.env, self.memo)
            self._evaluate(t)
        except (GraphError, ExecutionError, FloatingPointError, ValueError):
            return None
        fx = self.exact[t.ref]
        fpx = None if fx is None else _hash(b"x", fx.tobytes())
        value = self.floats[t.ref]
        if isinstance(value, Lazy):  # a merged weight: its value depends on its consumer
            fp = _hash(b"lazy", str(term).encode())
        else:
            fp = float_fingerprint(value)
        return Evaluated(t.shape, fp, fpx, tuple(map(tuple, t.type.splits)))

    def floats_of(self, term: Pattern | Var) -> np.ndarray | None:
        """The float values of ``term`` (built if needed); None when it cannot be built or is a
        merged weight (no values of its own)."""
        if self.add(term) is None:
            return None
        value = self.floats[instantiate(self.builder, term, self.env, self.memo).ref]
        return None if isinstance(value, Lazy) else value

    def _evaluate(self, t: Tensor) -> None:
        """Values of ``t``'s node and of any unevaluated node below it (children first)."""
        if t.ref in self.floats:
            return
        node, inputs = self.builder.producer(t)
        for i in inputs:
            self._evaluate(i)
        with np.errstate(all="ignore"):
            outs = apply(node, [self.floats[i.ref] for i in inputs])
            exact = self._exact(node, inputs)
        for k, out in enumerate(outs):
            ref = Ref(node.id, k)
            self.floats[ref] = out if isinstance(out, Lazy) else np.asarray(out, dtype=np.float64)
            self.exact[ref] = None if exact is None else exact[k]

    def _exact(self, node: Node, inputs: Sequence[Tensor]) -> tuple[np.ndarray, ...] | None:
        maybe = [self.exact[i.ref] for i in inputs]
        if not _exact_node(node) or any(a is None for a in maybe):
            return None
        args = [a for a in maybe if a is not None]
        if node.op == "scalar":
            return (np.array(_residue(node.params["value"]), dtype=np.int64),)
        if node.op == "reciprocal":
            return (_modinv(args[0]),)
        if node.op == "ewdiv":
            return (np.multiply(args[0], _modinv(args[1])) % PRIME,)
        if node.op == "neg":
            return ((-args[0]) % PRIME,)
        if node.op == "ewsub":
            return (np.subtract(args[0], args[1]) % PRIME,)
        outs = apply(node, list(args))
        return tuple(np.asarray(o, dtype=np.int64) % PRIME for o in outs)
