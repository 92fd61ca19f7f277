"""Many models: the local pool (always), Ray (when installed), the measuring lock, the model
lists, ``relsat optimize-many``. Tiny models, 2 workers, short timing budgets."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pyarrow.parquet as pq
import pytest
from onnx import TensorProto, helper, numpy_helper

import relsat
from relsat.cli import EXIT_ERROR, EXIT_USAGE, main
from relsat.fleet import Fleet, FleetError, MeasureLock, find_models, optimize_many
from relsat.fleet.cluster import connect
from relsat.fleet.local import run_local
from relsat.fleet.summary import Row
from relsat.fleet.worker import Task, run_one

DATA = Path(relsat.__file__).parent / "models" / "data"
#: Deterministic verdicts: no timing (a timed verdict depends on the machine's load).
UNTIMED = relsat.Options(timing=None, ort=relsat.OrtSettings(threads=1))
TIMED = relsat.Options(timing=relsat.Timing(max_seconds=1), ort=relsat.OrtSettings(threads=1))


def tiny(path: Path) -> Path:
    """y = relu(x @ W + b) on a 2x8 input."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4), dtype=np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4, dtype=np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["t"]),
            helper.make_node("Add", ["t", "b"], ["u"]),
            helper.make_node("Relu", ["u"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture
def models(tmp_path: Path) -> list[str]:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an ONNX model")
    return [str(DATA / "example.onnx"), str(broken), str(tiny(tmp_path / "tiny.onnx"))]


# --- the local pool -------------------------------------------------------------------------


def test_pool_gives_the_verdicts_of_single_runs(tmp_path: Path, models: list[str]) -> None:
    single = {m: relsat.optimize(m, UNTIMED) for m in models if "broken" not in m}
    seen: list[str] = []
    summary = optimize_many(
        models, UNTIMED, tmp_path / "out", Fleet(workers=2), on_row=lambda r: seen.append(r.name)
    )
    assert sorted(seen) == ["broken", "example", "tiny"]
    example, broken, small = summary.rows
    assert broken.error is not None and "not an ONNX model" in broken.error
    assert broken.kept is None and not (tmp_path / "out" / "broken.onnx").exists()
    for row in (example, small):
        result = single[row.model]
        assert row.error is None, row.error
        assert (row.kept, row.why) == (result.kept, result.why)
        # Prices measured while another process ran are doubtful and the pool's workers re-check
        # them (relsat.cost.stability), so a row's prices and the graph they choose may differ
        # from the single run's; the verdict may not.
        assert row.rewrites is not None and row.cost_after is not None and row.cost_after > 0
        assert row.machine == relsat.OrtSettings(threads=1).machine()
        assert row.prices is not None and row.prices.startswith(row.machine)
        written = Path(row.output or "")
        assert written == tmp_path / "out" / f"{row.name}.onnx" and written.stat().st_size > 0
    table = pq.read_table(summary.parquet)
    assert table["model"].to_pylist() == models and table.num_rows == 3
    assert summary.csv.read_text().splitlines()[0].startswith("index,model,name,kept,why")
    assert [r.name for r in summary.failed] == ["broken"]


def test_timed_rows_carry_the_speedup_and_its_interval(tmp_path: Path) -> None:
    summary = optimize_many([DATA / "encoder.onnx"], TIMED, tmp_path, Fleet(workers=1))
    (row,) = summary.rows
    assert row.error is None and row.kept in ("original", "optimized")
    if row.verdict is not None:  # timed: a rewrite was chosen
        assert row.speedup_low is not None and row.speedup_high is not None
        assert row.speedup_low <= row.speedup <= row.speedup_high
        assert row.measure_s is not None and row.measure_s > 0  # timing ran under the lock


def _fake(task: Task) -> tuple[Row, bytes | None]:
    """A job that optimizes nothing; the worker running ``die*`` kills itself."""
    if task.name.startswith("die"):
        os.kill(os.getpid(), signal.SIGKILL)
    return Row(index=task.index, model=task.model, name=task.name, kept="original"), None


def test_a_dead_worker_is_one_row_and_the_others_finish() -> None:
    tasks = [Task(i, f"{n}.onnx", n, UNTIMED) for i, n in enumerate(["a", "die", "b", "c"])]
    rows = {r.name: r for r in run_local(tasks, 2, retries=1, job=_fake)}
    assert sorted(rows) == ["a", "b", "c", "die"]
    assert rows["die"].error is not None and "worker died 2 times" in rows["die"].error
    assert all(rows[n].error is None and rows[n].kept == "original" for n in "abc")


# --- the measuring lock ---------------------------------------------------------------------


def test_measuring_excludes_every_other_stage(tmp_path: Path) -> None:
    events: list[str] = []

    def stage(name: str, exclusive: bool, seconds: float, delay: float) -> None:
        time.sleep(delay)
        lock = MeasureLock(tmp_path)
        with lock.hold(exclusive=exclusive):
            events.append(f"{name}+")
            time.sleep(seconds)
            events.append(f"{name}-")

    threads = [
        threading.Thread(target=stage, args=("explore", False, 0.4, 0.0)),
        threading.Thread(target=stage, args=("time", True, 0.2, 0.1)),  # waits for explore
        threading.Thread(target=stage, args=("late", False, 0.0, 0.2)),  # waits for time
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert events == ["explore+", "explore-", "time+", "time-", "late+", "late-"]


# --- which models ---------------------------------------------------------------------------


def test_local_workers_share_the_cores_and_the_cap_reaches_duckdb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from relsat.engine.db import Database
    from relsat.errors import SettingsError
    from relsat.threads import VARIABLE

    cores = Fleet().slots
    assert Fleet(workers=1).thread_share is None  # one worker: the whole machine
    assert Fleet(workers=2, ray="auto").thread_share is None  # Ray assigns a task's CPUs
    assert Fleet(workers=2).thread_share == max(1, cores // 2)
    assert Fleet(workers=4 * cores).thread_share == 1
    monkeypatch.setenv(VARIABLE, "1")
    db = Database()
    db.fit_threads(10**9)  # a large e-graph: DuckDB's default would be a thread per core
    assert db.con.execute("SELECT current_setting('threads')").fetchone()[0] == 1
    db.close()
    monkeypatch.setenv(VARIABLE, "many")
    with pytest.raises(SettingsError, match="RELSAT_THREADS must be an integer >= 1"):
        Database()


def test_folders_and_list_files_name_models(tmp_path: Path) -> None:
    (tmp_path / "zoo" / "deep").mkdir(parents=True)
    a, b = tiny(tmp_path / "zoo" / "a.onnx"), tiny(tmp_path / "zoo" / "deep" / "a.onnx")
    listing = tmp_path / "list.txt"
    listing.write_text(f"# models\nzoo/deep/a.onnx\n{a}  # again\n\nmissing.onnx\nlist.txt\n")
    assert find_models([tmp_path / "zoo"]) == [str(a), str(b)]
    assert find_models([listing]) == [str(b), str(a), str(tmp_path / "missing.onnx")]
    summary = optimize_many([listing], UNTIMED, tmp_path / "out", Fleet(workers=1))
    assert [r.name for r in summary.rows] == ["a", "a-2", "missing"]
    assert summary.rows[2].error == "no such file"
    assert {p.name for p in (tmp_path / "out").glob("*.onnx")} == {"a.onnx", "a-2.onnx"}


# --- the command ----------------------------------------------------------------------------


def test_optimize_many_command(
    tmp_path: Path, models: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["optimize-many", *models, "--out-dir", str(out), "--workers", "2", "--no-timing"]
    assert main([*argv, "--threads", "1"]) == EXIT_ERROR  # one model failed, the others written
    text = capsys.readouterr().out
    assert "optimizing on 2 local workers" in text and "1 of 3 models failed" in text
    assert (out / "example.onnx").is_file() and (out / "tiny.onnx").is_file()
    assert (out / "summary.csv").is_file() and (out / "summary.parquet").is_file()
    assert main([*argv[:-3], "--workers", "0"]) == EXIT_USAGE
    assert main(["optimize-many", models[0], "--out-dir", str(out), "--cost-model", "t4",
                 "--cost-store", str(tmp_path / "s")]) == EXIT_USAGE  # fmt: skip


def test_a_rows_error_names_the_option_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shape refused at load: ``--input-shape`` in optimize-many's line, ``input_shapes`` in a
    row of the Python API."""
    encoder = str(DATA / "encoder.onnx")
    options = relsat.Options(input_shapes={"nope": (1, 2)}, timing=None)
    row, _ = run_one(Task(0, encoder, "encoder", options))
    assert row.error and "input_shapes names unknown inputs ['nope']" in row.error
    named = (("input_shapes", "--input-shape"),)
    row, _ = run_one(Task(0, encoder, "encoder", options, named=named))
    assert row.error and "--input-shape names unknown inputs ['nope']" in row.error
    argv = ["optimize-many", encoder, "--out-dir", str(tmp_path), "--workers", "1", "--no-timing"]
    assert main([*argv, "--input-shape", "nope=1,2"]) == EXIT_ERROR
    text = capsys.readouterr().out
    assert "--input-shape names unknown inputs ['nope']" in text and "input_shapes" not in text


# --- Ray ------------------------------------------------------------------------------------


def test_without_ray_the_error_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    with pytest.raises(FleetError, match=r"pip install 'relsat\[cluster\]'"):
        optimize_many([DATA / "example.onnx"], UNTIMED, tmp_path, Fleet(ray="auto"))


def test_an_unreachable_cluster_is_one_line() -> None:
    class NoRay:
        def is_initialized(self) -> bool:
            return False

        def init(self, **kw: object) -> None:
            raise AssertionError("must not try Ray's minutes of retries")

    start = time.perf_counter()
    with pytest.raises(FleetError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:1"):
        connect(NoRay(), "127.0.0.1:1", 1)
    assert time.perf_counter() - start < 10
    with pytest.raises(FleetError, match="HOST:PORT"):
        connect(NoRay(), "nowhere", 1)


@pytest.fixture(scope="module")
def ray_local() -> object:
    ray = pytest.importorskip("ray")
    from relsat.fleet.cluster import RESOURCE

    ray.init(
        num_cpus=2,
        resources={RESOURCE: 2},
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
    )
    yield ray
    ray.shutdown()


def test_ray_gives_the_rows_of_the_pool(
    ray_local: object, tmp_path: Path, models: list[str]
) -> None:
    local = optimize_many(models, UNTIMED, tmp_path / "local", Fleet(workers=2))
    remote = optimize_many(models, UNTIMED, tmp_path / "ray", Fleet(ray="auto"))
    for a, b in zip(local.rows, remote.rows, strict=True):
        assert (a.name, a.kept, a.why, a.rewrites) == (b.name, b.kept, b.why, b.rewrites)
        assert (a.error is None) == (b.error is None)
        if b.output is not None:  # written here by the driver from the bytes the task returned
            assert Path(b.output).read_bytes() == Path(a.output or "").read_bytes()
    assert remote.rows[1].error is not None and "not an ONNX model" in remote.rows[1].error


def test_ray_a_killed_worker_is_one_row(ray_local: object, tmp_path: Path) -> None:
    from relsat.fleet.cluster import run_ray

    def job(task: Task) -> tuple[Row, bytes | None]:  # pickled by value: the worker needs no tests/
        if task.name == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        return run_one(task)

    tasks = [
        Task(0, str(DATA / "example.onnx"), "example", UNTIMED),
        Task(1, "x.onnx", "die", UNTIMED),
    ]
    rows = {
        r.name: r
        for r in run_ray(tasks, "auto", workers=2, out_dir=str(tmp_path), job=job, retries=0)
    }
    assert rows["die"].error is not None and "worker died" in rows["die"].error
    assert rows["example"].error is None and rows["example"].kept == "original"
    assert (tmp_path / "example.onnx").is_file()


# --- what the summary says ----------------------------------------------------------------


def test_the_summary_says_the_word_of_the_timing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row's why is the timing's word, beside the speedup it qualifies: synthetic rounds
    where the A/A control ran as fast as the optimized model (no real timing)."""
    from rich.console import Console

    from relsat.fleet.summary import table
    from relsat.onnx import latency
    from relsat.pipeline import ort

    n = 15
    noisy = latency.LatencyComparison.from_rounds(
        [1.0] * n,
        [0.70 + 0.08 * i / (n - 1) for i in range(n)],
        [0.82 - 0.14 * i / (n - 1) for i in range(n)],
    )
    monkeypatch.setattr(ort, "unchanged", lambda run: False)
    monkeypatch.setattr(latency, "compare_latency", lambda *args, **kwargs: noisy)
    options = relsat.Options(cost_model="analytic", ort=relsat.OrtSettings(threads=1))
    row, _ = run_one(Task(0, str(tiny(tmp_path / "tiny.onnx")), "tiny", options))
    assert (row.kept, row.why, row.verdict) == ("original", "too noisy to tell", "same")
    console = Console(width=200, record=True)
    console.print(table([row]))
    text = console.export_text()
    assert "too noisy to tell" in text and "x1.35 [1.33-1.38]" in text


def test_an_out_dir_that_would_overwrite_an_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tiny(tmp_path / "tiny.onnx")
    before = model.read_bytes()
    argv = ["optimize-many", str(model), "--no-timing", "--out-dir"]
    assert main([*argv, str(tmp_path)]) == EXIT_USAGE  # tiny.onnx would be written over itself
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "would overwrite the input" in err
    assert model.read_bytes() == before and not (tmp_path / "summary.csv").exists()
    (tmp_path / "a-file").write_text("")
    assert main([*argv, str(tmp_path / "a-file")]) == EXIT_USAGE
    assert "is a file, not a folder" in capsys.readouterr().err
