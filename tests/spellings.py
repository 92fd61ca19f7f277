"""A corpus of exporter spellings (issue 39), built with onnx.helper: one small ONNX model per
(fusion, spelling) and per near miss, and the judge that says whether a model came out fused.

Not a test file: ``tests/test_spellings.py`` runs relsat on it, ``bench/spellings.py`` runs
relsat and its peers (onnxruntime's transformers optimizer, onnxscript, onnxslim) on it.

The spellings are those exporters and model code write: operand orders, epsilons, head sizes, group
sizes, partial rotary, ``Div`` / ``Reciprocal`` / ``Pow(-0.5)``, ReduceMean's axes as an attribute
(opset 13) or an input (opset 18), a negative or a positive last axis, casts to float left in,
Gemma's ``(1 + w)`` scale, a projection's bias added before a tanh GELU (MatMul + Add either way
round). A near miss computes something else that looks alike (an
epsilon given as an input tensor, ``keepdims=0``, a scale that broadcasts over another axis, a
softmax over another axis, key/value heads tiled instead of repeated, a bias per token before a
GELU, a GroupNorm's instance norm that scales, or its groups laid out along the positions): it must
stay unfused.

:func:`corpus` lists every :class:`Spelling`; :func:`fused` judges an ONNX model by the kernels
it holds, the same way for every tool.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

S = 4  # tokens: tiny shapes, so a spelling costs relsat well under a second
N = 32  # hidden size of the norms and activations
F = TensorProto.FLOAT
f32 = np.float32
n = helper.make_node

#: The fused kernels that count for each fusion, by ONNX op type (any domain).
KERNELS: dict[str, frozenset[str]] = {
    "layernorm": frozenset({"LayerNormalization", "SkipLayerNormalization"}),
    "rmsnorm": frozenset(
        {"RMSNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"}
    ),
    "gelu": frozenset({"Gelu", "BiasGelu"}),
    "gelu_tanh": frozenset({"FastGelu", "Gelu"}),  # ONNX Gelu(approximate="tanh")
    "biasgelu_tanh": frozenset({"FastGelu"}),  # with its bias input: a projection's bias folded
    "quickgelu": frozenset({"QuickGelu"}),
    "silu": frozenset({"QuickGelu", "Swish"}),  # QuickGelu(alpha=1) is x * sigmoid(x)
    "attention": frozenset({"Attention", "MultiHeadAttention"}),
    "gqa": frozenset({"Attention", "MultiHeadAttention", "GroupQueryAttention"}),
    "rotary": frozenset({"RotaryEmbedding"}),
    "groupnorm": frozenset({"GroupNormalization", "GroupNorm"}),
}


@dataclass(frozen=True)
class Spelling:
    """One corpus model: the ``fusion`` it spells, the ``name`` of the spelling, ``build``
    (returns the model) and whether it is a ``near_miss`` (computes something else: must stay
    unfused)."""

    fusion: str
    name: str
    build: Callable[[], onnx.ModelProto]
    near_miss: bool = False

    @property
    def id(self) -> str:
        return f"{self.fusion}/{self.name}"


def fused(model: onnx.ModelProto | None, fusion: str) -> bool:
    """Whether ``model`` holds ``fusion``'s kernel (:data:`KERNELS`). Grouped-query attention
    counts only where no Expand or Tile is left (the key/value heads read by the kernel, not
    copied before it); a tanh GELU as ONNX Gelu only with ``approximate="tanh"``, an erf one
    only without; FastGelu for a biased tanh GELU only with its bias input."""
    if model is None:
        return False
    ops = {x.op_type for x in model.graph.node}
    if fusion == "gqa" and ops & {"Expand", "Tile"}:
        return False
    for node in model.graph.node:
        if node.op_type not in KERNELS[fusion]:
            continue
        if node.op_type == "Gelu" and fusion.startswith("gelu"):
            approx = next((a.s.decode() for a in node.attribute if a.name == "approximate"), "")
            if (approx == "tanh") != (fusion == "gelu_tanh"):
                continue
        if fusion == "biasgelu_tanh" and not (len(node.input) > 1 and node.input[1]):
            continue
        if node.op_type == "QuickGelu" and fusion == "silu":
            alpha = next((a.f for a in node.attribute if a.name == "alpha"), 1.702)
            if abs(alpha - 1.0) > 1e-6:
                continue
        return True
    return False


# --- building -------------------------------------------------------------------------------


def _rng(seed: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, seed)))


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int]],
    out: list[int],
    consts: dict[str, np.ndarray | float | int],
    opset: int,
) -> onnx.ModelProto:
    """A model of ``nodes`` with float ``inputs`` (name → shape), one float output ``y`` of
    shape ``out`` and the constants ``consts`` (a Python float is a float32 scalar)."""
    inits = []
    for k, v in consts.items():
        arr = np.asarray(v, f32) if isinstance(v, float) else np.asarray(v)
        inits.append(numpy_helper.from_array(arr, k))
    graph = helper.make_graph(
        nodes,
        "spelling",
        [helper.make_tensor_value_info(k, F, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info("y", F, out)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def _mean(
    x: str, out: str, *, axes_input: bool, axis: int = -1, keepdims: int = 1
) -> onnx.NodeProto:
    """ReduceMean over ``axis``: axes as an input (opset 18) or an attribute (opset 13)."""
    if axes_input:
        return n("ReduceMean", [x, f"axes_{axis}".replace("-", "m")], [out], keepdims=keepdims)
    return n("ReduceMean", [x], [out], axes=[axis], keepdims=keepdims)


def _axes_consts() -> dict[str, np.ndarray | float | int]:
    return {f"axes_{a}".replace("-", "m"): np.array([a], np.int64) for a in (-1, 1, 2)}


# --- LayerNorm ------------------------------------------------------------------------------


def layernorm(
    *,
    eps: float = 1e-5,
    opset: int = 17,
    axis: int = -1,
    order: str = "as-torch",
    cast: bool = False,
    square: str = "pow",
    eps_input: bool = False,
    keepdims: int = 1,
    scale_shape: tuple[int, ...] = (N,),
    hidden: int = N,
) -> onnx.ModelProto:
    """torch's LayerNorm before opset 17: d = x - mean(x); d / sqrt(mean(d^2) + eps) * g + b."""
    axes_input = opset >= 18
    rows = hidden if keepdims == 0 else S  # keepdims=0 broadcasts only where the dims agree
    shape = [1, rows, hidden]
    nodes, x = [], "x"
    if cast:
        nodes.append(n("Cast", ["x"], ["xf"], to=F))
        x = "xf"
    nodes += [
        _mean(x, "mu", axes_input=axes_input, axis=axis, keepdims=keepdims),
        n("Sub", [x, "mu"], ["d"]),
        n("Pow", ["d", "two"], ["d2"]) if square == "pow" else n("Mul", ["d", "d"], ["d2"]),
        _mean("d2", "var", axes_input=axes_input, axis=axis, keepdims=keepdims),
        n("Add", ["eps", "var"] if order == "swapped" else ["var", "eps"], ["ve"]),
        n("Sqrt", ["ve"], ["sd"]),
    ]
    if square == "reciprocal":  # d * 1/sqrt(...)
        nodes += [n("Reciprocal", ["sd"], ["inv"]), n("Mul", ["d", "inv"], ["nrm"])]
    else:
        nodes.append(n("Div", ["d", "sd"], ["nrm"]))
    last = "yc" if cast else "y"
    if order == "swapped":
        nodes += [n("Mul", ["g", "nrm"], ["ng"]), n("Add", ["b", "ng"], [last])]
    else:
        nodes += [n("Mul", ["nrm", "g"], ["ng"]), n("Add", ["ng", "b"], [last])]
    if cast:
        nodes.append(n("Cast", ["yc"], ["y"], to=F))
    rng = _rng("layernorm")
    consts: dict[str, np.ndarray | float | int] = {
        "two": 2.0,
        "g": rng.uniform(0.5, 1.5, scale_shape).astype(f32),
        "b": rng.standard_normal(hidden).astype(f32),
        **(_axes_consts() if axes_input else {}),
    }
    inputs = {"x": shape}
    if eps_input:
        inputs["eps"] = []
    else:
        consts["eps"] = eps
    return _model(nodes, inputs, shape, consts, opset)


