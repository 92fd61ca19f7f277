"""What the commands share: exit codes, the usage error, the console, Arrow tables."""

from __future__ import annotations

from typing import Any

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "EXIT_VERIFY",
    "Usage",
    "console",
    "print_arrow",
]

EXIT_ERROR, EXIT_USAGE, EXIT_VERIFY = 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
#: The width rich lays tables out in when the output is not a terminal (a pipe, a file): wide
#: enough that no rule name, error or column is cut or wrapped at 80 columns.
PIPED_WIDTH = 1000


class Usage(Exception):
    """Bad command-line usage beyond what argparse checks (exit 2, one line)."""


def console() -> Any:
    """A rich console that does not colour numbers or paths by itself; when the output is not
    a terminal, lines are never wrapped (``soft_wrap``) and tables laid out :data:`PIPED_WIDTH`
    wide."""
    from rich.console import Console

    out = Console(highlight=False)
    if not out.is_terminal:
        out.soft_wrap = True
        out.width = PIPED_WIDTH
    return out


def print_arrow(table: Any, limit: int = 200) -> None:
    """An Arrow table as a rich table, at most ``limit`` rows."""
    from rich.table import Table

    t = Table(show_edge=False)
    for name in table.column_names:
        t.add_column(name)
    for row in table.slice(0, limit).to_pylist():
        t.add_row(*("" if v is None else str(v) for v in row.values()))
    out = console()
    out.print(t)
    if table.num_rows > limit:
        out.print(f"… {table.num_rows - limit} more rows")
