"""The shared cost store: writers' own files, merging by DuckDB (sound rows first), identities
kept apart, corrupt files named and skipped, older files without spreads read, clearing, and
``relsat costs`` show / export / import / merge / clear.

Small shapes only; no assertion compares two timings. Every price is taken as sound here
(``LENIENT``): which prices a busy machine makes doubtful is tests/test_cost_ort.py's."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from relsat.cli import EXIT_ERROR, main
from relsat.cost import OpSignature, OrtModel, OrtTiming
from relsat.cost.ort import PROTOCOL, CostCacheWarning, cache_dir
from relsat.cost.stability import Stability
from relsat.cost.store import CostStore, CostStoreError, StoreRows, merge_rows, read_sources
from relsat.cost.table import COST_SCHEMA, CostTable
from relsat.engine.db import Database
from relsat.onnx.runtime import OrtSettings

LENIENT = Stability(attempts=1, max_spread=math.inf, max_load=1.0)
FAST = OrtTiming(warmup=1, min_runs=3, max_runs=8, budget_s=0.02, passes=3, stability=LENIENT)
SIGS = [
    OpSignature("relu", (), "", ((4, 16),), (4, 16)),
    OpSignature("ewadd", (), "", ((2, 8), (2, 8)), (2, 8)),
    OpSignature("transpose", (1,), "1_0", ((4, 16),), (16, 4)),
    OpSignature("matmul", (0,), "", ((4, 8), (8, 16)), (4, 16), (False, True)),
    OpSignature("concat", (1, 2), "", ((4, 8), (4, 8)), (4, 16)),
    OpSignature("poolavg", (2, 2, 2, 2, 1, 0), "", ((1, 8, 8, 8),), (1, 8, 4, 4)),
]


@pytest.fixture(autouse=True)
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own cache directory: never the user's."""
    monkeypatch.setenv("RELSAT_CACHE_DIR", str(tmp_path / "cache"))
    yield tmp_path / "cache"


class Quiet:
    """A load probe that always reads a quiet machine."""

    def start(self) -> object:
        return None

    def share(self, since: object) -> float:
        return 0.0


def model(**kw: object) -> OrtModel:
    defaults = {"timing": FAST, "progress": False, "cache": False, "probe": Quiet()}
    return OrtModel(**{**defaults, **kw})  # type: ignore[arg-type]


def rows(
    device: str,
    ms: dict[str, float],
    spread: float | None = None,
    load: float | None = None,
    *,
    old: bool = False,
) -> pa.Table:
    """Cost rows of ``device`` with the given key → ms, each of ``spread`` and ``load`` (other
    columns filler); ``old``: as written before rows kept spread and load (no such columns)."""
    n = len(ms)
    table = pa.table(
        {
            "device": [device] * n,
            "key": list(ms),
            "op": ["relu"] * n,
            **{f"p{i}": [-1] * n for i in range(6)},
            "s": [""] * n,
            "inputs": ["[[1]]"] * n,
            "output": ["[1]"] * n,
            "ms": list(ms.values()),
            "source": ["test"] * n,
            "spread": [spread] * n,
            "load": [load] * n,
        },
        schema=COST_SCHEMA,
    )
    return table.drop_columns(["spread", "load"]) if old else table


def test_each_writer_owns_a_file_and_no_row_is_lost(tmp_path: Path) -> None:
    store = tmp_path / "store"
    one, two = model(store=store), model(store=store)
    one.costs(SIGS[:3])
    two.costs(SIGS[2:])  # SIGS[2] measured by both: two files, one merged row
    files = CostStore(store).files()
    assert len(files) == 2
    found = CostStore(store).read(one.device)
    assert found.files == 2 and not found.skipped
    assert sorted(found.rows["key"].to_pylist()) == sorted({one.canonical(s).key for s in SIGS})


def test_a_store_at_a_uri_takes_the_object_store_path(tmp_path: Path) -> None:
    # An object store (s3://, gs://) is opened by pyarrow.fs from its URI and written without
    # a rename, one object per writer. No object store is reachable here: a file:// URI takes
    # the same URI path through pyarrow.fs, and `remote` forces the write-without-rename branch.
    uri = (tmp_path / "bucket").as_uri()
    store = CostStore(uri)
    assert store.location == uri and not store.remote
    store.remote = True  # as for s3://: each writer PUTs its whole object
    first, second = store.writer("node-a"), store.writer("node-b")
    first.write(rows("ort-cpu|x", {"a": 1.0, "b": 2.0}))
    second.write(rows("ort-cpu|x", {"b": 4.0, "c": 3.0}))
    first.write(rows("ort-cpu|x", {"a": 1.0, "b": 2.0, "d": 5.0}))  # rewrites its own object
    assert len(store.files()) == 2 and not list((tmp_path / "bucket").rglob("*.tmp"))
    merged = CostStore(uri).read("ort-cpu|x")
    assert dict(
        zip(merged.rows["key"].to_pylist(), merged.rows["ms"].to_pylist(), strict=True)
    ) == {
        "a": 1.0,
        "b": 3.0,  # the median of both writers' times
        "c": 3.0,
        "d": 5.0,
    }
    assert CostStore(uri).read("ort-cpu|other").rows.num_rows == 0  # another identity: none


