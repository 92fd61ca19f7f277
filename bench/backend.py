"""The ONNX backend test models through ``relsat.optimize``: what becomes of each one, as given
and with its input dims made dynamic (issue 27).

    python bench/backend.py --list
    python bench/backend.py [--models NAME|FAMILY ...] [--limit N] [--variants given dynamic]
                            [--timeout 120] [--cost-model analytic] [--work DIR]

The corpus: every backend test model of the installed onnx wheel with a ``test_data_set_0`` —
the folders ``pytorch-converted``, ``pytorch-operator`` and ``simple`` under
``onnx/backend/test/data`` — and the node tests (``node``: one model per operator test, about
1,900), which the wheel ships as Python (``onnx.backend.test.case.node``) rather than files:
they are written once to ``--work``/``onnx-<version>/node`` (about 10 s), as onnx's own
``backend-test-tools generate-data`` writes its model tests. Not here: ``light`` (the model zoo
graphs, which have no inputs to run: bench/today.py measures them as ``zoo-<name>``) and
``real`` (downloaded).

A model counts only where onnxruntime itself loads it and runs it on its ``test_data_set_0``
inputs; the others are skipped, counted by reason. Variants: ``given`` (the model as shipped:
only a handful have a ``dim_param``, and relsat reads a zero-size dim as dynamic too) and
``dynamic`` (every positive dim of every tensor input made a ``dim_param`` — ``d<axis>_<size>``,
so dims of one size at one axis are declared one dim, as an exporter's ``batch`` is — except
integer inputs of rank 0 or 1, which are parameters such as axes, a shape or pads; the outputs'
dims left open; skipped where no dim changed or onnxruntime does not run the variant on the same
inputs). The pricing shape is the test data's (``input_shapes``, unless a dim is 0), so prices,
relsat's checks and the reference check run where the model is known to run; the test data are
relsat's ``inputs`` too (the values its onnxruntime checks feed where an input's shape fits:
axes, divisors, strings it cannot draw); relsat's own onnxruntime check also runs at two other
shapes.

Per model and variant ``relsat.optimize`` runs in a worker process (one at a time; a model past
``--timeout`` seconds, or one that kills the worker, is a row, and a fresh worker takes the next
one) with ``timing=None`` (no never-slower timing) and ``--cost-model`` prices (analytic by
default: fast and deterministic; ``ort-cpu`` measures every operator in onnxruntime as
``relsat optimize`` does). Each outcome is one class:

* ``optimized`` — a rewrite chosen, verified (NumPy and onnxruntime), the optimized model kept;
* ``original kept`` — no rewrite, or relsat's onnxruntime check rejected the rewrite (``why``);
* ``dims fixed`` — relsat optimized at the pricing shape instead of keeping a dynamic dim
  symbolic (``Result.shapes.note`` says why) and so handed back the original (its interface),
  as it does without ``static``;
* ``refused: dynamic dim`` — a :class:`relsat.RelsatError` about a dynamic or symbolic dim
  (a ``SymbolicDimError``, or one whose words say ``dynamic``, ``symbolic`` or ``dim_param``);
* ``refused: data-dependent shape`` — a ``DynamicShapeError``: even at fixed input shapes an
  operator's output shape is open, computed from an input's values (Unique, NonZero, a Reshape
  target or Reduce axes given as inputs); the error names that input;
* ``refused: other`` — any other ``RelsatError`` (unsupported opset, op, type, ...), grouped by
  error type and reason;
* ``crashed`` — an exception that is not a ``RelsatError`` (a bug), or the worker died;
* ``timed out``.

Where relsat wrote an optimized model (``optimized`` or ``dims fixed``), onnxruntime runs it on
the test inputs and its outputs are compared with onnxruntime's outputs of the original
(``reference``: rtol 1e-3, atol 1e-5 scaled by the output's largest magnitude; other types
equal); for a model with dynamic inputs the written model's input dims are compared with the
original's, ``dim_param`` names included (``interface``).

Markdown on stdout (outcomes per variant, refusals and crashes grouped, the dynamic-dim models'
checks), progress on stderr, one row per model and variant appended to
bench/results/backend.csv. Runs on the CPU; the whole corpus took 6-7 minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench modules

import common

FAMILIES = ("node", "pytorch-converted", "pytorch-operator", "simple")
VARIANTS = ("given", "dynamic")
CLASSES = (
    "optimized",
    "original kept",
    "dims fixed",
    "refused: dynamic dim",
    "refused: data-dependent shape",
    "refused: other",
    "crashed",
    "timed out",
)
CSV_HEADERS = [
    "model",
    "family",
    "variant",
    "outcome",
    "error_type",
    "detail",
    "dims",
    "interface",
    "reference",
    "seconds",
    "cost_model",
]
#: Tasks a worker runs before a fresh one takes over (DuckDB and onnxruntime keep caches).
WORKER_TASKS = 300
RTOL, ATOL = 1e-3, 1e-5
#: Characters of an outcome's detail kept in the CSV (the table groups on them).
DETAIL = 200


@dataclass(frozen=True)
class Entry:
    """One backend test model: its folder holds ``model.onnx`` and ``test_data_set_0``."""

    name: str
    family: str
    folder: Path


# --- the corpus -------------------------------------------------------------------------------


def data_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("onnx")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "backend" / "test" / "data"


def node_dir(work: Path) -> Path:
    from importlib.metadata import version

    return work / f"onnx-{version('onnx')}" / "node"


def corpus(work: Path, *, generate: bool) -> list[Entry]:
    """The models with a ``test_data_set_0``, by family; the node tests written to ``work``
    first when ``generate`` (else only those already written)."""
    entries = []
    for family in FAMILIES:
        root = node_dir(work) if family == "node" else data_dir() / family
        if family == "node" and generate and not (root / ".complete").exists():
            write_node_tests(root)
        for folder in sorted(root.glob("*/test_data_set_0")):
            if (folder.parent / "model.onnx").exists():
                entries.append(Entry(folder.parent.name, family, folder.parent))
    return entries


def write_node_tests(root: Path) -> None:
    """The wheel's node test cases as model folders (``model.onnx``, ``test_data_set_0``)."""
    from onnx import numpy_helper
    from onnx.backend.test.case import node

    common.log(f"writing the onnx wheel's node tests to {root} ...")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases()
    for case in cases:
        folder = root / case.name / "test_data_set_0"
        folder.mkdir(parents=True, exist_ok=True)
        (folder.parent / "model.onnx").write_bytes(case.model.SerializeToString())
        inputs, outputs = case.data_sets[0]
        for kind, values, infos in (
            ("input", inputs, case.model.graph.input),
            ("output", outputs, case.model.graph.output),
        ):
            for j, value in enumerate(values):
                which = infos[j].type.WhichOneof("value") if j < len(infos) else "tensor_type"
                if which == "sequence_type":
                    proto = numpy_helper.from_list(value, infos[j].name)
                elif which == "optional_type":
                    proto = numpy_helper.from_optional(value, infos[j].name)
                elif which == "map_type":
                    proto = numpy_helper.from_dict(value, infos[j].name)
                elif hasattr(value, "SerializeToString"):
                    proto = value
                else:
                    proto = numpy_helper.from_array(value, infos[j].name if j < len(infos) else "")
                (folder / f"{kind}_{j}.pb").write_bytes(proto.SerializeToString())
    (root / ".complete").write_text(f"{len(cases)} cases\n")
    common.log(f"  {len(cases)} node tests written")


