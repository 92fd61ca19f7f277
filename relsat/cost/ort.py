"""Measured onnxruntime CPU costs: each operator signature priced by timing it in onnxruntime here.

:class:`OrtModel` (``cost_model="ort-cpu"``) turns a signature into a one-unit relsat graph
(:func:`unit_graph`, built by the same e-node decoding extraction uses), exports it with
:func:`relsat.onnx.to_model` — so a fused unit (Conv+bias+Relu) is timed exactly as the
exporter writes it and onnxruntime fuses it — and times it in a session from
:class:`~relsat.onnx.runtime.OrtSettings` (the options end-to-end timings use), TASO-style:
``warmup`` untimed runs, then ``min_runs``…``max_runs`` timed runs (stopping after
``budget_s``) spread over ``passes`` round-robin passes, inputs pre-allocated and bound once;
the price is the median of the passes' medians minus the fixed per-call overhead of a trivial
model, clamped at ``floor_ms`` (:class:`OrtTiming`).

* Prices that hold (:mod:`relsat.cost.stability`): a unit whose passes spread too wide, or that
  was timed while other processes took much of the CPU, is timed again; a price stored is the
  median with its spread and the load it was timed under. A doubtful stored price (spread
  unknown — a cache written before spreads were kept — or wide, or timed under load) is
  re-checked on its first use by an instance, and replaced when a sound re-check disagrees.
  ``remeasure=True`` re-checks every price an instance uses.

* Weight inputs are initializers: onnxruntime prepacks constant conv and matmul weights, so a
  weight timed as a graph input would be priced wrong. Which inputs are weight-only comes from
  the e-graph (:attr:`~relsat.cost.model.OpSignature.constants`); only the positions listed in
  :data:`CONSTANT_INPUTS` keep the flag (:meth:`OrtModel.canonical`), so e.g. an ``ewadd`` of a
  bias shares its key with one of two activations.
* Free in onnxruntime (:data:`ORT_ZERO_COST`): leaves, noop, dropout, the split projections,
  reshape (aliased) and merge/enlarge (folded into initializers by the exporter). Transpose,
  concat and split are real copies on a CPU and are timed.
* Inputs: float32 ones hold normal values, boolean ones (the masks' And, Or and Where) true and
  false at random, integer ones zeros where ONNX shape inference shows their values are data
  (the output shapes follow from the input shapes: a gather's index, a comparison); a unit whose
  integer input may be a shape, a count or a bound (a Tile's repeats, a Range's limit: made-up
  values would time another computation), or that divides, gets the fallback.
* Fallback: a unit that cannot be rebuilt, exported or run alone, or whose tensors exceed
  ``memory_cap`` bytes, is priced by ``AnalyticModel("cpu")`` (if even that refuses, by the same
  roofline for a memory-bound op of its shapes), counted in ``fallbacks`` and its reason kept in
  ``fallback_reasons`` (op → reason → count). One bad unit never stops pricing.
* Cache: measured rows persist per machine identity (:meth:`OrtSettings.machine`: CPU, threads,
  onnxruntime version, optimization level) in ``<cache>/costs/ort-cpu-<hash>.parquet`` under
  :func:`cache_dir`; rows of another identity are never used. The file is rewritten atomically
  (temporary file, then ``os.replace``) every ``save_every`` seconds while measuring and when a
  run ends or is interrupted; an unreadable file is ignored with a :class:`CostCacheWarning`
  and replaced at the next save. Fallback prices are not cached: they are cheap to redo, and a
  unit relsat cannot build today may become buildable.
* Shared costs: the cache folder is a :class:`~relsat.cost.store.CostStore` — this identity's
  rows of its other Parquet files (``relsat costs import``) are used too. ``store`` adds a shared
  store (a folder every machine of a cluster can reach): its rows of this identity are read
  (``shared`` counts those the cache lacked), and the units this instance measures are written
  to a file of its own there; rows of another identity are never read. On a miss the cache and
  the store are read again before measuring (another process may have measured it meanwhile).
  An unreadable file of either is named in a :class:`CostCacheWarning` and skipped.
  :meth:`OrtModel.recheck` re-times the stored prices themselves (``relsat costs show
  --remeasure``); :func:`remeasured` makes a run's ``ort-cpu`` model re-time every price.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from relsat.cost.analytic import AnalyticModel
from relsat.cost.model import CostModel, OpSignature
from relsat.cost.stability import CpuLoad, LoadProbe, Price, Stability, recheck, settle
from relsat.cost.store import CostStore, CostStoreError, CostStoreWarning, StoreWriter, warn_skipped
from relsat.cost.table import CostTable, conform, missing_columns
from relsat.errors import CostError
from relsat.graph.builder import GraphBuilder
from relsat.graph.graph import Graph
from relsat.graph.ops import opaque_parts
from relsat.onnx.runtime import OrtSettings

__all__ = [
    "CONSTANT_INPUTS",
    "ORT_ZERO_COST",
    "CostCacheWarning",
    "OrtModel",
    "OrtTiming",
    "Rechecked",
    "cache_dir",
    "remeasured",
    "unit_graph",
]

#: Operators onnxruntime runs for free: leaves (a scalar constant too), no operator, aliases
#: (reshape, the projections
#: of a split), and weight-only ops the exporter folds into initializers (merge, enlarge).
ORT_ZERO_COST = frozenset(
    {
        "input",
        "weight",
        "scalar",
        "noop",
        "same",
        "dropout",
        "split_0",
        "split_1",
        "reshape",
        "merge",
        "enlarge",
    }
)

#: The timing protocol's version, part of the cache identity: prices measured under another
#: protocol (2: round-robin passes, :class:`OrtTiming`; 3: one kernel, one price; 4: sessions
#: without spinning threads, :class:`~relsat.onnx.runtime.OrtSettings`; 5: an attention's keys
#: given as the transpose they come from, :func:`unit_graph`; 6: the least of the per-pass
#: medians, :class:`OrtTiming`) are never mixed with these. Protocol 6's rows written before
#: prices kept their spread (the least of the per-pass medians, now their median, re-timed
#: when they spread too wide or were timed under load) read as spread unknown: each is
#: re-checked on its first use and replaced where it disagrees, so a cache carries over.
PROTOCOL = 6

#: The input positions whose constness changes what onnxruntime does (it prepacks a constant
#: conv weight, a constant MatMul/Gemm B; batchnorm parameters fold): only there does a unit make
#: a weight-only input an initializer. Opaque ops: every position (their kernels may prepack).
CONSTANT_INPUTS: dict[str, frozenset[int]] = {
    "conv2d": frozenset({1}),
    "conv2d_bias": frozenset({1, 2}),
    "matmul": frozenset({1}),
    "matmul_bias": frozenset({1, 2}),
    "linear": frozenset({1}),
    "batchnorm": frozenset({1, 2, 3, 4}),
    "layernorm": frozenset({1, 2}),  # scale and bias
    "skiplayernorm": frozenset({2}),  # packed scale and bias
    "biasgelu": frozenset({1}),
    "biasgelu_tanh": frozenset({1}),
    "attention": frozenset({3}),  # a constant bias (a scalar 0: no mask) is left out on export
    "mha": frozenset({1, 2, 3}),  # packed weights and biases (prepacked), a constant mask
    "gqa": frozenset({3}),
    "rmsnorm": frozenset({1}),  # the scale
    "rotary": frozenset({1, 2}),  # cos and sin tables: written as the fused kernel's caches
    "instancenorm": frozenset({1, 2}),  # scale and bias
    "groupnorm": frozenset({1, 2}),  # scale and bias
}

SOURCE = "measured:onnxruntime-cpu"
#: Below this many units to time, no progress bar (it would only flicker).
PROGRESS_MIN = 8
BYTES = 4  # float32


class CostCacheWarning(CostStoreWarning):
    """The onnxruntime cost cache (or a cost store) could not be read or written (it is then
    ignored)."""


@dataclass(frozen=True)
class OrtTiming:
    """How one unit is timed: ``warmup`` untimed runs (fewer if they take half of ``budget_s``),
    then timed runs until ``max_runs`` or — after ``min_runs`` — ``budget_s`` seconds; the median
    minus the per-call overhead, at least ``floor_ms``. Units whose inputs and output together
    exceed ``memory_cap`` bytes are not run (fallback price).

    ``passes``: the runs are spread over that many round-robin passes over a batch of
    ``batch`` units (each pass a share of the runs and the budget); each pass's median is one
    repeat, and a unit's price is the median of its repeats. On a shared machine load comes and
    goes in bursts longer than one unit's timing (measured here: the same conv timed 0.26 and
    0.56 ms in two one-pass runs under load); passes spread each burst over all units, a burst
    over one or two of five repeats does not move the median, and one over more spreads the
    repeats: ``stability`` (:class:`~relsat.cost.stability.Stability`) then has the unit timed
    again, as when the machine was busy while it was timed. (Protocol 6 took the least of three
    pass medians, unchecked; before it their median, unchecked: a burst over two of three
    passes set the price of a fused rotary to 25 µs that re-checks timed at 4-11 µs.)"""

    warmup: int = 3
    min_runs: int = 10
    max_runs: int = 60
    budget_s: float = 0.25
    memory_cap: int = 1 << 30
    floor_ms: float = 1e-4
    passes: int = 5
    batch: int = 16
    stability: Stability = field(default_factory=Stability)

    def __post_init__(self) -> None:
        if self.warmup < 1 or self.min_runs < 1 or self.max_runs < self.min_runs:
            raise ValueError("need warmup >= 1 and 1 <= min_runs <= max_runs")
        if self.passes < 1 or self.batch < 1:
            raise ValueError("need passes >= 1 and batch >= 1")
        if self.budget_s <= 0 or self.memory_cap <= 0 or self.floor_ms <= 0:
            raise ValueError("budget_s, memory_cap and floor_ms must be positive")


def cache_dir() -> Path:
    """relsat's cache directory: ``$RELSAT_CACHE_DIR``, else ``$XDG_CACHE_HOME/relsat``, else
    ``~/.cache/relsat``."""
    if os.environ.get("RELSAT_CACHE_DIR"):
        return Path(os.environ["RELSAT_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "relsat"
    return Path.home() / ".cache" / "relsat"


_default_cache_dir = cache_dir  # OrtModel's ``cache_dir`` argument shadows the name


def unit_graph(sig: OpSignature) -> Graph:
    """The one-operator graph of ``sig``: an input per non-constant input, a weight per
    ``constants`` flag, the operator decoded as extraction decodes it. Raises ``GraphError``
    (or another relsat error) when the signature cannot be rebuilt.

    >>> g = unit_graph(OpSignature("matmul", (0,), "", ((2, 3), (3, 4)), (2, 4), (False, True)))
    >>> [n.op for n in g.nodes]
    ['input', 'weight', 'matmul']
    """
    from relsat.engine.decode import _node as decode_node  # the e-node decoding, one place

    b = GraphBuilder()
    flags = sig.constants or (False,) * len(sig.inputs)
    meta = _opaque_meta(sig)
    dtypes = [*meta.get("in_dtypes", []), *["FLOAT"] * len(sig.inputs)]
    leaves = [
        b.input(shape, name=f"x{i}")
        if not constant
        else b.weight(shape, name=f"w{i}")
        if dtypes[i] == "FLOAT"
        else _constant_leaf(b, shape, dtypes[i], meta.get("opset", 17))
        for i, (shape, constant) in enumerate(zip(sig.inputs, flags, strict=True))
    ]
    row: dict[str, Any] = {"op": sig.op, "s": sig.s, "shape": list(sig.output)}
    row.update({f"p{i}": p for i, p in enumerate(sig.params)})
    if sig.op in ("attention", "gqa") and not flags[1]:
        # The keys as every exporter writes them, k.transpose(-1, -2): the fused kernel reads k
        # itself (relsat.onnx.transformer_ops), so the unit times the kernel, not a Transpose
        # the transposed keys' own e-node is already priced for.
        b_, h, d, t = sig.inputs[1]
        leaves[1] = b.transpose(b.input([b_, h, t, d], name="k1"), [0, 1, 3, 2])
    outs = decode_node(b, row, [(t,) for t in leaves], {})
    if outs[0].shape != sig.output:
        raise sig.error(f"the rebuilt unit computes {list(outs[0].shape)}", model="ort-cpu")
    return b.build(*outs)


def _opaque_meta(sig: OpSignature) -> dict[str, Any]:
    """An opaque signature's ONNX record (``_onnx``: domain, opset, element types); empty for
    any other signature."""
    if sig.op != "opaque" or "|" not in sig.s:
        return {}
    meta = json.loads(opaque_parts(sig.s)[1]).get("_onnx", {})
    return meta if isinstance(meta, dict) else {}


def _constant_leaf(b: GraphBuilder, shape: tuple[int, ...], dtype: str, opset: int) -> Any:
    """A weight-only input of another element type than float32 (a mask's boolean constant, a
    gather's constant index), as the importer holds one: an opaque ``Constant`` (written as an
    initializer), of random booleans or of zeros."""
    from onnx import TensorProto, helper

    from relsat.onnx.context import encode_tensor

    code = TensorProto.DataType.Value(dtype)
    if code == TensorProto.BOOL:
        value = np.random.default_rng(0).random(shape) < 0.5
    else:
        value = np.zeros(shape, dtype=helper.tensor_dtype_to_np_dtype(code))
    meta = {"domain": "", "opset": opset, "types": {"value": "TENSOR"}, "inputs": []}
    attrs = {
        "value": encode_tensor(value, code),
        "_onnx": {**meta, "outputs": [1], "out_dtypes": [dtype]},
    }
    (leaf,) = b.opaque("Constant", [], [shape], attrs)
    return leaf


class OrtModel(CostModel):
    """Milliseconds onnxruntime takes on this CPU for each signature (see the module docstring).

    ``settings``: the onnxruntime options (threads, optimization level); ``timing``: the protocol;
    ``cache``: keep measurements in the per-machine file (``cache_dir`` overrides
    :func:`cache_dir`); ``save_every``: seconds between cache writes while measuring (0: after
    every unit); ``progress``: a progress bar on stderr (None: when stderr is a terminal);
    ``fallback``: the price of units onnxruntime cannot time (default ``AnalyticModel("cpu")``);
    ``store``: a shared :class:`~relsat.cost.store.CostStore` (or its folder) read and written
    beside the cache; ``remeasure``: re-check every stored price this instance uses, not only
    the doubtful ones (:mod:`relsat.cost.stability`); ``probe``: what watches the machine's
    load while units are timed (default :class:`~relsat.cost.stability.CpuLoad`).

    ``measured`` counts the units this instance timed, ``cached`` the rows read from the cache
    file, ``shared`` those it lacked that the cache folder's other files or the store had,
    ``fallbacks`` the signatures priced by the fallback, ``fallback_reasons`` why (by op),
    ``rechecked`` the stored prices it timed again and ``replaced`` those a re-check replaced
    (signature, old ms, new ms).
    """

    name = "ort-cpu"
    wants_constants = True
    precomputes_weights = True
    #: Unit timings on a shared machine repeat within a few percent at best (passes included).
    rewrite_margin = 0.05

    def __init__(
        self,
        settings: OrtSettings | None = None,
        *,
        timing: OrtTiming | None = None,
        cache: bool = True,
        cache_dir: str | os.PathLike[str] | None = None,
        save_every: float = 5.0,
        progress: bool | None = None,
        fallback: CostModel | None = None,
        store: CostStore | str | os.PathLike[str] | None = None,
        remeasure: bool = False,
        probe: LoadProbe | None = None,
    ) -> None:
        self.settings = settings if settings is not None else OrtSettings()
        self.remeasure = remeasure
        self.probe: LoadProbe = (
            probe if probe is not None else CpuLoad(threads=self.settings.effective_threads)
        )
        self.timing = timing if timing is not None else OrtTiming()
        self.device = f"{self.settings.machine()}|protocol{PROTOCOL}"
        self.fallback = fallback if fallback is not None else AnalyticModel("cpu")
        self.save_every = save_every
        self.progress = progress
        self.table = CostTable()  # measured rows of this identity: the cache file's and new ones
        self.path: Path | None = None
        if cache:
            digest = hashlib.sha256(self.device.encode()).hexdigest()[:16]
            root = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
            self.path = root / "costs" / f"ort-cpu-{digest}.parquet"
        self.measured = 0
        self.fallbacks = 0
        self.fallback_reasons: dict[str, Counter[str]] = {}
        self.rechecked = 0
        self.replaced: list[tuple[OpSignature, float, float]] = []
        self._checked: set[OpSignature] = set()  # timed by this instance: not re-checked again
        self._priced: dict[OpSignature, float] = {}  # zero-cost and fallback prices, this run
        self._dirty = False
        self._overhead_ms: float | None = None
        self.store = store if store is None or isinstance(store, CostStore) else CostStore(store)
        self._writer: StoreWriter | None = None  # this instance's file in the store
        self._new: set[str] = set()  # keys this instance measured: what it adds to the store
        rows = self._read(warn=True)
        self.cached = 0 if rows is None else rows.num_rows
        if rows is not None and rows.num_rows:
            self.table.insert_arrow(rows)
        self.shared = self._read_shared(warn=True)

    def __repr__(self) -> str:
        return f"OrtModel({self.settings!r}, {self.timing!r}, path={str(self.path)!r})"

    @property
    def source(self) -> str:
        return SOURCE

    # --- pricing ----------------------------------------------------------------------------

    def canonical(self, sig: OpSignature) -> OpSignature:
        """``sig`` with the constant flags onnxruntime cares about (:data:`CONSTANT_INPUTS`),
        or none. A unit whose inputs are all constant would be folded away by the exporter: it
        is timed (and keyed) as if computed at run time."""
        if sig.constants is None:
            return sig
        keep = (
            frozenset(range(len(sig.inputs)))
            if sig.op == "opaque"
            else CONSTANT_INPUTS.get(sig.op, frozenset())
        )
        flags = tuple(c and i in keep for i, c in enumerate(sig.constants))
        return _one_kernel(replace(sig, constants=flags if any(flags) and not all(flags) else None))

    def cost(self, sig: OpSignature) -> float:
        return float(self.costs([sig])[0])

    def costs(self, sigs: Sequence[OpSignature]) -> np.ndarray:
        keyed = [self.canonical(s) for s in sigs]
        unique = list(dict.fromkeys(keyed))
        stored = self.table.prices(self.device, unique)
        known = {s: p.ms for s, p in stored.items()}
        known.update((s, self._priced[s]) for s in unique if s in self._priced)
        todo = []
        for s in unique:
            if s in known:
                continue
            if s.op in ORT_ZERO_COST:
                known[s] = self._priced[s] = 0.0
            else:
                todo.append(s)
        if todo:
            todo = self._refresh(todo, known, stored)
        doubtful = [s for s in stored if s not in self._priced and self._doubtful(stored[s], s)]
        if todo or doubtful:
            self._measure_all(todo + doubtful, known, stored, thorough=self.remeasure)
        return np.array([known[s] for s in keyed], dtype=np.float64)

    def _doubtful(self, price: Price, sig: OpSignature) -> bool:
        """Whether a stored price is re-checked now: not yet by this instance, and doubtful (or
        every one, with ``remeasure``)."""
        return sig not in self._checked and (
            self.remeasure or not price.sound(self.timing.stability)
        )

    def recheck(self, every: bool = False) -> Rechecked:
        """Re-time this identity's stored prices that are doubtful (every one with ``every``),
        as their next use would, and write the cache and the store. A unit that cannot be
        rebuilt or run keeps its price."""
        rows = self.table.to_arrow(self.device)
        sigs = [OpSignature.from_key(k) for k in rows["key"].to_pylist()]
        stored = self.table.prices(self.device, sigs)
        todo = [
            s for s in sigs if s not in self._checked and (every or self._doubtful(stored[s], s))
        ]
        before = (self.rechecked, len(self.replaced))
        if todo:
            self._measure_all(todo, {s: p.ms for s, p in stored.items()}, stored, thorough=True)
        after = self.table.prices(self.device, todo)
        return Rechecked(
            rows=len(sigs),
            checked=self.rechecked - before[0],
            replaced=tuple(self.replaced[before[1] :]),
            doubtful=sum(not p.sound(self.timing.stability) for p in after.values()),
        )

    def _refresh(
        self,
        todo: list[OpSignature],
        known: dict[OpSignature, float],
        stored: dict[OpSignature, Price],
    ) -> list[OpSignature]:
        """``todo`` less what other writers (processes of this machine, machines sharing the
        store) have measured since this instance read the cache and the store: read again on
        a miss, before measuring (their prices added to ``known`` and ``stored``)."""
        if self.path is None and self.store is None:
            return todo
        rows = self._read(warn=False)
        if rows is not None and rows.num_rows:
            have = pa.array(self.table.to_arrow(self.device)["key"].to_pylist(), pa.string())
            new = rows.filter(pc.invert(pc.is_in(rows["key"], value_set=have)))
            if new.num_rows:
                self.table.insert_arrow(new)
                self.cached += new.num_rows
        self.shared += self._read_shared(warn=False)
        found = self.table.prices(self.device, todo)
        stored.update(found)
        known.update((s, p.ms) for s, p in found.items())
        return [s for s in todo if s not in found]

    def _measure_all(
        self,
        todo: list[OpSignature],
        known: dict[OpSignature, float],
        stored: dict[OpSignature, Price],
        *,
        thorough: bool = False,
    ) -> None:
        """Price ``todo`` in batches of round-robin passes (:class:`OrtTiming`), those in
        ``stored`` as re-checks: one attempt each (the cheap check of a doubtful price on its
        next use) unless ``thorough`` (asked for: ``remeasure``, :meth:`recheck`). The cache file
        is written every ``save_every`` seconds and — also on an exception or interrupt — when
        done, so measurements survive the run."""
        last_save = time.monotonic()
        size = self.timing.batch
        # new units and re-checks apart: a re-check may take one attempt, a new unit up to all
        fresh = [s for s in todo if s not in stored]
        again = [s for s in todo if s in stored]
        batches: list[tuple[list[OpSignature], int | None]]
        batches = [(fresh[i : i + size], None) for i in range(0, len(fresh), size)]
        once = None if thorough else 1
        batches += [(again[i : i + size], once) for i in range(0, len(again), size)]
        try:
            with self._progress_bar(len(todo)) as advance:
                for batch, attempts in batches:
                    prices = self._price_batch(batch, stored, attempts)
                    for sig, ms in zip(batch, prices, strict=True):
                        known[sig] = ms
                        advance(sig.op)
                    if self._dirty and time.monotonic() - last_save >= self.save_every:
                        self.save()
                        last_save = time.monotonic()
        finally:
            self.save()

    def _price_batch(
        self,
        batch: list[OpSignature],
        stored: dict[OpSignature, Price] | None = None,
        attempts: int | None = None,
    ) -> list[float]:
        """Measured prices of ``batch`` (fallback prices for units that cannot be timed), in
        at most ``attempts`` attempts (default: :class:`~relsat.cost.stability.Stability`'s);
        a unit in ``stored`` is a re-check (:func:`~relsat.cost.stability.recheck` decides
        what stands; one that cannot be timed now keeps its price)."""
        stored = stored if stored is not None else {}
        prices: dict[int, float] = {}
        units: dict[int, tuple[Any, Any]] = {}

        def failed(i: int, exc: Exception) -> None:
            sig = batch[i]
            self._checked.add(sig)
            prices[i] = stored[sig].ms if sig in stored else self._fall_back(sig, exc)

        for i, sig in enumerate(batch):
            try:
                units[i] = self._prepared(sig)
            except Exception as exc:  # one unit onnxruntime or relsat cannot handle: fall back
                failed(i, exc)
        share = self._pass_timing()

        def time_pass(i: int, first: bool) -> float:
            session, binding = units[i]
            return _median_ms(session, binding, share, warmup=first)

        def run_failed(i: int, exc: Exception) -> None:
            failed(i, batch[i].error(f"onnxruntime cannot run it: {_first_line(exc)}"))

        settled = settle(
            list(units),
            time_pass,
            passes=self.timing.passes,
            stability=self.timing.stability,
            probe=self.probe,
            on_error=run_failed,
            attempts=attempts,
        )
        for i, timed in settled.items():
            prices[i] = self._settled(batch[i], timed, stored.get(batch[i]))
        return [prices[i] for i in range(len(batch))]

    def _pass_timing(self) -> OrtTiming:
        """One pass's share of :attr:`timing`: its runs and budget over ``passes``."""
        t = self.timing
        return replace(
            t,
            min_runs=max(1, -(-t.min_runs // t.passes)),
            max_runs=max(1, -(-t.max_runs // t.passes)),
            budget_s=t.budget_s / t.passes,
        )

    def _settled(self, sig: OpSignature, timed: Price, old: Price | None) -> float:
        """Store the price ``timed`` (as timed: the overhead not yet subtracted) of ``sig``,
        or what a re-check of ``old`` leaves standing; returns the price."""
        net = replace(timed, ms=max(timed.ms - self.overhead_ms(), self.timing.floor_ms))
        self._checked.add(sig)
        if old is None:
            new = net
            self.measured += 1
        else:
            new = recheck(old, net, self.timing.stability)
            self.rechecked += 1
            if new.ms != old.ms:
                self.replaced.append((sig, old.ms, new.ms))
            if (new.ms, new.spread, new.load) == (old.ms, old.spread, old.load):
                return new.ms
        self.table.insert(
            self.device, [sig], [new.ms], SOURCE, spread=[new.spread], load=[new.load]
        )
        self._new.add(sig.key)
        self._dirty = True
        return new.ms

    def _fall_back(self, sig: OpSignature, exc: Exception) -> float:
        reason = exc.reason if isinstance(exc, CostError) else f"{type(exc).__name__}: {exc}"
        reason = (reason.strip().splitlines() or [""])[0][:160]
        self.fallback_reasons.setdefault(sig.op, Counter())[reason] += 1
        self.fallbacks += 1
        try:
            ms = self.fallback.cost(sig)
        except CostError:  # an op the roofline does not know: price its memory traffic
            ms = self.fallback.cost(replace(sig, op="opaque", constants=None))
        self._priced[sig] = ms
        return ms

    def measure(self, sig: OpSignature) -> Price:
        """Time one signature in onnxruntime as a unit of its own is timed — repeats until its
        price is sound or the attempts run out (:mod:`relsat.cost.stability`) — with no cache
        and no fallback: its price, spread, load and attempts. Raises
        :class:`~relsat.errors.CostError` saying which step failed."""
        session, binding = self._prepared(sig)
        share = self._pass_timing()
        errors: list[Exception] = []
        settled = settle(
            [0],
            lambda _, first: _median_ms(session, binding, share, warmup=first),
            passes=self.timing.passes,
            stability=self.timing.stability,
            probe=self.probe,
            on_error=lambda _, exc: errors.append(exc),
        )
        if errors:
            exc = errors[0]
            raise sig.error(f"onnxruntime cannot run it: {_first_line(exc)}", self.name) from exc
        timed = settled[0]
        return replace(timed, ms=max(timed.ms - self.overhead_ms(), self.timing.floor_ms))

    def _prepared(self, sig: OpSignature) -> tuple[Any, Any]:
        """The unit's session and bound inputs; CostError when over the memory cap."""
        nbytes = BYTES * (sum(math.prod(s) for s in sig.inputs) + math.prod(sig.output))
        if nbytes > self.timing.memory_cap:
            raise sig.error(
                f"over the memory cap ({nbytes} > {self.timing.memory_cap} bytes)", self.name
            )
        return self._unit_session(sig)

    def _unit_session(self, sig: OpSignature) -> tuple[Any, Any]:
        from relsat.onnx import to_model

        try:
            unit = unit_graph(sig)
        except Exception as exc:
            raise sig.error(f"cannot build the unit: {_first_line(exc)}", self.name) from exc
        try:
            model = to_model(unit)
        except Exception as exc:
            raise sig.error(f"cannot export the unit: {_first_line(exc)}", self.name) from exc
        try:
            session = self.settings.session(model)
            return session, _bind(session, integers=_values_free(model))
        except Exception as exc:
            raise sig.error(f"onnxruntime rejects it: {_first_line(exc)}", self.name) from exc

    def overhead_ms(self) -> float:
        """The fixed cost of one ``run`` (a one-element Identity model), measured once."""
        if self._overhead_ms is None:
            from relsat.onnx import to_model

            b = GraphBuilder()
            session = self.settings.session(to_model(b.build(b.input([1], name="x"))))
            timing = OrtTiming(warmup=20, min_runs=200, max_runs=200)
            self._overhead_ms = _median_ms(session, _bind(session), timing)
        return self._overhead_ms

    # --- cache ------------------------------------------------------------------------------

    def _read(self, *, warn: bool) -> pa.Table | None:
        """The cache file's rows of this identity; None when there is no readable file."""
        if self.path is None or not self.path.exists():
            return None
        try:
            rows = pq.read_table(str(self.path))
            missing = missing_columns(rows)
            if missing:
                raise ValueError(f"it lacks the columns {missing}")
            rows = conform(rows)  # a file written before spreads were kept: spread unknown
        except Exception as exc:  # truncated, not Parquet, other columns: start afresh
            if warn:
                warnings.warn(
                    f"ignoring unreadable cost cache {self.path}: {_first_line(exc)}",
                    CostCacheWarning,
                    stacklevel=3,
                )
            return None
        mine = rows.filter(pc.equal(rows["device"], self.device))
        if warn and mine.num_rows < rows.num_rows:
            warnings.warn(
                f"ignoring {rows.num_rows - mine.num_rows} rows of {self.path} measured under "
                f"another identity than {self.device!r}",
                CostCacheWarning,
                stacklevel=3,
            )
        return mine

    def _read_shared(self, *, warn: bool) -> int:
        """Add this identity's rows of the cache folder's other files and of the store that the
        table lacks; returns their number. Unreadable files are skipped (named in a warning
        when ``warn``)."""
        sources = [CostStore(self.path.parent)] if self.path is not None else []
        sources += [self.store] if self.store is not None else []
        have = set(self.table.to_arrow(self.device)["key"].to_pylist())
        added = 0
        for source in sources:
            try:
                found = source.read(self.device, exclude=[self.path] if self.path else [])
            except CostStoreError as exc:
                if warn:
                    warnings.warn(f"ignoring cost store: {exc}", CostCacheWarning, stacklevel=3)
                continue
            if warn:
                warn_skipped(found.skipped, CostCacheWarning)
            known = pa.array(sorted(have), pa.string())
            new = found.rows.filter(pc.invert(pc.is_in(found.rows["key"], value_set=known)))
            if new.num_rows:
                self.table.insert_arrow(new)
                have.update(new["key"].to_pylist())
                added += new.num_rows
        return added

    def save(self) -> None:
        """Write the measured rows to the cache file, atomically; rows another process added
        to the file meanwhile are kept; and the rows this instance measured to its own file of
        the store. Does nothing without new measurements."""
        if not self._dirty:
            return
        self._save_store()
        if self.path is None:
            self._dirty = False
            return
        theirs = self._read(warn=False)
        if theirs is not None and theirs.num_rows:
            ours = self.table.to_arrow(self.device)["key"]
            new = theirs.filter(pc.invert(pc.is_in(theirs["key"], value_set=ours)))
            if new.num_rows:
                self.table.insert_arrow(new)
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.path.stem, suffix=".tmp", dir=self.path.parent)
            os.close(fd)
            self.table.save_parquet(tmp, self.device)
            os.replace(tmp, self.path)
            tmp = None
        except OSError as exc:  # a read-only cache directory must not stop pricing
            warnings.warn(f"cannot write cost cache {self.path}: {exc}", CostCacheWarning, 2)
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        self._dirty = False

    def _save_store(self) -> None:
        """Replace this instance's file of the store with every row it measured."""
        if self.store is None or not self._new:
            return
        rows = self.table.to_arrow(self.device)
        mine = rows.filter(pc.is_in(rows["key"], value_set=pa.array(sorted(self._new))))
        try:
            if self._writer is None:
                self._writer = self.store.writer()
            self._writer.write(mine)
        except CostStoreError as exc:  # a shared folder gone away must not stop pricing
            warnings.warn(str(exc), CostCacheWarning, stacklevel=3)

    # --- reporting --------------------------------------------------------------------------

    def report(self) -> str:
        """What this instance did: units timed, rows from the cache, fallbacks and why."""
        store = f", {self.shared} from other files and {self.store}" if self.shared else ""
        checked = (
            f", {self.rechecked} re-checked ({len(self.replaced)} replaced)"
            if self.rechecked
            else ""
        )
        lines = [
            f"{self.name} on {self.device}: {self.measured} units timed, {self.cached} from "
            f"{self.path or 'no cache'}{store}{checked}, {self.fallbacks} priced by "
            f"{self.fallback.source}"
        ]
        for op, reasons in sorted(self.fallback_reasons.items()):
            for reason, n in reasons.most_common():
                lines.append(f"  fallback {op} x{n}: {reason}")
        return "\n".join(lines)

    @contextlib.contextmanager
    def _progress_bar(self, total: int) -> Iterator[Callable[[str], None]]:
        show = self.progress if self.progress is not None else sys.stderr.isatty()
        if not show or total <= PROGRESS_MIN:
            yield lambda op: None
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task("timing units in onnxruntime", total=total)
            yield lambda op: bar.update(task, advance=1, description=f"timing {op} units")


@dataclass(frozen=True)
class Rechecked:
    """What :meth:`OrtModel.recheck` did: of the identity's ``rows``, ``checked`` were timed
    again, ``replaced`` by their re-check (signature, old ms, new ms); ``doubtful`` of those
    checked are still doubtful (the machine was busy, or the unit's timings spread)."""

    rows: int
    checked: int
    replaced: tuple[tuple[OpSignature, float, float], ...]
    doubtful: int


def remeasured(options: Any, *, onnx: bool) -> Any:
    """``options`` (a :class:`relsat.Options`) with an ``ort-cpu`` model that re-checks every
    stored price it uses (``OrtModel(remeasure=True)``), where the options price with
    ``ort-cpu`` (its default for an ONNX input, ``onnx``); other options as they are. An
    :class:`OrtModel` already there (a shared store's) is told to re-check."""
    model = options.cost_model
    if isinstance(model, OrtModel):
        model.remeasure = True
        return options
    if model == "ort-cpu" or (model is None and onnx):
        return replace(options, cost_model=OrtModel(options.ort, remeasure=True))
    return options


def _one_kernel(sig: OpSignature) -> OpSignature:
    """The unit onnxruntime runs ``sig`` as, when another signature is the same kernel.

    A rotary embedding whose cos and sin tables are computed at run time is the kernel with
    constant caches: its tables' layout is a Reshape per table, written once per model.

    onnxruntime runs a Conv with or without a bias, with or without a fused activation, as one
    kernel (bias and activation in its epilogue), and fuses MatMul + bias Add into a Gemm (and
    Gemm + activation): those are priced as one measured unit, the activation free. Measured
    apart, two near-equal timings differ by their noise, and extraction would take whichever
    was lucky — e.g. un-fusing ResNet's convs into conv + Add + Relu for a "gain" that
    onnxruntime's own fusion erases at run time."""
    constant_weight = sig.constants is not None and len(sig.inputs) >= 2 and sig.constants[1]
    if sig.op in ("conv2d", "conv2d_bias") and constant_weight:
        x, w = sig.inputs[:2]
        assert sig.constants is not None
        return replace(
            sig,
            op="conv2d_bias",
            params=(*sig.params[:3], 0),
            inputs=(x, w, (1, w[0], 1, 1)),
            constants=(sig.constants[0], True, True),
        )
    if sig.op == "rotary" and (sig.constants is None or not any(sig.constants[1:])):
        # tables computed at run time: the export lays each out as the kernel's cache once,
        # shared by every rotary reading it (measured, 4 rotaries of [1, 4, 128, 32] on two
        # threads: 37 us fused with run-time caches, 71 us spelled out); the kernel is the unit
        return replace(sig, constants=(False, True, True))
    if sig.op in ("matmul", "matmul_bias") and len(sig.inputs[0]) == 2 and constant_weight:
        a, w = sig.inputs[:2]
        assert sig.constants is not None
        return replace(
            sig,
            op="matmul_bias",
            params=(0,),
            inputs=(a, w, (w[-1],)),
            constants=(sig.constants[0], True, True),
        )
    return sig


#: The input types a timed unit is given values of (onnxruntime's names → NumPy's); integer
#: ones only where their values are data (:func:`_values_free`).
_INPUT_TYPES: dict[str, Any] = {"tensor(float)": np.float32, "tensor(bool)": np.bool_}
_INTEGER_TYPES: dict[str, Any] = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}

#: Operators a unit of integer inputs is not run with made-up values for: zeros divide by zero.
_ZERO_HAZARDS = frozenset({"Div", "Mod"})


def _values_free(model: Any) -> bool:
    """Whether the unit's output shapes follow from its inputs' shapes alone (ONNX shape
    inference with the declared outputs cleared gives every dim): its integer inputs are then
    data (a gather's index, a comparison's operands), not shapes, counts or bounds (a Tile's
    repeats, a Range's limit), where made-up values would time another computation."""
    import onnx

    if any(n.op_type in _ZERO_HAZARDS for n in model.graph.node):
        return False
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    want = [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in probe.graph.output]
    for o in probe.graph.output:
        o.type.tensor_type.ClearField("shape")
    del probe.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=True)
    except Exception:  # any refusal: not known to be free of values
        return False
    got = [
        [d.dim_value if d.HasField("dim_value") else None for d in o.type.tensor_type.shape.dim]
        for o in inferred.graph.output
    ]
    return got == want


def _bind(session: Any, *, integers: bool = False) -> Any:
    """An IOBinding with pre-allocated random inputs and (where the type is known) outputs,
    so timed runs allocate and convert nothing on the Python side: float32 inputs hold normal
    values, boolean ones (a mask's operands) true and false at random, integer ones zeros (an
    index in range of any axis) where ``integers`` says their values are data; else an integer
    input is refused (the fallback prices the unit)."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    binding = session.io_binding()
    types = {**_INPUT_TYPES, **(_INTEGER_TYPES if integers else {})}
    for arg in session.get_inputs():
        kind = types.get(arg.type)
        if kind is None or not all(isinstance(d, int) for d in arg.shape):
            raise ValueError(f"input {arg.name} is {arg.type} {arg.shape}, not static float/bool")
        if kind is np.bool_:
            value = rng.random(arg.shape) < 0.5
        elif kind is np.float32:
            value = rng.standard_normal(arg.shape, dtype=np.float32)
        else:
            value = np.zeros(arg.shape, dtype=kind)
        binding.bind_ortvalue_input(arg.name, ort.OrtValue.ortvalue_from_numpy(value))
    for arg in session.get_outputs():
        if arg.type == "tensor(float)" and all(isinstance(d, int) for d in arg.shape):
            buffer = np.empty(arg.shape, dtype=np.float32)
            binding.bind_ortvalue_output(arg.name, ort.OrtValue.ortvalue_from_numpy(buffer))
        else:
            binding.bind_output(arg.name, "cpu")
    return binding


def _median_ms(session: Any, binding: Any, timing: OrtTiming, *, warmup: bool = True) -> float:
    """The median wall time (ms) of ``run_with_iobinding`` per :class:`OrtTiming`."""
    run = session.run_with_iobinding
    start = time.perf_counter()
    for _ in range(timing.warmup if warmup else 1):  # first runs allocate, pick kernels
        run(binding)
        if time.perf_counter() - start > timing.budget_s / 2:
            break
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < timing.max_runs:
        t = time.perf_counter()
        run(binding)
        times.append(time.perf_counter() - t)
        if len(times) >= timing.min_runs and time.perf_counter() - start > timing.budget_s:
            break
    return 1e3 * statistics.median(times)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:160]
