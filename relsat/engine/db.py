"""The one module that talks to DuckDB, and the one that knows where ``sql/`` lives.

Hand-written SQL lives in ``sql/<stage>/<verb_object>.sql``; each file opens with a comment saying
what it does and which ``$name`` parameters it takes (always bound, never formatted into the
text). Every statement is counted and timed, planning and execution separately
(:class:`Counters`, see :meth:`Database.run`).
"""

from __future__ import annotations

import functools
import re
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from duckdb import func, sqltypes

from relsat.errors import DatabaseError
from relsat.paths import data_dir
from relsat.threads import cap as thread_cap

__all__ = ["SCHEMA_VERSION", "SQL_DIR", "Counters", "Database", "DeadlinePassed", "sql_text"]

#: Where the hand-written SQL lives.
SQL_DIR = data_dir("sql")
#: Bumped whenever a table changes shape; a stored e-graph of another version is refused.
SCHEMA_VERSION = "16"

_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_PLAN_COST: dict[str, float] = {}  # statement text -> seconds DuckDB takes to plan it
#: The statements of each ``sql/<name>.sql`` with the parameters they want and their planning
#: cost, split once per process (the files do not change while it runs).
_STATEMENTS: dict[str, list[tuple[str, list[str], float]]] = {}
#: Below this many e-nodes an e-graph's statements run on one thread (:meth:`Database.fit_threads`):
#: they are many and small, and a second thread costs more in scheduling than it gains (measured
#: on 2 loaded cores, k_multi = 1 to 3: 0-26 % less exploration time up to 100,000 e-nodes).
SERIAL_BELOW = 200_000
_SKIPPED_OPTIMIZERS = (
    "compressed_materialization,statistics_propagation,common_subexpressions,"
    "late_materialization,common_subplan,partitioned_execution,"
    "join_filter_pushdown"
)


@functools.cache
def sql_text(name: str) -> str:
    """The text of ``sql/<name>.sql`` (e.g. ``"rebuild/apply_remap"``), read once per process."""
    path = SQL_DIR / f"{name}.sql"
    try:
        return path.read_text()
    except OSError as exc:
        raise DatabaseError(f"missing SQL file {path}: {exc.strerror}") from None


class DeadlinePassed(DatabaseError):
    """The deadline set with :meth:`Database.deadline` passed: the running statement was
    interrupted (or the next one refused). Inside :meth:`Database.transaction` everything since
    ``BEGIN`` is rolled back. Exploration turns it into ``StopReason.TIME_LIMIT``."""


#: How often the watcher re-sends the interrupt after the deadline: DuckDB forgets an interrupt
#: that arrives between statements, so one sent in the gap before a statement starts is repeated.
_INTERRUPT_EVERY_S = 0.02


@dataclass
class Counters:
    """Statements issued, and time spent planning (estimated, see :meth:`Database.run`) and
    executing them."""

    statements: int = 0
    plan_s: float = 0.0
    exec_s: float = 0.0

    def snapshot(self) -> Counters:
        return Counters(self.statements, self.plan_s, self.exec_s)

    def since(self, before: Counters) -> Counters:
        return Counters(
            self.statements - before.statements,
            self.plan_s - before.plan_s,
            self.exec_s - before.exec_s,
        )


def _f32bits(values: pa.Array) -> pa.Array:
    """The float32 bits (a signed 32-bit integer) of each DOUBLE, rounded to float32 as a cast
    rounds (to nearest even); NULL for NULL, NaN, infinity and values past float32's range. A
    function, not a SQL macro: the macro's arithmetic repeats its argument dozens of times, and
    a right-hand side's float arithmetic inside it made one statement 250 ms to plan."""
    doubles = values.to_numpy(zero_copy_only=False).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        floats = doubles.astype(np.float32)
    bits = floats.view(np.int32)
    bits = np.where(floats == 0, 0, bits)  # -0.0 is 0.0
    mask = (
        ~np.isfinite(floats)
        | ~np.isfinite(doubles)
        | pc.is_null(values).to_numpy(zero_copy_only=False)
    )
    return pa.array(bits, type=pa.int32(), mask=mask)


