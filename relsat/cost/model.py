"""What a cost model is: the price in milliseconds of one operator instance, by its signature.

An :class:`OpSignature` is everything that determines an operator's run time (TASO's cost-cache
key, ``reference/SEMANTICS.md`` §6.1): the op, its integer parameters ``p0…p5`` and string
parameter ``s`` in the e-node encoding (:func:`relsat.engine.egraph.encode_node`), its input shapes
in
argument order and its output shape. Optionally (``constants``) which inputs are weight-only: a
runtime that prepacks constant weights (onnxruntime on a CPU) prices those differently, so a
model that says so (``wants_constants``) gets the flags, and they become part of the key.
A :class:`CostModel` prices signatures; backends (analytic roofline, a table of measurements, a
GPU timing itself, onnxruntime on the CPU) all implement the same attributes (``name``,
``device``, ``source``) and ``cost``.

Whether a concat is copied or an all-weights operator is folded away is *not* part of the
signature (it depends on where the operator sits, not on what it is): :class:`Pricing` applies
those policies on top of any model.

>>> sig = OpSignature("relu", (), "", ((1, 4),), (1, 4))
>>> sig.params, sig.key
((-1, -1, -1, -1, -1, -1), '["relu",[-1,-1,-1,-1,-1,-1],"",[[1,4]],[1,4]]')
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from relsat.errors import CostError, check_choice

__all__ = [
    "ZERO_COST",
    "CostError",
    "CostModel",
    "OpSignature",
    "Pricing",
]

Shape = tuple[int, ...]

#: Operators that cost nothing (TENSAT's zero-cost list plus those TASO prices at 0, §6.1): they
#: alias or relabel a buffer, exist only at weight-preparation time, or are no operator at all.
ZERO_COST = frozenset(
    {
        "input",
        "weight",
        "split",
        "split_0",
        "split_1",
        "reshape",
        "transpose",
        "merge",
        "enlarge",
        "noop",
        "dropout",
    }
)


@dataclass(frozen=True)
class OpSignature:
    """One operator instance as far as its run time goes; hashable, with a stable text ``key``.

    ``params`` is always six integers (absent ones -1), shapes are tuples of ints. ``constants``
    is None (the default: not part of the signature) or one flag per input, True where that
    input is weight-only; only a set ``constants`` enters ``key``, so signatures without it keep
    the keys of cost tables written before it existed.

    >>> OpSignature("matmul", (0,), "", ((2, 3), (3, 4)), (2, 4), (False, True)).key
    '["matmul",[0,-1,-1,-1,-1,-1],"",[[2,3],[3,4]],[2,4],[false,true]]'
    """

    op: str
    params: tuple[int, ...]
    s: str
    inputs: tuple[Shape, ...]
    output: Shape
    constants: tuple[bool, ...] | None = None

    def __post_init__(self) -> None:
        params = tuple(int(p) for p in self.params)
        if len(params) > 6:
            raise CostError(
                f"{len(params)} integer parameters, at most 6",
                op=self.op,
                inputs=self.inputs,
                output=self.output,
            )
        object.__setattr__(self, "params", params + (-1,) * (6 - len(params)))
        object.__setattr__(self, "inputs", tuple(tuple(int(d) for d in s) for s in self.inputs))
        object.__setattr__(self, "output", tuple(int(d) for d in self.output))
        if self.constants is not None:
            constants = tuple(bool(c) for c in self.constants)
            if len(constants) != len(self.inputs):
                raise CostError(
                    f"{len(constants)} constant flags for {len(self.inputs)} inputs",
                    op=self.op,
                    inputs=self.inputs,
                    output=self.output,
                )
            object.__setattr__(self, "constants", constants)

    @property
    def key(self) -> str:
        """A stable text key (compact JSON of all fields), the cost table's primary key."""
        fields: list[object] = [
            self.op,
            list(self.params),
            self.s,
            [list(s) for s in self.inputs],
            list(self.output),
        ]
        if self.constants is not None:
            fields.append(list(self.constants))
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def from_key(cls, key: str) -> OpSignature:
        """The signature whose :attr:`key` is ``key`` (a cost table's row names its unit by it).

        >>> sig = OpSignature("matmul", (0,), "", ((2, 3), (3, 4)), (2, 4), (False, True))
        >>> OpSignature.from_key(sig.key) == sig
        True
        """
        fields = json.loads(key)
        op, params, s, inputs, output = fields[:5]
        constants = tuple(fields[5]) if len(fields) > 5 else None
        return cls(op, tuple(params), s, tuple(map(tuple, inputs)), tuple(output), constants)

    def error(self, message: str, model: str | None = None) -> CostError:
        """A :class:`CostError` naming this signature."""
        return CostError(message, op=self.op, inputs=self.inputs, output=self.output, model=model)


