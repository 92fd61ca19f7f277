"""``relsat costs``: the measured cost tables, shared between machines (:mod:`relsat.cost.store`).

    relsat costs show [--store DIR]            rows per machine identity, this machine's marked
    relsat costs export FILE [--store DIR]     the store's rows, merged, as one Parquet file
    relsat costs import FILE... [--store DIR]  add cost files to the store (as new files)
    relsat costs merge A B... -o C             files or stores merged into one Parquet file

``--store`` defaults to this machine's cost cache (``$RELSAT_CACHE_DIR/costs``, else
``~/.cache/relsat/costs``), which ``ort-cpu`` reads. Rows are keyed by machine identity and
operator signature; merging keeps every identity apart and takes the median of duplicate
measurements. An unreadable file inside a store is named and skipped; a file named on the
command line that cannot be read is an error (nothing is written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from relsat.cli.common import console

__all__ = ["add"]


def add(sub: Any) -> None:
    """Add ``costs`` and its sub-commands to the sub-command parsers."""
    p = sub.add_parser("costs", help="show, export, import and merge measured cost tables")
    verbs = p.add_subparsers(dest="verb", required=True)
    show = verbs.add_parser("show", help="rows per machine identity in a store")
    _store(show)
    show.add_argument("--threads", type=int, default=0, help="this machine's identity at N threads")
    show.set_defaults(run=_show)
    export = verbs.add_parser("export", help="a store's rows as one Parquet file")
    export.add_argument("file", help="the Parquet file to write")
    export.add_argument("--identity", help="only this machine identity's rows")
    _store(export)
    export.set_defaults(run=_export)
    imp = verbs.add_parser("import", help="add cost files to a store")
    imp.add_argument("files", nargs="+", metavar="FILE", help="Parquet cost files")
    _store(imp)
    imp.set_defaults(run=_import)
    merge = verbs.add_parser("merge", help="merge cost files or stores into one Parquet file")
    merge.add_argument("sources", nargs="+", metavar="SOURCE", help="Parquet files or stores")
    merge.add_argument("-o", "--output", required=True, help="the Parquet file to write")
    merge.set_defaults(run=_merge)


def _store(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="DIR", help="a cost store (default: this machine's cache)")


def _open(args: argparse.Namespace) -> Any:
    from relsat.cost.ort import cache_dir
    from relsat.cost.store import CostStore

    return CostStore(args.store or cache_dir() / "costs")


def _show(args: argparse.Namespace) -> int:
    from relsat.cost.ort import PROTOCOL
    from relsat.onnx.runtime import OrtSettings

    store = _open(args)
    found = store.read()
    here = f"{OrtSettings(threads=args.threads).machine()}|protocol{PROTOCOL}"
    out = console()
    out.print(f"{store.location}: {found.files} files, {found.rows.num_rows} rows", soft_wrap=True)
    for identity, n in found.identities().items():
        mark = "  (this machine)" if identity == here else ""
        out.print(f"  {n:7d}  {identity}{mark}", soft_wrap=True, markup=False)
    if here not in found.identities():
        out.print(f"  (none for this machine: {here})", soft_wrap=True, markup=False)
    _skipped(found)
    return 0


def _export(args: argparse.Namespace) -> int:
    store = _open(args)
    found = store.read(args.identity)
    _write(found.rows, Path(args.file))
    _report(f"exported from {store.location} to {args.file}", found)
    return 0


def _import(args: argparse.Namespace) -> int:
    from relsat.cost.store import read_file

    store = _open(args)
    tables = [(f, read_file(f)) for f in args.files]  # every file readable before any is added
    out = console()
    for name, rows in tables:
        path = store.add(rows, Path(name).stem)
        out.print(f"imported {rows.num_rows} rows of {name} as {path}", soft_wrap=True)
    return 0


def _merge(args: argparse.Namespace) -> int:
    from relsat.cost.store import read_sources

    found = read_sources(args.sources)
    _write(found.rows, Path(args.output))
    _report(f"merged {found.files} files into {args.output}", found)
    return 0


def _write(rows: Any, target: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from relsat.pipeline.save import write_atomic

    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    write_atomic(target, sink.getvalue().to_pybytes())


def _report(what: str, found: Any) -> None:
    out = console()
    out.print(f"{what}: {found.rows.num_rows} rows", soft_wrap=True)
    for identity, n in found.identities().items():
        out.print(f"  {n:7d}  {identity}", soft_wrap=True, markup=False)
    _skipped(found)


def _skipped(found: Any) -> None:
    for s in found.skipped:
        print(f"relsat: skipped unreadable {s.path}: {s.reason}", file=sys.stderr)