# --- RMSNorm --------------------------------------------------------------------------------


def rmsnorm(
    *,
    eps: float = 1e-6,
    opset: int = 18,
    axis: int = -1,
    square: str = "pow",
    root: str = "reciprocal",
    scale: str = "left",
    cast: bool = False,
    gemma: bool = False,
    eps_input: bool = False,
    keepdims: int = 1,
    scale_shape: tuple[int, ...] = (N,),
) -> onnx.ModelProto:
    """transformers' LlamaRMSNorm as torch writes it: ms = mean(x^2); x * 1/sqrt(ms + eps) * w,
    with 1/sqrt spelled ``root``: ``reciprocal`` (dynamo: Reciprocal(Sqrt)), ``div-one``
    (legacy: Div(1, Sqrt)), ``pow-half`` (Gemma: Pow(ms + eps, -0.5)) or ``div`` (x / Sqrt)."""
    axes_input = opset >= 18
    rows = N if keepdims == 0 else S
    shape = [1, rows, N]
    nodes, x = [], "x"
    if cast:
        nodes.append(n("Cast", ["x"], ["xf"], to=F))
        x = "xf"
    nodes += [
        n("Pow", [x, "two"], ["sq"]) if square == "pow" else n("Mul", [x, x], ["sq"]),
        _mean("sq", "ms", axes_input=axes_input, axis=axis, keepdims=keepdims),
        n("Add", ["ms", "eps"], ["mse"]),
    ]
    if root == "pow-half":
        nodes += [n("Pow", ["mse", "mhalf"], ["inv"]), n("Mul", [x, "inv"], ["nrm"])]
    elif root == "div":
        nodes += [n("Sqrt", ["mse"], ["rt"]), n("Div", [x, "rt"], ["nrm"])]
    else:
        nodes.append(n("Sqrt", ["mse"], ["rt"]))
        if root == "div-one":
            nodes.append(n("Div", ["one", "rt"], ["inv"]))
        else:
            nodes.append(n("Reciprocal", ["rt"], ["inv"]))
        nodes.append(n("Mul", [x, "inv"], ["nrm"]))
    if cast:  # hidden_states.to(input_dtype)
        nodes.append(n("Cast", ["nrm"], ["nrmc"], to=F))
    nrm = "nrmc" if cast else "nrm"
    w = "w"
    if gemma:  # Gemma: output * (1.0 + self.weight)
        nodes.append(n("Add", ["one", "w"], ["w1"]))
        w = "w1"
    nodes.append(n("Mul", [w, nrm] if scale == "left" else [nrm, w], ["y"]))
    rng = _rng("rmsnorm")
    consts: dict[str, np.ndarray | float | int] = {
        "two": 2.0,
        "one": 1.0,
        "mhalf": -0.5,
        "w": rng.uniform(-0.5, 0.5, scale_shape).astype(f32)
        if gemma
        else rng.uniform(0.5, 1.5, scale_shape).astype(f32),
        **(_axes_consts() if axes_input else {}),
    }
    inputs = {"x": shape}
    if eps_input:
        inputs["eps"] = []
    else:
        consts["eps"] = eps
    return _model(nodes, inputs, shape, consts, opset)


