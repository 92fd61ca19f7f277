"""The wheel ships every package and the data folders (sql/, rules/) the code reads."""

from __future__ import annotations

import tomllib
from pathlib import Path

from relsat.engine.db import SQL_DIR
from relsat.paths import data_dir
from relsat.rewrite.rulefile import RULES_DIR

ROOT = Path(__file__).resolve().parent.parent


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_is_listed() -> None:
    listed = set(_setuptools()["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "relsat").rglob("__init__.py")
    }
    assert found <= listed, f"add to pyproject.toml [tool.setuptools] packages: {found - listed}"


def test_data_folders_ship_inside_the_package() -> None:
    cfg = _setuptools()
    assert cfg["package-dir"] == {"relsat._data.sql": "sql", "relsat._data.rules": "rules"}
    assert cfg["package-data"]["relsat._data.sql"] == ["**/*.sql"]
    assert cfg["package-data"]["relsat._data.rules"] == ["**/*.rules"]
    # in a checkout the folders beside the package are found
    assert SQL_DIR == data_dir("sql") == ROOT / "sql"
    assert RULES_DIR == data_dir("rules") == ROOT / "rules"


def test_an_installed_package_reads_its_own_copy(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import relsat.paths

    fake = tmp_path / "relsat"
    (fake / "_data" / "sql").mkdir(parents=True)
    monkeypatch.setattr(relsat.paths, "__file__", str(fake / "paths.py"))
    assert relsat.paths.data_dir("sql") == fake / "_data" / "sql"