class CostModel(ABC):
    """Prices operator signatures in milliseconds on one device.

    ``name`` says which model (``"analytic"``), ``device`` which device its numbers are for (the
    cost table's ``device`` column), ``source`` what is recorded as the ``source`` of the rows it
    prices (``"analytic"``, ``"measured:cudnn"``, …). Subclasses implement :meth:`cost`; a backend
    that prices many signatures faster at once overrides :meth:`costs`.

    Two class attributes describe the runtime a model prices. ``wants_constants``: its prices
    depend on which inputs are weight-only, so pricing fills :attr:`OpSignature.constants` (and
    passes each signature through :meth:`canonical`). ``precomputes_weights``: the runtime folds
    weight-only subgraphs before inference (an ONNX export does), so pricing charges them 0 unless
    told otherwise (:class:`Pricing` ``precompute_weights``). ``rewrite_margin``: the relative
    uncertainty of its prices (0 for a formula, a few percent for timings); extraction charges
    every e-node a rule created that much more, so a rewrite is taken only when it saves more
    than the noise of its own prices.
    """

    name: str
    device: str
    wants_constants: bool = False
    precomputes_weights: bool = False
    rewrite_margin: float = 0.0

    @property
    def source(self) -> str:
        return self.name

    @abstractmethod
    def cost(self, sig: OpSignature) -> float:
        """Milliseconds for one run of ``sig``; raises :class:`CostError` when it cannot tell."""

    def costs(self, sigs: Sequence[OpSignature]) -> np.ndarray:
        """:meth:`cost` of each signature, as a float64 array."""
        return np.fromiter((self.cost(s) for s in sigs), dtype=np.float64, count=len(sigs))

    def canonical(self, sig: OpSignature) -> OpSignature:
        """The signature as this model keys it (default: ``sig`` itself). A model that
        ``wants_constants`` drops the flags that do not change its price, so that signatures of
        equal price share one key (and one measurement)."""
        return sig


@dataclass(frozen=True)
class Pricing:
    """Where-dependent policies applied on top of a model's per-signature cost (§6.3).

    ``concat="copy"`` charges every concat its copy unless all its inputs are weight-only (TENSAT's
    ``--all_weight_only``, its main experiments); ``"free"`` makes every concat free (TASO's
    convention for rule-made concats, and TENSAT without the flag). An expand of weights alone (a
    rule's constant fill: the zero bias of ``attention-packed-split-unbiased``) is free either
    way: like a weight-only concat, the exporter writes it as an initializer.

    ``precompute_weights=True`` prices every operator whose inputs are all weight-only at 0: it
    can be evaluated once before inference (TASO's ``preprocess_weights``, which the published
    "optimized" runtimes include). Default False, as in TENSAT's extraction, which charges
    weight-only work in full: charging it 0 made the ILP behave badly (§6.3). Any other value
    raises :class:`~relsat.errors.SettingsError`.

    >>> Pricing().adjust("concat", 0.01, all_weights=True), Pricing().adjust("concat", 0.01, False)
    (0.0, 0.01)
    """

    concat: Literal["copy", "free"] = "copy"
    precompute_weights: bool = False

    def __post_init__(self) -> None:
        check_choice("concat", self.concat, ("copy", "free"))

    def adjust(self, op: str, ms: float, all_weights: bool) -> float:
        """The cost of one operator of cost ``ms`` whose inputs are all weight-only or not."""
        return 0.0 if self.free(np.array([op]), np.array([all_weights]))[0] else float(ms)

    def free(self, ops: np.ndarray, all_weights: np.ndarray) -> np.ndarray:
        """Which operators the policies make free (vectorized: op names, inputs-all-weights)."""
        concat = ops == "concat"
        free = concat & all_weights if self.concat == "copy" else concat
        free = free | ((ops == "expand") & all_weights)
        if self.precompute_weights:
            free = free | all_weights
        return np.asarray(free, dtype=bool)