# --- GELU, QuickGELU, SiLU ------------------------------------------------------------------


def activation(spelling: str) -> onnx.ModelProto:
    """One activation of x [1, S, N] as exporters and model code spell it."""
    nodes, inputs, consts = _activation_parts(spelling)
    return _model(nodes, inputs, [1, S, N], consts, 17)


def _activation_parts(
    spelling: str,
) -> tuple[list[onnx.NodeProto], dict[str, list[int]], dict[str, np.ndarray | float | int]]:
    """:func:`activation`'s nodes (of x, to y), inputs and constants."""
    s2 = math.sqrt(2.0)
    k = math.sqrt(2.0 / math.pi)
    consts: dict[str, np.ndarray | float | int] = {
        "one": 1.0,
        "half": 0.5,
        "s2": s2,
        "is2": 1.0 / s2,
        "three": 3.0,
        "c": 0.044715,
        "k": k,
        "a": 1.702,
    }
    erf_tail = [n("Erf", ["xs"], ["e"])]
    nodes: list[onnx.NodeProto]
    inputs = {"x": [1, S, N]}
    if spelling == "erf-legacy":  # torch legacy: (x * (erf(x / s2) + 1)) * 0.5
        nodes = [
            n("Div", ["x", "s2"], ["xs"]),
            *erf_tail,
            n("Add", ["e", "one"], ["e1"]),
            n("Mul", ["x", "e1"], ["xe"]),
            n("Mul", ["xe", "half"], ["y"]),
        ]
    elif spelling == "erf-half-first":  # gelu_python: (x * 0.5) * (1 + erf(x / s2))
        nodes = [
            n("Div", ["x", "s2"], ["xs"]),
            *erf_tail,
            n("Add", ["one", "e"], ["e1"]),
            n("Mul", ["x", "half"], ["xh"]),
            n("Mul", ["xh", "e1"], ["y"]),
        ]
    elif spelling == "erf-half-inner":  # onnxscript: x * ((erf(x / s2) + 1) * 0.5)
        nodes = [
            n("Div", ["x", "s2"], ["xs"]),
            *erf_tail,
            n("Add", ["e", "one"], ["e1"]),
            n("Mul", ["e1", "half"], ["eh"]),
            n("Mul", ["x", "eh"], ["y"]),
        ]
    elif spelling == "erf-inv-sqrt2":  # x / s2 as x * 0.70710677, constants first
        nodes = [
            n("Mul", ["is2", "x"], ["xs"]),
            *erf_tail,
            n("Add", ["one", "e"], ["e1"]),
            n("Mul", ["e1", "x"], ["xe"]),
            n("Mul", ["half", "xe"], ["y"]),
        ]
    elif spelling == "erf-near-miss":  # the outer factor is another tensor: not GELU
        inputs["z"] = [1, S, N]
        nodes = [
            n("Div", ["x", "s2"], ["xs"]),
            *erf_tail,
            n("Add", ["e", "one"], ["e1"]),
            n("Mul", ["z", "e1"], ["xe"]),
            n("Mul", ["xe", "half"], ["y"]),
        ]
    elif spelling == "tanh-pow":  # NewGELU: 0.5 x (1 + tanh(k (x + 0.044715 x^3)))
        nodes = [
            n("Pow", ["x", "three"], ["x3"]),
            n("Mul", ["x3", "c"], ["cx3"]),
            n("Add", ["x", "cx3"], ["in"]),
            n("Mul", ["in", "k"], ["arg"]),
            n("Tanh", ["arg"], ["t"]),
            n("Add", ["t", "one"], ["t1"]),
            n("Mul", ["x", "half"], ["xh"]),
            n("Mul", ["xh", "t1"], ["y"]),
        ]
    elif spelling == "tanh-cube":  # torch legacy gelu(approximate="tanh"), constants first
        nodes = [
            n("Mul", ["x", "x"], ["x2"]),
            n("Mul", ["x", "x2"], ["x3"]),
            n("Mul", ["c", "x3"], ["cx3"]),
            n("Add", ["x", "cx3"], ["in"]),
            n("Mul", ["k", "in"], ["arg"]),
            n("Tanh", ["arg"], ["t"]),
            n("Add", ["one", "t"], ["t1"]),
            n("Mul", ["x", "t1"], ["xt"]),
            n("Mul", ["half", "xt"], ["y"]),
        ]
    elif spelling == "tanh-fast":  # FastGELU: 0.5 x (1 + tanh(x * k * (1 + 0.044715 x x)))
        nodes = [
            n("Mul", ["c", "x"], ["cx"]),
            n("Mul", ["cx", "x"], ["cx2"]),
            n("Add", ["one", "cx2"], ["p"]),
            n("Mul", ["x", "k"], ["xk"]),
            n("Mul", ["xk", "p"], ["arg"]),
            n("Tanh", ["arg"], ["t"]),
            n("Add", ["one", "t"], ["t1"]),
            n("Mul", ["half", "x"], ["xh"]),
            n("Mul", ["xh", "t1"], ["y"]),
        ]
    elif spelling == "quick":  # CLIP's quick_gelu: x * sigmoid(1.702 x)
        nodes = [
            n("Mul", ["x", "a"], ["ax"]),
            n("Sigmoid", ["ax"], ["sg"]),
            n("Mul", ["x", "sg"], ["y"]),
        ]
    elif spelling == "silu":  # x * sigmoid(x)
        nodes = [n("Sigmoid", ["x"], ["sg"]), n("Mul", ["x", "sg"], ["y"])]
    elif spelling == "silu-swapped":
        nodes = [n("Sigmoid", ["x"], ["sg"]), n("Mul", ["sg", "x"], ["y"])]
    else:
        raise ValueError(spelling)
    return nodes, inputs, consts


