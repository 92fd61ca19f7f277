"""The cost table: operator signature → milliseconds, per device, stored in DuckDB.

Rows are written set-at-a-time through Arrow and persist with the database; ``save_parquet`` /
``load_parquet`` ship a table, so costs measured on one GPU can be reused on a machine without
one. :class:`TableModel` answers from a table and falls back to another model (by default the
analytic one) for signatures it lacks.

A measured row keeps how far it can be trusted: ``spread`` (the interquartile range of its
repeats over their median) and ``load`` (other processes' share of the CPU while it was timed),
:mod:`relsat.cost.stability`. Tables written before those columns existed read with both
unknown (null) — :func:`conform` — and are written back with them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from relsat.cost.analytic import AnalyticModel
from relsat.cost.model import CostModel, OpSignature
from relsat.cost.stability import Price
from relsat.engine.db import Database
from relsat.errors import DatabaseError

__all__ = [
    "COST_SCHEMA",
    "OPTIONAL_COLUMNS",
    "CostTable",
    "TableModel",
    "conform",
    "missing_columns",
]

#: The columns of the ``cost`` table (``sql/cost/schema.sql``), as Arrow types.
COST_SCHEMA = pa.schema(
    [
        ("device", pa.string()),
        ("key", pa.string()),
        ("op", pa.string()),
        *[(f"p{i}", pa.int32()) for i in range(6)],
        ("s", pa.string()),
        ("inputs", pa.string()),
        ("output", pa.string()),
        ("ms", pa.float64()),
        ("source", pa.string()),
        ("spread", pa.float64()),  # null: unknown (a measurement without repeats, an old table)
        ("load", pa.float64()),  # null: unknown
    ]
)

#: The columns a cost table written before they existed lacks: read as unknown (null).
OPTIONAL_COLUMNS = ("spread", "load")


def missing_columns(rows: pa.Table) -> list[str]:
    """The columns of :data:`COST_SCHEMA` that ``rows`` lacks and :func:`conform` cannot add."""
    return [
        n for n in COST_SCHEMA.names if n not in rows.column_names and n not in OPTIONAL_COLUMNS
    ]


def conform(rows: pa.Table) -> pa.Table:
    """``rows`` with exactly :data:`COST_SCHEMA`'s columns and types: other columns dropped, a
    table written before :data:`OPTIONAL_COLUMNS` existed given them as null (spread and load
    unknown). The caller checks :func:`missing_columns` first; Arrow's cast errors pass."""
    for name in OPTIONAL_COLUMNS:
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.nulls(rows.num_rows, pa.float64()))
    return rows.select(COST_SCHEMA.names).cast(COST_SCHEMA)


