"""Many models on a Ray cluster: one Ray task per model, rows streamed back as tasks finish.

Ray is an optional extra (``pip install 'relsat[cluster]'``), imported only here and only when
asked for. ``address`` is ``"auto"`` (the cluster ``ray start`` runs on this machine or
``$RAY_ADDRESS``; if there is none, a local Ray started here with ``workers`` model slots) or a
cluster's address (``HOST:PORT`` or ``ray://HOST:PORT``), which must answer within
:data:`CONNECT_TIMEOUT_S` (Ray itself would wait for minutes).

**One model at a time per node.** Each task needs one unit of the custom resource
:data:`RESOURCE` (``relsat``); a node offers as many as it may run models at once. Start the
nodes with ``ray start ... --resources='{"relsat": 1}'`` for one model at a time per node (the
default the issue asks for); a node with more units runs that many models side by side, their
measuring stages still one at a time (the machine's :class:`~relsat.fleet.lock.MeasureLock`).
A cluster where no node offers the resource is refused with one line saying how to start one.
Every row records the node and the machine identity its timing and prices ran under.

**Failures.** A task whose worker process dies is retried ``retries`` times by Ray, then its row
says so; an error inside a model is already its row (:func:`~relsat.fleet.worker.run_one`).
The kept models come back to this process as bytes and are written here, so ``--out-dir`` need
not be shared with the nodes.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from relsat.errors import RelsatError
from relsat.fleet.summary import Row, error_row
from relsat.fleet.worker import Task, run_one

__all__ = ["CONNECT_TIMEOUT_S", "RESOURCE", "FleetError", "connect", "run_ray"]

#: The custom Ray resource a model task needs one unit of: a node's model slots.
RESOURCE = "relsat"
#: How long a cluster address may take to answer before the run is refused.
CONNECT_TIMEOUT_S = 5.0


class FleetError(RelsatError):
    """Many models cannot run as asked: Ray missing, a cluster unreachable or without relsat
    slots. The message is one line naming the cause."""


def run_ray(
    tasks: Sequence[Task],
    address: str,
    *,
    workers: int,
    out_dir: str,
    retries: int = 1,
    job: Callable[[Task], tuple[Row, bytes | None]] = run_one,
) -> Iterator[Row]:
    """Run each task as a Ray task on the cluster at ``address``; yields each row as its model
    finishes, after writing the kept model to ``out_dir``."""
    ray = _import_ray()
    started_here = connect(ray, address, workers)
    try:
        if not ray.cluster_resources().get(RESOURCE):
            raise FleetError(
                f"no node of the Ray cluster offers the resource {RESOURCE!r}: start each node "
                f"with ray start ... --resources='{{\"{RESOURCE}\": 1}}' (one model at a time)"
            )
        remote = ray.remote(job).options(
            num_cpus=1, resources={RESOURCE: 1}, max_retries=retries, name="relsat-optimize"
        )
        pending = {remote.remote(task): task for task in tasks}
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ref)
            try:
                row, data = ray.get(ref)
            except ray.exceptions.RayError as exc:  # the worker died, the node went away
                yield error_row(task.index, task.model, task.name, _ray_error(exc, retries))
                continue
            if data is not None:
                row.output = _write(Path(out_dir) / f"{task.name}.onnx", data, row)
            yield row
    finally:
        if started_here:
            ray.shutdown()


def connect(ray: Any, address: str, workers: int) -> bool:
    """Connect to the cluster at ``address`` (``"auto"``: the running one, else a local Ray
    started here with ``workers`` model slots). Returns whether this call started Ray (and so
    must stop it). A Ray already initialized in this process is used as it is."""
    if ray.is_initialized():
        return False
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address == "auto":
        try:
            ray.init(address="auto", **quiet)
            return True
        except ConnectionError:  # no cluster running here: start one
            cpus = _cores()
            ray.init(
                num_cpus=cpus,
                resources={RESOURCE: max(1, workers)},
                include_dashboard=False,
                **quiet,
            )
            return True
    _reachable(address)
    try:
        ray.init(address=address, **quiet)
    except Exception as exc:
        raise FleetError(f"cannot connect to the Ray cluster at {address}: {_line(exc)}") from None
    return True


def _reachable(address: str) -> None:
    """Refuse an address that does not accept a TCP connection within
    :data:`CONNECT_TIMEOUT_S` (one line, instead of Ray's minutes of retries)."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise FleetError(f"--ray wants auto, HOST:PORT or ray://HOST:PORT, got {address!r}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise FleetError(f"cannot reach the Ray cluster at {address}: {reason}") from None


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise FleetError(
            "--ray needs Ray, which is not installed: pip install 'relsat[cluster]'"
        ) from None
    return ray


def _write(target: Path, data: bytes, row: Row) -> str | None:
    from relsat.pipeline.save import write_atomic

    try:
        write_atomic(target, data)
    except RelsatError as exc:
        row.error = str(exc)
        return None
    return str(target)


def _ray_error(exc: BaseException, retries: int) -> str:
    name = type(exc).__name__
    if name in ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError"):
        tries = retries + 1
        return (
            f"worker died {tries} time{'s' if tries > 1 else ''} while optimizing it "
            f"({name}: killed, out of memory, a crash in native code, or its node went away)"
        )
    return f"{name}: {_line(exc)}"


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