def test_merging_two_stores_prices_everything_without_measuring(tmp_path: Path) -> None:
    a, b = model(store=tmp_path / "a"), model(store=tmp_path / "b")
    ms_a, ms_b = a.costs(SIGS[:3]), b.costs(SIGS[3:])
    assert a.measured == 3 and b.measured == 3
    merged = tmp_path / "merged.parquet"
    assert (
        main(["costs", "merge", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(merged)]) == 0
    )
    assert pq.read_table(merged).num_rows == 6
    # a third machine of the same identity, pointed at a store holding only the merged file
    store = tmp_path / "shared"
    assert main(["costs", "import", str(merged), "--store", str(store)]) == 0
    c = model(store=store)
    assert c.shared == 6
    assert c.costs(SIGS).tolist() == [*ms_a.tolist(), *ms_b.tolist()]
    assert c.measured == 0


def test_an_imported_file_prices_from_the_local_cache(tmp_path: Path, cache_root: Path) -> None:
    first = model(store=tmp_path / "s")
    ms = first.costs(SIGS)
    exported = tmp_path / "costs.parquet"
    assert main(["costs", "export", str(exported), "--store", str(tmp_path / "s")]) == 0
    assert main(["costs", "import", str(exported)]) == 0  # into this machine's cache
    assert any(p.name.startswith("costs-") for p in (cache_root / "costs").iterdir())
    cached = OrtModel(timing=FAST, progress=False)  # the default: the cache folder
    assert cached.costs(SIGS).tolist() == ms.tolist() and cached.measured == 0


def test_rows_of_another_identity_are_never_used(tmp_path: Path) -> None:
    store = tmp_path / "store"
    one = model(settings=OrtSettings(threads=1), store=store)
    one.costs(SIGS[:2])
    two = model(settings=OrtSettings(threads=2), store=store)
    assert two.device != one.device and two.shared == 0
    two.costs(SIGS[:2])
    assert two.measured == 2
    found = CostStore(store).read()
    assert found.identities() == {one.device: 2, two.device: 2}  # kept apart, never merged
    assert CostStore(store).read(one.device).rows.num_rows == 2


def test_a_corrupt_file_is_named_and_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    good = model(store=store)
    good.costs(SIGS[:2])
    bad = store / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    found = CostStore(store).read()
    assert [Path(s.path).name for s in found.skipped] == ["bad.parquet"]
    assert found.rows.num_rows == 2  # nothing else lost
    with pytest.warns(CostCacheWarning, match="bad.parquet"):
        again = model(store=store)
    assert again.shared == 2
    again.costs(SIGS[:2])
    assert again.measured == 0
    # a store argument: skipped and named; a file argument: refused, nothing written
    out = tmp_path / "out.parquet"
    assert main(["costs", "merge", str(store), "-o", str(out)]) == 0
    assert "bad.parquet" in capsys.readouterr().err and pq.read_table(out).num_rows == 2
    out.unlink()
    assert main(["costs", "merge", str(bad), str(store), "-o", str(out)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("relsat: error:") and "bad.parquet" in err and not out.exists()
    assert main(["costs", "import", str(bad), "--store", str(tmp_path / "other")]) == EXIT_ERROR
    assert not (tmp_path / "other").exists()


def test_a_file_with_other_columns_is_not_a_cost_table(tmp_path: Path) -> None:
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1]}), path)
    with pytest.raises(CostStoreError, match="lacks the columns"):
        read_sources([path])


def test_duplicates_merge_to_their_median_in_any_order() -> None:
    a = rows("m1", {"k": 1.0, "j": 5.0})
    b = rows("m1", {"k": 3.0})
    c = rows("m1", {"k": 2.0})
    other = rows("m2", {"k": 100.0})
    for tables in ([a, b, c, other], [other, c, b, a]):
        merged = merge_rows(tables)
        got = {
            (d, k): ms
            for d, k, ms in zip(
                *(merged[n].to_pylist() for n in ("device", "key", "ms")), strict=True
            )
        }
        assert got == {("m1", "j"): 5.0, ("m1", "k"): 2.0, ("m2", "k"): 100.0}
    assert merge_rows([a, other], "m2")["ms"].to_pylist() == [100.0]


