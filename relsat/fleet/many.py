""":func:`optimize_many`: many ONNX models, one :class:`~relsat.Options`, one summary table.

>>> from relsat.fleet import Fleet
>>> Fleet(workers=2).where()
'2 local workers'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from relsat.errors import SettingsError, check_int
from relsat.fleet.inputs import find_models, names
from relsat.fleet.summary import Row, error_row, write
from relsat.fleet.worker import Task
from relsat.pipeline.options import Options

__all__ = ["Fleet", "Summary", "optimize_many"]


@dataclass(frozen=True, kw_only=True)
class Fleet:
    """Where and how many models run.

    ``workers``: local worker processes (None: one per core this process may use), or with
    ``ray`` the model slots of a local Ray started here; ``ray``: None (a local process pool),
    ``"auto"`` or a cluster address (:mod:`relsat.fleet.cluster`); ``cost_store``: a shared
    :class:`~relsat.cost.store.CostStore` folder every worker reads and writes measured prices
    in; ``exclusive``: measuring stages take the machine's lock exclusively (False: timings may
    share cores — faster, noisier; for experiments only); ``retries``: how often a model whose
    worker died is tried again."""

    workers: int | None = None
    ray: str | None = None
    cost_store: str | os.PathLike[str] | None = None
    exclusive: bool = True
    retries: int = 1

    def __post_init__(self) -> None:
        if self.workers is not None:
            check_int("workers", self.workers, 1)
        check_int("retries", self.retries, 0)
        if self.ray is not None and (not isinstance(self.ray, str) or not self.ray):
            raise SettingsError("ray", self.ray, "None, 'auto' or a cluster address")

    @property
    def slots(self) -> int:
        """The number of models run at once on this machine."""
        return self.workers if self.workers is not None else _cores()

    @property
    def thread_share(self) -> int | None:
        """The threads each local worker's non-measuring stages may use (``RELSAT_THREADS``,
        :mod:`relsat.threads`): the cores divided among the workers, so that two models
        exploring at once do not each start a DuckDB thread per core; None for one worker (the
        whole machine) and on Ray (a task's CPUs are Ray's to assign)."""
        if self.ray is not None or self.slots == 1:
            return None
        return max(1, _cores() // self.slots)

    def where(self) -> str:
        """In words: ``2 local workers`` or ``Ray at auto``."""
        if self.ray is not None:
            return f"Ray at {self.ray}"
        return f"{self.slots} local worker" + ("s" if self.slots != 1 else "")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Summary:
    """What :func:`optimize_many` did: one row per model in list order, and the files the
    summary was written to."""

    rows: tuple[Row, ...]
    csv: Path
    parquet: Path

    @property
    def failed(self) -> tuple[Row, ...]:
        """The rows with an error."""
        return tuple(r for r in self.rows if r.error is not None)


def optimize_many(
    models: Iterable[str | os.PathLike[str]],
    options: Options | None = None,
    out_dir: str | os.PathLike[str] = ".",
    fleet: Fleet | None = None,
    *,
    on_row: Callable[[Row], None] | None = None,
    named: Mapping[str, str] | None = None,
) -> Summary:
    """Optimize every model ``models`` names (ONNX files, folders, list files:
    :func:`~relsat.fleet.inputs.find_models`) with ``options``, as :func:`relsat.optimize`
    would one by one — the never-slower choice included — and write each kept model to
    ``out_dir/<name>.onnx`` and the summary to ``out_dir/summary.csv`` and ``summary.parquet``
    (rewritten as each model finishes).

    ``fleet`` says where they run (:class:`Fleet`: a local pool by default; on a Ray cluster
    every node must read the models, and the cost store, at the same absolute paths: a shared
    folder; the kept models come back to this process). ``on_row`` is
    called with each row as its model finishes. A model that fails (cannot be loaded, fails
    verification, its worker dies) gets a row with its ``error``; the others go on. ``named``
    says what an error calls a setting it names (a command line's flags, ``{"input_shapes":
    "--input-shape"}``; None: the fields of :class:`Options`).
    """
    options = options if options is not None else Options()
    fleet = fleet if fleet is not None else Fleet()
    models = [os.fspath(m) for m in models]
    if not isinstance(options, Options):
        raise SettingsError("options", options, "a relsat.Options or None")
    if options.db is not None:
        raise SettingsError("db", options.db, "None (each model keeps its e-graph in memory)")
    files = find_models(models)
    if not files:
        raise SettingsError("models", models, "at least one ONNX file, folder or list")
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    store = None if fleet.cost_store is None else os.fspath(fleet.cost_store)
    if store is not None and "://" not in store:  # the same folder for every worker and node
        store = os.path.abspath(store)
    rows: list[Row] = []
    tasks = []
    for index, (model, name) in enumerate(zip(files, names(files), strict=True)):
        path = os.path.abspath(model)  # what a worker opens, whatever its working folder
        if not Path(path).is_file():
            rows.append(error_row(index, path, name, "no such file"))
            continue
        out = None if fleet.ray is not None else str(folder)
        share = fleet.thread_share
        called = tuple(sorted((named or {}).items()))
        tasks.append(Task(index, path, name, options, out, store, fleet.exclusive, share, called))
    for row in rows:
        if on_row is not None:
            on_row(row)
    for row in _run(tasks, fleet, folder):
        rows.append(row)
        write(rows, folder)
        if on_row is not None:
            on_row(row)
    csv_path, parquet_path = write(rows, folder)
    return Summary(tuple(sorted(rows, key=lambda r: r.index)), csv_path, parquet_path)


def _run(tasks: Sequence[Task], fleet: Fleet, folder: Path) -> Iterable[Row]:
    if not tasks:
        return iter(())
    if fleet.ray is not None:
        from relsat.fleet.cluster import run_ray

        return run_ray(
            tasks, fleet.ray, workers=fleet.slots, out_dir=str(folder), retries=fleet.retries
        )
    from relsat.fleet.local import run_local

    return run_local(tasks, fleet.slots, retries=fleet.retries)
