"""The machine's measuring lock: timings on one machine never share its cores.

Every process that optimizes for :func:`relsat.fleet.optimize_many` on a machine — pool workers,
Ray tasks on one node, two ``relsat optimize-many`` commands side by side — takes the same lock
(two files in ``$RELSAT_LOCK_DIR``, default ``<tmp>/relsat-<uid>``) around each pipeline stage:

* the **measuring** stages (``price``: unit timings for ``ort-cpu``; ``pack``: attention sites
  timed packed and unpacked; ``time``: the never-slower timing of the optimized model against
  the input) hold it **exclusively**: no other relsat
  stage runs on the machine meanwhile, so a timing has the cores to itself;
* every other stage (load, explore, extract, verify, ...) holds it **shared**: those overlap
  each other freely.

Writers go first: a process waiting to measure stops new stages from starting (they wait at the
gate), the running ones finish, then it measures; so a stream of short shared stages never
starves a timing. The lock is ``flock``: released by the kernel when a process dies, so a killed
worker never leaves it held. Where ``fcntl`` is missing (Windows) the lock does nothing.

>>> import tempfile
>>> lock = MeasureLock(tempfile.mkdtemp())
>>> with lock.hold(exclusive=True):
...     pass
>>> lock.waited_s >= 0 and lock.held_s >= 0
True
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

try:
    import fcntl
except ImportError:  # not POSIX: no lock
    fcntl = None  # type: ignore[assignment]

__all__ = ["MeasureLock", "lock_dir"]


def lock_dir() -> Path:
    """Where the machine's lock files live: ``$RELSAT_LOCK_DIR``, else ``<tmp>/relsat-<uid>``
    (one per user: another user's relsat is not seen)."""
    if os.environ.get("RELSAT_LOCK_DIR"):
        return Path(os.environ["RELSAT_LOCK_DIR"])
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"relsat-{uid}"


class MeasureLock:
    """A writer-first shared/exclusive lock over two files in ``directory`` (default
    :func:`lock_dir`). ``waited_s`` adds up the seconds spent waiting for it, ``held_s`` those
    spent holding it exclusively (measuring)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else lock_dir()
        self.waited_s = 0.0
        self.held_s = 0.0

    @contextmanager
    def hold(self, *, exclusive: bool) -> Iterator[None]:
        """Hold the lock, exclusively (measuring) or shared (any other stage), while the block
        runs."""
        if fcntl is None:
            yield
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with self._open("gate") as gate, self._open("stages") as stages:
            fcntl.flock(gate, fcntl.LOCK_EX)  # queue behind a waiting writer
            try:
                fcntl.flock(stages, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            finally:
                if not exclusive:  # a writer keeps the gate shut until it is done
                    fcntl.flock(gate, fcntl.LOCK_UN)
            got = time.perf_counter()
            self.waited_s += got - start
            try:
                yield
            finally:
                if exclusive:
                    self.held_s += time.perf_counter() - got
                fcntl.flock(stages, fcntl.LOCK_UN)
                if exclusive:
                    fcntl.flock(gate, fcntl.LOCK_UN)

    def _open(self, name: str) -> BinaryIO:
        return open(self.directory / f"{name}.lock", "a+b")
