"""A seeded generator of random *valid* ONNX models: the input of the importer fuzz
(``tests/test_import_robust.py``).

``random_model(seed)`` builds a small model from ``np.random.default_rng(seed)`` alone, so a
seed names a model for good, with input values onnxruntime runs it on. The operators are those of
the ONNX backend suite an exporter writes: element-wise (Add/Sub/Mul/Div/Pow, Relu, Sigmoid,
Tanh, Erf, Sqrt, Log, Neg, Abs, Reciprocal), MatMul (weights, batched, ``x @ x^T``), Gemm,
Transpose, Reshape (constant targets with 0 and -1, or computed from Shape), Flatten, Concat,
Split, Slice (negative and huge bounds, steps), Softmax, ReduceMean (axes as attribute or input),
LayerNormalization, Unsqueeze/Squeeze, Gather (constant indices, or ids given as an input),
Where (a comparison, a bool input, torch's NaN guard), Cast there and back, Expand, Conv, the
pools, BatchNormalization, Clip; and the spellings the importer's recognizers look for, near
misses included: SegFormer's image <-> tokens, rotary halves and GPT-J's pairs, ``repeat_kv``,
merged heads, an eager attention with a causal mask from Ranges. Opsets 9, 11, 13, 17 and 18
(each operator in its form there), a dynamic batch dim sometimes.

>>> model, feeds = random_model(7)
>>> model == random_model(7)[0] and set(feeds) == {i.name for i in model.graph.input}
True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["describe", "random_model"]

FLOAT = TensorProto.FLOAT

Value = tuple[str, tuple[int, ...]]


class _Gen:
    """One random valid ONNX graph under construction from ``np.random.default_rng(seed)``:
    float inputs of rank 1-4, 2-8 operator steps each drawn from :meth:`moves`, every float
    tensor made kept in a pool the later steps read (the recent ones favoured: chains). Each
    move tracks the shape it makes, so that the next one is valid; a move that does not apply
    to the tensor drawn returns None and another is drawn."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.opset = int(self.rng.choice([9, 11, 13, 17, 18]))
        self.batch = self.rng.random() < 0.25  # x0's first dim dynamic
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.pool: list[Value] = []
        self.made: list[Value] = []
        self.count = 0

    # --- plumbing ---------------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, value: np.ndarray, base: str = "c") -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def ints(self, values: list[int]) -> str:
        return self.const(np.array(values, np.int64), "i")

    def weight(self, shape: tuple[int, ...], low: float = -1.0, high: float = 1.0) -> str:
        return self.const(self.rng.uniform(low, high, shape).astype(np.float32), "w")

    def op(self, op_type: str, ins: list[str], shape: tuple[int, ...] | None, **attrs) -> str:
        """Append a node; its output joins the pool when ``shape`` (a float tensor's) is given."""
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, ins, [out], **attrs))
        if shape is not None:
            self.pool.append((out, shape))
            self.made.append((out, shape))
        return out

    def pick(self) -> Value:
        if self.rng.random() < 0.7:
            return self.pool[-1 - min(int(self.rng.exponential(1.0)), len(self.pool) - 1)]
        return self.pool[int(self.rng.integers(len(self.pool)))]

    def dim(self, low: int = 1, high: int = 5) -> int:
        return int(self.rng.integers(low, high + 1))

    def signed(self, axis: int, rank: int) -> int:
        """``axis`` of ``rank`` axes, counted from the back sometimes (from opset 11 on)."""
        return axis - rank if self.opset >= 11 and self.rng.random() < 0.3 else axis

    def axes_input(self, node_ins: list[str], axes: list[int], attrs: dict, since: int) -> None:
        """``axes`` as an input from opset ``since`` on, an attribute before."""
        if self.opset >= since:
            node_ins.append(self.ints(axes))
        else:
            attrs["axes"] = axes

    def positive(self, x: Value) -> str:
        """``sigmoid(x) + 0.5``: a tensor Sqrt and Reciprocal take without NaN or infinity."""
        s = self.op("Sigmoid", [x[0]], x[1])
        return self.op("Add", [s, self.const(np.float32(0.5))], x[1])

    # --- moves (each returns the value it made, or None where it does not apply) ------------

    def unary(self, x: Value) -> Value | None:
        op = str(self.rng.choice(["Relu", "Sigmoid", "Tanh", "Erf", "Neg", "Identity", "Abs"]))
        return self.op(op, [x[0]], x[1]), x[1]

    def positive_unary(self, x: Value) -> Value | None:
        op = str(self.rng.choice(["Sqrt", "Reciprocal", "Log"]))
        return self.op(op, [self.positive(x)], x[1]), x[1]

    def operand(self, x: Value) -> Value:
        """A second operand broadcasting with ``x``: a tensor of its shape, a constant of a
        suffix of it (some dims 1), a one-element constant, or a constant with a lead dim."""
        shape = x[1]
        roll = self.rng.random()
        same = [v for v in self.pool if v[1] == shape and v[0] != x[0]]
        if roll < 0.3 and same:
            return same[int(self.rng.integers(len(same)))]
        if roll < 0.55:
            k = int(self.rng.integers(0, len(shape) + 1))
            sub = tuple(d if self.rng.random() < 0.6 else 1 for d in shape[len(shape) - k :])
            return self.weight(sub, 0.5, 2.0), sub
        if roll < 0.75:
            one = () if self.rng.random() < 0.5 else (1,)
            return self.weight(one, 0.5, 2.0), one
        if roll < 0.85 and len(shape) < 4:
            wide = (2, *shape)
            return self.weight(wide, 0.5, 2.0), wide
        return self.weight(shape, 0.5, 2.0), shape

    def binary(self, x: Value) -> Value | None:
        op = str(self.rng.choice(["Add", "Sub", "Mul", "Div", "Add", "Mul"]))
        y = self.operand(x)
        a, b = (x, y) if self.rng.random() < 0.7 else (y, x)
        shape = tuple(int(d) for d in np.broadcast_shapes(a[1], b[1]))
        second = b[0]
        if op == "Div" and b[0] in {v[0] for v in self.pool}:
            second = self.positive(b)  # a computed divisor kept away from 0
        return self.op(op, [a[0], second], shape), shape

    def pow(self, x: Value) -> Value | None:
        exponent = np.float32(self.rng.choice([2.0, 3.0, 0.5]))
        base = self.positive(x) if exponent == 0.5 else x[0]
        return self.op("Pow", [base, self.const(exponent)], x[1]), x[1]

    def matmul(self, x: Value) -> Value | None:
        shape = x[1]
        n = self.dim()
        roll = self.rng.random()
        if len(shape) >= 2 and roll < 0.3:  # x @ x^T: an attention's scores
            perm = [*range(len(shape) - 2), len(shape) - 1, len(shape) - 2]
            t = self.op("Transpose", [x[0]], None, perm=perm)
            out = (*shape[:-1], shape[-2])
            return self.op("MatMul", [x[0], t], out), out
        if len(shape) == 3 and roll < 0.5:  # batched weights
            w = self.weight((shape[0], shape[-1], n))
            out = (*shape[:-1], n)
            return self.op("MatMul", [x[0], w], out), out
        out = (*shape[:-1], n)
        if len(shape) == 2 and self.rng.random() < 0.4:
            bias = self.weight((n,))
            y = self.op("MatMul", [x[0], self.weight((shape[-1], n))], out)
            return self.op("Add", [y, bias], out), out  # a Linear: MatMul + bias
        if len(shape) >= 2 and self.rng.random() < 0.2:  # a constant first operand
            first = self.weight((n, shape[-2]))
            out = (*shape[:-2], n, shape[-1])
            return self.op("MatMul", [first, x[0]], out), out
        return self.op("MatMul", [x[0], self.weight((shape[-1], n))], out), out

    def gemm(self, x: Value) -> Value | None:
        if len(x[1]) != 2:
            return None
        m, k = x[1]
        n = self.dim()
        trans_b = int(self.rng.integers(2))
        w = self.weight((n, k) if trans_b else (k, n))
        ins = [x[0], w]
        if self.opset < 11 or self.rng.random() < 0.7:  # C optional from opset 11
            ins.append(self.weight(((n,), (1, n), (m, n))[int(self.rng.integers(3))]))
        alpha = float(self.rng.choice([1.0, 1.0, 0.5]))
        beta = float(self.rng.choice([1.0, 1.0, 2.0]))
        return self.op("Gemm", ins, (m, n), transB=trans_b, alpha=alpha, beta=beta), (m, n)

    def transpose(self, x: Value) -> Value | None:
        rank = len(x[1])
        if rank < 2:
            return None
        if self.rng.random() < 0.2:  # no perm: the axes reversed
            return self.op("Transpose", [x[0]], tuple(x[1][::-1])), tuple(x[1][::-1])
        perm = [int(p) for p in self.rng.permutation(rank)]
        out = tuple(x[1][p] for p in perm)
        return self.op("Transpose", [x[0]], out, perm=perm), out

    def reshape(self, x: Value) -> Value | None:
        size = int(np.prod(x[1]))
        factors = _factors(size)
        rank = int(self.rng.integers(1, 5))
        dims = [1] * rank
        for f in factors:
            dims[int(self.rng.integers(rank))] *= f
        target = list(dims)
        if self.rng.random() < 0.3:
            target[int(self.rng.integers(rank))] = -1
        for i in range(min(rank, len(x[1]))):  # 0 copies the input's dim
            if target[i] == x[1][i] and self.rng.random() < 0.2:
                target[i] = 0
        out = tuple(dims)
        return self.op("Reshape", [x[0], self.ints(target)], out), out

    def flatten(self, x: Value) -> Value | None:
        rank = len(x[1])
        a = int(self.rng.integers(0, rank + 1))
        axis = self.signed(a, rank) if a < rank else a
        out = (int(np.prod(x[1][:a])), int(np.prod(x[1][a:])))
        return self.op("Flatten", [x[0]], out, axis=axis), out

    def concat(self, x: Value) -> Value | None:
        rank = len(x[1])
        a = int(self.rng.integers(rank))
        axis = self.signed(a, rank)
        fits = [v for v in self.pool if len(v[1]) == rank and _all_but(v[1], x[1], a)]
        parts = [x]
        for _ in range(int(self.rng.integers(1, 3))):
            if fits and self.rng.random() < 0.5:
                parts.append(fits[int(self.rng.integers(len(fits)))])
            else:
                shape = list(x[1])
                shape[a] = self.dim(1, 3)
                parts.append((self.weight(tuple(shape)), tuple(shape)))
        out = list(x[1])
        out[a] = sum(p[1][a] for p in parts)
        return self.op("Concat", [p[0] for p in parts], tuple(out), axis=axis), tuple(out)

    def split(self, x: Value) -> Value | None:
        axes = [i for i, d in enumerate(x[1]) if d >= 2]
        if not axes:
            return None
        a = axes[int(self.rng.integers(len(axes)))]
        cut = int(self.rng.integers(1, x[1][a]))
        sizes = [cut, x[1][a] - cut]
        ins, attrs = [x[0]], {"axis": a}
        if self.opset >= 13:
            ins.append(self.ints(sizes))
        else:
            attrs["split"] = sizes
        outs = [self.fresh("split"), self.fresh("split")]
        self.nodes.append(helper.make_node("Split", ins, outs, **attrs))
        shapes = []
        for name, size in zip(outs, sizes, strict=True):
            shape = list(x[1])
            shape[a] = size
            shapes.append((name, tuple(shape)))
        self.pool += shapes
        self.made += shapes
        return shapes[int(self.rng.integers(2))]

    def slice(self, x: Value) -> Value | None:
        rank = len(x[1])
        count = int(self.rng.integers(1, rank + 1))
        axes = sorted(int(a) for a in self.rng.choice(rank, count, replace=False))
        starts, ends, steps, out_list = [], [], [], list(x[1])
        for a in axes:
            d = x[1][a]
            for _ in range(8):  # redrawn until the slice keeps something
                step = int(self.rng.choice([1, 1, 1, 2, -1]))
                start = int(self.rng.integers(-d, d))
                end = int(self.rng.choice([self.rng.integers(-d, d + 1), 1 << 62, -(1 << 62)]))
                if _sliced(d, start, end, step):
                    break
            starts.append(start)
            ends.append(end)
            steps.append(step)
            out_list[a] = _sliced(d, start, end, step)
        out = tuple(out_list)
        if 0 in out:
            return None
        if self.opset < 10:
            if any(s != 1 for s in steps):
                return None
            attrs = {"starts": starts, "ends": ends, "axes": axes}
            return self.op("Slice", [x[0]], out, **attrs), out
        ins = [x[0], self.ints(starts), self.ints(ends)]
        roll = self.rng.random()
        if roll < 0.8 or any(s != 1 for s in steps):
            ins.append(self.ints([self.signed(a, rank) for a in axes]))
        if any(s != 1 for s in steps) or roll < 0.3:
            ins.append(self.ints(steps))
        if len(ins) == 3 and axes != list(range(count)):
            ins.append(self.ints(axes))
        return self.op("Slice", ins, out), out

    def softmax(self, x: Value) -> Value | None:
        rank = len(x[1])
        axis = self.signed(int(self.rng.integers(rank)), rank)
        return self.op("Softmax", [x[0]], x[1], axis=axis), x[1]

    def reducemean(self, x: Value) -> Value | None:
        rank = len(x[1])
        count = int(self.rng.integers(1, rank + 1))
        axes = sorted(int(a) for a in self.rng.choice(rank, count, replace=False))
        keep = int(self.rng.random() < 0.7)
        ins, attrs = [x[0]], {"keepdims": keep}
        written = [self.signed(a, rank) for a in axes]
        self.axes_input(ins, written, attrs, 18)
        out = tuple(1 if i in axes else d for i, d in enumerate(x[1]) if keep or i not in axes)
        return self.op("ReduceMean", ins, out, **attrs), out

    def layernorm(self, x: Value) -> Value | None:
        if self.opset < 17:
            return None
        rank = len(x[1])
        axis = -1 if self.rng.random() < 0.6 else self.signed(int(self.rng.integers(rank)), rank)
        tail = x[1][axis % rank :]
        ins = [x[0], self.weight(tail)]
        if self.rng.random() < 0.7:
            ins.append(self.weight(tail))
        attrs = {"axis": axis, "epsilon": float(self.rng.choice([1e-5, 1e-6]))}
        return self.op("LayerNormalization", ins, x[1], **attrs), x[1]

    def unsqueeze(self, x: Value) -> Value | None:
        rank = len(x[1])
        if rank >= 4:
            return None
        count = 1 if rank == 3 or self.rng.random() < 0.7 else 2
        new = rank + count
        axes = sorted(int(a) for a in self.rng.choice(new, count, replace=False))
        out = list(x[1])
        for a in axes:
            out.insert(a, 1)
        ins, attrs = [x[0]], {}
        self.axes_input(ins, [self.signed(a, new) for a in axes], attrs, 13)
        return self.op("Unsqueeze", ins, tuple(out), **attrs), tuple(out)

    def squeeze(self, x: Value) -> Value | None:
        ones = [i for i, d in enumerate(x[1]) if d == 1]
        if not ones or len(ones) == len(x[1]):
            return None
        ins, attrs = [x[0]], {}
        axes = ones if self.rng.random() < 0.5 else ones[:1]
        if self.rng.random() < 0.8:
            self.axes_input(ins, axes, attrs, 13)
        else:
            axes = ones
        out = tuple(d for i, d in enumerate(x[1]) if i not in axes)
        return self.op("Squeeze", ins, out, **attrs), out

    def gather(self, x: Value) -> Value | None:
        rank = len(x[1])
        axis = self.signed(int(self.rng.integers(rank)), rank)
        d = x[1][axis % rank]
        shape = [(), (self.dim(1, 3),), (2, self.dim(1, 2))][int(self.rng.integers(3))]
        indices = self.rng.integers(-d if self.opset >= 11 else 0, d, shape).astype(np.int64)
        a = axis % rank
        out = (*x[1][:a], *shape, *x[1][a + 1 :])
        if not out:
            return None  # a scalar: kept out of the pool (its rank fits nothing later)
        return self.op("Gather", [x[0], self.const(indices, "idx")], out, axis=axis), out

    def where(self, x: Value) -> Value | None:
        roll = self.rng.random()
        if roll < 0.3:  # torch's guard after a masked softmax: Where(IsNaN(x), 0, x)
            nan = self.op("IsNaN", [x[0]], None)
            return self.op("Where", [nan, self.const(np.float32(0)), x[0]], x[1]), x[1]
        if roll < 0.7:
            cond = self.op("Greater", [x[0], self.const(np.float32(0))], None)
        else:
            cond = self.const(self.rng.random(x[1][-1:]) < 0.5, "mask")
        y = self.operand(x)
        shape = tuple(int(d) for d in np.broadcast_shapes(x[1], y[1]))
        return self.op("Where", [cond, x[0], y[0]], shape), shape

    def cast(self, x: Value) -> Value | None:
        to = int(
            self.rng.choice([FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.DOUBLE])
        )
        if to == FLOAT:
            return self.op("Cast", [x[0]], x[1], to=FLOAT), x[1]
        other = self.op("Cast", [x[0]], None, to=to)
        return self.op("Cast", [other], x[1], to=FLOAT), x[1]

    def expand(self, x: Value) -> Value | None:
        shape = list(x[1])
        ones = [i for i, d in enumerate(shape) if d == 1]
        if ones and self.rng.random() < 0.6:
            shape[ones[int(self.rng.integers(len(ones)))]] = self.dim(2, 3)
        elif len(shape) < 4:
            shape.insert(0, self.dim(1, 3))
        else:
            return None
        return self.op("Expand", [x[0], self.ints(shape)], tuple(shape)), tuple(shape)

    def shaped_reshape(self, x: Value) -> Value | None:
        """A Reshape to a shape computed at run time (Shape, Gather, Unsqueeze, Concat), as
        torch writes ``x.view(x.size(0), -1)``."""
        if len(x[1]) < 2:
            return None
        shape = self.op("Shape", [x[0]], None)
        first = self.op("Gather", [shape, self.const(np.int64(0), "idx")], None, axis=0)
        ins, attrs = [first], {}
        self.axes_input(ins, [0], attrs, 13)
        lead = self.op("Unsqueeze", ins, None, **attrs)
        target = self.op("Concat", [lead, self.ints([-1])], None, axis=0)
        out = (x[1][0], int(np.prod(x[1][1:])))
        return self.op("Reshape", [x[0], target], out), out

    def rotate_half(self, x: Value) -> Value | None:
        """transformers' rotary embedding: ``x * cos + cat(-x2, x1) * sin`` with constant tables
        whose halves are equal (or, a near miss, are not), or Cos and Sin of a computed
        ``cat(h, h)``."""
        shape = x[1]
        d = shape[-1]
        if d % 2 or len(shape) < 2 or self.opset < 11:
            return None
        last = len(shape) - 1
        half = self.rng.uniform(-1, 1, (*shape[-2:-1], d // 2)).astype(np.float32)
        if self.rng.random() < 0.3:
            angles = self.op("Concat", [self.const(half), self.const(half)], None, axis=1)
            cos = self.op("Cos", [angles], None)
            sin = self.op("Sin", [angles], None)
        else:
            equal = self.rng.random() < 0.8
            cos = self.const(np.concatenate([np.cos(half), np.cos(half if equal else -half)], -1))
            sin = self.const(np.concatenate([np.sin(half), np.sin(half)], -1))
        x1 = self.op("Slice", [x[0], self.ints([0]), self.ints([d // 2]), self.ints([last])], None)
        x2 = self.op("Slice", [x[0], self.ints([d // 2]), self.ints([d]), self.ints([last])], None)
        turned = self.op("Concat", [self.op("Neg", [x2], None), x1], None, axis=-1)
        straight = self.op("Mul", [x[0], cos], None)
        return self.op("Add", [straight, self.op("Mul", [turned, sin], None)], shape), shape

    def rotate_pairs(self, x: Value) -> Value | None:
        """GPT-J's ``rotate_every_two``: strided Slices, Neg, Unsqueeze, Concat, Reshape (the
        Neg on the other slice sometimes: a near miss)."""
        shape = x[1]
        d, last = shape[-1], len(shape) - 1
        if d % 2 or self.opset < 13:
            return None
        big = 1 << 62
        even = self.op("Slice", [x[0], *(self.ints([v]) for v in (0, big, last, 2))], None)
        odd = self.op("Slice", [x[0], *(self.ints([v]) for v in (1, big, last, 2))], None)
        if self.rng.random() < 0.8:
            odd = self.op("Neg", [odd], None)
        else:
            even = self.op("Neg", [even], None)
        parts = [self.op("Unsqueeze", [p, self.ints([-1])], None) for p in (odd, even)]
        stacked = self.op("Concat", parts, None, axis=-1)
        return self.op("Reshape", [stacked, self.ints(list(shape))], shape), shape

    def repeat_kv(self, x: Value) -> Value | None:
        """transformers' ``repeat_kv``: ``[B, H, T, D]`` unsqueezed at 2, expanded ``n`` times
        there and reshaped to ``[B, H*n, T, D]`` (Tile instead of Expand sometimes)."""
        if len(x[1]) != 4 or self.opset < 13:
            return None
        b, h, t, d = x[1]
        n = self.dim(1, 3)
        wide = self.op("Unsqueeze", [x[0], self.ints([2])], None)
        if self.rng.random() < 0.8:
            wide = self.op("Expand", [wide, self.ints([b, h, n, t, d])], None)
        else:
            wide = self.op("Tile", [wide, self.ints([1, 1, n, 1, 1])], None)
        out = (b, h * n, t, d)
        return self.op("Reshape", [wide, self.ints(list(out))], out), out

    def merged_heads(self, x: Value) -> Value | None:
        """onnxscript's keys of scaled_dot_product_attention: ``[B, H, T, D]`` reshaped to
        ``[B*H, T, D]``, transposed ``(0, 2, 1)`` and reshaped to ``[B, H, D, T]``."""
        if len(x[1]) != 4:
            return None
        b, h, t, d = x[1]
        merged = self.op("Reshape", [x[0], self.ints([b * h, t, d])], None)
        turned = self.op("Transpose", [merged], None, perm=[0, 2, 1])
        out = (b, h, d, t)
        return self.op("Reshape", [turned, self.ints(list(out))], out), out

    def causal(self, t: int, s: str) -> str:
        """A ``[T, T]`` float mask, 0 where key <= query and ``s`` (-inf or -1e4) above: from
        two Ranges (their limit read off a shape sometimes), compared, and a Where."""
        if self.rng.random() < 0.5:
            limit = self.ints([t])
            limit = self.op(
                "Squeeze", [limit, self.ints([0])] if self.opset >= 13 else [limit], None
            )
        else:
            shape = self.op("Shape", [self.pool[0][0]], None)
            first = self.op("Gather", [shape, self.const(np.int64(0), "idx")], None, axis=0)
            limit = self.op("Add", [first, self.const(np.int64(t - self.pool[0][1][0]))], None)
        zero, one = self.const(np.int64(0)), self.const(np.int64(1))
        rows = self.op("Range", [zero, limit, one], None)
        cols = self.op("Range", [zero, limit, one], None)
        ins_q, ins_k, attrs_q, attrs_k = [rows], [cols], {}, {}
        self.axes_input(ins_q, [1], attrs_q, 13)
        self.axes_input(ins_k, [0], attrs_k, 13)
        q = self.op("Unsqueeze", ins_q, None, **attrs_q)
        k = self.op("Unsqueeze", ins_k, None, **attrs_k)
        if self.opset >= 12 and self.rng.random() < 0.5:
            keep = self.op("LessOrEqual", [k, q], None)
        else:
            keep = self.op("Not", [self.op("Greater", [k, q], None)], None)
        fill = self.const(np.float32(s))
        return self.op("Where", [keep, self.const(np.float32(0)), fill], None)

    def attention(self, x: Value) -> Value | None:
        """An eager attention of ``x`` ``[..., T, D]`` with itself: scores scaled, a mask added
        (causal from Ranges, from a bool input, a constant with -inf, or none), Softmax on the
        last axis, torch's NaN guard sometimes, times ``x``."""
        shape = x[1]
        if len(shape) < 2 or self.opset < 11:
            return None
        t, d = shape[-2:]
        perm = [*range(len(shape) - 2), len(shape) - 1, len(shape) - 2]
        keys = self.op("Transpose", [x[0]], None, perm=perm)
        scores = self.op("MatMul", [x[0], keys], None)
        scores = self.op("Mul", [scores, self.const(np.float32(1 / np.sqrt(d)))], None)
        fill = float(self.rng.choice([-np.inf, -1e4]))
        roll = self.rng.random()
        if roll < 0.35:
            bias = self.causal(t, fill)
        elif roll < 0.6:
            name = f"mask{self.count}"
            self.count += 1
            self.inputs.append(helper.make_tensor_value_info(name, TensorProto.BOOL, [t]))
            self.feeds[name] = np.arange(t) < max(1, t - 1)  # a padded sequence
            zero, low = self.const(np.float32(0)), self.const(np.float32(fill))
            bias = self.op("Where", [name, zero, low], None)
        elif roll < 0.8:
            bias = self.const(np.where(self.rng.random((t, t)) < 0.8, 0, fill).astype(np.float32))
        else:
            bias = None
        if bias is not None:
            scores = self.op("Add", [scores, bias], None)
        probs = self.op("Softmax", [scores], None, axis=-1)
        if self.rng.random() < 0.4:
            nan = self.op("IsNaN", [probs], None)
            probs = self.op("Where", [nan, self.const(np.float32(0)), probs], None)
        return self.op("MatMul", [probs, x[0]], shape), shape

    def tokens(self, x: Value) -> Value | None:
        """SegFormer's (MiT) image <-> tokens: an image ``[N, C, H, W]`` flattened and
        transposed to ``[N, H*W, C]``; tokens ``[N, T, C]`` transposed and reshaped into an
        image ``[N, C, h, w]`` with ``h * w = T``."""
        shape = x[1]
        if len(shape) == 4:
            n, c, h, w = shape
            flat = self.op("Reshape", [x[0], self.ints([n, c, h * w])], (n, c, h * w))
            return self.op("Transpose", [flat], (n, h * w, c), perm=[0, 2, 1]), (n, h * w, c)
        if len(shape) != 3:
            return None
        n, t, c = shape
        turned = self.op("Transpose", [x[0]], (n, c, t), perm=[0, 2, 1])
        h = int(self.rng.choice([f for f in range(1, t + 1) if t % f == 0]))
        image = (n, c, h, t // h)
        return self.op("Reshape", [turned, self.ints(list(image))], image), image

    def indexed(self, x: Value) -> Value | None:
        """A Gather at indices given as an int64 graph input (an embedding's token ids)."""
        name = f"ids{self.count}"
        self.count += 1
        d = x[1][0]
        shape = (self.dim(1, 3),)
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, list(shape)))
        self.feeds[name] = self.rng.integers(0, d, shape).astype(np.int64)
        out = (*shape, *x[1][1:])
        return self.op("Gather", [x[0], name], out, axis=0), out

    def masked(self, x: Value) -> Value | None:
        """A Where on a bool graph input (an attention mask)."""
        name = f"mask{self.count}"
        self.count += 1
        shape = x[1][-1:]
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.BOOL, list(shape)))
        self.feeds[name] = self.rng.random(shape) < 0.5
        fill = self.const(np.float32(self.rng.choice([0.0, -1e4, -np.inf])))
        return self.op("Where", [name, x[0], fill], x[1]), x[1]

    def conv(self, x: Value) -> Value | None:
        if len(x[1]) != 4:
            return None
        n, c, h, w = x[1]
        groups = int(self.rng.choice([g for g in (1, c) if c % g == 0]))
        k = int(self.rng.choice([1, 3])) if min(h, w) >= 3 else 1
        stride = int(self.rng.choice([1, 1, 2]))
        dilation = int(self.rng.choice([1, 1, 2])) if min(h, w) >= 5 else 1
        pad = int(self.rng.integers(0, k))
        cout = groups * self.dim(1, 2)
        span = dilation * (k - 1) + 1
        oh, ow = ((d + 2 * pad - span) // stride + 1 for d in (h, w))
        if oh < 1 or ow < 1:
            return None
        ins = [x[0], self.weight((cout, c // groups, k, k))]
        if self.rng.random() < 0.5:
            ins.append(self.weight((cout,)))
        attrs = {
            "group": groups,
            "strides": [stride, stride],
            "dilations": [dilation, dilation],
            "pads": [pad] * 4,
        }
        if self.rng.random() < 0.3:
            attrs = {"group": groups, "auto_pad": "SAME_UPPER"}
            oh, ow = h, w
        out = (n, cout, oh, ow)
        return self.op("Conv", ins, out, **attrs), out

    def pooling(self, x: Value) -> Value | None:
        if len(x[1]) != 4:
            return None
        n, c, h, w = x[1]
        if self.rng.random() < 0.3:
            op = str(self.rng.choice(["GlobalAveragePool", "GlobalMaxPool"]))
            return self.op(op, [x[0]], (n, c, 1, 1)), (n, c, 1, 1)
        k = int(self.rng.choice([1, 2, 3]))
        if k > min(h, w):
            return None
        stride = int(self.rng.choice([1, 2]))
        op = str(self.rng.choice(["MaxPool", "AveragePool"]))
        oh, ow = ((d - k) // stride + 1 for d in (h, w))
        out = (n, c, oh, ow)
        return self.op(op, [x[0]], out, kernel_shape=[k, k], strides=[stride, stride]), out

    def batchnorm(self, x: Value) -> Value | None:
        if len(x[1]) < 2:
            return None
        c = x[1][1]
        ins = [x[0], self.weight((c,)), self.weight((c,)), self.weight((c,))]
        ins.append(self.weight((c,), 0.5, 2.0))
        return self.op("BatchNormalization", ins, x[1]), x[1]

    def clip(self, x: Value) -> Value | None:
        low, high = (np.float32(v) for v in self.rng.choice([(0.0, 6.0), (-1.0, 1.0)]))
        if self.opset >= 11:
            return self.op("Clip", [x[0], self.const(low), self.const(high)], x[1]), x[1]
        return self.op("Clip", [x[0]], x[1], min=float(low), max=float(high)), x[1]

    def moves(self) -> list[tuple[float, Callable[[Value], Value | None]]]:
        return [
            (3.0, self.unary),
            (1.0, self.positive_unary),
            (3.0, self.binary),
            (0.5, self.pow),
            (2.0, self.matmul),
            (0.7, self.gemm),
            (2.0, self.transpose),
            (2.0, self.reshape),
            (0.5, self.flatten),
            (1.5, self.concat),
            (0.7, self.split),
            (1.5, self.slice),
            (1.0, self.softmax),
            (1.0, self.reducemean),
            (1.0, self.layernorm),
            (1.0, self.unsqueeze),
            (1.0, self.squeeze),
            (1.0, self.gather),
            (1.0, self.where),
            (0.7, self.cast),
            (0.5, self.expand),
            (0.3, self.shaped_reshape),
            (1.0, self.conv),
            (0.7, self.pooling),
            (0.5, self.batchnorm),
            (0.5, self.clip),
            (2.0, self.tokens),
            (0.5, self.rotate_half),
            (0.5, self.rotate_pairs),
            (0.5, self.repeat_kv),
            (0.5, self.merged_heads),
            (1.0, self.attention),
            (0.3, self.indexed),
            (0.3, self.masked),
        ]

    # --- the graph --------------------------------------------------------------------------

    def start(self) -> None:
        for i in range(1 + int(self.rng.random() < 0.3)):
            if self.rng.random() < 0.4:
                shape: tuple[int, ...] = (1, self.dim(1, 4), self.dim(3, 6), self.dim(3, 6))
            else:
                shape = tuple(self.dim() for _ in range(int(self.rng.integers(1, 5))))
            name = f"x{i}"
            dims: list[int | str] = list(shape)
            if i == 0 and self.batch:
                dims[0] = "batch"
            self.inputs.append(helper.make_tensor_value_info(name, FLOAT, dims))
            self.feeds[name] = self.rng.standard_normal(shape).astype(np.float32)
            self.pool.append((name, shape))

    def build(self) -> onnx.ModelProto:
        self.start()
        steps = int(self.rng.integers(2, 9))
        moves = self.moves()
        weights = np.array([w for w, _ in moves])
        done = 0
        for _ in range(steps * 5):
            if done == steps:
                break
            move = moves[int(self.rng.choice(len(moves), p=weights / weights.sum()))][1]
            made = move(self.pick())
            if made is not None:
                if not made[1] or int(np.prod(made[1])) > 4096:
                    self.pool.remove(made)  # a scalar, or too big to keep growing from
                done += 1
        if not self.made:
            self.op("Relu", [self.pool[0][0]], self.pool[0][1])
        outputs = [self.made[-1]]
        if len(self.made) > 1 and self.rng.random() < 0.3:
            extra = self.made[int(self.rng.integers(len(self.made) - 1))]
            outputs += [extra] if extra[0] != outputs[0][0] else []
        graph = helper.make_graph(
            self.nodes,
            "fuzz",
            self.inputs,
            [
                helper.make_tensor_value_info(n, FLOAT, [None] * len(s) if self.batch else s)
                for n, s in outputs
            ],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8
        return model


def _factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return [*out, n] if n > 1 else out


def _sliced(d: int, start: int, end: int, step: int) -> int:
    """How many elements ONNX's Slice keeps of a dim of ``d`` (its clamping rules)."""
    start, end = (v + d if v < 0 else v for v in (start, end))
    if step > 0:
        start, end = min(max(start, 0), d), min(max(end, 0), d)
        return max(0, -(-(end - start) // step))
    start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
    return max(0, -(-(start - end) // -step))


def _all_but(a: tuple[int, ...], b: tuple[int, ...], axis: int) -> bool:
    return all(x == y for i, (x, y) in enumerate(zip(a, b, strict=True)) if i != axis)


def random_model(seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The graph of ``seed`` and input values for it (the same every time)."""
    gen = _Gen(seed)
    return gen.build(), gen.feeds


def describe(model: onnx.ModelProto) -> str:
    """One line: the opset and the operators, in order (for a failure report)."""
    return f"opset {model.opset_import[0].version}: " + " ".join(
        n.op_type for n in model.graph.node
    )
