"""A seeded random tensor-graph generator: the input of the fuzz test and ``bench/fuzz.py``.

``random_graph(seed)`` builds a small graph with :class:`relsat.GraphBuilder` from
``random.Random(seed)`` alone, so a seed names a graph for good (a failure is reported as its
seed, and ``random_graph(seed)`` rebuilds it). The graphs mix what TASO's rules rewrite and what
broke them before:

* convolutions (``conv2d`` and the fused ``conv2d_bias``) with groups (1, some, depthwise),
  strides, SAME/VALID padding, odd and even kernels and every activation; two convs of one
  input, and one weight used twice;
* matmul chains, two matmuls of one input, ``matmul_bias``, batched (3-D) matmuls;
* concat (2 to 4 inputs, any axis) and split (at the last concat boundary or anywhere);
* max and average pools; element-wise ops, broadcasting ones included (``[1, C, 1, 1]``,
  ``[N]``);
* dead inputs (an input nothing reads: the interface must keep it) and several outputs (every
  tensor nothing reads, sometimes an intermediate one too).

Shapes are small (verification runs the NumPy executor on both graphs).

>>> g = random_graph(7)
>>> g == random_graph(7) and len(g.outputs) >= 1
True
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from relsat.errors import GraphError
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph
from relsat.graph.ops import ACTIVATIONS

__all__ = ["FuzzSize", "describe", "random_graph"]


@dataclass(frozen=True)
class FuzzSize:
    """How big the graphs get: operator steps, and the largest spatial / matrix dim."""

    min_steps: int = 2
    max_steps: int = 7
    max_hw: int = 7
    max_dim: int = 6


SMALL = FuzzSize()


class _Gen:
    """One graph under construction: the builder, the tensors made so far, and the draws."""

    def __init__(self, rng: random.Random, size: FuzzSize) -> None:
        self.rng = rng
        self.size = size
        self.b = GraphBuilder()
        self.images: list[Tensor] = []  # rank 4, NCHW
        self.mats: list[Tensor] = []  # rank 2 or 3
        self.used: set[int] = set()  # node ids some op reads
        self.starts: set[int] = set()  # node ids of the starting inputs

    # --- draws ------------------------------------------------------------------------------

    def pick(self, pool: Sequence[Tensor]) -> Tensor:
        """A tensor of ``pool``, the recent ones favoured (chains), any one sometimes (sharing)."""
        if self.rng.random() < 0.6:
            return pool[-1 - min(int(self.rng.expovariate(1.0)), len(pool) - 1)]
        return self.rng.choice(pool)

    def act(self) -> str:
        return self.rng.choice(("NONE", "NONE", *ACTIVATIONS))

    def leaf(self, shape: Sequence[int], *, weight: float = 0.8) -> Tensor:
        """A new weight (mostly) or input of ``shape``."""
        make = self.b.weight if self.rng.random() < weight else self.b.input
        return make(list(shape))

    def use(self, *ts: Tensor) -> None:
        self.used.update(t.ref.node for t in ts)

    def keep(self, t: Tensor, *, start: bool = False) -> Tensor:
        if start:
            self.starts.add(t.ref.node)
        (self.images if t.rank == 4 else self.mats).append(t)
        return t

    # --- starting tensors -------------------------------------------------------------------

    def start(self) -> None:
        r, s = self.rng, self.size
        kind = r.choice(("image", "image", "mat", "mat", "both"))
        if kind in ("image", "both"):
            for _ in range(r.choice((1, 1, 2))):
                c = r.choice((1, 2, 3, 4, 6, 8))
                self.keep(self.b.input([r.choice((1, 1, 2)), c, *self.hw(s.max_hw)]), start=True)
        if kind in ("mat", "both"):
            for _ in range(r.choice((1, 1, 2))):
                shape = [r.randint(1, s.max_dim), r.randint(1, s.max_dim)]
                if r.random() < 0.2:
                    shape.insert(0, r.choice((1, 2, 3)))
                self.keep(self.b.input(shape), start=True)
        if r.random() < 0.2:  # a dead input: nothing reads it, the interface keeps it
            self.b.input([r.randint(1, 4), r.randint(1, 4)], name="dead")

    def hw(self, top: int) -> list[int]:
        h = self.rng.randint(2, top)
        return [h, h if self.rng.random() < 0.7 else self.rng.randint(2, top)]

    # --- moves ------------------------------------------------------------------------------

    def conv(self) -> None:
        r = self.rng
        x = self.pick(self.images)
        c = x.shape[1]
        divisors = [g for g in range(1, c + 1) if c % g == 0]
        groups = r.choice([1, c, *divisors])
        k = r.choice((1, 3, 3, 1, 2, 5))
        kh, kw = (k, k) if r.random() < 0.8 else (k, r.choice((1, 3)))
        stride = r.choice(((1, 1), (1, 1), (2, 2), (1, 2)))
        padding = r.choice(("SAME", "SAME", "VALID"))
        if padding == "VALID" and (kh > x.shape[2] or kw > x.shape[3]):
            padding = "SAME"
        act = self.act()
        bias = r.random() < 0.3
        w = self.leaf([groups * r.choice((1, 1, 2)), c // groups, kh, kw], weight=0.9)
        twin = r.random() < 0.4  # a second conv of the same input: the multi-pattern rules
        outs = []
        for i in range(2 if twin else 1):
            if i == 1 and r.random() < 0.7:  # its own weight, of the same or another width
                w = self.leaf([groups * r.choice((1, 2)), c // groups, kh, kw], weight=0.9)
            if bias:
                b = self.leaf([1, w.shape[0], 1, 1])
                y = self.b.conv2d_bias(x, w, b, stride, padding, act)
                self.use(x, w, b)
            else:
                y = self.b.conv2d(x, w, stride, padding, act)
                self.use(x, w)
            outs.append(self.keep(y))
        if twin and r.random() < 0.4:  # the two convs side by side
            self.use(*outs)
            self.keep(self.b.concat(1, outs))

    def pool(self) -> None:
        r = self.rng
        x = self.pick(self.images)
        k = r.choice((1, 2, 3))
        padding = r.choice(("SAME", "VALID"))
        if padding == "VALID" and k > min(x.shape[2:]):
            padding = "SAME"
        pool = self.b.maxpool2d if r.random() < 0.5 else self.b.avgpool2d
        y = pool(x, k, r.choice((1, 1, 2)), padding, r.choice(("NONE", "NONE", "RELU")))
        self.use(x)
        self.keep(y)

    def matmul(self) -> None:
        r = self.rng
        x = self.pick(self.mats)
        k = x.shape[-1]
        act = self.act()
        first = None
        for _ in range(2 if r.random() < 0.3 else 1):  # two matmuls of one input sometimes
            w_shape = [*x.shape[:-2], k, r.randint(1, self.size.max_dim)]
            if first is not None and r.random() < 0.3:
                w_shape[-1] = first.shape[-1]
            w = self.leaf(w_shape)
            if x.rank == 2 and r.random() < 0.3:
                bias = self.leaf([w_shape[-1]])
                y = self.b.matmul_bias(x, w, bias, act)
                self.use(x, w, bias)
            else:
                y = self.b.matmul(x, w, act)
                self.use(x, w)
            first = first or y
            self.keep(y)

    def unary(self) -> None:
        pool = self.images if self.images and (not self.mats or self.rng.random() < 0.5) else []
        x = self.pick(pool or self.mats)
        op = self.rng.choice((self.b.relu, self.b.tanh, self.b.sigmoid, self.b.relu6))
        self.use(x)
        self.keep(op(x))

    def binary(self) -> None:
        r = self.rng
        pools = [p for p in (self.images, self.mats) if p]
        x = self.pick(r.choice(pools))
        same = [t for t in (self.images if x.rank == 4 else self.mats) if t.shape == x.shape]
        roll = r.random()
        if roll < 0.5 and len(same) > 1:
            y = r.choice([t for t in same if t is not x] or same)
        elif roll < 0.75:  # broadcasting: a per-channel or per-column operand
            shape = [1, x.shape[1], 1, 1] if x.rank == 4 else [x.shape[-1]]
            y = self.leaf(shape)
        else:
            y = self.leaf(x.shape, weight=0.5)
        op = self.b.add if r.random() < 0.6 else self.b.mul
        a, c = (x, y) if r.random() < 0.7 else (y, x)
        self.use(a, c)
        self.keep(op(a, c))

    def pair(self) -> None:
        """Two element-wise ops sharing an operand (broadcast sometimes), then concatenated."""
        r = self.rng
        pools = [p for p in (self.images, self.mats) if p]
        x = self.pick(r.choice(pools))
        y = self.leaf(x.shape, weight=0.5) if r.random() < 0.5 else x
        if r.random() < 0.5:
            shared = self.leaf([1, x.shape[1], 1, 1] if x.rank == 4 else [x.shape[-1]])
        else:
            shared = self.leaf(x.shape, weight=0.5)
        op = self.b.add if r.random() < 0.6 else self.b.mul
        left = op(x, shared) if r.random() < 0.7 else op(shared, x)
        right = op(shared, y) if r.random() < 0.5 else op(y, shared)
        self.use(x, y, shared, left, right)
        self.keep(self.b.concat(r.choice((0, 1)), [left, right]))

    def concat(self) -> None:
        r = self.rng
        pools = [p for p in (self.images, self.mats) if p]
        x = self.pick(r.choice(pools))
        axis = 1 if x.rank == 4 and r.random() < 0.7 else r.randrange(x.rank)
        pool = self.images if x.rank == 4 else self.mats

        def fits(t: Tensor) -> bool:
            return t.rank == x.rank and all(
                a == b for i, (a, b) in enumerate(zip(t.shape, x.shape, strict=True)) if i != axis
            )

        others = [t for t in pool if fits(t)]
        parts = [x]
        for _ in range(r.choice((1, 1, 2, 3))):
            if others and r.random() < 0.6:
                parts.append(r.choice(others))
            else:
                shape = list(x.shape)
                shape[axis] = r.randint(1, 4)
                parts.append(self.leaf(shape, weight=0.5))
        self.use(*parts)
        self.keep(self.b.concat(axis, parts))

    def split(self) -> None:
        r = self.rng
        pool = [t for t in (*self.images, *self.mats) if any(t.type.splits)]
        if pool and r.random() < 0.7:  # at a concat boundary, as TENSAT's split
            x = r.choice(pool)
            axis = r.choice([i for i, s in enumerate(x.type.splits) if s])
            pieces: Sequence[Tensor] = self.b.split_at_concat(x, axis)
        else:
            x = self.pick([t for t in (*self.images, *self.mats) if max(t.shape) > 1])
            axis = r.choice([i for i, d in enumerate(x.shape) if d > 1])
            cut = r.randint(1, x.shape[axis] - 1)
            pieces = self.b.split(x, axis, [cut, x.shape[axis] - cut])
        self.use(x)
        for p in pieces if r.random() < 0.8 else pieces[:1]:  # a dead piece sometimes
            self.keep(p)

    # --- the graph --------------------------------------------------------------------------

    def moves(self) -> list[tuple[float, Callable[[], None]]]:
        image, mat = bool(self.images), bool(self.mats)
        splittable = any(max(t.shape) > 1 for t in (*self.images, *self.mats))
        return [
            (3.0 * image, self.conv),
            (1.0 * image, self.pool),
            (3.0 * mat, self.matmul),
            (1.0, self.unary),
            (2.0, self.binary),
            (1.5, self.concat),
            (1.0, self.pair),
            (1.0 * splittable, self.split),
        ]

    def build(self) -> Graph:
        self.start()
        steps = self.rng.randint(self.size.min_steps, self.size.max_steps)
        done = 0
        for _ in range(steps * 4):  # a move the builder refuses is simply redrawn
            if done == steps:
                break
            weights, moves = zip(*self.moves(), strict=True)
            move = self.rng.choices(moves, weights)[0]
            try:
                move()
            except GraphError:
                continue
            done += 1
        return self.finish()

    def finish(self) -> Graph:
        made = [t for t in (*self.images, *self.mats) if t.ref.node not in self.starts]
        outputs = [t for t in made if t.ref.node not in self.used] or made[-1:]
        if made and self.rng.random() < 0.2:  # an intermediate tensor as an output too
            extra = self.rng.choice(made)
            outputs += [extra] if extra not in outputs else []
        if not outputs:  # every move refused: one op on an input
            x = (self.images or self.mats)[0]
            outputs = [self.b.relu(x)]
        return self.b.build(*outputs)


def random_graph(seed: int, size: FuzzSize = SMALL) -> Graph:
    """The graph of ``seed`` (the same graph every time, on every machine)."""
    return _Gen(random.Random(seed), size).build()


def describe(graph: Graph) -> str:
    """One line: op counts and output shapes (for a failure report)."""
    ops = ", ".join(f"{op} {k}" for op, k in sorted(graph.op_counts().items()))
    return f"{len(graph)} nodes ({ops}); inputs {[n.shape for n in graph.inputs]}; " + (
        f"outputs {graph.output_shapes}"
    )