def test_show_marks_this_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = model(settings=OrtSettings(threads=1), store=tmp_path / "s")
    m.costs(SIGS[:1])
    assert main(["costs", "show", "--store", str(tmp_path / "s"), "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert f"{m.device}  (this machine)" in out and "1 files, 1 rows" in out


def test_the_cache_folder_is_a_store(cache_root: Path) -> None:
    m = OrtModel(timing=FAST, progress=False)
    m.costs(SIGS[:2])
    assert m.path is not None and m.path.parent == cache_dir() / "costs"
    assert CostStore(cache_root / "costs").read(m.device).rows.num_rows == 2


def test_optimize_writes_its_measurements_to_the_store(tmp_path: Path) -> None:
    encoder = Path(__file__).resolve().parent.parent / "relsat" / "models" / "data" / "encoder.onnx"
    store = tmp_path / "store"
    argv = ["optimize", str(encoder), "-o", str(tmp_path / "out.onnx"), "--no-timing"]
    assert main([*argv, "--threads", "1", "--cost-store", str(store)]) == 0
    found = CostStore(store).read()
    assert found.rows.num_rows > 0 and list(found.identities()) == [
        f"{OrtSettings(threads=1).machine()}|protocol{PROTOCOL}"
    ]
    assert main([*argv, "--cost-model", "t4", "--cost-store", str(store)]) == 2  # usage


def test_a_miss_reads_the_store_again_before_measuring(tmp_path: Path) -> None:
    store = tmp_path / "store"
    early, late = model(store=store), model(store=store)  # both started before any measuring
    early.costs(SIGS)
    assert late.shared == 0
    late.costs(SIGS)
    assert late.measured == 0 and late.shared == len(SIGS)


# --- spreads, older files, clearing ----------------------------------------------------------


def by_key(table: pa.Table, column: str = "ms") -> dict[str, object]:
    return dict(zip(table["key"].to_pylist(), table[column].to_pylist(), strict=True))


def test_merging_prefers_sound_rows_and_keeps_the_widest_spread() -> None:
    """A writer's sound re-check outvotes another writer's doubtful price; writers that
    disagree make the merged row doubtful (its spread their IQR over the median)."""
    doubtful = rows("m", {"rotary": 0.025, "conv": 1.0}, spread=0.02, load=0.8)
    sound = rows("m", {"rotary": 0.005}, spread=0.03, load=0.0)
    merged = merge_rows([doubtful, sound])
    assert by_key(merged) == {"conv": 1.0, "rotary": 0.005}
    assert by_key(merged, "spread") == {"conv": 0.02, "rotary": 0.03}
    assert by_key(merged, "load") == {"conv": 0.8, "rotary": 0.0}
    apart = merge_rows([rows("m", {"k": 1.0}, 0.01, 0.0), rows("m", {"k": 2.0}, 0.02, 0.0)])
    assert by_key(apart, "spread") == {"k": pytest.approx(0.5 / 1.5)}  # they disagree
    unknown = merge_rows([rows("m", {"k": 1.0}), rows("m", {"k": 3.0}, 0.5, 0.9)])
    assert by_key(unknown) == {"k": 2.0} and by_key(unknown, "spread") == {"k": None}


def test_an_older_file_without_spreads_reads_as_spread_unknown(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    pq.write_table(rows("m", {"a": 1.0, "b": 2.0}, old=True), store / "old.parquet")
    found = CostStore(store).read("m")
    assert not found.skipped and by_key(found.rows) == {"a": 1.0, "b": 2.0}
    assert by_key(found.rows, "spread") == {"a": None, "b": None}
    spreads = found.spreads()["m"]
    assert (spreads.rows, spreads.unknown, spreads.doubtful, spreads.median) == (2, 2, 2, None)
    table = CostTable.from_parquet(store / "old.parquet")  # a shipped table of the old format
    assert table.to_arrow()["spread"].null_count == 2


def test_an_older_database_cost_table_gains_the_columns(tmp_path: Path) -> None:
    path = str(tmp_path / "old.duckdb")
    db = Database(path)
    db.execute(
        "CREATE TABLE cost (device VARCHAR NOT NULL, key VARCHAR NOT NULL, op VARCHAR NOT NULL,"
        + "".join(f" p{i} INTEGER NOT NULL," for i in range(6))
        + " s VARCHAR NOT NULL, inputs VARCHAR NOT NULL, output VARCHAR NOT NULL,"
        " ms DOUBLE NOT NULL, source VARCHAR NOT NULL, PRIMARY KEY (device, key))"
    )
    db.execute(
        f"INSERT INTO cost VALUES ('m', 'a', 'relu', {'-1, ' * 6}'', '[[1]]', '[1]', 1, 't')"
    )
    table = CostTable(db)
    table.insert_arrow(rows("m", {"b": 2.0}, spread=0.05, load=0.1))
    assert by_key(table.to_arrow(), "spread") == {"a": None, "b": 0.05}
    db.close()


def test_spreads_summarise_how_far_prices_hold() -> None:
    table = pa.concat_tables(
        [
            rows("m", {"a": 1.0, "b": 1.0}, spread=0.02, load=0.0),
            rows("m", {"c": 1.0}, spread=0.4, load=0.0),
            rows("m", {"d": 1.0}, spread=0.04, load=0.9),
            rows("m", {"e": 1.0}),
        ]
    )
    s = StoreRows(table).spreads()["m"]
    assert (s.rows, s.wide, s.loaded, s.unknown, s.doubtful) == (5, 1, 1, 1, 3)
    assert s.median == pytest.approx(0.03)


def test_clear_removes_rows_and_says_what(tmp_path: Path) -> None:
    store = CostStore(tmp_path / "store")
    store.add(rows("m1", {"a": 1.0, "b": 2.0}), "one")
    mixed = store.add(pa.concat_tables([rows("m1", {"c": 1.0}), rows("m2", {"c": 5.0})]), "mix")
    (tmp_path / "store" / "bad.parquet").write_bytes(b"not parquet")
    done = store.clear("m1")
    assert done.rows == {"m1": 3} and done.total == 3
    assert len(done.deleted) == 1 and done.rewritten == (mixed,)
    assert [s.path.endswith("bad.parquet") for s in done.skipped] == [True]
    assert store.read().identities() == {"m2": 1}  # the other identity's row kept
    everything = store.clear()
    assert everything.rows == {"m2": 1} and everything.deleted == (mixed,)
    assert [Path(f).name for f in store.files()] == ["bad.parquet"]  # unreadable: left alone


def test_costs_clear_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    CostStore(store).add(pa.concat_tables([rows("m1", {"a": 1.0}), rows("m2", {"a": 2.0})]))
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["costs", "clear", "--store", str(store)]) == 2  # no terminal to ask: refused
    assert "give --yes" in capsys.readouterr().err
    assert CostStore(store).read().rows.num_rows == 2  # nothing removed
    assert main(["costs", "clear", "--store", str(store), "--identity", "m1", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 row from" in out and "m1" in out and "0 files deleted, 1 rewritten" in out
    assert main(["costs", "clear", "--store", str(store), "-y"]) == 0
    assert "removed 1 row" in capsys.readouterr().out
    assert CostStore(store).files() == []
    assert main(["costs", "clear", "--store", str(store), "-y"]) == 0
    assert "no rows to remove" in capsys.readouterr().out


def test_show_gives_the_spread_and_lists_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    here = f"{OrtSettings(threads=1).machine()}|protocol{PROTOCOL}"
    store = CostStore(tmp_path / "s")
    store.add(rows(here, {"a": 0.5, "b": 0.25}, spread=0.02, load=0.0))
    argv = ["costs", "show", "--store", str(tmp_path / "s"), "--threads", "1"]
    assert main([*argv, "--rows"]) == 0
    out = capsys.readouterr().out
    assert "spread median 2.0%, 90th percentile 2.0%; every price sound" in out
    assert "relu" in out and "0.5000" in out and "2.0%" in out
    store.add(rows(here, {"old": 1.0}, old=True), "old")
    assert main(argv) == 0
    assert "1 of unknown spread: 1 re-checked on next use" in capsys.readouterr().out


def test_show_remeasure_rechecks_this_machines_prices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real onnxruntime re-check from the command line: its report's structure, no time."""
    m = model(settings=OrtSettings(threads=1), store=tmp_path / "s")
    m.costs(SIGS[:2])
    argv = ["costs", "show", "--store", str(tmp_path / "s"), "--threads", "1", "--remeasure"]
    assert main(argv) == 0
    assert "re-checked the doubtful prices" in capsys.readouterr().out
    assert main([*argv, "all"]) == 0
    assert "2 of 2 timed again" in capsys.readouterr().out
