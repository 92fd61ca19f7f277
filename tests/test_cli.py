"""The ``relsat`` command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relsat.cli import main


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


def test_errors_are_one_line_with_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", "alexnet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("relsat: error: unknown model 'alexnet'")
    assert err.count("\n") == 1
