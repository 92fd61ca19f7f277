"""Which of onnxruntime's fused CPU kernels pay on this machine, against their spelled-out form.

The peers write kernels relsat has no rule for (onnxruntime's transformers optimizer:
EmbedLayerNormalization, SkipSimplifiedLayerNormalization). A rule is worth writing where the
kernel is cheaper than what relsat writes instead; this script measures that, kernel by kernel,
before anyone builds one. Per case and shape, three single-node-or-so models side by side, one
session each (one intra-op thread, no spinning), run in turn every round:

* ``fused``: the fused kernel (com.microsoft);
* ``spelled``: the same computation in ONNX operators at onnxruntime's default level
  (``ORT_ENABLE_ALL``: whatever onnxruntime fuses by itself when it loads the model);
* ``spelled-basic``: the spelled model at ``ORT_ENABLE_BASIC`` (no fusion: what the two or
  three kernels cost apart, as relsat writes them where its writer keeps onnxruntime from
  fusing them back, :mod:`relsat.graph.residuals`);
* ``A/A``: a second session of ``spelled``, for the noise.

The ratios are medians of per-round ratios against ``spelled``; outputs are compared.

Cases: ``skip-layernorm`` (SkipLayerNormalization against Add + LayerNormalization),
``skip-rmsnorm`` (SkipSimplifiedLayerNormalization with its sum output read again, as a pre-norm
decoder's next residual add reads it, against Add + SimplifiedLayerNormalization),
``embed-layernorm`` (EmbedLayerNormalization against three Gathers, two Adds and a
LayerNormalization).

    python bench/kernels.py        # every case at [1, 128, 256], [1, 128, 768], [1, 1, 768]
    python bench/kernels.py --cases skip-rmsnorm --rounds 500
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
from common import append_csv, log, markdown
from onnx import TensorProto, helper, numpy_helper

SHAPES = ((128, 256), (128, 768), (1, 768))
VOCAB = 1000
EPS = 1e-6


def _model(nodes: list, inputs: list, init: dict[str, np.ndarray], n_out: int) -> onnx.ModelProto:
    outs = [helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, None) for i in range(n_out)]
    graph = helper.make_graph(
        nodes, "case", inputs, outs, [numpy_helper.from_array(v, k) for k, v in init.items()]
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _float_input(name: str, s: int, n: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, s, n])


def _skip_norm(
    s: int, n: int, init: dict[str, np.ndarray], fused: str, norm: str, rng: np.random.Generator
) -> tuple:
    """A residual Add and the norm after it (its scale, and bias for LayerNormalization,
    ``init``), against the com.microsoft kernel ``fused`` of both. A fused kernel with a fourth
    output writes the sum there, read again as a pre-norm decoder's next residual add reads it
    (both models output it)."""
    inputs = [_float_input("x", s, n), _float_input("skip", s, n)]
    with_sum = fused == "SkipSimplifiedLayerNormalization"
    outs = ["out0", "", "", "out1"] if with_sum else ["out0"]
    total = "out1" if with_sum else "sum"
    node = helper.make_node(fused, ["x", "skip", *init], outs, domain="com.microsoft", epsilon=EPS)
    spelled = [
        helper.make_node("Add", ["x", "skip"], [total]),
        helper.make_node(norm, [total, *init], ["out0"], epsilon=EPS),
    ]
    n_out = 2 if with_sum else 1
    feed = {k: rng.random((1, s, n), dtype=np.float32) for k in ("x", "skip")}
    return _model([node], inputs, init, n_out), _model(spelled, inputs, init, n_out), feed


def skip_layernorm(s: int, n: int, rng: np.random.Generator) -> tuple:
    init = {"g": rng.random(n, dtype=np.float32), "b": rng.random(n, dtype=np.float32)}
    return _skip_norm(s, n, init, "SkipLayerNormalization", "LayerNormalization", rng)


def skip_rmsnorm(s: int, n: int, rng: np.random.Generator) -> tuple:
    init = {"g": rng.random(n, dtype=np.float32)}
    return _skip_norm(
        s, n, init, "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization", rng
    )


def embed_layernorm(s: int, n: int, rng: np.random.Generator) -> tuple:
    init = {
        "W": rng.random((VOCAB, n), dtype=np.float32),
        "P": rng.random((512, n), dtype=np.float32),
        "S": rng.random((2, n), dtype=np.float32),
        "g": rng.random(n, dtype=np.float32),
        "b": rng.random(n, dtype=np.float32),
    }
    ids = [helper.make_tensor_value_info(k, TensorProto.INT32, [1, s]) for k in ("ids", "seg")]
    fused = _model(
        [
            helper.make_node(
                "EmbedLayerNormalization",
                ["ids", "seg", "W", "P", "S", "g", "b"],
                ["out0", "mask_index"],
                domain="com.microsoft",
                epsilon=EPS,
            )
        ],
        ids,
        init,
        1,
    )
    spelled_init = {**init, "pos": np.arange(s, dtype=np.int64).reshape(1, s)}
    spelled = _model(
        [
            helper.make_node("Gather", ["W", "ids"], ["word"]),
            helper.make_node("Gather", ["P", "pos"], ["position"]),
            helper.make_node("Gather", ["S", "seg"], ["segment"]),
            helper.make_node("Add", ["word", "position"], ["sum"]),
            helper.make_node("Add", ["sum", "segment"], ["sum2"]),
            helper.make_node("LayerNormalization", ["sum2", "g", "b"], ["out0"], epsilon=EPS),
        ],
        ids,
        spelled_init,
        1,
    )
    feed = {
        "ids": rng.integers(0, VOCAB, (1, s)).astype(np.int32),
        "seg": rng.integers(0, 2, (1, s)).astype(np.int32),
    }
    return fused, spelled, feed


CASES: dict[str, Callable[[int, int, np.random.Generator], tuple]] = {
    "skip-layernorm": skip_layernorm,
    "skip-rmsnorm": skip_rmsnorm,
    "embed-layernorm": embed_layernorm,
}


def _session(model: onnx.ModelProto, level: ort.GraphOptimizationLevel) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = level
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def measure(case: str, s: int, n: int, rounds: int, repeat: int) -> list[list]:
    fused, spelled, feed = CASES[case](s, n, np.random.default_rng(0))
    level = ort.GraphOptimizationLevel
    full, basic = level.ORT_ENABLE_ALL, level.ORT_ENABLE_BASIC
    sessions = {
        "fused": _session(fused, full),
        "spelled": _session(spelled, full),
        "spelled-basic": _session(spelled, basic),
        "A/A": _session(spelled, full),
    }
    reference = sessions["spelled"].run(None, feed)
    errors = {}
    for name, sess in sessions.items():
        got = sess.run(None, feed)
        errors[name] = max(float(np.abs(a - b).max()) for a, b in zip(got, reference, strict=True))
    times: dict[str, list[float]] = {name: [] for name in sessions}
    order = list(sessions)
    for r in range(rounds):
        for name in order if r % 2 == 0 else reversed(order):
            start = time.perf_counter()
            for _ in range(repeat):
                sessions[name].run(None, feed)
            times[name].append((time.perf_counter() - start) / repeat)
    base = np.array(times["spelled"])
    rows = []
    for name, ts in times.items():
        t = np.array(ts)
        rows.append(
            [
                case,
                f"1x{s}x{n}",
                name,
                float(np.median(t) * 1e6),
                float(np.median(t / base)),
                errors[name],
                rounds,
            ]
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5, help="runs per session per round")
    args = ap.parse_args()
    headers = ["case", "shape", "variant", "median us", "ratio", "max abs diff", "rounds"]
    rows = []
    for case in args.cases:
        for s, n in SHAPES:
            log(f"{case} [1, {s}, {n}]")
            rows += measure(case, s, n, args.rounds, args.repeat)
    path = append_csv("kernels", headers, rows)
    print(markdown(headers, rows))
    print(f"rows appended to {path}")


if __name__ == "__main__":
    main()
