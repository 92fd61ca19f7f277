"""The ``relsat`` command line."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from relsat import Graph
from relsat.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, main
from relsat.graph.serial import from_json


def test_models_lists_the_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in ("nasrnn", "bert", "resnext50", "nasneta", "squeezenet", "vgg19", "inceptionv3"):
        assert f"* {name}" in out


def test_summary_prints_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "resnext.json"
    assert main(["summary", "resnext50", "--json", str(target)]) == 0
    out = capsys.readouterr().out
    assert "operators  86 (conv2d 53, ewadd 16, relu 16, poolmax 1)" in out
    assert "outputs    [1,2048,7,7]" in out
    assert json.loads(target.read_text())["format"] == "relsat-graph"


def test_optimize_a_bundled_model_then_inspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, out = tmp_path / "out" / "e.duckdb", tmp_path / "out" / "new" / "opt.json"  # made
    code = main(["optimize", "--model", "squeezenet", "--db", str(db), "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "it  0 multi" in text and "before / after" in text and "verified" in text
    optimized = from_json(out.read_text())
    assert optimized.op_counts()["relu"] < 26
    assert (
        main(["sql", str(db), "SELECT count(*) AS n FROM enode WHERE rule = 'conv-relu-fuse'"]) == 0
    )
    assert "n" in capsys.readouterr().out
    assert main(["inspect", str(db)]) == 0
    text = capsys.readouterr().out
    assert "e-nodes" in text and "conv-relu-fuse" in text


def test_errors_are_one_line_with_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["summary", "alexnet"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("relsat: error: unknown model 'alexnet'")
    assert err.count("\n") == 1
    assert main(["optimize"]) == EXIT_USAGE
    assert main(["sql", str(tmp_path / "missing.duckdb"), "SELECT 1"]) == EXIT_ERROR
    assert capsys.readouterr().err.startswith("relsat: error:")
    (tmp_path / "a-file").write_text("")
    target = tmp_path / "a-file" / "dir" / "out.json"  # a folder cannot be made under a file
    assert main(["optimize", "--model", "vgg19", "--no-verify", "-o", str(target)]) == EXIT_ERROR
    assert "cannot write" in capsys.readouterr().err
    assert not target.exists()


def test_show_draws_changes_and_eclasses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, out = tmp_path / "e.duckdb", tmp_path / "opt.json"
    assert (
        main(["optimize", "--model", "vgg19", "--no-verify", "--db", str(db), "-o", str(out)]) == 0
    )
    capsys.readouterr()
    assert main(["show", str(out), "--model", "vgg19", "-o", str(tmp_path / "g.dot")]) == 0
    dot = (tmp_path / "g.dot").read_text()
    assert dot.startswith("digraph relsat {") and "#ffd8a8" in dot  # fused convs highlighted
    assert main(["show", "--db", str(db), "--eclass", "4"]) == 0
    text = capsys.readouterr().out
    assert "subgraph cluster_4" in text
    assert main(["show", "--db", str(db)]) == EXIT_USAGE


def test_optimize_the_example_onnx_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from relsat.models.example import PATH, build

    assert PATH.read_bytes() == build()  # the shipped example is what its builder makes
    out = tmp_path / "example-opt.onnx"
    assert main(["optimize", str(PATH), "-o", str(out), "--timing-seconds", "0.5"]) == 0
    text = capsys.readouterr().out  # measured costs: whether a rewrite pays depends on the CPU
    assert "verified in onnxruntime" in text or "no rewrite chosen" in text
    import onnx

    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    assert [o.name for o in model.graph.output] == ["probs"]
    assert "Softmax" in {n.op_type for n in model.graph.node}  # the opaque op came back


def test_onnx_errors_leave_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(bad), "-o", str(out)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("relsat: error:") and "bad.onnx" in err
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


def test_a_wrong_optimization_is_refused_with_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from relsat import GraphBuilder
    from relsat import onnx as ronnx
    from relsat.cli import EXIT_VERIFY

    b = GraphBuilder()  # two depthwise convs of one input: TENSAT's unguarded merge is wrong here
    x = b.input([1, 8, 12, 12], name="x")
    ys = [b.conv2d(x, b.weight([8, 1, 3, 3], name=f"w{i}"), padding="SAME") for i in (1, 2)]
    src = tmp_path / "depthwise.onnx"
    ronnx.save(b.build(b.concat(1, ys)), src)
    out = tmp_path / "out.onnx"
    analytic = ["--cost-model", "analytic", "--timing-seconds", "0.2"]  # it prefers the merge
    assert main(["optimize", str(src), "--no-guards", "-o", str(out), *analytic]) == EXIT_VERIFY
    assert "verification failed, nothing written" in capsys.readouterr().out
    assert not out.exists()
    assert main(["optimize", str(src), "-o", str(out), *analytic]) == 0  # guarded: written
    assert out.exists()


# --- never slower: timing the optimized ONNX model against its input --------------------------

FAST_TIMING = ["--cost-model", "analytic", "--timing-seconds", "0.2", "--threads", "1"]


def _relu_softmax(path: Path) -> bytes:
    """x -> Relu -> Softmax: nothing for relsat to rewrite."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Softmax", ["h"], ["y"])]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    onnx.save(model, str(path))
    return path.read_bytes()


