"""Rules with a fused kernel, checked in onnxruntime too (``relsat rules check``).

:func:`~relsat.rewrite.check.check_rule` runs both sides of a rule in relsat's NumPy executor.
For a fused operator (gelu, quickgelu, layernorm, rmsnorm, rotary, attention, ...: those
:data:`relsat.onnx.exporter.FUSED` lists, which the exporter writes as one onnxruntime kernel)
that executor runs relsat's own model of the kernel (:mod:`relsat.graph.kernels`), never the
kernel. :func:`with_ort` checks a rule holding one against onnxruntime itself: at the first
:data:`INSTANCES` distinct instances the NumPy check compared (its drawn shapes and parameter
values), both sides are exported (:func:`relsat.onnx.exporter.build_model`) and run in
onnxruntime (CPU, one thread, no spinning: :class:`relsat.onnx.runtime.OrtSettings`) on the
values the NumPy check drew, rounded to float32. The two sides must agree, and each side that
holds a fused operator must agree with its NumPy run on those values (so a kernel whose NumPy
model is wrong shows even where both sides use it). Outputs are compared by
:func:`relsat.graph.execute.compare_outputs`, the rule of the NumPy check, at float32's
tolerances :data:`RTOL`, :data:`ATOL` (those of :func:`relsat.onnx.verify`: onnxruntime computes
in float32, the NumPy check in float64). A rule that fuses an additive mask is compared with a
row of -inf in it too, as in NumPy (:func:`relsat.rewrite.inputs.masked`).

The result is an :class:`OrtCheck` on the verdict: ``ok`` (with the fused ONNX operators that
ran), ``mismatch`` (the verdict then fails as ``numeric-mismatch``, naming the shapes and
parameter values), or ``skipped`` with the reason where no instance could run in onnxruntime (the
exporter refuses a side, onnxruntime has no CPU kernel for it) or no fused kernel ran (the
exporter spells the operator out at every instance drawn): never a failure, never silent. The
``onnx`` packages are imported when a check runs: the rewrite package does not need them.

>>> from relsat.rewrite.check import check_rule
>>> from relsat.rewrite.rulefile import parse_rules
>>> rule = parse_rules("# name: r\\n(ewmul ?x (sigmoid ?x)) => (quickgelu 1.0 ?x)\\n")["r"]
>>> fused_ops(rule)
('quickgelu',)
>>> print(with_ort(check_rule(rule)).ort.text())
onnxruntime: 4 instances equal (QuickGelu)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from relsat.errors import RelsatError
from relsat.graph.execute import Comparison, compare_outputs, random_values, run
from relsat.graph.graph import Graph
from relsat.rewrite import inputs
from relsat.rewrite.check import ORT_STATUSES as STATUSES
from relsat.rewrite.check import Instance, OrtCheck, Verdict, check_rule, sides
from relsat.rewrite.rules import Rule

__all__ = [
    "ATOL",
    "INSTANCES",
    "RTOL",
    "STATUSES",
    "OrtCheck",
    "check_ort",
    "check_rule_ort",
    "fused_ops",
    "with_ort",
]

#: float32's tolerances (:func:`relsat.onnx.verify`'s defaults), for the rule of
#: :func:`~relsat.graph.execute.compare_outputs`.
RTOL, ATOL = 1e-4, 1e-5
#: Distinct instances run in onnxruntime per rule (each exports and loads both sides).
INSTANCES = 4


class _Skip(Exception):
    """An instance onnxruntime cannot run (the reason is the message)."""


def fused_ops(rule: Rule) -> tuple[str, ...]:
    """The operators of ``rule`` (either side) that the exporter writes as a fused onnxruntime
    kernel (:data:`relsat.onnx.exporter.FUSED`), sorted."""
    from relsat.onnx.exporter import FUSED

    return tuple(sorted({op for p in (*rule.lhs, *rule.rhs) for op in p.ops()} & FUSED.keys()))


def check_rule_ort(rule: Rule, *, seed: int = 0) -> Verdict:
    """:func:`~relsat.rewrite.check.check_rule`, then (:func:`with_ort`) onnxruntime."""
    return with_ort(check_rule(rule, seed=seed))


def with_ort(verdict: Verdict) -> Verdict:
    """``verdict`` with its rule checked in onnxruntime (:func:`check_ort`) where it is ``ok``
    and the rule holds a fused operator (else ``verdict`` as it is); a mismatch fails it."""
    if not verdict.ok or not fused_ops(verdict.rule):
        return verdict
    ort = check_ort(verdict.rule, verdict.examples)
    if ort.status == "mismatch":
        detail = f"in onnxruntime, {ort.detail}"
        return replace(verdict, status="numeric-mismatch", detail=detail, ort=ort)
    return replace(verdict, ort=ort)


def check_ort(rule: Rule, examples: Iterable[Instance]) -> OrtCheck:
    """``rule`` in onnxruntime at the first :data:`INSTANCES` distinct of ``examples``
    (instances whose sides the NumPy check found equal)."""
    compared = 0
    kernels: set[str] = set()
    skipped: list[str] = []
    for inst in _distinct(examples)[:INSTANCES]:
        try:
            differ, ran = _compare(rule, inst)
        except _Skip as reason:
            skipped.append(f"{reason}, at {inst.where}")
            continue
        if differ is not None:
            return OrtCheck("mismatch", differ, compared, tuple(sorted(kernels | ran)))
        compared += 1
        kernels |= ran
    if not compared:
        return OrtCheck("skipped", skipped[0] if skipped else "no instance to run")
    if not kernels:
        why = f"the exporter spells {', '.join(fused_ops(rule))} out at every instance drawn"
        return OrtCheck("skipped", f"no fused kernel ran ({why}; {compared} instances equal)")
    note = f"{len(skipped)} instances skipped: {skipped[0]}" if skipped else ""
    return OrtCheck("ok", note, compared, tuple(sorted(kernels)))


def _distinct(examples: Iterable[Instance]) -> list[Instance]:
    seen: dict[str, Instance] = {}
    for inst in examples:
        seen.setdefault(inst.where, inst)
    return list(seen.values())


@dataclass(frozen=True)
class _Side:
    """One side of an instance, exported and loaded: ``which`` (``left``, ``right``), its graph,
    its onnxruntime session, the fused ONNX operators its model holds."""

    which: str
    graph: Graph
    session: Any
    kernels: frozenset[str]


def _compare(rule: Rule, inst: Instance) -> tuple[str | None, frozenset[str]]:
    """Both sides of ``rule`` at ``inst`` in onnxruntime: what differed (None: nothing) and the
    fused ONNX operators that ran. Raises :class:`_Skip` where a side cannot run there."""
    lhs, rhs, conds = sides(rule, inst.shapes, inst.values)
    within = inputs.bounds(conds, inst.values, inst.shapes)
    drawn = inputs.drawn(lhs, conds, within) or random_values(lhs, seed=0)
    runs = [("", drawn)]
    masked = inputs.masked(rule, lhs, conds, drawn)
    if masked is not None:
        names, values = masked
        runs.append((f" with a row of -inf in {', '.join(f'?{n}' for n in names)}", values))
    both = (_side(lhs, "left"), _side(rhs, "right"))
    ran = both[0].kernels | both[1].kernels
    for how, values in runs:
        f32 = {k: np.asarray(v, dtype=np.float32) for k, v in values.items()}
        outs = [_run(side, f32) for side in both]
        where = f"at {inst.where}{how}"
        result = _compared(*outs)
        if not result.ok:
            return f"the sides differ {where}: {_first(result)}", ran
        exact = {k: v.astype(np.float64) for k, v in f32.items()}
        for side, out in zip(both, outs, strict=True):
            if side.kernels:  # the kernel against relsat's NumPy model of it, on these values
                result = _compared(out, run(side.graph, exact))
                if not result.ok:
                    differ = f"{', '.join(sorted(side.kernels))} and relsat's NumPy kernels differ"
                    return f"{differ} on the {side.which} side {where}: {_first(result)}", ran
    return None, ran


def _compared(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> Comparison:
    return compare_outputs(a, b, rtol=RTOL, atol=ATOL)


def _first(result: Comparison) -> str:
    return result.report().splitlines()[0]


def _side(g: Graph, which: str) -> _Side:
    """Side ``g`` exported and loaded in onnxruntime."""
    import onnxruntime as ort

    from relsat.onnx.exporter import FUSED, build_model
    from relsat.onnx.runtime import OrtSettings

    try:
        model = build_model(g)
    except RelsatError as err:
        raise _Skip(f"the exporter cannot write the {which} side ({_line(err)})") from None
    fused = {FUSED[n.op] for n in g.nodes if n.op in FUSED}
    kernels = frozenset(n.op_type for n in model.graph.node if n.op_type in fused)
    options = OrtSettings(threads=1).session_options()  # no spinning: the cores are shared
    options.log_severity_level = 4  # failures to load are reported here, not logged
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as err:  # onnxruntime raises its own unrelated exception classes
        raise _Skip(f"onnxruntime cannot load the {which} side ({_line(err)})") from None
    return _Side(which, g, session, kernels)


def _run(side: _Side, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    feed = {i.name: values[i.name] for i in side.session.get_inputs()}
    try:
        return [np.asarray(o) for o in side.session.run(None, feed)]
    except Exception as err:  # onnxruntime raises its own unrelated exception classes
        raise _Skip(f"onnxruntime cannot run the {side.which} side ({_line(err)})") from None


def _line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
