"""``relsat costs``: the measured cost tables, shared between machines (:mod:`relsat.cost.store`).

    relsat costs show [--store DIR] [--rows] [--remeasure [all]]
                                               rows per machine identity and how far their
                                               prices hold (spread), this machine's marked
    relsat costs export FILE [--store DIR]     the store's rows, merged, as one Parquet file
    relsat costs import FILE... [--store DIR]  add cost files to the store (as new files)
    relsat costs merge A B... -o C             files or stores merged into one Parquet file
    relsat costs clear [--store DIR] [--identity ID] [--yes]
                                               remove the store's rows (one identity's)

``--store`` defaults to this machine's cost cache (``$RELSAT_CACHE_DIR/costs``, else
``~/.cache/relsat/costs``), which ``ort-cpu`` reads. Rows are keyed by machine identity and
operator signature; merging keeps every identity apart and takes the median of duplicate
measurements (of the sound ones, where some are). An unreadable file inside a store is named
and skipped; a file named on the command line that cannot be read is an error (nothing is
written).

A price's *spread* is the interquartile range of its repeats over their median; a price whose
spread is wide or unknown, or that was timed while the machine was busy, is doubtful and is
re-checked on its next use (:mod:`relsat.cost.stability`). ``show --remeasure`` re-checks this
machine's doubtful prices now (``--remeasure all``: every one) and replaces those a sound
re-check disagrees with. ``clear`` asks before it removes anything unless given ``--yes``
(without a terminal to ask on, it refuses).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from relsat.cli.common import Usage, console

__all__ = ["add"]


def add(sub: Any) -> None:
    """Add ``costs`` and its sub-commands to the sub-command parsers."""
    p = sub.add_parser(
        "costs", help="show, re-check, export, import, merge and clear measured cost tables"
    )
    verbs = p.add_subparsers(dest="verb", required=True)
    show = verbs.add_parser("show", help="rows per machine identity in a store, with spreads")
    _store(show)
    show.add_argument("--threads", type=int, default=0, help="this machine's identity at N threads")
    show.add_argument(
        "--rows", action="store_true", help="list this machine's prices with spread and load"
    )
    show.add_argument(
        "--remeasure",
        nargs="?",
        const="doubtful",
        choices=("doubtful", "all"),
        help="first re-time this machine's doubtful prices (spread wide or unknown, timed "
        "under load), or all of them, replacing those a re-check disagrees with",
    )
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
    clear = verbs.add_parser("clear", help="remove a store's rows (one identity's with --identity)")
    clear.add_argument("--identity", help="only this machine identity's rows")
    clear.add_argument(
        "-y", "--yes", action="store_true", help="do not ask for confirmation (for scripts)"
    )
    _store(clear)
    clear.set_defaults(run=_clear)


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
    settings = OrtSettings(threads=args.threads)
    here = f"{settings.machine()}|protocol{PROTOCOL}"
    out = console()
    if args.remeasure:
        _remeasure(args, settings, out)
    found = store.read()
    out.print(f"{store.location}: {found.files} files, {found.rows.num_rows} rows", soft_wrap=True)
    spreads = found.spreads()
    for identity, n in found.identities().items():
        mark = "  (this machine)" if identity == here else ""
        out.print(f"  {n:7d}  {identity}{mark}", soft_wrap=True, markup=False)
        out.print(f"           {_spread_line(spreads[identity])}", soft_wrap=True, markup=False)
    if here not in found.identities():
        out.print(f"  (none for this machine: {here})", soft_wrap=True, markup=False)
    elif args.rows:
        _rows(found.rows, here)
    _skipped(found)
    return 0


def _spread_line(s: Any) -> str:
    """One identity's spreads in words: how far its prices hold, how many are re-checked."""
    from relsat.cost.stability import Stability

    limits = Stability()
    known = (
        f"spread median {s.median:.1%}, 90th percentile {s.p90:.1%}"
        if s.median is not None
        else "spread unknown"
    )
    parts = [
        f"{s.wide} wide (over {limits.max_spread:.0%})" if s.wide else "",
        f"{s.loaded} timed under load" if s.loaded else "",
        f"{s.unknown} of unknown spread" if s.unknown and s.median is not None else "",
    ]
    doubts = ", ".join(p for p in parts if p)
    if not s.doubtful:
        return f"{known}; every price sound"
    tail = f"{s.doubtful} re-checked on next use"
    return f"{known}; {doubts}: {tail}" if doubts else f"{known}; {tail}"


def _rows(rows: Any, identity: str) -> None:
    """This identity's prices: op, shapes, ms, spread and load, by op then price."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from relsat.cli.common import print_arrow

    mine = rows.filter(pc.equal(rows["device"], identity))
    mine = mine.sort_by([("op", "ascending"), ("ms", "ascending")])

    def pct(values: list[float | None]) -> list[str]:
        return ["?" if v is None else f"{v:.1%}" for v in values]

    table = pa.table(
        {
            "op": mine["op"],
            "inputs": mine["inputs"],
            "output": mine["output"],
            "ms": [f"{v:.4f}" for v in mine["ms"].to_pylist()],
            "spread": pct(mine["spread"].to_pylist()),
            "load": pct(mine["load"].to_pylist()),
        }
    )
    print_arrow(table, limit=table.num_rows)


def _remeasure(args: argparse.Namespace, settings: Any, out: Any) -> None:
    """Re-check this machine's prices in the store (and its cache), and say what changed."""
    from relsat.cost.ort import OrtModel

    model = OrtModel(settings, store=args.store)
    done = model.recheck(every=args.remeasure == "all")
    what = "every price" if args.remeasure == "all" else "the doubtful prices"
    out.print(
        f"re-checked {what} of {model.device}: {done.checked} of {done.rows} timed again, "
        f"{len(done.replaced)} replaced, {done.doubtful} still doubtful",
        soft_wrap=True,
        markup=False,
    )
    for sig, old, new in done.replaced:
        shapes = " ".join(str(list(i)) for i in sig.inputs)
        out.print(f"  {sig.op} {shapes}: {old:.4f} -> {new:.4f} ms", soft_wrap=True, markup=False)


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


def _clear(args: argparse.Namespace) -> int:
    store = _open(args)
    found = store.read(args.identity)
    what = f"the rows of {args.identity}" if args.identity else "every row"
    if not found.rows.num_rows:
        console().print(f"{store.location}: no rows to remove", soft_wrap=True, markup=False)
        _skipped(found)
        return 0
    summary = f"{_n(found.rows.num_rows, 'price')} of {_n(len(found.identities()), 'identity')}"
    if not args.yes:
        if not sys.stdin.isatty():
            raise Usage(
                f"costs clear would remove {what} of {store.location} ({summary}): give --yes"
            )
        answer = input(f"remove {what} of {store.location} ({summary})? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            console().print("nothing removed", soft_wrap=True)
            return 0
    done = store.clear(args.identity)
    out = console()
    out.print(
        f"removed {_n(done.total, 'row')} from {store.location}: "
        f"{_n(len(done.deleted), 'file')} deleted, {len(done.rewritten)} rewritten",
        soft_wrap=True,
        markup=False,
    )
    for identity, n in done.rows.items():
        out.print(f"  {n:7d}  {identity}", soft_wrap=True, markup=False)
    for s in done.skipped:
        print(f"relsat: left unreadable {s.path}: {s.reason}", file=sys.stderr)
    return 0


def _n(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless one."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun[:-1]}ies" if noun.endswith("y") else f"{n} {noun}s"


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