class CostTable:
    """The ``cost`` table of ``db`` (created if missing; a new in-memory database if None)."""

    def __init__(self, db: Database | None = None) -> None:
        self.db = db if db is not None else Database()
        self.db.script("cost/schema")

    def __len__(self) -> int:
        return int(self.db.scalar("SELECT count(*) FROM cost"))

    def lookup(self, device: str, sigs: Sequence[OpSignature]) -> dict[OpSignature, float]:
        """The stored times of those of ``sigs`` the table has for ``device``."""
        by_key = {s.key: s for s in sigs}
        if not by_key:
            return {}
        rows = self.db.run("cost/lookup", device=device, keys=list(by_key))
        return {by_key[key]: float(ms) for key, ms, _, _ in rows}

    def prices(self, device: str, sigs: Sequence[OpSignature]) -> dict[OpSignature, Price]:
        """The stored prices, with their spread and load, of those of ``sigs`` the table has
        for ``device``."""
        by_key = {s.key: s for s in sigs}
        if not by_key:
            return {}
        rows = self.db.run("cost/lookup", device=device, keys=list(by_key))
        return {by_key[key]: Price(float(ms), spread, load) for key, ms, spread, load in rows}

    def get(self, device: str, sig: OpSignature) -> float | None:
        """The stored time of one signature, or None."""
        return self.lookup(device, [sig]).get(sig)

    def insert(
        self,
        device: str,
        sigs: Sequence[OpSignature],
        ms: Sequence[float] | np.ndarray,
        source: str,
        *,
        spread: Sequence[float | None] | None = None,
        load: Sequence[float | None] | None = None,
    ) -> None:
        """Store ``ms[i]`` for ``sigs[i]`` (replacing rows of the same device and signature),
        with its ``spread[i]`` and ``load[i]`` (default: unknown)."""
        if len(sigs) != len(ms):
            raise ValueError(f"{len(sigs)} signatures but {len(ms)} times")
        for name, values in (("spreads", spread), ("loads", load)):
            if values is not None and len(values) != len(sigs):
                raise ValueError(f"{len(sigs)} signatures but {len(values)} {name}")
        if not sigs:
            return
        n = len(sigs)
        columns: dict[str, list[object] | np.ndarray] = {
            "device": [device] * n,
            "key": [s.key for s in sigs],
            "op": [s.op for s in sigs],
            **{f"p{i}": [s.params[i] for s in sigs] for i in range(6)},
            "s": [s.s for s in sigs],
            "inputs": [
                json.dumps([list(x) for x in s.inputs], separators=(",", ":")) for s in sigs
            ],
            "output": [json.dumps(list(s.output), separators=(",", ":")) for s in sigs],
            "ms": np.asarray(ms, dtype=np.float64),
            "source": [source] * n,
            "spread": list(spread) if spread is not None else [None] * n,
            "load": list(load) if load is not None else [None] * n,
        }
        self.insert_arrow(pa.table(columns, schema=COST_SCHEMA))

    def insert_arrow(self, rows: pa.Table) -> None:
        """Store rows with the columns of :data:`COST_SCHEMA` (replacing same device and key);
        rows without spread and load (an older table) store them as unknown."""
        missing = missing_columns(rows)
        if missing:
            raise DatabaseError(f"cost rows lack columns {missing}", path=self.db.path)
        rows = conform(rows)
        with self.db.transaction():
            self.db.insert_arrow("cost_in", rows)
            self.db.run("cost/upsert")

    def to_arrow(self, device: str | None = None) -> pa.Table:
        """The table's rows (of one device, or all), sorted by device and key."""
        where = "" if device is None else "WHERE device = $device"
        params = None if device is None else {"device": device}
        return self.db.arrow(f"SELECT * FROM cost {where} ORDER BY device, key", params)

    def save_parquet(self, path: str | Path, device: str | None = None) -> None:
        """Write the table (or one device's rows) to a Parquet file."""
        pq.write_table(self.to_arrow(device).cast(COST_SCHEMA), str(path))

    def load_parquet(self, path: str | Path) -> int:
        """Add the rows of a Parquet file written by :meth:`save_parquet`; returns their number."""
        try:
            rows = pq.read_table(str(path))
        except (OSError, pa.ArrowInvalid) as exc:
            raise DatabaseError(f"cannot read cost table: {exc}", path=str(path)) from None
        self.insert_arrow(rows)
        return rows.num_rows

    @classmethod
    def from_parquet(cls, path: str | Path, db: Database | None = None) -> CostTable:
        """A table (in ``db``, or a new in-memory database) holding a Parquet file's rows."""
        table = cls(db)
        table.load_parquet(path)
        return table


class TableModel(CostModel):
    """Costs from a :class:`CostTable` for ``device``; signatures it lacks go to ``fallback``
    (default: the analytic model of that device), and are counted in ``fallbacks``."""

    name = "table"

    def __init__(
        self,
        table: CostTable,
        device: str = "h100",
        *,
        fallback: CostModel | None = None,
    ) -> None:
        self.table = table
        self.device = device
        self.name = f"table {device}"  # the report names the device whose table priced it
        self.fallback = fallback if fallback is not None else AnalyticModel(device)
        self.fallbacks = 0

    @property
    def source(self) -> str:
        """Rows this model hands out that a table lacked come from the fallback."""
        return self.fallback.source

    def cost(self, sig: OpSignature) -> float:
        return float(self.costs([sig])[0])

    def costs(self, sigs: Sequence[OpSignature]) -> np.ndarray:
        found = self.table.lookup(self.device, sigs)
        missing = [s for s in dict.fromkeys(sigs) if s not in found]
        if missing:
            self.fallbacks += len(missing)
            found.update(zip(missing, self.fallback.costs(missing).tolist(), strict=True))
        return np.array([found[s] for s in sigs], dtype=np.float64)
