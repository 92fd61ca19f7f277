"""How many threads this process's own work may use: the one setting that lets several relsat
processes share a machine's cores (the workers of ``relsat optimize-many``) without each one
starting a thread per core.

``RELSAT_THREADS`` (an integer >= 1; unset: no cap) bounds the threads of the stages that do not
measure — DuckDB's statements (:class:`relsat.engine.db.Database`) and the onnxruntime sessions
that check outputs (:mod:`relsat.onnx.verification`). The measuring stages (unit prices,
never-slower timing) are not capped: they run alone under the machine's measuring lock
(:mod:`relsat.fleet.lock`) with the threads their prices are keyed by.

>>> import os
>>> os.environ["RELSAT_THREADS"] = "1"
>>> cap()
1
>>> del os.environ["RELSAT_THREADS"]
>>> cap() is None
True
"""

from __future__ import annotations

import os

from relsat.errors import SettingsError

__all__ = ["VARIABLE", "cap"]

#: The environment variable that caps a process's threads.
VARIABLE = "RELSAT_THREADS"


def cap() -> int | None:
    """The cap ``RELSAT_THREADS`` sets, or None; :class:`SettingsError` for a bad value."""
    text = os.environ.get(VARIABLE, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise SettingsError(VARIABLE, text, "an integer >= 1") from None
    if value < 1:
        raise SettingsError(VARIABLE, text, "an integer >= 1")
    return value