def biased_activation(
    spelling: str, *, order: str = "mm-first", rank: int = 3, bias: str = "columns"
) -> onnx.ModelProto:
    """A projection of x [1, S, N] (``rank`` 2: [S, N]) to [.., M] (M = 2N) with its bias, then
    activation ``spelling`` of the sum: MatMul + Add (``order`` "mm-first" or "bias-first"), or
    transformers' Conv1D of GPT-2 (``order`` "addmm": torch's addmm over the 2-D view, a
    Reshape, Gemm and Reshape). ``bias``: "columns" a bias [M] (one per output column);
    "rows" a bias [S, 1] (one per token: not the projection's bias), "tensor" another input
    [.., M] (a sum, not a bias)."""
    nodes, _, consts = _activation_parts(spelling)
    for node in nodes:  # the activation reads the projection's sum, not x
        node.input[:] = ["sum" if i == "x" else i for i in node.input]
    m = 2 * N
    lead = [1, S] if rank == 3 else [S]
    rng = _rng(f"{spelling}{order}{rank}{bias}")
    consts = {**consts, "pw": rng.standard_normal((N, m)).astype(f32) / math.sqrt(N)}
    inputs = {"x": [*lead, N]}
    if bias == "tensor":
        inputs["pb"] = [*lead, m]
    else:
        shape = (m,) if bias == "columns" else (S, 1)
        consts["pb"] = rng.standard_normal(shape).astype(f32)
    if order == "addmm":
        consts |= {"flat": np.array([-1, N], np.int64), "back": np.array([*lead, m], np.int64)}
        head = [
            n("Reshape", ["x", "flat"], ["x2d"]),
            n("Gemm", ["x2d", "pw", "pb"], ["gemm"]),
            n("Reshape", ["gemm", "back"], ["sum"]),
        ]
    else:
        add = ["mm", "pb"] if order == "mm-first" else ["pb", "mm"]
        head = [n("MatMul", ["x", "pw"], ["mm"]), n("Add", add, ["sum"])]
    return _model(head + nodes, inputs, [*lead, m], consts, 17)


# --- attention ------------------------------------------------------------------------------


