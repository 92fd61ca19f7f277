"""Stage ``verify``: the optimized graph computes what the input computes.

Relsat's NumPy executor runs both graphs on the same random values (:func:`relsat.compare`)
unless ``Options.verify`` is False or an opaque op has no NumPy kernel (onnxruntime checks an
ONNX input's models later, :mod:`relsat.pipeline.ort`). Graphs with symbolic dims run at the
pricing shape (:func:`relsat.graph.specialize.specialize`), never at marker sizes. Whatever
``verify`` says, a graph whose interface (inputs, their order and shapes; output shapes) differs
from the input's is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from relsat.engine.egraph import EGraph
from relsat.errors import RelsatError
from relsat.graph.execute import Comparison, compare
from relsat.graph.graph import Graph, same_computation
from relsat.graph.kernels import has_kernel
from relsat.graph.specialize import specialize
from relsat.pipeline.options import Options
from relsat.pipeline.run import Run

__all__ = [
    "CHECKS",
    "VerificationError",
    "interface_mismatch",
    "rewrites",
    "runtime_rules",
    "unchanged",
    "verify",
]

#: What :attr:`VerificationError.check` can be: where the difference was found.
CHECKS = ("numpy", "onnxruntime", "interface")


class VerificationError(RelsatError):
    """The optimized graph does not compute what the original computes. ``check`` says which
    check found it (:data:`CHECKS`: relsat's NumPy executor, onnxruntime, or the interface),
    ``detail`` how, in words; ``comparison`` is the outputs' comparison (None for the
    interface)."""

    def __init__(
        self, comparison: Comparison | None, *, check: str = "numpy", detail: str | None = None
    ) -> None:
        self.comparison = comparison
        self.check = check
        self.detail = detail if detail is not None else comparison.report() if comparison else ""
        what = {
            "numpy": "the optimized graph differs from the original",
            "onnxruntime": "onnxruntime outputs differ",
            "interface": "the optimized graph's interface differs",
        }[check]
        super().__init__(f"{what}: {self.detail}")


def verify(run: Run) -> Run:
    """Check ``run.optimized`` against ``run.graph`` (:class:`VerificationError` when it
    differs)."""
    graph, optimized = run.graph, run.optimized
    assert optimized is not None, "verify runs after decode"
    done = run
    opaque = {n.params["type"] for n in graph.nodes if n.op == "opaque"}
    unrunnable = sorted(t for t in opaque if not has_kernel(t))
    if run.options.verify and unrunnable:  # say so instead of failing deep in the executor
        note = f"skipped: no NumPy kernel for {', '.join(unrunnable)} (check in onnxruntime)"
        done = replace(run, verification=note)
    elif run.options.verify and run.shapes is not None and run.shapes.opened:
        # NumPy would need the values that make those dims what they are at the pricing shape
        note = "skipped: dims computed from values (check in onnxruntime)"
        done = replace(run, verification=note)
    elif run.options.verify and (same_computation(graph, optimized) or _kept_as_is(run)):
        done = replace(run, verified=True, verification="not needed (unchanged)")
    elif run.options.verify:
        left, right = graph, optimized
        dims = run.shapes.dims if run.shapes is not None else None
        if dims is not None:  # at the pricing shape, not at the markers
            left, right = specialize(graph, dims.value), specialize(optimized, dims.value)
        comparison = compare(left, right)
        if not comparison.ok:
            raise VerificationError(comparison)
        done = replace(run, verified=True, verification="passed")
    mismatch = interface_mismatch(graph, optimized)
    if mismatch:  # checked whatever Options.verify says: such a graph is never handed back
        raise VerificationError(None, check="interface", detail=mismatch)
    return done


def _kept_as_is(run: Run) -> bool:
    """An ONNX input whose optimized graph holds only rewrites onnxruntime makes itself: the
    input is kept as it is (:func:`relsat.pipeline.ort.export`), nothing to verify."""
    return run.source is not None and run.egraph is not None and unchanged(run)


def interface_mismatch(original: Graph, optimized: Graph) -> str | None:
    """How the optimized graph's inputs (names, shapes, order) or outputs (count, shapes) differ
    from the original's, or None."""
    want = [(n.name, n.shape) for n in original.inputs]
    got = [(n.name, n.shape) for n in optimized.inputs]
    if want != got:
        return f"inputs {want} became {got}"
    want_out = [original.shape(r) for r in original.outputs]
    got_out = [optimized.shape(r) for r in optimized.outputs]
    if want_out != got_out:
        return f"output shapes {want_out} became {got_out}"
    return None


def unchanged(run: Run) -> bool:
    """No rewrite was chosen that onnxruntime does not make itself: every chosen e-node is the
    input's (duplicates that hash-consing merged aside) or built by a rule marked ``runtime`` (a
    fusion onnxruntime makes when it loads the input: a Conv's bias, batch norm or activation
    folded in), no chosen class holds another of the input's e-nodes (a rule's union of two
    input tensors: an And with an all-true operand is its other operand), and the ``tidy``
    stage changed nothing; or the graphs are the same computation."""
    assert run.egraph is not None and run.optimized is not None
    own = set(rewrites(run.egraph, run.choice)) - runtime_rules(run.options)
    if not own and not run.tidied:
        chosen = sorted(run.choice.values())
        ((merged,),) = run.egraph.db.run("analysis/input_alternatives", chosen=chosen)
        if not merged:
            return True
    return same_computation(run.graph, run.optimized)


def runtime_rules(options: Options) -> set[str]:
    """The names of the rules marked ``runtime`` among those the run explored with."""
    from relsat.engine.explore import default_rules  # read once per process, as explore reads it

    rules = default_rules() if options.rules is None else options.rules
    return {r.name for r in rules if r.runtime}


def rewrites(egraph: EGraph, choice: Mapping[int, int]) -> dict[str, int]:
    """The rules that built the chosen e-nodes (``choice``: e-class → e-node): rule → count."""
    ids = ",".join(str(i) for i in sorted(choice.values())) or "-1"
    rows = egraph.db.execute(
        f"SELECT rule, count(*) FROM enode WHERE id IN ({ids}) AND rule IS NOT NULL "
        "GROUP BY rule ORDER BY 2 DESC, 1"
    )
    return {str(r[0]): int(r[1]) for r in rows}
