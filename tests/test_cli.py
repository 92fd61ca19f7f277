"""The ``relsat`` command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relsat import Graph
from relsat.cli import EXIT_ERROR, EXIT_USAGE, main


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
    db, out = tmp_path / "e.duckdb", tmp_path / "opt.json"
    code = main(["optimize", "--model", "squeezenet", "--db", str(db), "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "it  0 multi" in text and "before / after" in text and "verified" in text
    optimized = Graph.from_json(out.read_text())
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
    target = tmp_path / "no" / "such" / "dir" / "out.json"
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
    assert main(["optimize", str(PATH), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "verified in onnxruntime" in text
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
    assert main(["optimize", str(src), "--no-guards", "-o", str(out)]) == EXIT_VERIFY
    assert "verification failed, nothing written" in capsys.readouterr().out
    assert not out.exists()
    assert main(["optimize", str(src), "-o", str(out)]) == 0  # guarded: correct, written
    assert out.exists()
