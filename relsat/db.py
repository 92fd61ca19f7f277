"""The one module that talks to DuckDB, and the one that knows where ``sql/`` lives.

Hand-written SQL lives in ``sql/<stage>/<verb_object>.sql``; each file opens with a comment saying
what it does and which ``$name`` parameters it takes. :meth:`Database.run` issues a named
statement as a DuckDB prepared statement: it is planned once per connection (``PREPARE``) and then
only executed (``EXECUTE``), so the per-iteration cost is execution, not planning. Every statement
is counted and timed, planning and execution separately (:class:`Counters`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from relsat.errors import DatabaseError

__all__ = ["SCHEMA_VERSION", "SQL_DIR", "Counters", "Database", "sql_text"]

#: Where the hand-written SQL lives.
SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
#: Bumped whenever a table changes shape; a stored e-graph of another version is refused.
SCHEMA_VERSION = "1"

_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def sql_text(name: str) -> str:
    """The text of ``sql/<name>.sql`` (e.g. ``"rebuild/apply_remap"``)."""
    path = SQL_DIR / f"{name}.sql"
    try:
        return path.read_text()
    except OSError as exc:
        raise DatabaseError(f"missing SQL file {path}: {exc.strerror}") from None


@dataclass
class Counters:
    """Statements issued and time spent planning (PREPARE) and executing (EXECUTE)."""

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


class Database:
    """A DuckDB connection holding one e-graph (in memory, or in the file ``path``)."""

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        self.path = None if path is None else str(path)
        try:
            self.con = duckdb.connect(self.path or ":memory:", read_only=read_only)
        except duckdb.Error as exc:
            raise DatabaseError(f"cannot open e-graph database: {exc}", path=self.path) from None
        self.counters = Counters()
        self._prepared: dict[str, list[tuple[str, list[str]]]] = {}
        self._in_transaction = False

    # --- statements -----------------------------------------------------------------------

    def script(self, name: str) -> None:
        """Run every statement of ``sql/<name>.sql`` once (schema and macro files)."""
        self.execute(sql_text(name))

    def _exec(self, sql: str, params: Mapping[str, Any] | None, fetch: str) -> Any:
        start = time.perf_counter()
        try:
            if fetch == "arrow":
                return self.con.sql(sql, params=dict(params) if params else None).to_arrow_table()
            return self.con.execute(sql, dict(params) if params else None).fetchall()
        except duckdb.Error as exc:
            raise DatabaseError(f"{type(exc).__name__}: {exc}", path=self.path) from None
        finally:
            self.counters.statements += 1
            self.counters.exec_s += time.perf_counter() - start

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple]:
        """Run ad-hoc SQL (not in the hot loop) and fetch its rows; counted, timed as execution."""
        rows: list[tuple] = self._exec(sql, params, "rows")
        return rows

    def run(self, name: str, **params: Any) -> list[tuple]:
        """Execute the named statement ``sql/<name>.sql`` with ``$`` parameters bound.

        The file may hold several statements separated by ``;``; each is prepared once.
        """
        handles = self._prepared.get(name)
        if handles is None:
            handles = self._prepare(name)
        result: list[tuple] = []
        for handle, wanted in handles:
            missing = [p for p in wanted if p not in params]
            if missing:
                raise DatabaseError(f"sql/{name}.sql needs parameters {missing}")
            args = ", ".join(f"{p} := {_literal(params[p])}" for p in wanted)
            start = time.perf_counter()
            try:
                result = self.con.execute(
                    f"EXECUTE {handle}({args})" if wanted else f"EXECUTE {handle}"
                ).fetchall()
            except duckdb.Error as exc:
                raise DatabaseError(
                    f"sql/{name}.sql: {type(exc).__name__}: {exc}", path=self.path
                ) from None
            finally:
                self.counters.statements += 1
                self.counters.exec_s += time.perf_counter() - start
        return result

    def _prepare(self, name: str) -> list[tuple[str, list[str]]]:
        text = _strip_comments(sql_text(name))
        parts = [p.strip() for p in text.split(";") if p.strip()]
        handles = []
        for i, part in enumerate(parts):
            handle = f"relsat_{name.replace('/', '_')}_{i}"
            wanted = list(dict.fromkeys(_PARAM.findall(part)))
            start = time.perf_counter()
            try:
                self.con.execute(f"PREPARE {handle} AS {part}")
            except duckdb.Error as exc:
                raise DatabaseError(
                    f"sql/{name}.sql: cannot prepare statement {i + 1}: {exc}", path=self.path
                ) from None
            finally:
                self.counters.plan_s += time.perf_counter() - start
            handles.append((handle, wanted))
        self._prepared[name] = handles
        return handles

    # --- data in and out ------------------------------------------------------------------

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        """Append an Arrow table (columns in the table's order) in one statement."""
        self.con.register("relsat_arrow_in", data)
        try:
            cols = ", ".join(data.column_names)
            self.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM relsat_arrow_in")
        finally:
            self.con.unregister("relsat_arrow_in")

    def arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
        """Run a query and fetch its result as an Arrow table."""
        table: pa.Table = self._exec(sql, params, "arrow")
        return table

    def scalar(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        rows = self.execute(sql, params)
        return rows[0][0] if rows else None

    # --- transactions ---------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: on any exception the database is rolled back and the error re-raised."""
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
        self.execute("COMMIT")

    def close(self) -> None:
        self.con.close()


def _literal(value: Any) -> str:
    """An EXECUTE argument. EXECUTE cannot take bound parameters itself, so only numbers and
    booleans are accepted, never text: nothing a user typed is ever formatted into SQL."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    raise DatabaseError(f"statement parameter {value!r}: only numbers and booleans")


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
