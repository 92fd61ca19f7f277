"""Many models on this machine: a pool of worker processes, each optimizing one model at a time.

The pool is ``workers`` one-process :class:`~concurrent.futures.ProcessPoolExecutor` s (``spawn``:
no DuckDB or onnxruntime state forked from the parent), fed from one queue: a worker that
finishes takes the next model. One executor per worker, not one executor for all, so that a
worker that dies (killed, out of memory, a crash in native code) is known by the model it was
running: that model is tried again in a fresh worker (``retries`` times) and then gets a row
saying its worker died; the other workers never notice. Timing honesty is the worker's
(:func:`relsat.fleet.worker.run_one`: the machine's measuring lock).
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from relsat.fleet.summary import Row, error_row
from relsat.fleet.worker import Task, run_one

__all__ = ["Job", "run_local"]

#: What a worker runs for one task: :func:`~relsat.fleet.worker.run_one` (tests give another).
Job = Callable[[Task], tuple[Row, "bytes | None"]]


def run_local(
    tasks: Sequence[Task], workers: int, *, retries: int = 1, job: Job = run_one
) -> Iterator[Row]:
    """Run ``tasks`` on ``workers`` processes; yields each row as its model finishes."""
    context = multiprocessing.get_context("spawn")
    slots: list[ProcessPoolExecutor | None] = [None] * max(1, min(workers, len(tasks)))
    queue = deque((task, 0) for task in tasks)  # (task, times its worker died)
    running: dict[Future[tuple[Row, bytes | None]], tuple[int, Task, int]] = {}
    try:
        while queue or running:
            for i, executor in enumerate(slots):
                if not queue:
                    break
                if any(slot == i for slot, _, _ in running.values()):
                    continue
                if executor is None:
                    executor = slots[i] = ProcessPoolExecutor(1, mp_context=context)
                task, deaths = queue.popleft()
                running[executor.submit(job, task)] = (i, task, deaths)
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                i, task, deaths = running.pop(future)
                try:
                    row, _ = future.result()
                except BrokenProcessPool:  # the worker died running this model
                    broken = slots[i]
                    slots[i] = None
                    if broken is not None:
                        broken.shutdown(wait=False)
                    if deaths < retries:
                        queue.appendleft((task, deaths + 1))
                        continue
                    tries = deaths + 1
                    row = error_row(
                        task.index,
                        task.model,
                        task.name,
                        f"worker died {tries} time{'s' if tries > 1 else ''} while optimizing "
                        "it (killed, out of memory, or a crash in native code)",
                    )
                except Exception as exc:  # the task could not be sent or its row not returned
                    row = error_row(
                        task.index, task.model, task.name, f"{type(exc).__name__}: {exc}"
                    )
                yield row
    finally:
        for executor in slots:
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
