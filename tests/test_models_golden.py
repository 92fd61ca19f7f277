"""Golden tests: the TASO-script models equal their op lists (``reference/models/*.oplist.json``).

Each builder must create TASO's operators in TASO's order, with TASO's attributes, shapes and
arguments (``reference/models/FORMAT.md`` §2). Op-list ``weight<K>`` numbering counts TASO's
implicit pool kernels, so weights are matched by identity (a consistent bijection), not by index.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from relsat import models
from relsat.graph.graph import Graph, Node, Ref
from relsat.models import bert, inception, nasnet, nasrnn, resnet, resnext

# (registry name, builder, op list, trailing noops that the op list lacks)
CASES = [
    ("nasrnn", nasrnn.build, "nasrnn.oplist.json", 0),
    ("bert", bert.build, "bert_2019_batch1.oplist.json", 8),
    ("bert-2021", bert.build_2021, "bert.oplist.json", 0),
    ("resnext50", resnext.build, "resnext50.oplist.json", 0),
    ("nasneta", nasnet.build, "nasnet_a.oplist.json", 0),
    ("inceptionv3-taso", inception.build, "inceptionv3.oplist.json", 0),
    ("resnet50", resnet.build, "resnet50.oplist.json", 0),
]
IDS = [c[0] for c in CASES]

_TYPE = {"maxpool2d": "poolmax", "avgpool2d": "poolavg"}
_WEIGHT = re.compile(r"weight(\d+)\[([\d, ]*)\]")
_LEAVES = ("input", "weight")


def _ops(graph: Graph, noops: int) -> list[Node]:
    """Non-leaf nodes in creation order, minus the ``noops`` trailing joins."""
    ops = [n for n in graph.nodes if n.op not in _LEAVES]
    return ops[: len(ops) - noops]


def _attrs(graph: Graph, node: Node) -> dict[str, Any]:
    """Our node's attributes in the op list's vocabulary."""
    p = node.params
    if node.op == "conv2d":
        x, w = (graph.shape(r) for r in node.inputs)
        return {
            "k": list(w[2:]),
            "s": list(p["stride"]),
            "pad": p["padding"],
            "act": p["activation"],
            "groups": x[1] // w[1],
        }
    if node.op in ("poolmax", "poolavg"):
        return {
            "k": list(p["kernel"]),
            "s": list(p["stride"]),
            "pad": p["padding"],
            "act": p["activation"],
        }
    if node.op == "matmul":
        return {"act": p["activation"]}
    if node.op == "concat":
        return {"axis": p["axis"], "n": len(node.inputs)}
    if node.op == "transpose":
        return {"perm": list(p["perm"]), "shuffle": p["shuffle"]}
    return {}


def _mismatches(graph: Graph, oplist: list[dict[str, Any]], noops: int) -> list[str]:
    """Every difference between ``graph`` and ``oplist``, each naming the element index."""
    ops = _ops(graph, noops)
    errors = [] if len(ops) == len(oplist) else [f"{len(ops)} ops, op list has {len(oplist)}"]
    op_index = {n.id: i for i, n in enumerate(ops)}
    input_index = {n.id: k for k, n in enumerate(graph.inputs)}
    ours_of: dict[int, int] = {}  # op-list weight number -> our weight node id
    theirs_of: dict[int, int] = {}  # our weight node id -> op-list weight number
    for i, (node, want) in enumerate(zip(ops, oplist, strict=False)):
        where = f"element {i} ({want['type']})"
        if node.op != _TYPE.get(want["type"], want["type"]):
            errors.append(f"{where}: type {node.op}")
            continue
        attrs = {k: v for k, v in want["attrs"].items() if k != "inputs"}
        if _attrs(graph, node) != attrs:
            errors.append(f"{where}: attrs {_attrs(graph, node)} != {attrs}")
        shapes_in = [list(graph.shape(r)) for r in node.inputs]
        if shapes_in != want["in"]:
            errors.append(f"{where}: in shapes {shapes_in} != {want['in']}")
        shapes_out = [list(t.shape) for t in node.outputs]
        if shapes_out != want["out"]:
            errors.append(f"{where}: out shapes {shapes_out} != {want['out']}")
        refs = want["attrs"]["inputs"]
        if len(refs) != len(node.inputs):
            errors.append(f"{where}: {len(node.inputs)} inputs != {len(refs)}")
        for pos, (ref, text) in enumerate(zip(node.inputs, refs, strict=False)):
            problem = _check_ref(graph, ref, text, op_index, input_index, ours_of, theirs_of)
            if problem:
                errors.append(f"{where}: input {pos} {problem}")
    return errors


def _check_ref(
    graph: Graph,
    ref: Ref,
    text: str,
    op_index: dict[int, int],
    input_index: dict[int, int],
    ours_of: dict[int, int],
    theirs_of: dict[int, int],
) -> str | None:
    """Why our argument ``ref`` is not the op list's ``text`` (None: it is)."""
    source = graph.node(ref)
    if source.id in op_index:
        ours = f"op{op_index[source.id]}"
    elif source.id in input_index:
        ours = f"input{input_index[source.id]}"
    else:
        ours = f"{source.op} node {source.id} {list(source.shape)}"
    if text.startswith(("op", "input")):
        return None if ours == text else f"is {ours}, not {text}"
    m = _WEIGHT.fullmatch(text)
    assert m, f"unreadable op-list reference {text!r}"
    k, shape = int(m[1]), tuple(int(d) for d in m[2].split(", "))
    if source.op != "weight" or source.shape != shape:
        return f"is {source.op} {list(source.shape)}, not {text}"
    if ours_of.setdefault(k, source.id) != source.id:
        return f"{text} was weight node {ours_of[k]} before, now node {source.id}"
    if theirs_of.setdefault(source.id, k) != k:
        return f"weight node {source.id} was weight{theirs_of[source.id]} before, now {text}"
    return None


