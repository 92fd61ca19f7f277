"""Shared fixtures: where the reference data (``../shared/reference``) lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def reference_dir() -> Path:
    """``$RELSAT_REFERENCE`` or ``../shared/reference`` beside the repository."""
    return Path(os.environ.get("RELSAT_REFERENCE", ROOT.parent / "shared" / "reference"))


@pytest.fixture(scope="session")
def reference() -> Path:
    path = reference_dir()
    if not path.is_dir():
        pytest.skip(f"reference data not found at {path} (set RELSAT_REFERENCE)")
    return path


@pytest.fixture(autouse=True, scope="session")
def _private_cost_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Measured onnxruntime costs go to a cache of this test session, not the user's."""
    os.environ["RELSAT_CACHE_DIR"] = str(tmp_path_factory.mktemp("relsat-cache"))
