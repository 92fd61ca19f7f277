"""Many models, many machines: :func:`optimize_many` runs :func:`relsat.optimize` over a list of
ONNX models in a local process pool or as Ray tasks on a cluster, and writes one summary table.

* :mod:`~relsat.fleet.inputs`: which models (files, folders, list files) and their output names;
* :mod:`~relsat.fleet.lock`: the machine's measuring lock — timings never share cores;
* :mod:`~relsat.fleet.worker`: one model in a worker, the pipeline's stages under the lock;
* :mod:`~relsat.fleet.local` / :mod:`~relsat.fleet.cluster`: the process pool / the Ray tasks;
* :mod:`~relsat.fleet.summary`: the rows, written as CSV and Parquet, printed as a table;
* :mod:`~relsat.fleet.many`: :func:`optimize_many` and its :class:`Fleet` settings.

Measured prices are shared through a :class:`~relsat.cost.store.CostStore` (``Fleet.cost_store``).
"""

from __future__ import annotations

from relsat.fleet.cluster import FleetError
from relsat.fleet.inputs import find_models
from relsat.fleet.lock import MeasureLock
from relsat.fleet.many import Fleet, Summary, optimize_many
from relsat.fleet.summary import Row

__all__ = ["Fleet", "FleetError", "MeasureLock", "Row", "Summary", "find_models", "optimize_many"]
