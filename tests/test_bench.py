"""bench/: its layout (no module shadows a package, no import circle, shared modules are not
programs), every script's ``--help`` and ``--list``, and the shared timing, CLI parsing, corpus
selection and CSV code on tiny inputs. Nothing here optimizes or exports a model."""

from __future__ import annotations

import ast
import csv
import importlib.machinery
import importlib.util
import json
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

BENCH = Path(__file__).resolve().parent.parent / "bench"
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import calls  # noqa: E402
import common  # noqa: E402
import corpus  # noqa: E402
import timing  # noqa: E402

MODULES = sorted(p.stem for p in BENCH.glob("*.py"))
#: Packages a bench module must never be named after, installed here or not.
TAKEN = {
    "transformers",
    "torch",
    "torchvision",
    "onnx",
    "onnxruntime",
    "onnxscript",
    "onnxslim",
    "onnxsim",
    "timm",
    "numpy",
    "relsat",
    "duckdb",
    "highspy",
    "egglog",
    "cupy",
    "pytest",
    "tests",
}


def _is_script(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return True
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            return True
    return False


def _bench_imports(path: Path) -> set[str]:
    """The bench modules ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found & set(MODULES)


SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py") if _is_script(p))
SHARED = sorted(set(MODULES) - set(SCRIPTS))
# corpus.py names its torch modules as strings (imported when a model is built).
GRAPH = {m: _bench_imports(BENCH / f"{m}.py") for m in MODULES}
GRAPH["corpus"] |= {m for m, _, _ in corpus.REAL_TORCH.values()} & set(MODULES)


# --- layout ---------------------------------------------------------------------------------


def _installed(entry: str) -> bool:
    """Whether ``sys.path`` entry ``entry`` holds installed packages (a site-packages folder, the
    standard library, a folder a ``.pth`` file adds), not the current directory or one of the
    project's own folders: there the README's commands write folders (``many/``, ``out/``) that
    import as namespace packages and are no package a bench module could hide."""
    if not entry:
        return False  # "": the current directory
    path = Path(entry).resolve()
    sites = [*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    if path in {Path(p).resolve() for p in sites}:
        return True  # a virtual environment inside the clone is still installed packages
    return path != Path.cwd().resolve() and ROOT not in (path, *path.parents)


@pytest.mark.parametrize("name", MODULES)
def test_no_bench_module_shadows_a_package(name: str) -> None:
    # bench/ is first on sys.path when a script runs: a module named like a package hides it
    # (bench/transformers.py once hid transformers from every bench script).
    installed = [p for p in sys.path if _installed(p)]
    assert name not in TAKEN
    assert name not in sys.stdlib_module_names and name not in sys.builtin_module_names
    assert importlib.machinery.PathFinder.find_spec(name, installed) is None


def test_a_folder_the_readme_writes_is_no_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``relsat optimize-many … --out-dir many`` run where the tests run leaves ``many/``,
    importable from there (the control); the shadowing test does not count it as a package."""
    (tmp_path / "many").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert importlib.machinery.PathFinder.find_spec("many", ["", *sys.path]) is not None
    installed = [p for p in ["", *sys.path] if _installed(p)]
    assert importlib.machinery.PathFinder.find_spec("many", installed) is None


def test_no_import_circle_among_bench_modules() -> None:
    state: dict[str, str] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for d in sorted(GRAPH[m]):
            assert state.get(d) != "open", " -> ".join([*path, m, d])
            if d not in state:
                visit(d, [*path, m])
        state[m] = "done"

    for m in MODULES:
        if m not in state:
            visit(m, [])


def test_scripts_are_programs_and_shared_modules_are_not() -> None:
    assert {"real", "today", "ort_fusions", "onnx_models"} <= set(SCRIPTS)
    assert {"common", "calls", "timing", "exports", "corpus", "hfmodels"} <= set(SHARED)
    for m in MODULES:
        imported = GRAPH[m] & set(SCRIPTS)
        assert not imported, f"{m} imports the scripts {sorted(imported)}"


@pytest.mark.parametrize("name", sorted(set(MODULES) - {"calls"}))
def test_only_calls_py_calls_relsat_optimize(name: str) -> None:
    # Every optimize goes through bench/calls.py: the one place to port an API change.
    text = (BENCH / f"{name}.py").read_text()
    assert '"relsat", "optimize"' not in text
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("relsat"):
            assert "optimize" not in {a.name for a in node.names}
        if isinstance(node, ast.Attribute) and node.attr == "optimize":
            assert ast.unparse(node.value) not in ("relsat", "relsat.pipeline.optimize")


def test_readme_names_every_script_and_module() -> None:
    readme = (BENCH / "README.md").read_text()
    missing = [m for m in MODULES if f"`{m}.py`" not in readme]
    assert not missing, f"bench/README.md does not mention {missing}"


# --- every script runs ----------------------------------------------------------------------


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


#: Runs each script of a JSON list with ``--help`` as ``python bench/<script>.py --help`` would
#: (``sys.argv``, bench/ first on ``sys.path``, ``__main__``), one after another in one
#: interpreter (one start-up, not one per script: each costs most of a second), and prints a JSON
#: object: each script's exit code, stdout and stderr (a traceback where it raised).
HELP_DRIVER = """
import contextlib, io, json, runpy, sys, traceback
bench, scripts = json.load(sys.stdin)
done = {}
for script in scripts:
    path = f"{bench}/{script}.py"
    sys.argv, sys.path[0] = [path, "--help"], bench
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    done[script] = [code, out.getvalue(), err.getvalue()]
json.dump(done, sys.__stdout__)
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, list]:
    """Every script's ``--help``: exit code, stdout, stderr, by script."""
    proc = subprocess.run(
        [sys.executable, "-c", HELP_DRIVER],
        input=json.dumps([str(BENCH), SCRIPTS]),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script: str, helps: dict[str, list]) -> None:
    code, out, err = helps[script]
    assert code == 0, err[-2000:]
    assert out.startswith("usage:")


def test_real_list() -> None:
    proc = _run(str(BENCH / "real.py"), "--list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = [line.split("\t")[0] for line in proc.stdout.splitlines()]
    assert "tensat-nasrnn" in names
    assert ("hf-bert" in names) == (importlib.util.find_spec("torch") is not None)


def test_today_list() -> None:
    proc = _run(str(BENCH / "today.py"), "--list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = [line.split("\t")[0] for line in proc.stdout.splitlines() if not line.startswith("#")]
    if corpus.zoo_dir() is not None:
        assert "zoo-resnet50" in names
    if importlib.util.find_spec("torch") is not None:
        for model in ("bert-tiny", "gpt2-tiny", "vit-tiny", "llama-tiny"):
            assert {f"{model}.dynamo", f"{model}.legacy"} <= set(names)
    if not corpus.timm_available():
        assert "# timm skipped" in proc.stdout


def test_families_list() -> None:
    proc = _run(str(BENCH / "families.py"), "--list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = proc.stdout.split()
    assert {"qwen3.dynamo", "t5.legacy", "clip-vision.dynamo", "segformer.legacy"} <= set(names)
    assert len(names) == 24
    more = _run(str(BENCH / "families.py"), "--more", "--list").stdout.split()
    assert {"falcon.dynamo", "mixtral.legacy", "deberta-v2.dynamo", "hubert.legacy"} <= set(more)
    assert len(more) == 34 and not set(more) & set(names)


def test_ort_fusions_list() -> None:
    proc = _run(str(BENCH / "ort_fusions.py"), "--list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "hf-bert" in proc.stdout.split()


def test_backend_list(tmp_path: Path) -> None:
    proc = _run(str(BENCH / "backend.py"), "--list", "--work", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("\t") for line in proc.stdout.splitlines() if not line.startswith("#")]
    if (Path(onnx.__file__).parent / "backend" / "test" / "data" / "simple").is_dir():
        assert ["test_single_relu_model", "simple"] in rows
    assert "# node: the wheel's node tests" in proc.stdout  # not written by --list


def test_today_refuses_an_unknown_model() -> None:
    proc = _run(str(BENCH / "today.py"), "--models", "no-such-model")
    assert proc.returncode == 2 and "no-such-model" in proc.stderr


# --- the shared modules ---------------------------------------------------------------------


def _model(path: Path, op: str = "Relu", extra: int = 0) -> Path:
    """y = op(x) (+ extra) on a 1x8 float input."""
    nodes = [helper.make_node(op, ["x"], ["t" if extra else "y"])]
    inits = []
    if extra:
        inits.append(helper.make_tensor("c", TensorProto.FLOAT, [1], [float(extra)]))
        nodes.append(helper.make_node("Add", ["t", "c"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_side_by_side_has_an_aa_row_and_checks_outputs(tmp_path: Path) -> None:
    original = _model(tmp_path / "a.onnx")
    same = _model(tmp_path / "b.onnx")
    other = _model(tmp_path / "c.onnx", extra=1)
    broken = tmp_path / "d.onnx"
    broken.write_bytes(b"not a model")
    t = timing.side_by_side(
        original,
        {"same": same, "other": other, "broken": broken},
        threads=1,
        rounds=5,
        warmup_s=0.0,
    )
    assert list(t.ms) == ["original", "A/A", "same", "other"]
    assert all(ms > 0 for ms in t.ms.values())
    assert t.ratio("A/A") is not None and t.ratio("broken") is None
    assert t.checks["same"].startswith("ok") and t.checks["A/A"].startswith("ok")
    assert t.checks["other"].startswith("DIFFERS")
    assert t.checks["broken"].startswith("fails in onnxruntime")


def test_sessions_do_not_spin(tmp_path: Path) -> None:
    path = _model(tmp_path / "a.onnx")
    options = timing.session(path, threads=3).get_session_options()
    assert options.intra_op_num_threads == 3
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_random_inputs_follow_the_graph_inputs(tmp_path: Path) -> None:
    inputs = timing.random_inputs(_model(tmp_path / "a.onnx"))
    assert list(inputs) == ["x"] and inputs["x"].shape == (1, 8)
    assert inputs["x"].dtype == np.float32


#: The end of ``relsat optimize``'s output on an ONNX file, as rich prints it.
CLI_OUTPUT = """\
optimizing model.onnx: 230 nodes
opaque: 7 of 217 ops (Erf 4, Where 2, Gather 1)
  it  1 single matches    120 applied     80 added    40 merged     0 net    +40 e-nodes    600
gains by rule (ort-cpu): fuse-gelu 0.0123, matmul-assoc 0.0001
verified in onnxruntime: outputs match the original
onnxruntime CPU 1 thread: original 1.234 ms, optimized 1.100 ms (x1.12, faster)
              before / after
                 │  before │                     after
 ────────────────┼─────────┼──────────────────────────
  cost (ms)      │  1.2000 │  1.0000 (16.7 % less)
  latency (ms)   │   1.234 │  1.1 (x1.12, faster)
  explore (s)    │         │                     0.500
  stop           │         │                 saturated
  extraction     │         │               ilp optimal
  verified       │         │               onnxruntime
  kept           │         │      optimized (faster)
written to out.onnx
"""


def test_cli_output_is_parsed() -> None:
    run = calls.CliRun(["relsat"], rc=0)
    calls.parse(run, CLI_OUTPUT, "")
    assert run.ok
    assert run.cost == (1.2, 1.0)
    assert run.opaque == "7 of 217 ops (Erf 4, Where 2, Gather 1)"
    assert run.rewrites == "fuse-gelu 0.0123, matmul-assoc 0.0001"
    assert run.stop == "saturated"
    assert run.extraction == "ilp optimal"
    assert run.verified == "onnxruntime"
    assert run.kept == "optimized (faster)"
    assert run.timing is not None and run.timing.startswith("onnxruntime CPU")


def test_cli_refusal_is_the_last_relsat_line() -> None:
    run = calls.CliRun(["relsat"], rc=1)
    stderr = "a warning\nrelsat: error: opset 9 Upsample unsupported\n"
    calls.parse(run, "optimizing m.onnx\n", stderr)
    assert not run.ok and run.error == "opset 9 Upsample unsupported"


def test_cli_times_out_as_a_row(tmp_path: Path) -> None:
    source = _model(tmp_path / "a.onnx")
    run = calls.cli(source, tmp_path / "out.onnx", ["--threads", "1"], timeout=0.01)
    assert run.rc is None and run.error is not None and "timed out" in run.error
    assert not run.ok


def _never(directory: Path) -> corpus.Export:
    raise AssertionError("select must not make anything")


def test_select_by_name_model_or_family() -> None:
    pairs = [("a.dynamo", "hf"), ("a.legacy", "hf"), ("zoo-b", "z")]
    entries = {n: corpus.Entry(n, f, "x", _never) for n, f in pairs}
    assert [x.name for x in corpus.select(entries, ["a"])] == ["a.dynamo", "a.legacy"]
    assert [x.name for x in corpus.select(entries, ["z"])] == ["zoo-b"]
    assert [x.name for x in corpus.select(entries, ["a.legacy"])] == ["a.legacy"]
    assert len(corpus.select(entries, None)) == 3
    with pytest.raises(KeyError, match="nope"):
        corpus.select(entries, ["nope"])


def test_append_csv_extends_an_older_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    common.append_csv("t", ["a", "b"], [[1, 2]])
    common.append_csv("t", ["a", "b", "c, d"], [[3, 4, 5]])
    with (tmp_path / "t.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][2:] == ["a", "b", "c, d"]
    assert [r[2:] for r in rows[1:]] == [["1", "2"], ["3", "4", "5"]]