def test_nothing_to_rewrite_writes_the_input_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = _relu_softmax(tmp_path / "in.onnx")
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(tmp_path / "in.onnx"), "-o", str(out), *FAST_TIMING]) == 0
    text = capsys.readouterr().out
    assert "no rewrite chosen: the input model is kept unchanged" in text
    assert "onnxruntime CPU" not in text  # nothing timed
    assert out.read_bytes() == original


def _fake_latency(monkeypatch: pytest.MonkeyPatch, verdict: str | None) -> None:
    """Treat the re-exported model as rewritten, so the timing path runs whatever the rules find;
    with a ``verdict``, compare_latency answers it without timing."""
    from relsat.onnx import latency
    from relsat.pipeline import ort

    monkeypatch.setattr(ort, "unchanged", lambda run: False)
    if verdict is not None:
        ratio = {"faster": 0.5, "slower": 2.0, "same": 1.0}[verdict]
        fake = latency.LatencyComparison(1.0, ratio, ratio, ratio * 0.9, ratio * 1.1, 9, verdict, 1)
        monkeypatch.setattr(latency, "compare_latency", lambda *args, **kwargs: fake)


@pytest.mark.parametrize(
    ("verdict", "flags", "kept"),
    [
        ("slower", [], "original"),
        ("same", [], "original"),
        ("faster", [], "optimized"),
        ("slower", ["--keep-slower"], "optimized"),
        ("same", ["--no-timing"], "optimized"),
    ],
)
def test_the_original_is_kept_unless_the_optimized_model_is_faster(
    verdict: str,
    flags: list[str],
    kept: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    original = _relu_softmax(tmp_path / "in.onnx")
    _fake_latency(monkeypatch, verdict)
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(tmp_path / "in.onnx"), "-o", str(out), *FAST_TIMING, *flags]) == 0
    text = capsys.readouterr().out
    assert "verified in onnxruntime" in text
    assert (out.read_bytes() == original) == (kept == "original")
    if kept == "original":  # the word the timing line, the table and the summary say
        why, speedup = {"slower": ("slower", 0.5), "same": ("too noisy to tell", 1.0)}[verdict]
        assert f"the original is kept unchanged ({why}; --keep-slower keeps" in text
        assert f" original ({why}) " in text and f"(x{speedup:.2f}, {why})" in text
        assert "after (not written)" in text  # the optimized graph's op counts, not the file's
    if "--no-timing" in flags:
        assert "not timed (--no-timing)" in text and "onnxruntime CPU" not in text
    else:
        assert "onnxruntime CPU (1 thread): 1 -> " in text and "latency (ms)" in text
    if "--keep-slower" in flags:
        assert "kept anyway (--keep-slower)" in text