def select(entries: list[Entry], wanted: list[str] | None, limit: int | None) -> list[Entry]:
    """Names or families (all when None); the first ``limit`` of each family."""
    if wanted:
        known = {e.name for e in entries} | set(FAMILIES)
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise KeyError(f"unknown models or families: {', '.join(unknown)}")
        entries = [e for e in entries if e.name in wanted or e.family in wanted]
    if limit is not None:
        seen: Counter[str] = Counter()
        kept = []
        for e in entries:
            seen[e.family] += 1
            if seen[e.family] <= limit:
                kept.append(e)
        entries = kept
    return entries


# --- one model, in the worker ------------------------------------------------------------------


def read_data(model: Any, folder: Path) -> tuple[dict[str, Any], int]:
    """The test inputs by input name (a pb file's own name when it names an input, else the
    inputs in order, initializers left out) and how many outputs the data set holds."""
    import onnx
    from onnx import numpy_helper

    inits = {t.name for t in model.graph.initializer}
    infos = [vi for vi in model.graph.input if vi.name not in inits]
    by_name = {vi.name: vi for vi in infos}
    feeds: dict[str, Any] = {}
    files = sorted(folder.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    for j, path in enumerate(files):
        data = path.read_bytes()
        kind = infos[j].type.WhichOneof("value") if j < len(infos) else "tensor_type"
        if kind == "sequence_type":
            proto: Any = onnx.SequenceProto()
            proto.ParseFromString(data)
            value: Any = numpy_helper.to_list(proto)
        elif kind == "optional_type":
            proto = onnx.OptionalProto()
            proto.ParseFromString(data)
            value = numpy_helper.to_optional(proto)
        else:
            proto = onnx.TensorProto()
            proto.ParseFromString(data)
            value = numpy_helper.to_array(proto)
        vi = by_name.get(proto.name) or (infos[j] if j < len(infos) else None)
        if vi is None:
            raise ValueError(f"{path.name} matches no graph input")
        feeds[vi.name] = value
    return feeds, len(list(folder.glob("output_*.pb")))


def dynamic_variant(model: Any) -> tuple[Any, int]:
    """``model`` with every positive dim of every tensor input a ``dim_param``
    (``d<axis>_<size>``; integer inputs of rank 0 or 1 left as they are: they are parameters
    such as axes or a shape), its outputs' dims open and its value_info dropped; and how many
    dims were made dynamic."""
    import onnx

    ints = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}

    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {t.name for t in out.graph.initializer}
    made = 0
    for vi in out.graph.input:
        if vi.name in inits or vi.type.WhichOneof("value") != "tensor_type":
            continue
        tensor = vi.type.tensor_type
        if tensor.elem_type in ints and len(tensor.shape.dim) <= 1:
            continue  # axes, a shape, pads, k: a parameter, not data with a batch
        for axis, d in enumerate(tensor.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                size = d.dim_value
                d.Clear()
                d.dim_param = f"d{axis}_{size}"
                made += 1
    for vi in out.graph.output:
        if vi.type.WhichOneof("value") == "tensor_type":
            for d in vi.type.tensor_type.shape.dim:
                d.Clear()
    del out.graph.value_info[:]
    return out, made


def dynamic_inputs(model: Any) -> dict[str, list[int | str]]:
    """The tensor inputs with a dim that is not a positive number: their dims."""
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits or vi.type.WhichOneof("value") != "tensor_type":
            continue
        dims = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        if any(not isinstance(d, int) or d <= 0 for d in dims):
            out[vi.name] = dims
    return out


def run_ort(model: Any, feeds: dict[str, Any]) -> list[Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in names})


