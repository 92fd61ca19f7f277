"""A shared, mergeable store of measured costs: a folder of Parquet files with the cost table's
columns (:data:`~relsat.cost.table.COST_SCHEMA`), each written by one writer, merged by DuckDB
when read.

The pattern of TensorRT timing caches and TVM's tuning databases: every row is keyed by the
machine identity it was measured under (its ``device``, e.g.
``ort-cpu|AMD EPYC 7B13|2t|ort1.23.2|all|protocol4``) and the operator signature (``key``);
a reader takes only its own identity's rows, so prices of another machine kind are never used,
and re-measures what is missing.

* **Writers never share a file.** Each writer (:meth:`CostStore.writer`: one per process that
  measures) owns ``<host>-<pid>-<random>.parquet`` and only ever rewrites that file, with all the
  rows it has measured so far (temporary file, then ``os.replace``: a reader sees the old file or
  the new one). :meth:`CostStore.add` writes a new file (``relsat costs import``). So any number
  of machines can point at one shared folder and no writer loses another's rows.
* **Reading merges.** :meth:`CostStore.read` reads every ``*.parquet`` file (sub-folders too),
  and DuckDB (``sql/cost/merge_rows.sql``) keeps one row per identity and signature: the median
  of the times stored for it (of its sound ones, where some are:
  :mod:`relsat.cost.stability`), whatever the files' order. A file that cannot be read (truncated,
  not Parquet, other columns) is named in :attr:`StoreRows.skipped` and left alone; the other
  files' rows are read.
* **Clearing.** :meth:`CostStore.clear` removes every row, or one identity's: files left with
  no row are deleted, the others rewritten without those rows (``relsat costs clear``).
* **Older files.** A file written before rows kept their spread and load reads with both
  unknown (:func:`~relsat.cost.table.conform`).
* **Where.** A local folder, or an object-store URI that ``pyarrow.fs`` opens (``s3://…``,
  ``gs://…``; written without a rename, one object per writer; the tests take that path through
  a ``file://`` URI, no object store being reachable from them). The local cost cache
  (:func:`relsat.cost.ort.cache_dir` ``/costs``) is such a folder.

>>> import tempfile
>>> store = CostStore(tempfile.mkdtemp())
>>> store.read().rows.num_rows, store.files()
(0, [])
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import uuid
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from relsat.cost.stability import Stability
from relsat.cost.table import COST_SCHEMA, conform, missing_columns
from relsat.errors import DatabaseError

__all__ = [
    "Cleared",
    "CostStore",
    "CostStoreError",
    "CostStoreWarning",
    "Skipped",
    "Spreads",
    "StoreRows",
    "StoreWriter",
    "merge_rows",
    "read_file",
    "read_sources",
    "warn_skipped",
]


class CostStoreWarning(UserWarning):
    """A cost file could not be read or written; it was skipped (nothing else is lost)."""


class CostStoreError(DatabaseError):
    """A cost file given by name cannot be read or written (``path`` names it)."""


@dataclass(frozen=True)
class Skipped:
    """A file of a store that could not be read, and why (the first line of the error)."""

    path: str
    reason: str


@dataclass(frozen=True)
class StoreRows:
    """What a read found: the merged ``rows`` (:data:`COST_SCHEMA`), how many ``files`` were
    read and which were ``skipped``."""

    rows: pa.Table
    files: int = 0
    skipped: tuple[Skipped, ...] = ()

    def identities(self) -> dict[str, int]:
        """Rows per machine identity (``device``), sorted by identity."""
        counts: dict[str, int] = {}
        for device in self.rows["device"].to_pylist():
            counts[device] = counts.get(device, 0) + 1
        return dict(sorted(counts.items()))

    def spreads(self, stability: Stability | None = None) -> dict[str, Spreads]:
        """How far each identity's prices hold (:class:`Spreads`), sorted by identity."""
        s = stability if stability is not None else Stability()
        by: dict[str, list[tuple[float | None, float | None]]] = {}
        cols = [self.rows[n].to_pylist() for n in ("device", "spread", "load")]
        for device, spread, load in zip(*cols, strict=True):
            by.setdefault(device, []).append((spread, load))
        return {d: Spreads.of(rows, s) for d, rows in sorted(by.items())}


@dataclass(frozen=True)
class Spreads:
    """One identity's prices by how far they hold: the ``median`` and 90th percentile
    (``p90``) of the known spreads (None: none known); how many are ``wide`` (spread over
    ``max_spread``), were timed under ``loaded`` (load over ``max_load``) and have an
    ``unknown`` spread; ``doubtful``: those re-checked on their next use (any of the three)."""

    rows: int
    median: float | None
    p90: float | None
    wide: int
    loaded: int
    unknown: int
    doubtful: int

    @classmethod
    def of(cls, rows: Sequence[tuple[float | None, float | None]], s: Stability) -> Spreads:
        """The summary of (spread, load) pairs under ``s``'s thresholds."""
        known = sorted(spread for spread, _ in rows if spread is not None)
        return cls(
            rows=len(rows),
            median=_quantile(known, 0.5),
            p90=_quantile(known, 0.9),
            wide=sum(spread is not None and spread > s.max_spread for spread, _ in rows),
            loaded=sum(load is not None and load > s.max_load for _, load in rows),
            unknown=len(rows) - len(known),
            doubtful=sum(not s.sound(spread, load) for spread, load in rows),
        )