def test_timing_runs_for_real_and_the_output_matches_its_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    original = _relu_softmax(tmp_path / "in.onnx")
    _fake_latency(monkeypatch, None)
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(tmp_path / "in.onnx"), "-o", str(out), *FAST_TIMING]) == 0
    text = capsys.readouterr().out
    (report,) = [line for line in text.splitlines() if line.startswith("onnxruntime CPU")]
    assert " rounds, " in report  # the timing ran: rounds and why it stopped
    assert (out.read_bytes() == original) == ("x faster (" not in report)


def test_timing_options_are_validated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from relsat.models.example import PATH

    assert main(["optimize", str(PATH), "--threads", "-1"]) == EXIT_USAGE
    assert "--threads must be >= 0" in capsys.readouterr().err
    assert main(["optimize", str(PATH), "--timing-seconds", "0"]) == EXIT_USAGE
    assert "--timing-seconds must be > 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ["--nodes", "0"],
        ["--nodes", "-5"],
        ["--iterations", "-1"],
        ["--time-limit", "-3"],
        ["--time-limit", "nan"],
        ["--k-multi", "-1"],
        ["--ilp-time-limit", "-1"],
        ["--ilp-time-limit", "0"],
        ["--batch", "0"],
    ],
)
def test_numeric_options_are_range_checked(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    assert main(["optimize", "--model", "squeezenet", *args, "-o", str(out)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"relsat: error: {args[0]} must be ") and err.count("\n") == 1
    assert not out.exists()


def test_other_bad_settings_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimize", "--model", "squeezenet", "--cost-model", "tpu"]) == EXIT_USAGE
    err = capsys.readouterr().err  # the option typed and what it takes, not the API's field
    assert err.startswith("relsat: error: --cost-model must be ort-cpu, analytic, ")
    assert "'tpu'" in err and "cost_model" not in err and "CostModel" not in err
    assert main(["show", "--db", "x.duckdb", "--eclass", "1", "--depth", "-1"]) == EXIT_USAGE
    assert capsys.readouterr().err == "relsat: error: --depth must be >= 0, got -1\n"


def test_a_bad_rule_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.rules"
    bad.write_bytes(b"# name: r\n\xfe(relu ?x) => (relu ?x)\n")
    assert main(["optimize", "--model", "squeezenet", "--rules", str(bad)]) == EXIT_ERROR
    assert capsys.readouterr().err == f"relsat: error: {bad}:2:1: not UTF-8 text (byte 0xfe)\n"


def test_foreign_databases_and_sql_writes_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import duckdb

    other = tmp_path / "sales.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE sales (a INTEGER)")
    con.close()
    before = other.read_bytes()
    assert main(["optimize", "--model", "squeezenet", "--db", str(other)]) == EXIT_ERROR
    assert capsys.readouterr().err == (
        f"relsat: error: {other}: not a relsat e-graph (it holds other tables: sales)\n"
    )
    assert other.read_bytes() == before
    db = tmp_path / "e.duckdb"
    assert main(["optimize", "--model", "squeezenet", "--iterations", "1", "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["sql", str(db), "DELETE FROM enode"]) == EXIT_ERROR
    assert capsys.readouterr().err == (
        f"relsat: error: {db}: the e-graph is opened read-only: DELETE statements are refused\n"
    )


def test_ctrl_c_is_one_line_and_exit_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from relsat.engine import phase

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(phase.Phases, "phase", interrupted)
    db, out = tmp_path / "e.duckdb", tmp_path / "out.json"
    argv = ["optimize", "--model", "squeezenet", "--db", str(db), "-o", str(out)]
    assert main(argv) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "relsat: interrupted\n"
    assert not out.exists()
    monkeypatch.undo()
    assert main(["inspect", str(db)]) == 0  # the stored e-graph opens: the input graph only
    with pytest.raises(KeyboardInterrupt):  # --debug shows the traceback
        monkeypatch.setattr(phase.Phases, "phase", interrupted)
        main(["--debug", "optimize", "--model", "squeezenet"])


def test_outputs_follow_the_umask(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = os.umask(0o027)
    try:
        assert main(["summary", "squeezenet", "--json", str(tmp_path / "s.json")]) == 0
        argv = ["optimize", "--model", "squeezenet", "--iterations", "1", "--no-verify"]
        assert main([*argv, "-o", str(tmp_path / "o.json")]) == 0
        assert main([*argv, "-o", str(tmp_path / "o.onnx")]) == 0
    finally:
        os.umask(old)
    for name in ("s.json", "o.json", "o.onnx"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o640, name


def test_the_default_cost_model_follows_the_input() -> None:
    from relsat.cli import parser
    from relsat.cli.optimize import options
    from relsat.pipeline.price import cost_model

    onnx_args = parser().parse_args(["optimize", "in.onnx", "--threads", "2"])
    from relsat.cost import OrtModel

    chosen = cost_model(options(onnx_args), onnx=True)
    assert isinstance(chosen, OrtModel) and chosen.settings.threads == 2
    bundled = parser().parse_args(["optimize", "--model", "bert"])
    assert cost_model(options(bundled), onnx=False).name == "analytic"


def test_runtime_first_follows_the_input_unless_asked() -> None:
    """``--runtime-first auto`` (the default) leaves it to the input's kind; on and off say it."""
    from relsat.cli import parser
    from relsat.cli.optimize import options

    def given(*flags: str) -> bool | None:
        return options(parser().parse_args(["optimize", "in.onnx", *flags])).runtime_first

    assert given() is None
    assert given("--runtime-first", "on") is True
    assert given("--runtime-first", "off") is False
    with pytest.raises(SystemExit):
        parser().parse_args(["optimize", "in.onnx", "--runtime-first", "yes"])


def test_same_graph_ignores_node_order_and_inner_labels() -> None:
    from relsat import GraphBuilder
    from relsat.graph.graph import same_computation as same_graph

    def graph(order: str, label: str | None) -> Graph:
        b = GraphBuilder()
        x = b.input([4, 4], name="x")
        first, second = (b.tanh, b.relu) if order == "tr" else (b.relu, b.tanh)
        p, q = first(x, name=label), second(x)
        return b.build(b.add(p, q) if order == "tr" else b.add(q, p))

    assert same_graph(graph("tr", None), graph("rt", "h"))
    b = GraphBuilder()
    x = b.input([4, 4], name="x")
    assert not same_graph(graph("tr", None), b.build(b.add(b.relu(x), b.tanh(x))))


# --- ONNX inputs of any element type; --input-shape ---------------------------------------------


def _token_model(path: Path, dims: list[int | str]) -> None:
    """int64 input_ids → Gather of an embedding → Linear, times the cast int64 attention_mask;
    dims may be dynamic."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
        helper.make_node("MatMul", ["h", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["lin"]),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axis2"], ["mask3"]),
        helper.make_node("Mul", ["lin", "mask3"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
        for name, shape in (("emb", (40, 16)), ("w", (16, 16)), ("b", (16,)))
    ]
    inits.append(numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"))
    ids, mask = (
        helper.make_tensor_value_info(n, TensorProto.INT64, dims)
        for n in ("input_ids", "attention_mask")
    )
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [*dims, 16])
    graph = helper.make_graph(nodes, "tokens", [ids, mask], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_token_ids_with_input_shapes_optimize_and_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import onnx

    src, out = tmp_path / "tokens.onnx", tmp_path / "out.onnx"
    _token_model(src, ["batch", "seq"])
    _fake_latency(monkeypatch, None)  # export and verify whatever the rules find
    shapes = ["--input-shape", "input_ids=2,8", "--input-shape", "attention_mask=2,8"]
    # the shapes price the model; its dims stay dynamic (names kept) unless --static
    for flags, want in (([], [["batch", "seq"]] * 2), (["--static"], [[2, 8]] * 2)):
        assert main(["optimize", str(src), "-o", str(out), "--no-timing", *shapes, *flags]) == 0
        text = capsys.readouterr().out
        assert "opaque: 2 of" in text and "Gather 1" in text and "Cast 1" in text
        assert "verified in onnxruntime" in text
        written = onnx.load(str(out))
        assert [(i.name, i.type.tensor_type.elem_type) for i in written.graph.input] == [
            ("input_ids", onnx.TensorProto.INT64),
            ("attention_mask", onnx.TensorProto.INT64),
        ]
        dims = [
            [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in written.graph.input
        ]
        assert dims == want, flags


def test_input_shape_usage_and_onnx_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "tokens.onnx", tmp_path / "out.onnx"
    _token_model(src, ["batch", "seq"])
    for bad in ("input_ids=2,x", "input_ids", "=2,8", "input_ids=0,8"):
        assert main(["optimize", str(src), "-o", str(out), "--input-shape", bad]) == EXIT_USAGE
        assert "--input-shape wants NAME=D,D,..." in capsys.readouterr().err
    assert main(["optimize", str(src), "-o", str(out), "--input-shape", "ids=2,8"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown inputs ['ids']" in err and "tokens.onnx" in err
    shape = ["--input-shape", "input_ids=2,8,1"]
    assert main(["optimize", str(src), "-o", str(out), *shape]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "'input_ids': --input-shape gives rank 3, the input has rank 2" in err
    assert "input_shapes" not in err  # the option as typed, not the API's field
    assert list(tmp_path.iterdir()) == [src]  # nothing written


def test_load_errors_name_the_option_typed_in_the_cli_and_the_field_in_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shape refused at load names ``--input-shape`` (``--batch``) on the command line and
    ``input_shapes`` (``batch``) in Python: one error, its settings named by who reads it."""
    import relsat
    from relsat import Options
    from relsat import onnx as ronnx

    src, out = tmp_path / "tokens.onnx", tmp_path / "out.onnx"
    _token_model(src, ["batch", "seq"])
    given = {"input_ids": (2, 8), "attention_mask": (2, 8, 1)}
    argv = [f"{k}={','.join(map(str, v))}" for k, v in given.items()]
    flags = [x for a in argv for x in ("--input-shape", a)]
    assert main(["optimize", str(src), "-o", str(out), *flags]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "--input-shape gives rank 3, the input has rank 2" in err and "input_shapes" not in err
    with pytest.raises(ronnx.OnnxError, match="input_shapes gives rank 3") as caught:
        relsat.optimize(str(src), Options(input_shapes=given, timing=None))
    assert caught.value.settings == ("input_shapes",) and "--" not in str(caught.value)
    with pytest.raises(ronnx.OnnxError, match="unknown inputs") as caught:
        relsat.optimize(str(src), Options(input_shapes={"ids": (2, 8)}, timing=None))
    assert str(caught.value).count("input_shapes names unknown inputs ['ids']") == 1
    # the fixed-shape importer: a dynamic dim left open names both ways of fixing it
    with pytest.raises(ronnx.OnnxError, match="is dynamic") as caught:
        ronnx.load(str(src))
    assert "fix it with input_shapes or batch" in str(caught.value)
    named = caught.value.named({"input_shapes": "--input-shape", "batch": "--batch"})
    assert "fix it with --input-shape or --batch" in named and str(src) in named


def test_inputs_file_prices_and_checks_and_bad_files_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--inputs FILE.npz``: its shapes price the dynamic dims; a file that is no .npz of
    arrays, or an unknown input name, is bad usage in one line; nothing is written."""
    import numpy as np

    src, out = tmp_path / "tokens.onnx", tmp_path / "out.onnx"
    _token_model(src, ["batch", "seq"])
    good = tmp_path / "inputs.npz"
    np.savez(good, input_ids=np.ones((2, 8), dtype=np.int64))
    assert main(["optimize", str(src), "-o", str(out), "--no-timing", "--inputs", str(good)]) == 0
    assert "priced at batch=2, seq=8" in capsys.readouterr().out
    out.unlink()
    text = tmp_path / "inputs.txt"
    text.write_text("not arrays")
    one = tmp_path / "one.npy"
    np.save(one, np.ones(3))
    for bad in (text, one, tmp_path / "missing.npz"):
        assert main(["optimize", str(src), "-o", str(out), "--inputs", str(bad)]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert f"--inputs {bad}: cannot read it as a .npz of input arrays" in err
    np.savez(good, ids=np.ones((2, 8), dtype=np.int64))
    assert main(["optimize", str(src), "-o", str(out), "--inputs", str(good)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "names of the model's inputs (input_ids, attention_mask)" in err
    assert not out.exists()


def test_a_subgraph_is_one_error_line_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    r = helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "branch", [], [r])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Sign", ["s"], ["sign"]),
        helper.make_node("Cast", ["sign"], ["c"], to=TensorProto.BOOL),
        helper.make_node("If", ["c"], ["y"], name="choose", then_branch=branch, else_branch=branch),
    ]
    src, out = tmp_path / "if.onnx", tmp_path / "out.onnx"
    graph = helper.make_graph(nodes, "if", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    assert main(["optimize", str(src), "-o", str(out)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "if.onnx" in err and "node 'choose' (If)" in err
    assert list(tmp_path.iterdir()) == [src]


def test_an_input_with_external_data_is_written_with_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import onnx

    from relsat import onnx as ronnx
    from relsat.pipeline import ort

    src, out = tmp_path / "in" / "tokens.onnx", tmp_path / "out" / "kept.onnx"
    src.parent.mkdir()
    out.parent.mkdir()
    _token_model(tmp_path / "inline.onnx", [1, 8])
    model = onnx.load(str(tmp_path / "inline.onnx"))
    onnx.save_model(model, str(src), save_as_external_data=True, size_threshold=0)
    monkeypatch.setattr(ort, "unchanged", lambda run: True)  # keep the input
    assert main(["optimize", str(src), "-o", str(out), "--no-timing"]) == 0
    assert "kept unchanged" in capsys.readouterr().out
    assert sorted(p.name for p in out.parent.iterdir()) == ["kept.onnx"]  # the data came along
    assert ronnx.verify(tmp_path / "inline.onnx", out).ok


def test_an_interface_change_is_never_written_even_unverified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from relsat import GraphBuilder
    from relsat.pipeline import verify

    b = GraphBuilder()
    x = b.input([1, 4], name="x")
    g = b.build(b.relu(x))
    b2 = GraphBuilder()
    y = b2.input([1, 4], name="y")
    assert verify.interface_mismatch(g, b2.build(b2.relu(y))) is not None  # an input renamed
    b3 = GraphBuilder()
    x3 = b3.input([1, 4], name="x")
    other = b3.build(b3.concat(1, [x3, x3]))
    assert "output shapes" in (verify.interface_mismatch(g, other) or "")
    assert verify.interface_mismatch(g, g) is None

    monkeypatch.setattr(verify, "interface_mismatch", lambda a, b: "inputs ['x'] became []")
    out = tmp_path / "o.json"
    code = main(["optimize", "--model", "squeezenet", "--no-verify", "-o", str(out)])
    assert code == 3 and not out.exists()
    assert "interface differs, nothing written" in capsys.readouterr().out


def test_a_stored_egraph_is_resumed_or_overwritten_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from relsat.engine.egraph import EGraph

    db = str(tmp_path / "e.duckdb")
    run = ["optimize", "--model", "nasrnn", "--db", db, "--extractor", "greedy"]
    assert main([*run, "--iterations", "1"]) == 0
    text = capsys.readouterr().out
    assert "it  0 single" in text and "it  1" not in text
    assert main(run) == EXIT_ERROR  # neither flag: refused before any work, naming both
    err = capsys.readouterr().err
    assert "already holds an e-graph" in err and "--resume" in err and "--overwrite" in err
    assert main([*run, "--iterations", "3", "--resume"]) == 0
    text = capsys.readouterr().out
    assert "it  0" not in text and "it  1 single" in text  # iteration numbers go on
    eg = EGraph(db)
    rows = eg.db.execute("SELECT iteration, phase, matches FROM iteration_stats ORDER BY epoch")
    assert [r[:2] for r in rows] == [(0, "multi"), (0, "single"), (1, "single"), (2, "single")]
    assert rows[2][2] < rows[1][2]  # matches applied by the first run are not found again
    assert not any(eg.audit().values())
    eg.close()
    assert main(["optimize", "--model", "bert", "--db", db, "--resume"]) == EXIT_ERROR
    assert "built from another graph" in capsys.readouterr().err
    assert main([*run, "--iterations", "1", "--overwrite"]) == 0
    assert "it  0 multi" in capsys.readouterr().out
    eg = EGraph(db)
    assert eg.db.scalar("SELECT max(iteration) FROM iteration_stats") == 0
    eg.close()
    assert main([*run, "--resume", "--overwrite"]) == EXIT_USAGE
    assert main(["optimize", "--model", "nasrnn", "--resume"]) == EXIT_USAGE


def test_progress_lines_add_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each phase line shows e-nodes added, merged away by congruence and the net change, and
    the net changes add up to the e-node totals."""
    import re

    assert main(["optimize", "--model", "bert", "--extractor", "greedy", "--no-verify"]) == 0
    lines = re.findall(
        r"added +(\d+) merged +(\d+) net +([+-]\d+) e-nodes +(\d+)", capsys.readouterr().out
    )
    assert any(int(m) > 0 for _, m, _, _ in lines)
    total = int(lines[0][3]) - int(lines[0][2])
    for added, merged, net, enodes in lines:
        assert int(net) == int(added) - int(merged)
        total += int(net)
        assert total == int(enodes)


def test_optimize_with_blocks_writes_the_whole_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--blocks``: BERT's eight layers explored once each distinct block, the whole graph
    written and verified; the e-graph kept is the folded graph's (inputs ``blk<k>.in<j>``)."""
    db, out = tmp_path / "b.duckdb", tmp_path / "bert-opt.json"
    assert main(["optimize", "--model", "bert", "--blocks", "--db", str(db), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "blocks: 14 pieces, 4 distinct" in text and "26.6 % less" in text
    optimized = from_json(out.read_text())
    assert optimized.op_counts()["matmul"] == 32 and len(optimized.inputs) == 1
    assert main(["sql", str(db), "SELECT count(*) AS n FROM enode WHERE s LIKE 'blk%'"]) == 0
    assert "n" in capsys.readouterr().out


# --- the input is never lost ---------------------------------------------------------------


def test_o_naming_the_input_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.onnx"
    original = _relu_softmax(src)
    (tmp_path / "link.onnx").symlink_to(src)
    os.link(src, tmp_path / "hard.onnx")
    for target in (src, tmp_path / "link.onnx", tmp_path / "hard.onnx", tmp_path / "." / "in.onnx"):
        assert main(["optimize", str(src), "-o", str(target)]) == EXIT_USAGE
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1  # nothing done, one line
        assert f"-o {target} is the input model" in err and "--in-place" in err
    assert src.read_bytes() == original and not (tmp_path / "in.onnx.orig").exists()
    folder = tmp_path / "folder"
    folder.mkdir()
    assert main(["optimize", str(src), "-o", str(folder)]) == EXIT_USAGE  # up front, not after
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"relsat: error: -o {folder} is a folder")


def test_in_place_keeps_the_original_until_the_new_file_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import onnx

    from relsat.pipeline.result import Result

    src, backup = tmp_path / "in.onnx", tmp_path / "in.onnx.orig"
    original = _relu_softmax(src)
    refused = [
        ["--model", "nasrnn", "--in-place"],  # no input file to replace
        [str(src), "--in-place", "-o", str(tmp_path / "other.onnx")],
    ]
    for argv in refused:
        assert main(["optimize", *argv]) == EXIT_USAGE
        assert capsys.readouterr().err.count("\n") == 1
    _fake_latency(monkeypatch, "slower")  # the original kept: nothing to write
    assert main(["optimize", str(src), "--in-place", *FAST_TIMING]) == 0
    assert f"{src} left as it was" in capsys.readouterr().out
    assert src.read_bytes() == original and not backup.exists()
    _fake_latency(monkeypatch, "faster")
    save = Result.save
    monkeypatch.setattr(Result, "save", lambda self, path: Path(path).write_bytes(b"garbage"))
    assert main(["optimize", str(src), "--in-place", *FAST_TIMING]) == EXIT_ERROR
    assert "the written model does not read back" in capsys.readouterr().err
    assert src.read_bytes() == original and not backup.exists()  # put back
    backup.write_bytes(b"an earlier run's copy")
    assert main(["optimize", str(src), "--in-place", *FAST_TIMING]) == EXIT_USAGE
    assert "already exists" in capsys.readouterr().err
    backup.unlink()
    monkeypatch.setattr(Result, "save", save)
    assert main(["optimize", str(src), "-o", str(src), "--in-place", *FAST_TIMING]) == 0
    assert f"written to {src} (in place" in capsys.readouterr().out
    assert src.read_bytes() != original and not backup.exists()
    onnx.checker.check_model(str(src))


# --- usage: one line, the options as typed, help with defaults ------------------------------


def test_a_refused_argument_is_one_line_naming_the_option_and_its_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:  # as argparse exits: code 2
        main(["optimize", "--model", "nasrnn", "--scheduler", "fast"])
    assert info.value.code == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "usage:" not in err
    assert err.startswith("relsat optimize: error: argument --scheduler: invalid choice: 'fast'")
    assert "simple" in err and "backoff" in err and "relsat optimize --help" in err
    with pytest.raises(SystemExit):
        main([])
    assert capsys.readouterr().err.count("\n") == 1


def test_debug_works_after_the_sub_command_too(capsys: pytest.CaptureFixture[str]) -> None:
    from relsat.errors import RelsatError

    assert main(["summary", "alexnet"]) == EXIT_ERROR
    for argv in (["--debug", "summary", "alexnet"], ["summary", "alexnet", "--debug"]):
        with pytest.raises(RelsatError, match="unknown model 'alexnet'"):
            main(argv)


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # as one line: argparse wraps at its width


def test_help_reads_as_text_and_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    top = _help([], capsys)
    assert "``" not in top and "The relsat command line" not in top
    assert top.startswith("usage: relsat") and "relsat rewrites a neural network's" in top
    text = _help(["optimize"], capsys)
    assert "how the cheapest graph is picked" in text and "(default: ilp)" in text
    assert "0: onnxruntime's default, one per physical core" in text
    assert "e-node limit (>= 1) (default: 50000)" in text and "(default: None)" not in text
    assert "--in-place" in text and "IN.onnx.orig" in text


def test_a_piped_run_prints_no_banner_and_wraps_nothing(tmp_path: Path) -> None:
    """stdout a pipe: HiGHS's banner silenced (it writes below Python, so only a fresh process
    shows it), no line wrapped at 80 columns, a timestamped line per slow stage, a legend over
    the exploration lines, ONNX names in the table and a caption under it."""
    import re
    import subprocess
    import sys

    out = tmp_path / "out" / "opt.json"
    argv = ["optimize", "--model", "nasrnn", "--iterations", "1", "--no-verify", "-o", str(out)]
    env = os.environ | {"COLUMNS": "80", "TERM": "xterm"}
    done = subprocess.run(
        [sys.executable, "-m", "relsat", *argv],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "HiGHS" not in text and "Copyright" not in text and "HiGHS" not in done.stderr
    assert "explore: one line per phase of rules — iteration, phase, rule matches" in text
    legend = next(line for line in text.splitlines() if line.startswith("explore: "))
    assert legend.endswith("e-nodes in all, seconds") and len(legend) > 80  # not wrapped
    assert re.search(r"^\[\d\d:\d\d:\d\d\] extract done, \d+\.\d s$", text, flags=re.M)
    assert "cost: the sum of the operators' estimated costs (analytic)" in text
    assert re.search(r"^ +MatMul +│", text, flags=re.M) and not re.search(r"^ +matmul ", text, re.M)
    assert "\x1b[" not in text  # no live line, no colour codes in a pipe
    assert out.is_file()
