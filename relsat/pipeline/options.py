"""Every setting of :func:`relsat.optimize`, as one frozen value checked once when it is built.

>>> from relsat import Limits, Options
>>> options = Options(limits=Limits(iterations=2), extractor="greedy")
>>> options.describe()
"limits=Limits(nodes=50000, iterations=2, seconds=3600.0), extractor='greedy'"
>>> Options(k_multi=-1)
Traceback (most recent call last):
...
relsat.errors.SettingsError: k_multi must be an integer >= 0, got -1
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any

from relsat.cost import DEVICES, CostModel
from relsat.engine.cycles import MODES
from relsat.engine.explore import Backoff, Limits, backoff_for
from relsat.errors import SettingsError, check_choice, check_int
from relsat.extract import EXTRACTORS, IlpOptions
from relsat.onnx.latency import Timing
from relsat.onnx.runtime import OrtSettings
from relsat.rewrite.rules import Rule, RuleSet

__all__ = ["BLOCKS", "COST_MODELS", "Options"]

#: ``Options.blocks``: fold repeated blocks always, never, or only a chain of layers.
BLOCKS = ("auto", "on", "off")
#: ``Options.cost_model`` by name, besides a device of :data:`relsat.cost.DEVICES` (its shipped
#: measured table, or its roofline) and ``"analytic-<device>"`` (the roofline alone).
COST_MODELS = ("analytic", "ort-cpu")


@dataclass(frozen=True, kw_only=True)
class Options:
    """The settings of one :func:`relsat.optimize` run. Every field has a default; a bad value
    raises :class:`~relsat.errors.SettingsError` (a ``ValueError``) naming the field when the
    value is built, before any work (``dataclasses.replace`` checks again).

    Exploration (:func:`relsat.engine.explore.explore`): ``limits`` (:class:`Limits`: e-nodes,
    iterations, seconds), ``rules`` (None: the shipped ``rules/*.rules``; any iterable of
    :class:`~relsat.rewrite.rules.Rule`, kept as a tuple or :class:`RuleSet`), ``k_multi``
    (iterations with multi-pattern rules, an integer >= 0), ``k_neutral`` (iterations with
    the *neutral* rules — element-wise associativity and commutativity, which every cost model
    prices alike and which explode on long sums: :mod:`relsat.engine.relevance`; None: every
    iteration, TENSAT's schedule), ``scheduler`` (``"simple"``: every
    match applied; ``"backoff"`` or a :class:`~relsat.engine.phase.Backoff`: egg's backoff
    scheduler, as TENSAT ran), ``guards`` (False: TENSAT's unguarded rules, unsound in places;
    verification catches it), ``cycle_filter`` (``"efficient"``, ``"vanilla"`` or ``"off"``),
    ``runtime_first`` (run the rules marked ``runtime`` — the conv and Gemm fusions onnxruntime
    makes itself — to a fixpoint before the first multi-pattern phase, so that it sees the fused
    units an ONNX import writes apart; None: for an ONNX input, not for a Graph, whose
    exploration stays TENSAT's).

    Pricing: ``cost_model`` (None: ``"ort-cpu"`` for an ONNX input, ``"analytic"`` for a
    Graph; else ``"analytic"``, ``"ort-cpu"``, a device name, ``"analytic-<device>"`` or a
    :class:`~relsat.cost.CostModel`: see :func:`relsat.pipeline.price.cost_model`), ``concat``
    (``"copy"`` or ``"free"``) and ``precompute_weights`` (None: as the priced runtime does;
    False or True), the policies of :class:`~relsat.cost.Pricing`.

    Extraction: ``extractor`` (``"ilp"``, ``"greedy"``, ``"greedy-dag"``) and ``ilp``
    (:class:`~relsat.extract.IlpOptions`: time limit, gap, order constraints, ...).

    ``blocks``: explore each distinct repeated block once (:mod:`relsat.pipeline.blocks`):
    ``"on"``, ``"off"``, or ``"auto"`` (only a chain of layers: one tensor made inside the
    repeat crosses each cut); None: ``"auto"`` for an ONNX input, ``"off"`` for a Graph.
    ``exportable``: offer extraction only what the ONNX exporter can write (no weight merge of a
    tensor computed at run time: :mod:`relsat.onnx.exportable`); None: for an ONNX input, not
    for a Graph (TENSAT's search, whose result :meth:`Result.save` writes as JSON).
    ``verify``: check the optimized graph computes what the input computes (NumPy; for an ONNX
    input also onnxruntime). ``db``: keep the e-graph in this DuckDB file; ``resume``: explore
    the e-graph of the same graph stored there further (needs ``db``).

    ONNX input: a model with dynamic dims (a ``dim_param`` such as ``batch`` or ``sequence``)
    is optimized with them symbolic and written back with them (:mod:`relsat.onnx.symbolic`);
    ``input_shapes`` (input name → dims) and ``batch`` give the *pricing shape* its prices and
    timing use (defaults: batch 1, any other dynamic dim 128), ``timing_shapes`` (each a
    mapping of dim name → value; dims not named keep their pricing value) further shapes to
    time at (the verdict is the worst). ``inputs`` (input name → array, e.g. a loaded
    ``.npz``) are values for onnxruntime's checks and timing, fed wherever an input's shape is
    the array's (else drawn: :mod:`relsat.onnx.inputs`): what relsat cannot draw, such as axes
    or a target shape given as an input; for a model with dynamic dims their shapes are the
    pricing shape unless ``input_shapes`` gives one. ``static`` fixes the dims to the pricing
    shape instead (the written model's interface is fixed too), as relsat did before. Where a
    dim cannot stay symbolic, the model is optimized at the pricing shape and the input kept
    unless ``static`` (:attr:`Result.why` says so, and :attr:`Result.shapes` why the dim could
    not stay).
    ``ort`` (:class:`~relsat.onnx.runtime.OrtSettings`: threads, optimization level) runs the
    timing and the ``ort-cpu`` prices; ``timing`` (:class:`~relsat.onnx.latency.Timing`: time
    budget, rounds, confidence) is how the optimized model is timed against the input (None:
    not timed, the optimized model is kept); ``keep_slower`` keeps the optimized model even
    when it is not measurably faster.
    """

    limits: Limits = field(default_factory=Limits)
    rules: Iterable[Rule] | None = None
    k_multi: int = 1
    k_neutral: int | None = 1
    scheduler: str | Backoff = "simple"
    guards: bool = True
    cycle_filter: str = "efficient"
    runtime_first: bool | None = None
    cost_model: str | CostModel | None = None
    concat: str = "copy"
    precompute_weights: bool | None = None
    extractor: str = "ilp"
    ilp: IlpOptions = field(default_factory=IlpOptions)
    blocks: str | None = None
    exportable: bool | None = None
    verify: bool = True
    db: str | Path | None = None
    resume: bool = False
    input_shapes: Mapping[str, Sequence[int]] | None = field(default=None, hash=False)
    inputs: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)
    batch: int | None = None
    static: bool = False
    timing_shapes: Sequence[Mapping[str, int]] = field(default=(), hash=False)
    ort: OrtSettings = field(default_factory=OrtSettings)
    timing: Timing | None = field(default_factory=Timing)
    keep_slower: bool = False

    def __post_init__(self) -> None:
        _typed("limits", self.limits, Limits, "a relsat.Limits")
        if self.rules is not None and not isinstance(self.rules, RuleSet):
            object.__setattr__(self, "rules", _rules(self.rules))
        check_int("k_multi", self.k_multi, 0)
        if self.k_neutral is not None:
            check_int("k_neutral", self.k_neutral, 0)
        backoff_for(self.scheduler)
        for name in ("guards", "verify", "resume", "keep_slower", "static"):
            check_choice(name, getattr(self, name), (False, True))
        check_choice("exportable", self.exportable, (None, False, True))
        check_choice("cycle_filter", self.cycle_filter, MODES)
        check_choice("runtime_first", self.runtime_first, (None, False, True))
        _check_cost_model(self.cost_model)
        check_choice("concat", self.concat, ("copy", "free"))
        check_choice("precompute_weights", self.precompute_weights, (None, False, True))
        check_choice("extractor", self.extractor, tuple(EXTRACTORS))
        _typed("ilp", self.ilp, IlpOptions, "a relsat.IlpOptions")
        check_choice("blocks", self.blocks, (None, *BLOCKS))
        if self.db is not None and not isinstance(self.db, str | os.PathLike):
            raise SettingsError("db", self.db, "None or a path")
        if self.resume and self.db is None:
            raise SettingsError("resume", self.resume, "False without a db")
        if self.input_shapes is not None:
            object.__setattr__(self, "input_shapes", _shapes(self.input_shapes))
        if self.inputs is not None:
            object.__setattr__(self, "inputs", _arrays(self.inputs))
        if self.batch is not None:
            check_int("batch", self.batch, 1)
        object.__setattr__(self, "timing_shapes", _timing_shapes(self.timing_shapes))
        _typed("ort", self.ort, OrtSettings, "a relsat.OrtSettings")
        if self.timing is not None:
            _typed("timing", self.timing, Timing, "a relsat.Timing or None")

    def describe(self) -> str:
        """One line: the fields that differ from their defaults (``defaults`` if none)."""
        changed = [
            f"{f.name}={_short(value)}"
            for f in fields(self)
            for value in [getattr(self, f.name)]
            if not _same(value, _default(f))
        ]
        return ", ".join(changed) or "defaults"


def _typed(name: str, value: object, kind: type, wanted: str) -> None:
    if not isinstance(value, kind):
        raise SettingsError(name, value, wanted)


def _rules(rules: object) -> tuple[Rule, ...]:
    """``rules`` as a tuple of rules (an immutable value: the compiled program is reused)."""
    wanted = "None, a RuleSet or an iterable of relsat.Rule"
    if isinstance(rules, str | bytes) or not isinstance(rules, Iterable):
        raise SettingsError("rules", rules, wanted)
    kept = tuple(rules)
    if not all(isinstance(r, Rule) for r in kept):
        raise SettingsError("rules", rules, wanted)
    return kept


def _check_cost_model(value: object) -> None:
    if value is None or isinstance(value, CostModel):
        return
    name = value.lower() if isinstance(value, str) else ""
    if name in COST_MODELS or name in DEVICES or name.removeprefix("analytic-") in DEVICES:
        return
    raise SettingsError(
        "cost_model",
        value,
        f"'analytic', a device ({', '.join(sorted(DEVICES))}), 'analytic-<device>', 'ort-cpu', "
        "a CostModel or None",
    )


def _shapes(shapes: object) -> dict[str, tuple[int, ...]]:
    """``input_shapes`` as ``{name: dims}`` with positive integer dims."""
    wanted = "None or a mapping of input name to positive integer dims"
    if not isinstance(shapes, Mapping):
        raise SettingsError("input_shapes", shapes, wanted)
    fixed: dict[str, tuple[int, ...]] = {}
    for name, dims in shapes.items():
        ok = isinstance(name, str) and isinstance(dims, Sequence) and not isinstance(dims, str)
        if not ok or not all(type(d) is int and d > 0 for d in dims):
            raise SettingsError("input_shapes", shapes, wanted)
        fixed[name] = tuple(dims)
    return fixed


def _arrays(inputs: object) -> dict[str, Any]:
    """``inputs`` as ``{name: numpy array}`` (checked against the model at load)."""
    import numpy as np

    wanted = "None or a mapping of input name to an array (e.g. a loaded .npz)"
    if not isinstance(inputs, Mapping) or not all(isinstance(k, str) for k in inputs):
        raise SettingsError("inputs", inputs, wanted)
    try:
        return {name: np.asarray(value) for name, value in inputs.items()}
    except (TypeError, ValueError):
        raise SettingsError("inputs", inputs, wanted) from None


def _timing_shapes(shapes: object) -> tuple[Mapping[str, int], ...]:
    """``timing_shapes`` as a tuple of ``{dim name: positive int}``."""
    wanted = "a sequence of mappings of dim name to a positive integer"
    if isinstance(shapes, str | bytes | Mapping) or not isinstance(shapes, Iterable):
        raise SettingsError("timing_shapes", shapes, wanted)
    out = []
    for one in shapes:
        if (
            not isinstance(one, Mapping)
            or not one
            or not all(isinstance(k, str) and type(v) is int and v > 0 for k, v in one.items())
        ):
            raise SettingsError("timing_shapes", shapes, wanted)
        out.append(dict(one))
    return tuple(out)


def _default(f: Field[Any]) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _same(value: Any, default: Any) -> bool:
    try:
        return bool(value == default)
    except Exception:  # an object whose == is not a bool (arrays)
        return value is default


def _short(value: Any) -> str:
    """A field's value in :meth:`Options.describe`: rule sets by size, cost models by name."""
    if isinstance(value, tuple | RuleSet) and all(isinstance(r, Rule) for r in value):
        return f"<{len(value)} rules>"
    if isinstance(value, CostModel):
        return f"<{value.name}>"
    if isinstance(value, Mapping) and any(hasattr(v, "shape") for v in value.values()):
        return (
            "{"
            + ", ".join(f"{k}: <{list(getattr(v, 'shape', ()))}>" for k, v in value.items())
            + "}"
        )
    return repr(value)
