"""Where relsat's data folders are: the hand-written SQL (``sql/``) and the rule files
(``rules/``) stay at the top of the repository and ship inside the wheel as ``relsat/_data/``
(pyproject.toml maps them); this module is the one place that knows both.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["data_dir"]


def data_dir(name: str) -> Path:
    """The folder ``name`` (``"sql"``, ``"rules"``): inside the installed package
    (``relsat/_data/<name>``) or, in a checkout or an editable install, beside the package.

    >>> data_dir("sql").joinpath("schema", "egraph.sql").is_file()
    True
    """
    package = Path(__file__).resolve().parent
    shipped = package / "_data" / name
    return shipped if shipped.is_dir() else package.parent / name