def _f32(values: pa.Array) -> pa.Array:
    """A float parameter's value (a DOUBLE) from its float32 bits as an e-node stores them
    (relsat.graph.ops.f32_bits); NULL for NaN and infinity."""
    bits = values.to_numpy(zero_copy_only=False).astype(np.int64).astype(np.int32)
    floats = bits.view(np.float32).astype(np.float64)
    mask = ~np.isfinite(floats) | pc.is_null(values).to_numpy(zero_copy_only=False)
    return pa.array(floats, type=pa.float64(), mask=mask)


def _register_functions(con: duckdb.DuckDBPyConnection) -> None:
    """Functions the generated statements call (relsat.engine.compile) and queries may use:
    ``f32(bits)``, a float parameter's value, and ``f32bits(value)``, its bits."""
    for name, fn, arg, out in (
        ("f32", _f32, sqltypes.BIGINT, sqltypes.DOUBLE),
        ("f32bits", _f32bits, sqltypes.DOUBLE, sqltypes.INTEGER),
    ):
        con.create_function(name, fn, [arg], out, type=func.ARROW, null_handling=func.SPECIAL)


class Database:
    """A DuckDB connection holding one e-graph (in memory, or in the file ``path``)."""

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        self.path = None if path is None else str(path)
        self.read_only = read_only
        try:
            self.con = duckdb.connect(self.path or ":memory:", read_only=read_only)
        except duckdb.Error as exc:
            raise DatabaseError(f"cannot open e-graph database: {exc}", path=self.path) from None
        # The e-graph's statements are many and small: these optimizer passes cost planning time
        # and pay off only on large data (measured: 8-15 % less exploration time on the seven
        # benchmarks, bench/explore.py). Results do not depend on optimizer settings.
        self.con.execute(f"SET disabled_optimizers = '{_SKIPPED_OPTIMIZERS}'").fetchall()
        # A library prints no progress bar of its own (DuckDB draws one for a long statement).
        self.con.execute("SET enable_progress_bar = false").fetchall()
        _register_functions(self.con)
        self.counters = Counters()
        self._in_transaction = False
        # The deadline watcher (see deadline()): `_expired` once it has passed; `_busy` while a
        # statement runs, changed and read under `_lock` so that an interrupt only ever lands on
        # the statement it was meant for, never on a ROLLBACK or COMMIT.
        self._expired = threading.Event()
        self._lock = threading.Lock()
        self._busy = False
        self._watcher: tuple[threading.Thread, threading.Event] | None = None
        self._serial = False  # DuckDB's default threads until fit_threads says otherwise
        self._cap = thread_cap()  # RELSAT_THREADS: this process shares the cores with others
        if self._cap is not None:
            self.run("settings/threads", n=self._cap)

    # --- statements -----------------------------------------------------------------------

    def script(self, name: str) -> None:
        """Run every statement of ``sql/<name>.sql`` once (schema and macro files)."""
        self.execute(sql_text(name))

    def _exec(self, sql: str, params: Mapping[str, Any] | None, fetch: str) -> Any:
        self._enter()
        start = time.perf_counter()
        try:
            if fetch == "arrow":
                return self._to_arrow(sql, dict(params) if params else None)
            return self.con.execute(sql, dict(params) if params else None).fetchall()
        except duckdb.Error as exc:
            raise self._error(exc, "") from None
        finally:
            self._leave()
            self.counters.statements += 1
            self.counters.exec_s += time.perf_counter() - start

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple]:
        """Run ad-hoc SQL (not in the hot loop) and fetch its rows; counted, timed as execution."""
        rows: list[tuple] = self._exec(sql, params, "rows")
        return rows

    def run(self, name: str, *, columns: bool = False, **params: Any) -> list[Any]:
        """Execute the named statement(s) of ``sql/<name>.sql`` with ``$`` parameters bound;
        returns the rows of the last one (as dicts with ``columns=True``).

        DuckDB plans a statement anew on every execution (prepared statements included, as
        measured with DuckDB 2.0), so planning time cannot be read off the execution. The first
        time a statement runs, relsat times an ``EXPLAIN (FORMAT json)`` of it (parse, bind, plan,
        optimize; the JSON form, since rendering the text plan costs up to twice the planning)
        and from then on books that much of every execution as planning.
        """
        statements = _STATEMENTS.get(name) or self._load(name)
        rows: list[Any] = []
        for sql, wanted, plan_s in statements:
            with self._statement(name, plan_s):
                cursor = self.con.execute(sql, _bind(name, wanted, params))
                rows = cursor.fetchall()
                if columns and cursor.description:
                    names = [d[0] for d in cursor.description]
                    rows = [dict(zip(names, row, strict=True)) for row in rows]
        return rows

    def run_arrow(self, name: str, **params: Any) -> pa.Table:
        """Execute the one statement of ``sql/<name>.sql`` (a query) with ``$`` parameters bound
        and fetch its result as an Arrow table; counted and timed as :meth:`run`."""
        ((sql, wanted, plan_s),) = _STATEMENTS.get(name) or self._load(name)
        with self._statement(name, plan_s):
            table = self._to_arrow(sql, _bind(name, wanted, params))
        return table

    def _to_arrow(self, sql: str, params: dict[str, Any] | None) -> pa.Table:
        """Run a query and fetch its result as Arrow: through an executed statement, not a
        relation (``con.sql`` parses and binds the query once more to learn its schema, ~1.5 ms
        for the phase's queries), at the price of a copy of the (small) result, which DuckDB
        warns about."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            table: pa.Table = self.con.execute(sql, params).to_arrow_table()
        return table

    @contextmanager
    def _statement(self, name: str, plan_s: float) -> Iterator[None]:
        """Run one statement of ``sql/<name>.sql``: counted, timed (``plan_s`` of it booked as
        planning, see :meth:`run`), interruptible, a DuckDB error turned into a relsat one."""
        self._enter()
        start = time.perf_counter()
        try:
            yield
        except duckdb.Error as exc:
            raise self._error(exc, f"sql/{name}.sql: ") from None
        finally:
            self._leave()
            spent = time.perf_counter() - start
            self.counters.statements += 1
            self.counters.plan_s += min(plan_s, spent)
            self.counters.exec_s += max(spent - plan_s, 0.0)

    def _load(self, name: str) -> list[tuple[str, list[str], float]]:
        text = _strip_comments(sql_text(name))
        statements = []
        for part in (p.strip() for p in text.split(";")):
            if not part:
                continue
            wanted = list(dict.fromkeys(_PARAM.findall(part)))
            if part not in _PLAN_COST:  # measured once per process: it depends on the SQL text
                _PLAN_COST[part] = self._plan_cost(part, wanted)
            statements.append((part, wanted, _PLAN_COST[part]))
        _STATEMENTS[name] = statements
        return statements

    def _plan_cost(self, sql: str, wanted: list[str]) -> float:
        """Seconds DuckDB takes to plan ``sql``: an ``EXPLAIN (FORMAT json)`` of it (the text
        rendering is not planning) with every parameter 0, on a cursor of its own, so that a
        probe DuckDB refuses (a parameter that must be a list) cannot abort the transaction in
        progress; 0 when refused. The work tables may be empty: only the plan matters."""
        cursor = self.con.cursor()
        try:
            start = time.perf_counter()
            cursor.execute(f"EXPLAIN (FORMAT json) {sql}", {p: 0 for p in wanted} or None)
            cursor.fetchall()
            return time.perf_counter() - start
        except duckdb.Error:
            return 0.0
        finally:
            cursor.close()

    def fit_threads(self, enodes: int) -> None:
        """One thread while the e-graph has fewer than :data:`SERIAL_BELOW` e-nodes, DuckDB's
        default (one per core, or ``RELSAT_THREADS``: :mod:`relsat.threads`) from then on; a
        statement only when that changes."""
        serial = enodes < SERIAL_BELOW
        if serial == self._serial:
            return
        if serial:
            self.run("settings/threads", n=1)
        elif self._cap is not None:
            self.run("settings/threads", n=self._cap)
        else:
            self.run("settings/default_threads")
        self._serial = serial

    # --- data in and out ------------------------------------------------------------------

    @contextmanager
    def registered(self, name: str, data: pa.Table) -> Iterator[None]:
        """Make the Arrow table ``data`` readable as the view ``name`` while the block runs.

        When the block fails (an interrupted or refused statement aborts the transaction, and
        DuckDB then refuses even the unregister until the ROLLBACK), the block's error is the one
        raised; the name stays registered and is replaced by the next registration of it."""
        self.con.register(name, data)
        try:
            yield
        except BaseException:
            with suppress(duckdb.Error):
                self.con.unregister(name)
            raise
        self.con.unregister(name)

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        """Append an Arrow table (columns in the table's order) in one statement."""
        with self.registered("relsat_arrow_in", data):
            cols = ", ".join(data.column_names)
            self.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM relsat_arrow_in")

    def arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
        """Run a query and fetch its result as an Arrow table."""
        table: pa.Table = self._exec(sql, params, "arrow")
        return table

    def query(self, sql: str) -> pa.Table:
        """Run a user's read-only query (``relsat sql``) as an Arrow table. Only statements that
        read (SELECT and its forms, EXPLAIN, PRAGMA, CALL) are run: any other is refused, as a
        :class:`DatabaseError` naming its type, before it reaches DuckDB."""
        try:
            kinds = [s.type.name for s in duckdb.extract_statements(sql)]
        except duckdb.Error as exc:  # one line: DuckDB adds the statement and a caret below
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise DatabaseError(f"{type(exc).__name__}: {first}", path=self.path) from None
        writes = [k for k in kinds if k not in _READING]
        if writes:
            raise DatabaseError(
                f"the e-graph is opened read-only: {writes[0]} statements are refused",
                path=self.path,
            )
        return self.arrow(sql)

    def scalar(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        rows = self.execute(sql, params)
        return rows[0][0] if rows else None

    # --- transactions ---------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: on any exception the database is rolled back and the error re-raised.
        COMMIT and ROLLBACK are never refused or interrupted by a deadline (:meth:`deadline`):
        work that completed before the deadline is kept."""
        if self._in_transaction:
            yield
            return
        self.execute("BEGIN TRANSACTION")
        self._in_transaction = True
        try:
            yield
        except BaseException:
            self._in_transaction = False
            self.con.execute("ROLLBACK").fetchall()
            raise
        self._in_transaction = False
        try:
            self.con.execute("COMMIT").fetchall()
        except duckdb.Error as exc:
            raise DatabaseError(f"{type(exc).__name__}: {exc}", path=self.path) from None

    # --- deadlines ------------------------------------------------------------------------

    @contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Within the block, nothing runs past ``seconds`` from now: a watcher thread interrupts
        the statement running at the deadline (DuckDB's ``interrupt()``, within milliseconds) and
        every later statement is refused, both as :class:`DeadlinePassed`; Python loops call
        :meth:`check_deadline`. The deadline is lifted when the block ends."""
        if self._watcher is not None:
            raise DatabaseError("a deadline is already set")
        stop = threading.Event()
        self._expired.clear()

        def watch() -> None:
            if stop.wait(max(seconds, 0.0)):
                return
            self._expired.set()
            while not stop.is_set():
                with self._lock:
                    if self._busy:
                        self.con.interrupt()
                stop.wait(_INTERRUPT_EVERY_S)

        thread = threading.Thread(target=watch, name="relsat-deadline", daemon=True)
        self._watcher = (thread, stop)
        if seconds < float("inf"):
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread.is_alive():
                thread.join()
            self._watcher = None
            self._expired.clear()

    @property
    def expired(self) -> bool:
        """Whether the deadline of the enclosing :meth:`deadline` block has passed."""
        return self._expired.is_set()

    def check_deadline(self) -> None:
        """Raise :class:`DeadlinePassed` if the deadline has passed (for long Python loops)."""
        if self._expired.is_set():
            raise DeadlinePassed("the time limit passed", path=self.path)

    def _enter(self) -> None:
        self.check_deadline()
        with self._lock:
            self._busy = True

    def _leave(self) -> None:
        with self._lock:
            self._busy = False

    def _error(self, exc: duckdb.Error, where: str) -> DatabaseError:
        if isinstance(exc, duckdb.InterruptException) and self._expired.is_set():
            return DeadlinePassed(f"{where}interrupted at the time limit", path=self.path)
        return DatabaseError(f"{where}{type(exc).__name__}: {exc}", path=self.path)

    def close(self) -> None:
        self.con.close()


#: The DuckDB statement types that only read (what :meth:`Database.query` runs).
_READING = frozenset({"SELECT", "EXPLAIN", "PRAGMA", "CALL"})


def _bind(name: str, wanted: list[str], params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``$`` parameters a statement of ``sql/<name>.sql`` wants, from ``params``."""
    missing = [p for p in wanted if p not in params]
    if missing:
        raise DatabaseError(f"sql/{name}.sql needs parameters {missing}")
    return {p: params[p] for p in wanted} or None


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