def attention(
    *,
    d: int = 64,
    heads: int = 2,
    kv_heads: int | None = None,
    scale: str = "qk-root",
    mask: str | None = None,
    softmax_axis: int = -1,
    tiled: bool = False,
    opset: int = 18,
) -> onnx.ModelProto:
    """Scaled dot-product attention of head-split q [1, H, S, d], k, v [1, Hkv, S, d].

    ``scale``: ``qk-root`` (torch's SDPA: q and kt each times d^-1/4), ``scores-mul`` (the
    scores times 1/sqrt(d)), ``scores-div`` (the scores divided by sqrt(d)), ``q`` (q times
    1/sqrt(d) before the product). ``mask``: None, ``"sdpa"`` (a float mask input added, torch's
    NaN guard Where(IsNaN(p), 0, p) after the softmax) or ``"causal"`` (eager: a constant causal
    mask of 0 and -1e9 added, no guard). ``kv_heads`` below ``heads``: transformers' repeat_kv
    (Unsqueeze, Expand, Reshape: each key/value head repeated in place), or with ``tiled`` the
    heads tiled (Tile: [k0, k1, k0, k1], another computation)."""
    kv = heads if kv_heads is None else kv_heads
    group = heads // kv
    nodes: list[onnx.NodeProto] = []
    consts: dict[str, np.ndarray | float | int] = {
        "root": d**-0.25,
        "inv": d**-0.5,
        "sqd": math.sqrt(d),
        "zero": 0.0,
    }
    k, v = "k", "v"
    if kv_heads is not None:
        for x in "kv":
            if tiled:
                nodes.append(n("Tile", [x, "reps"], [f"{x}_r"]))
                consts["reps"] = np.array([1, group, 1, 1], np.int64)
            else:
                nodes += [
                    n("Unsqueeze", [x, "ax2"], [f"{x}_u"]),
                    n("Expand", [f"{x}_u", "rep_shape"], [f"{x}_e"]),
                    n("Reshape", [f"{x}_e", "rep_flat"], [f"{x}_r"]),
                ]
                consts |= {
                    "ax2": np.array([2], np.int64),
                    "rep_shape": np.array([1, kv, group, S, d], np.int64),
                    "rep_flat": np.array([1, heads, S, d], np.int64),
                }
        k, v = "k_r", "v_r"
    nodes.append(n("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]))
    q, kt = "q", "kt"
    if scale == "qk-root":
        nodes += [n("Mul", ["q", "root"], ["qs"]), n("Mul", ["kt", "root"], ["kts"])]
        q, kt = "qs", "kts"
    elif scale == "q":
        nodes.append(n("Mul", ["q", "inv"], ["qs"]))
        q = "qs"
    nodes.append(n("MatMul", [q, kt], ["qk"]))
    scores = "qk"
    if scale == "scores-mul":
        nodes.append(n("Mul", ["qk", "inv"], ["sc"]))
        scores = "sc"
    elif scale == "scores-div":
        nodes.append(n("Div", ["qk", "sqd"], ["sc"]))
        scores = "sc"
    inputs = {"q": [1, heads, S, d], "k": [1, kv, S, d], "v": [1, kv, S, d]}
    if mask == "sdpa":
        inputs["m"] = [1, 1, S, S]
    elif mask == "causal":
        consts["m"] = np.triu(np.full((1, 1, S, S), -1e9, f32), 1)
    if mask:
        nodes.append(n("Add", [scores, "m"], ["msk"]))
        scores = "msk"
    nodes.append(n("Softmax", [scores], ["p"], axis=softmax_axis))
    p = "p"
    if mask == "sdpa":
        nodes += [n("IsNaN", ["p"], ["nan"]), n("Where", ["nan", "zero", "p"], ["ps"])]
        p = "ps"
    nodes.append(n("MatMul", [p, v], ["y"]))
    return _model(nodes, inputs, [1, heads, S, d], consts, opset)


# --- rotary ---------------------------------------------------------------------------------


def _tables(half: int, pairs: bool) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables [1, 1, S, 2 * half] as transformers computes them: the frequencies
    concatenated with themselves (rotate_half) or each repeated in place (rotate_every_two)."""
    inv = 1.0 / (10000 ** (np.arange(half) / half))
    freqs = np.outer(np.arange(S), inv)
    emb = np.repeat(freqs, 2, axis=-1) if pairs else np.concatenate([freqs, freqs], -1)
    return np.cos(emb).astype(f32)[None, None], np.sin(emb).astype(f32)[None, None]


def rotary(
    *,
    d: int = 64,
    rot: int | None = None,
    axis: int = 3,
    end: str = "int64-max",
    interleaved: bool = False,
    runtime_tables: bool = False,
    order: str = "as-transformers",
    wrong_cut: bool = False,
    opset: int = 18,
) -> onnx.ModelProto:
    """transformers' apply_rotary_pos_emb on x [1, 2, S, d]: x * cos + rotate_half(x) * sin,
    with rotate_half(x) = cat(-x[..., h:], x[..., :h]) cut at ``axis`` (3, or -1) and the last
    slice ending at ``end`` (``"int64-max"`` as torch writes ``x[..., h:]``, or ``"d"``).
    ``rot`` < d: partial rotary (Phi, GPT-NeoX): the first ``rot`` dims turned, the rest passed
    through. ``interleaved``: GPT-J's rotate_every_two (strided Slices, Neg, Unsqueeze, Concat,
    Reshape) with tables repeated in place. ``runtime_tables``: the tables computed from a
    position input (MatMul, Concat(f, f), Cos, Sin, Unsqueeze) as Llama does. ``wrong_cut``:
    the halves cut at a quarter (a near miss)."""
    r = d if rot is None else rot
    h = r // 2
    cut = r // 4 if wrong_cut else h
    nodes: list[onnx.NodeProto] = []
    consts: dict[str, np.ndarray | float | int] = {}
    big = np.iinfo(np.int64).max

    def sl(x: str, start: int, stop: int, out: str, step: int = 1) -> None:
        key = f"{start}_{stop}_{step}"
        consts[f"st{key}"] = np.array([start], np.int64)
        consts[f"en{key}"] = np.array([stop], np.int64)
        consts[f"ax{key}"] = np.array([axis], np.int64)
        args = [x, f"st{key}", f"en{key}", f"ax{key}"]
        if step != 1:
            consts[f"sp{key}"] = np.array([step], np.int64)
            args.append(f"sp{key}")
        nodes.append(n("Slice", args, [out]))

    x = "x"
    if r < d:
        sl("x", 0, r, "xr")
        sl("x", r, big if end == "int64-max" else d, "xp")
        x = "xr"
    if interleaved:
        sl(x, 0, big if end == "int64-max" else r, "x1", 2)
        sl(x, 1, big if end == "int64-max" else r, "x2", 2)
        consts["last"] = np.array([-1], np.int64)
        consts["flat"] = np.array([1, 2, S, r], np.int64)
        nodes += [
            n("Neg", ["x2"], ["nx2"]),
            n("Unsqueeze", ["nx2", "last"], ["u1"]),
            n("Unsqueeze", ["x1", "last"], ["u2"]),
            n("Concat", ["u1", "u2"], ["st"], axis=-1),
            n("Reshape", ["st", "flat"], ["rh"]),
        ]
    else:
        sl(x, 0, cut, "x1")
        sl(x, cut, big if end == "int64-max" else r, "x2")
        nodes += [n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["rh"], axis=-1)]
    inputs = {"x": [1, 2, S, d]}
    cos, sin = _tables(h, interleaved)
    if runtime_tables:  # Llama: freqs = pos @ inv_freq; emb = cat(freqs, freqs); cos, sin
        inputs["pos"] = [1, S, 1]
        consts["invf"] = (1.0 / (10000 ** (np.arange(h) / h))).astype(f32)[None]
        consts["ax1"] = np.array([1], np.int64)
        nodes += [
            n("MatMul", ["pos", "invf"], ["fr"]),
            n("Concat", ["fr", "fr"], ["emb"], axis=-1),
            n("Cos", ["emb"], ["c3"]),
            n("Sin", ["emb"], ["s3"]),
            n("Unsqueeze", ["c3", "ax1"], ["cos"]),
            n("Unsqueeze", ["s3", "ax1"], ["sin"]),
        ]
    else:
        consts |= {"cos": cos, "sin": sin}
    if order == "swapped":
        nodes += [n("Mul", ["cos", x], ["xc"]), n("Mul", ["sin", "rh"], ["rs"])]
    else:
        nodes += [n("Mul", [x, "cos"], ["xc"]), n("Mul", ["rh", "sin"], ["rs"])]
    if r < d:
        nodes += [n("Add", ["xc", "rs"], ["xe"]), n("Concat", ["xe", "xp"], ["y"], axis=-1)]
    else:
        nodes.append(n("Add", ["xc", "rs"], ["y"]))
    return _model(nodes, inputs, [1, 2, S, d], consts, opset)


# --- GroupNorm ------------------------------------------------------------------------------


def groupnorm(
    *,
    shape: tuple[int, ...] = (1, 32, 4, 4),
    groups: int = 8,
    eps: float = 1e-5,
    back: str = "shape",
    order: str = "as-torch",
    one: float = 1.0,
    weight_shape: tuple[int, ...] | None = None,
    view: tuple[int, int, int] | None = None,
) -> onnx.ModelProto:
    """torch's GroupNorm below opset 21 (both exporters): x viewed [N, G, -1],
    InstanceNormalization with a scale of ``one`` and a bias of zeros, viewed back (``back``:
    through ``Shape(x)``, the legacy exporter, or a constant, dynamo), times the weight, plus the
    bias, ``[C, 1, ...]`` (``weight_shape``); ``view``: another first view."""
    c = shape[1]
    width = view[1] if view else groups
    nodes = [
        n("Reshape", ["x", "view"], ["grouped"]),
        n("InstanceNormalization", ["grouped", "one", "zero"], ["normed"], epsilon=eps),
    ]
    if back == "shape":
        nodes.append(n("Shape", ["x"], ["x_shape"]))
    nodes.append(n("Reshape", ["normed", "x_shape"], ["restored"]))
    if order == "swapped":
        nodes += [n("Mul", ["w", "restored"], ["scaled"]), n("Add", ["b", "scaled"], ["y"])]
    else:
        nodes += [n("Mul", ["restored", "w"], ["scaled"]), n("Add", ["scaled", "b"], ["y"])]
    rng = _rng("groupnorm")
    channel = weight_shape or (c, *([1] * (len(shape) - 2)))
    consts: dict[str, np.ndarray | float | int] = {
        "view": np.array(view or (0, groups, -1), np.int64),
        "one": np.full(width, one, f32),
        "zero": np.zeros(width, f32),
        "w": rng.uniform(0.5, 1.5, channel).astype(f32),
        "b": rng.standard_normal(channel).astype(f32),
    }
    if back != "shape":
        consts["x_shape"] = np.array(shape, np.int64)
    return _model(nodes, {"x": list(shape)}, list(shape), consts, 17 if back == "shape" else 20)


# --- the corpus -----------------------------------------------------------------------------


def _s(
    fusion: str, name: str, build: Callable[[], onnx.ModelProto], near: bool = False
) -> Spelling:
    return Spelling(fusion, name, build, near)


def corpus() -> list[Spelling]:
    """Every spelling and near miss, spellings first within each fusion."""
    L, R, A, Q, G, T, GN = layernorm, rmsnorm, activation, attention, attention, rotary, groupnorm
    BA = biased_activation
    items = [
        # LayerNorm
        _s("layernorm", "torch-eps-1e-5", lambda: L()),
        _s("layernorm", "eps-1e-6", lambda: L(eps=1e-6)),
        _s("layernorm", "eps-1e-12", lambda: L(eps=1e-12)),
        _s("layernorm", "eps-3e-6", lambda: L(eps=3e-6)),
        _s("layernorm", "axes-input-opset18", lambda: L(opset=18)),
        _s("layernorm", "positive-axis", lambda: L(axis=2)),
        _s("layernorm", "axes-input-positive-axis", lambda: L(opset=18, axis=2)),
        _s("layernorm", "operands-swapped", lambda: L(order="swapped")),
        _s("layernorm", "casts-left-in", lambda: L(cast=True)),
        _s("layernorm", "square-as-mul", lambda: L(square="mul")),
        _s("layernorm", "mul-reciprocal", lambda: L(square="reciprocal")),
        _s("layernorm", "eps-as-input", lambda: L(eps_input=True), True),
        _s("layernorm", "keepdims-0", lambda: L(keepdims=0), True),
        _s("layernorm", "scale-over-rows", lambda: L(scale_shape=(S, 1)), True),
        _s("layernorm", "mean-over-rows", lambda: L(axis=1), True),
        # RMSNorm
        _s("rmsnorm", "dynamo-reciprocal", lambda: R()),
        _s("rmsnorm", "eps-1e-5", lambda: R(eps=1e-5)),
        _s("rmsnorm", "eps-3e-6", lambda: R(eps=3e-6)),
        _s("rmsnorm", "eps-1e-12", lambda: R(eps=1e-12)),
        _s("rmsnorm", "legacy-div-one-casts", lambda: R(opset=17, root="div-one", cast=True)),
        _s("rmsnorm", "pow-minus-half", lambda: R(root="pow-half")),
        _s("rmsnorm", "div-by-root", lambda: R(root="div")),
        _s("rmsnorm", "square-as-mul", lambda: R(square="mul")),
        _s("rmsnorm", "scale-right", lambda: R(scale="right")),
        _s("rmsnorm", "gemma-one-plus-w", lambda: R(root="pow-half", gemma=True)),
        _s("rmsnorm", "axes-attribute", lambda: R(opset=17)),
        _s("rmsnorm", "positive-axis", lambda: R(axis=2)),
        _s("rmsnorm", "eps-as-input", lambda: R(eps_input=True), True),
        _s("rmsnorm", "keepdims-0", lambda: R(keepdims=0), True),
        _s("rmsnorm", "scale-over-rows", lambda: R(scale_shape=(S, 1)), True),
        _s("rmsnorm", "mean-over-rows", lambda: R(axis=1), True),
        # GELU and friends
        _s("gelu", "erf-legacy", lambda: A("erf-legacy")),
        _s("gelu", "erf-half-first", lambda: A("erf-half-first")),
        _s("gelu", "erf-half-inner", lambda: A("erf-half-inner")),
        _s("gelu", "erf-inv-sqrt2", lambda: A("erf-inv-sqrt2")),
        _s("gelu", "other-factor", lambda: A("erf-near-miss"), True),
        _s("gelu_tanh", "new-gelu-pow", lambda: A("tanh-pow")),
        _s("gelu_tanh", "torch-cube", lambda: A("tanh-cube")),
        _s("gelu_tanh", "fast-gelu", lambda: A("tanh-fast")),
        # tanh GELU of a projection with its bias (GPT-2's MLP): FastGelu with its bias input
        _s("biasgelu_tanh", "new-gelu-bias-second", lambda: BA("tanh-pow")),
        _s("biasgelu_tanh", "torch-cube-bias-first", lambda: BA("tanh-cube", order="bias-first")),
        _s("biasgelu_tanh", "fast-gelu-2d", lambda: BA("tanh-fast", rank=2)),
        _s("biasgelu_tanh", "bias-over-rows", lambda: BA("tanh-pow", bias="rows"), True),
        _s("biasgelu_tanh", "sum-of-two", lambda: BA("tanh-pow", bias="tensor"), True),
        _s("quickgelu", "clip", lambda: A("quick")),
        _s("silu", "x-sigmoid", lambda: A("silu")),
        _s("silu", "sigmoid-x", lambda: A("silu-swapped")),
        # attention
        *(_s("attention", f"sdpa-d{d}", lambda d=d: Q(d=d)) for d in (32, 48, 64, 80, 128)),
        _s("attention", "scores-mul", lambda: Q(scale="scores-mul")),
        _s("attention", "scores-div-d80", lambda: Q(d=80, scale="scores-div")),
        _s("attention", "scale-on-q-d48", lambda: Q(d=48, scale="q")),
        _s("attention", "sdpa-masked", lambda: Q(mask="sdpa")),
        _s("attention", "eager-causal", lambda: Q(scale="scores-mul", mask="causal")),
        _s("attention", "softmax-over-queries", lambda: Q(softmax_axis=2), True),
        # grouped-query attention
        *(
            _s("gqa", f"group-{g}", lambda g=g, kv=kv: G(d=16, heads=g * kv, kv_heads=kv))
            for g, kv in ((1, 2), (2, 2), (3, 2), (6, 1), (16, 2))
        ),
        _s("gqa", "multi-query-8", lambda: G(d=16, heads=8, kv_heads=1)),
        _s("gqa", "group-4-masked", lambda: G(d=16, heads=8, kv_heads=2, mask="sdpa")),
        _s(
            "gqa",
            "group-2-eager",
            lambda: G(d=16, heads=4, kv_heads=2, scale="scores-mul", mask="causal"),
        ),
        _s("gqa", "heads-tiled", lambda: G(d=16, heads=4, kv_heads=2, tiled=True), True),
        # rotary
        *(_s("rotary", f"half-d{d}", lambda d=d: T(d=d)) for d in (32, 48, 64, 80, 128, 256)),
        _s("rotary", "axis-minus-1", lambda: T(axis=-1)),
        _s("rotary", "end-at-d", lambda: T(end="d")),
        _s("rotary", "operands-swapped", lambda: T(order="swapped")),
        _s("rotary", "runtime-tables", lambda: T(runtime_tables=True)),
        _s("rotary", "partial-half", lambda: T(d=64, rot=32)),
        _s("rotary", "partial-quarter-d80", lambda: T(d=80, rot=20)),
        _s("rotary", "interleaved", lambda: T(interleaved=True)),
        _s("rotary", "interleaved-d48", lambda: T(d=48, interleaved=True)),
        _s("rotary", "cut-at-a-quarter", lambda: T(wrong_cut=True), True),
        # GroupNorm (diffusion UNets)
        _s("groupnorm", "legacy-shape", lambda: GN()),
        _s("groupnorm", "dynamo-constant", lambda: GN(back="constant")),
        _s("groupnorm", "groups-32-eps-1e-6", lambda: GN(shape=(1, 64, 4, 4), groups=32, eps=1e-6)),
        _s("groupnorm", "rank-3-attention", lambda: GN(shape=(1, 32, 16))),
        _s("groupnorm", "operands-swapped", lambda: GN(order="swapped")),
        _s("groupnorm", "instance-scale-not-one", lambda: GN(one=2.0), True),
        _s(
            "groupnorm",
            "weight-over-last-axis",
            lambda: GN(shape=(1, 4, 4, 4), weight_shape=(4,)),
            True,
        ),
        _s(
            "groupnorm",
            "groups-along-positions",
            lambda: GN(shape=(1, 4, 4, 4), view=(0, 16, 4)),
            True,
        ),
    ]
    ids = [s.id for s in items]
    assert len(ids) == len(set(ids)), "duplicate spelling ids"
    return items