def same(got: Any, want: Any) -> bool:
    """relsat's comparison rule at the test's rtol: floats within ``atol * max(1, max|want|) +
    rtol * |want|`` (NaN matching NaN), anything else equal; lists element by element."""
    import numpy as np

    if isinstance(want, list) or isinstance(got, list):
        return (
            isinstance(got, list)
            and isinstance(want, list)
            and len(got) == len(want)
            and all(same(g, w) for g, w in zip(got, want, strict=True))
        )
    if want is None or got is None:
        return want is None and got is None
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if want.dtype.kind not in "fc":
        return bool(np.array_equal(got, want))
    finite = np.abs(want[np.isfinite(want)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    return bool(np.allclose(got, want, rtol=RTOL, atol=ATOL * scale, equal_nan=True))


def examine(task: dict[str, Any]) -> dict[str, Any]:
    """One model and variant: onnxruntime's reference, relsat's outcome, the written model's
    checks. A dict of the CSV's fields (``skip`` set when the model does not count)."""
    import onnx

    folder, variant = Path(task["folder"]), task["variant"]
    row: dict[str, Any] = {"outcome": "", "error_type": "", "detail": "", "dims": ""}
    row |= {"interface": "", "reference": "", "seconds": 0.0, "skip": ""}
    try:
        model = onnx.load(str(folder / "model.onnx"))
        feeds, _ = read_data(model, folder / "test_data_set_0")
    except Exception as exc:
        return row | {"skip": f"test data unreadable: {first_line(exc)}"}
    path = folder / "model.onnx"
    if variant == "dynamic":
        model, made = dynamic_variant(model)
        if not made:
            return row | {"skip": "no input dim to make dynamic"}
        path = Path(task["scratch"]) / "variant.onnx"
        onnx.save(model, str(path))
    try:
        reference = run_ort(model, feeds)
    except Exception as exc:
        status = re.search(r"\] : \d+ : (\w+)", first_line(exc))
        return row | {"skip": f"onnxruntime cannot run it ({status[1] if status else 'error'})"}
    dynamic = dynamic_inputs(model)
    row["dims"] = "; ".join(f"{k}={v}" for k, v in dynamic.items())
    settings: dict[str, Any] = {"timing": None, "cost_model": task["cost_model"]}
    shapes = {k: list(getattr(feeds.get(k), "shape", ())) for k in dynamic}
    if dynamic and all(s and min(s) > 0 for s in shapes.values()):
        settings["input_shapes"] = shapes
    # the test's own inputs, where relsat's drawn values would not do (axes, divisors, strings)
    settings["inputs"] = {k: v for k, v in feeds.items() if hasattr(v, "shape") and v.size}
    started = time.perf_counter()
    try:
        result = optimize(path, **settings)
    except Exception as exc:
        from relsat import RelsatError
        from relsat.onnx import DynamicShapeError

        row["seconds"] = time.perf_counter() - started
        row["error_type"] = type(exc).__name__
        if isinstance(exc, RelsatError):
            row["detail"] = first_line(exc).removeprefix(f"{path}: ")
            dims = about_dims(exc, row["detail"])
            row["outcome"] = "refused: other"
            if isinstance(exc, DynamicShapeError):
                row["outcome"] = "refused: data-dependent shape"
            elif dims:
                row["outcome"] = "refused: dynamic dim"
        else:
            row["outcome"] = "crashed"
            where = traceback.extract_tb(exc.__traceback__)[-1]
            row["detail"] = f"{first_line(exc)} ({Path(where.filename).name}:{where.lineno})"
        return row
    row["seconds"] = time.perf_counter() - started
    fixed = result.shapes is not None and not result.shapes.symbolic
    if fixed:
        row["outcome"] = "dims fixed"
        row["detail"] = f"{result.shapes.note} (kept {result.kept}: {result.why})"
    elif result.kept == "optimized":
        row["outcome"], row["detail"] = "optimized", ", ".join(result.rewrites()) or "rewritten"
    else:
        row["outcome"], row["detail"] = "original kept", result.why
    written = result.model if result.kept == "optimized" else None
    if written is not None:
        row["reference"] = check_reference(written, feeds, reference)
        if dynamic and not fixed:  # "dims fixed" writes the pricing shape, and says so
            row["interface"] = check_interface(model, written)
    return row


def check_reference(written: Any, feeds: dict[str, Any], reference: list[Any]) -> str:
    """``match`` when onnxruntime runs the written model on the test inputs to the original's
    outputs, else what differs."""
    try:
        got = run_ort(written, feeds)
    except Exception as exc:
        return f"fails: {first_line(exc)[:160]}"
    bad = [i for i, (g, w) in enumerate(zip(got, reference, strict=False)) if not same(g, w)]
    if len(got) != len(reference):
        return f"{len(got)} outputs, the original has {len(reference)}"
    return "match" if not bad else f"output {bad[0]} differs"


def check_interface(original: Any, written: Any) -> str:
    """``kept`` when the written model's inputs have the original's dims, names included."""

    def dims(model: Any) -> list[tuple[str, list[int | str]]]:
        inits = {t.name for t in model.graph.initializer}
        return [
            (vi.name, [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim])
            for vi in model.graph.input
            if vi.name not in inits
        ]

    want, got = dims(original), dims(written)
    return "kept" if want == got else f"{want} became {got}"


def about_dims(exc: BaseException, words: str) -> bool:
    """Is this refusal about a dynamic or symbolic dim (by type, else by its ``words``)?"""
    from relsat.onnx import SymbolicDimError

    if isinstance(exc, SymbolicDimError):
        return True
    return bool(re.search(r"\bdynamic\b|\bsymbolic\b|dim_param", words))


def optimize(path: Path, **settings: Any) -> Any:
    import calls

    return calls.optimize(path, **settings)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def serve(conn: Any) -> None:
    """The worker: examine each task received, send back its row; None ends it."""
    warnings.simplefilter("ignore")
    os.dup2(2, 1)  # what the solvers print goes to stderr: stdout is the table
    while True:
        task = conn.recv()
        if task is None:
            return
        try:
            row = examine(task)
        # Broad on purpose: whatever happens is this model's row, never the end of the bench.
        except Exception as exc:
            row = {"outcome": "crashed", "error_type": type(exc).__name__}
            row["detail"] = f"bench: {first_line(exc)}"
        conn.send(row)


class Worker:
    """A worker process running one task at a time, replaced when it hangs or dies."""

    def __init__(self) -> None:
        self.proc: Any = None
        self.done = 0

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.proc = context.Process(target=serve, args=(child,), daemon=True)
        self.proc.start()
        self.done = 0

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join()
            self.proc = None

    def run(self, task: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self.proc is None or self.done >= WORKER_TASKS:
            self.stop()
            self.start()
        self.done += 1
        self.conn.send(task)
        if not self.conn.poll(timeout):
            self.stop()
            return {"outcome": "timed out", "detail": f"after {timeout:.0f} s"}
        try:
            return self.conn.recv()
        except EOFError:
            self.proc.join()
            code = self.proc.exitcode
            self.proc = None
            return {"outcome": "crashed", "error_type": "worker died", "detail": f"exit {code}"}


# --- tables ------------------------------------------------------------------------------------


def reason(detail: str) -> str:
    """A refusal's words with names and numbers blanked, to group like refusals."""
    text = re.sub(r"'[^']*'", "'…'", detail)
    text = re.sub(r"\[[^\]]*\]", "[…]", text)
    return re.sub(r"\b\d+\b", "N", text)[:160]


def outcome_table(rows: list[dict[str, Any]], variants: list[str]) -> str:
    counts = Counter((r["variant"], r["outcome"] or f"skipped: {r['skip']}") for r in rows)
    labels = list(CLASSES) + sorted({k for _, k in counts} - set(CLASSES))
    body = []
    for label in labels:
        cells = [counts[(v, label)] for v in variants]
        if any(cells):
            body.append([label, *cells])
    counted = [sum(1 for r in rows if r["variant"] == v and not r["skip"]) for v in variants]
    body.append(["**models counted**", *counted])
    return common.markdown(["outcome", *variants], body)


def refusal_table(rows: list[dict[str, Any]], top: int) -> str:
    groups: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for r in rows:
        if r["outcome"].startswith(("refused", "crashed", "timed out", "dims fixed")):
            key = (r["variant"], r["outcome"], r["error_type"], reason(r["detail"]))
            groups[key].append(r["model"])
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    body = [
        [v, o, t or "–", why, len(names), ", ".join(names[:3]) + (" …" if len(names) > 3 else "")]
        for (v, o, t, why), names in ordered[:top]
    ]
    if len(ordered) > top:
        rest = sum(len(n) for _, n in ordered[top:])
        body.append(["", "", "", f"{len(ordered) - top} more groups", rest, ""])
    return common.markdown(["variant", "outcome", "error", "reason", "models", "e.g."], body)


def dynamic_table(rows: list[dict[str, Any]]) -> str:
    written = [r for r in rows if r["dims"] and r["reference"]]
    symbolic = [r for r in written if r["interface"]]
    body = [
        [r["variant"], r["model"], r["outcome"], r["interface"] or "–", r["reference"]]
        for r in written
        if r["interface"] not in ("kept", "") or r["reference"] != "match"
    ]
    kept = sum(r["interface"] == "kept" for r in symbolic)
    match = sum(r["reference"] == "match" for r in written)
    head = (
        f"{len(written)} models with dynamic inputs written ({len(symbolic)} with their dims "
        f"symbolic: interface kept {kept}); outputs match onnxruntime's reference {match}"
    )
    if not body:
        return head + "."
    return (
        head
        + "; the others:\n\n"
        + common.markdown(["variant", "model", "outcome", "interface", "reference"], body)
    )


# --- main ---------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the corpus and exit")
    families = ", ".join(FAMILIES)
    ap.add_argument("--models", nargs="*", help=f"names or families ({families})")
    ap.add_argument("--limit", type=int, help="the first N models of each family")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per model")
    ap.add_argument("--cost-model", default="analytic", help="relsat's prices (default: analytic)")
    ap.add_argument("--top", type=int, default=40, help="refusal groups shown")
    ap.add_argument(
        "--work",
        default=str(Path(tempfile.gettempdir()) / "relsat-backend"),
        help="where the node tests are written and variants kept (default: %(default)s)",
    )
    args = ap.parse_args()
    work = Path(args.work)
    if args.list:
        for e in corpus(work, generate=False):
            print(f"{e.name}\t{e.family}")
        if not (node_dir(work) / ".complete").exists():
            print("# node: the wheel's node tests, written to --work on the first run")
        return
    try:
        entries = select(corpus(work, generate=True), args.models, args.limit)
    except KeyError as exc:
        ap.error(str(exc.args[0]))
    rows: list[dict[str, Any]] = []
    worker = Worker()
    start = time.perf_counter()
    scratch = work / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        for k, entry in enumerate(entries, 1):
            for variant in args.variants:
                task = {
                    "folder": str(entry.folder),
                    "variant": variant,
                    "cost_model": args.cost_model,
                    "scratch": str(scratch),
                }
                row = {"skip": "", "dims": "", "interface": "", "reference": "", "seconds": 0.0}
                row |= {"error_type": "", "detail": ""}
                row |= worker.run(task, args.timeout)
                row |= {"model": entry.name, "family": entry.family, "variant": variant}
                row.setdefault("outcome", "")
                rows.append(row)
                what = row["outcome"] or f"skipped ({row['skip'][:80]})"
                detail = f": {row['detail'][:160]}" if row["outcome"] not in CLASSES[:2] else ""
                common.log(f"[{k}/{len(entries)}] {entry.name} {variant}: {what}{detail}")
    finally:
        worker.stop()
    seconds = time.perf_counter() - start
    print(
        f"### ONNX backend test models through relsat.optimize ({len(entries)} models, "
        f"cost model {args.cost_model}, no timing, {seconds:.0f} s)\n"
    )
    print(outcome_table(rows, args.variants))
    print("\n#### Refusals, crashes and fixed dims, grouped\n")
    print(refusal_table(rows, args.top))
    print("\n#### Dynamic inputs: the written model's interface and outputs\n")
    print(dynamic_table(rows))
    counted = [r for r in rows if not r["skip"]]
    path = common.append_csv(
        "backend",
        CSV_HEADERS,
        [
            [
                r["model"],
                r["family"],
                r["variant"],
                r["outcome"],
                r["error_type"],
                r["detail"][:DETAIL],
                r["dims"],
                r["interface"],
                r["reference"],
                round(float(r["seconds"]), 3),
                args.cost_model,
            ]
            for r in counted
        ],
    )
    common.log(f"{len(counted)} rows appended to {path} ({seconds:.0f} s)")


if __name__ == "__main__":
    main()