def _load(reference: Path, name: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((reference / "models" / name).read_text())
    return data


@pytest.mark.parametrize(("name", "builder", "oplist", "noops"), CASES, ids=IDS)
def test_matches_oplist(
    reference: Path, name: str, builder: Callable[[], Graph], oplist: str, noops: int
) -> None:
    errors = _mismatches(builder(), _load(reference, oplist), noops)
    assert not errors, f"{name} vs {oplist}:\n" + "\n".join(errors[:20])


@pytest.mark.parametrize(
    ("name", "builder", "oplist"),
    [c[:3] for c in CASES if not c[3]],
    ids=[c[0] for c in CASES if not c[3]],
)
def test_outputs_are_oplist_sinks(
    reference: Path, name: str, builder: Callable[[], Graph], oplist: str
) -> None:
    """Graphs without noop joins output the op list's sinks, its last element last."""
    graph = builder()
    ops = _ops(graph, 0)
    data = _load(reference, oplist)
    used = {r for e in data for r in e["attrs"]["inputs"]}
    sinks = [i for i in range(len(data)) if f"op{i}" not in used]
    assert [ops.index(graph.node(r)) for r in graph.outputs] == sinks
    assert sinks[-1] == len(data) - 1


@pytest.mark.parametrize(("name", "builder"), [c[:2] for c in CASES], ids=IDS)
def test_no_dead_nodes(name: str, builder: Callable[[], Graph]) -> None:
    """Every node, every weight included, feeds an output (no TASO pool kernels, no leftovers)."""
    graph = builder()
    assert graph.reachable() == graph


@pytest.mark.parametrize(("name", "builder", "oplist", "noops"), CASES, ids=IDS)
def test_registry_loads(name: str, builder: Callable[[], Graph], oplist: str, noops: int) -> None:
    assert models.load(name) == builder()


def test_bert_noop_joins() -> None:
    """``c = out_1; c = noop(c, out_i)`` for i = 2..8; ``root = noop(c, X_8)``."""
    graph = bert.build()
    ops = [n for n in graph.nodes if n.op not in _LEAVES]
    joins, body = ops[-8:], ops[:-8]
    assert [n.op for n in joins] == ["noop"] * 8
    assert all(n.op != "noop" for n in body)
    outs = [n for n in body if n.op == "reshape" and n.shape == (bert.SEQ, bert.HIDDEN)]
    assert len(outs) == 8
    last = body[-1]
    assert last.op == "matmul" and graph.node(last.inputs[1]).op == "weight"
    previous = outs[0].id
    for join, out in zip(joins[:-1], outs[1:], strict=True):
        assert [r.node for r in join.inputs] == [previous, out.id]
        previous = join.id
    assert [r.node for r in joins[-1].inputs] == [previous, last.id]
    assert graph.outputs == (Ref(joins[-1].id),)


def _conv_acts(graph: Graph) -> Counter[str]:
    return Counter(n.params["activation"] for n in graph.nodes if n.op == "conv2d")


def test_nasrnn_totals() -> None:
    g = nasrnn.build()
    assert g.op_counts() == Counter(matmul=80, ewadd=55, ewmul=20, tanh=40, sigmoid=25, relu=10)
    assert len(g.weights) == 81 and len(g.inputs) == 5
    assert [n.shape for n in g.inputs] == [(1, 512)] * 5
    assert g.output_shapes == [(1, 512)]


def test_bert_totals() -> None:
    g = bert.build()
    assert g.op_counts() == Counter(matmul=48, reshape=32, transpose=32, relu=1, noop=8)
    assert len(g.weights) == 32 and [n.shape for n in g.inputs] == [(64, 1024)]
    g21 = bert.build_2021()
    assert g21.op_counts() == Counter(matmul=48, reshape=32, transpose=32, relu=1)
    assert [n.shape for n in g21.inputs] == [(1024, 1024)]


def test_resnext_totals() -> None:
    g = resnext.build()
    assert g.op_counts() == Counter(conv2d=53, ewadd=16, relu=16, poolmax=1)
    assert _conv_acts(g) == Counter(RELU=37, NONE=16)
    assert len(g.weights) == 53
    assert g.output_shapes == [(1, 2048, 7, 7)]


def test_nasnet_totals() -> None:
    g = nasnet.build()
    assert g.op_counts() == Counter(conv2d=217, ewadd=90, poolavg=51, poolmax=7, concat=18)
    assert _conv_acts(g) == Counter(RELU=37, NONE=180)
    assert all(len(n.inputs) == 5 for n in g.nodes if n.op == "concat")
    assert len(g.weights) == 217
    assert g.output_shapes == [(1, 5120, 7, 7)]


def test_inception_taso_totals() -> None:
    g = inception.build()
    assert g.op_counts() == Counter(conv2d=94, poolavg=10, poolmax=4, concat=11)
    assert _conv_acts(g) == Counter(RELU=94)
    assert g.output_shapes == [(32, 2048, 8, 8)]


def test_resnet_totals() -> None:
    g = resnet.build()
    assert g.op_counts() == Counter(conv2d=52, ewadd=16, relu=16)
    assert g.output_shapes == [(1, 2048, 7, 7)]