def _quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of sorted ``values`` (linear between neighbours); None if empty."""
    if not values:
        return None
    at = q * (len(values) - 1)
    lo = int(at)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (at - lo)


@dataclass(frozen=True)
class Cleared:
    """What :meth:`CostStore.clear` removed: ``rows`` per machine identity, the files
    ``deleted`` (left with no row) and ``rewritten`` (some rows kept), and the files it could
    not read (``skipped``: left alone)."""

    rows: dict[str, int]
    deleted: tuple[str, ...] = ()
    rewritten: tuple[str, ...] = ()
    skipped: tuple[Skipped, ...] = ()

    @property
    def total(self) -> int:
        """Rows removed, every identity's."""
        return sum(self.rows.values())


class CostStore:
    """The cost files under ``location`` (a folder, created on the first write, or a URI).

    ``location`` is kept as given in :attr:`location`; :attr:`root` is the path inside its file
    system (:attr:`fs`)."""

    def __init__(self, location: str | os.PathLike[str]) -> None:
        self.location = os.fspath(location)
        self.remote = "://" in self.location and not self.location.startswith("file://")
        if "://" in self.location:
            fs, root = pafs.FileSystem.from_uri(self.location)
        else:
            fs, root = pafs.LocalFileSystem(), str(Path(self.location).absolute())
        self.fs: pafs.FileSystem = fs
        self.root: str = root.rstrip("/") or "/"

    def __repr__(self) -> str:
        return f"CostStore({self.location!r})"

    def files(self) -> list[str]:
        """Every ``*.parquet`` file in the store (sub-folders too), sorted; [] when the folder
        does not exist. Temporary files of a writer (``*.tmp``) are not listed."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise CostStoreError(
                f"cannot list the cost store: {_first_line(exc)}", path=self.location
            ) from None
        return sorted(
            i.path for i in infos if i.type == pafs.FileType.File and i.path.endswith(".parquet")
        )

    def read(
        self, device: str | None = None, *, exclude: Iterable[str | os.PathLike[str]] = ()
    ) -> StoreRows:
        """The store's rows of one machine identity (``device``; None: every identity), merged
        (one row per identity and signature, the median time); files in ``exclude`` are left out,
        unreadable ones are listed in :attr:`StoreRows.skipped`."""
        left_out = {_same_path(p) for p in exclude}
        tables: list[pa.Table] = []
        skipped: list[Skipped] = []
        files = [f for f in self.files() if _same_path(f) not in left_out]
        for path in files:
            try:
                tables.append(read_file(path, self.fs))
            except CostStoreError as exc:
                skipped.append(Skipped(path, exc.reason))
        return StoreRows(merge_rows(tables, device), len(files) - len(skipped), tuple(skipped))

    def clear(self, device: str | None = None) -> Cleared:
        """Remove the store's rows of one machine identity (``device``; None: every row). A
        file left with no row is deleted; one that keeps rows of other identities is rewritten
        (atomically) without those; an unreadable file is left alone and named in
        :attr:`Cleared.skipped`. A writer still running writes its own file again with what it
        holds in memory."""
        removed: dict[str, int] = {}
        deleted: list[str] = []
        rewritten: list[str] = []
        skipped: list[Skipped] = []
        for path in self.files():
            try:
                rows = read_file(path, self.fs)
            except CostStoreError as exc:
                skipped.append(Skipped(path, exc.reason))
                continue
            mask = pc.equal(rows["device"], device) if device is not None else None
            gone = rows if mask is None else rows.filter(mask)
            kept = rows.slice(0, 0) if mask is None else rows.filter(pc.invert(mask))
            if not gone.num_rows:
                continue
            for name in gone["device"].to_pylist():
                removed[name] = removed.get(name, 0) + 1
            try:
                if kept.num_rows:
                    StoreWriter(self, path).write(kept)
                    rewritten.append(path)
                else:
                    self.fs.delete_file(path)
                    deleted.append(path)
            except OSError as exc:
                raise CostStoreError(
                    f"cannot remove cost rows: {_first_line(exc)}", path=path
                ) from None
        return Cleared(
            dict(sorted(removed.items())), tuple(deleted), tuple(rewritten), tuple(skipped)
        )

    def writer(self, name: str | None = None) -> StoreWriter:
        """A writer that owns one new file of the store (``name``.parquet; default
        ``<host>-<pid>-<random>``)."""
        name = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        return StoreWriter(self, f"{self.root}/{name}.parquet")

    def add(self, rows: pa.Table, stem: str = "added") -> str:
        """Write ``rows`` as a new file of the store (``<stem>-<random>.parquet``), never
        replacing one; returns its path."""
        writer = self.writer(f"{stem}-{uuid.uuid4().hex[:8]}")
        writer.write(rows)
        return writer.path


class StoreWriter:
    """One writer's file in a :class:`CostStore`: :meth:`write` replaces it with all the rows
    the writer has so far (the caller's rows only grow), atomically where the file system
    renames."""

    def __init__(self, store: CostStore, path: str) -> None:
        self.store = store
        self.path = path

    def write(self, rows: pa.Table) -> None:
        """Replace this writer's file with ``rows`` (:data:`COST_SCHEMA`'s columns);
        :class:`CostStoreError` when it cannot be written."""
        rows = _cost_rows(rows, self.path)
        fs = self.store.fs
        try:
            if self.store.remote:  # one PUT per object: readers see the old object or the new
                # the store's prefix made first where the file system has folders (a bucket's
                # prefix needs none; pyarrow's create_dir is then a no-op)
                fs.create_dir(self.path.rsplit("/", 1)[0], recursive=True)
                pq.write_table(rows, self.path, filesystem=fs)
                return
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(
                prefix=Path(self.path).stem, suffix=".tmp", dir=Path(self.path).parent
            )
            os.close(fd)
            try:
                pq.write_table(rows, tmp)
                os.replace(tmp, self.path)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        except OSError as exc:
            raise CostStoreError(
                f"cannot write cost file: {_first_line(exc)}", path=self.path
            ) from None


def read_file(path: str | os.PathLike[str], fs: pafs.FileSystem | None = None) -> pa.Table:
    """One Parquet file's cost rows (:data:`COST_SCHEMA`); :class:`CostStoreError` naming the
    file when it is not a readable cost table."""
    name = os.fspath(path)
    try:
        table = pq.read_table(name, filesystem=fs)
    except Exception as exc:  # truncated, not Parquet, unreachable: the reason, one line
        raise CostStoreError(
            f"not a readable Parquet file: {_first_line(exc)}", path=name
        ) from None
    return _cost_rows(table, name)


def read_sources(sources: Sequence[str | os.PathLike[str]], device: str | None = None) -> StoreRows:
    """The merged rows of ``sources``: each a Parquet file (which must be readable:
    :class:`CostStoreError` otherwise) or a store folder / URI (unreadable files skipped)."""
    tables: list[pa.Table] = []
    skipped: list[Skipped] = []
    files = 0
    for source in sources:
        name = os.fspath(source)
        if "://" in name or Path(name).is_dir():
            found = CostStore(name).read(device)
            tables.append(found.rows)
            skipped += found.skipped
            files += found.files
        elif Path(name).is_file():
            tables.append(read_file(name))
            files += 1
        else:
            raise CostStoreError("no such file or folder", path=name)
    return StoreRows(merge_rows(tables, device), files, tuple(skipped))


def merge_rows(
    tables: Sequence[pa.Table], device: str | None = None, stability: Stability | None = None
) -> pa.Table:
    """Rows of several cost tables as one: one row per (identity, signature), the median time
    of its sound rows where some are sound (by ``stability``'s thresholds), else of all, with
    the widest spread (DuckDB, ``sql/cost/merge_rows.sql``); only ``device``'s rows unless
    None."""
    from relsat.engine.db import Database

    rows = [conform(t) for t in tables if t.num_rows]
    if not rows:
        return COST_SCHEMA.empty_table()
    s = stability if stability is not None else Stability()
    db = Database()
    try:
        with db.registered("cost_rows", pa.concat_tables(rows)):
            merged = db.run_arrow(
                "cost/merge_rows", device=device, max_spread=s.max_spread, max_load=s.max_load
            )
    finally:
        db.close()
    return merged.cast(COST_SCHEMA)


def warn_skipped(skipped: Iterable[Skipped], category: type[Warning] = CostStoreWarning) -> None:
    """One warning per skipped file, naming it."""
    for s in skipped:
        warnings.warn(f"skipping unreadable cost file {s.path}: {s.reason}", category, stacklevel=3)


def _cost_rows(table: pa.Table, path: str) -> pa.Table:
    """``table`` with exactly :data:`COST_SCHEMA`'s columns and types (an older file's spread
    and load unknown), or a :class:`CostStoreError` naming ``path``."""
    missing = missing_columns(table)
    if missing:
        raise CostStoreError(f"not a cost table: it lacks the columns {missing}", path=path)
    try:
        return conform(table)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise CostStoreError(f"not a cost table: {_first_line(exc)}", path=path) from None


def _same_path(path: str | os.PathLike[str]) -> str:
    return os.path.normpath(os.path.abspath(os.fspath(path)))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]
