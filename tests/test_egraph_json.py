"""Reading and writing egraph-serialize JSON (extraction-gym's format)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from relsat.extract import gym as egraph_json
from relsat.extract import ilp
from relsat.extract.gym import EGraphFormatError

SMALL = {
    "nodes": {
        "x": {"op": "Input", "children": [], "eclass": "0", "cost": 0},
        "f": {"op": "F", "children": ["x", "x"], "eclass": "1", "cost": 2.5},
        "g": {"op": "G", "children": ["f"], "eclass": "1"},
        "h": {"op": "H", "children": ["g", "x"], "eclass": "2", "cost": 1},
    },
    "root_eclasses": ["2"],
    "class_data": {},
    "comment": "ignored",
}


def test_reads_classes_children_and_default_cost() -> None:
    p = egraph_json.loads(json.dumps(SMALL))
    assert p.class_labels == ["0", "1", "2"]
    assert p.node_labels == ["x", "f", "g", "h"]
    assert p.node_cost.tolist() == [0.0, 2.5, 1.0, 1.0]
    assert p.children(1).tolist() == [0, 0]
    assert p.children(2).tolist() == [1]  # a self-loop: g's child is its own class
    assert p.roots.tolist() == [2]
    assert ilp(p).cost == 3.5


def test_round_trip(tmp_path: Path, reference: Path) -> None:
    for src in (json.dumps(SMALL), (reference / "extraction-gym" / "vgg_acyclic.json").read_text()):
        p = egraph_json.loads(src)
        path = tmp_path / "out.json"
        egraph_json.save(p, path)
        q = egraph_json.load(path)
        assert q.node_labels == p.node_labels and q.class_labels == p.class_labels
        assert q.node_ops == p.node_ops
        for f in ("node_class", "node_cost", "child_ptr", "child_idx", "roots"):
            assert np.array_equal(getattr(p, f), getattr(q, f)), f


@pytest.mark.parametrize(
    ("text", "node", "field"),
    [
        ('{"nodes": {"a": {"op": "x", "children": ["zz"], "eclass": "0"}}}', "a", "children"),
        ('{"nodes": {"a": {"op": "x", "children": []}}}', "a", "eclass"),
        ('{"nodes": {"a": {"op": "x", "eclass": "0", "cost": -1}}}', "a", "cost"),
        ('{"nodes": {"a": {"op": "x", "eclass": "0", "cost": NaN}}}', "a", "cost"),
        ('{"nodes": {"a": {"op": "x", "eclass": "0", "cost": "1"}}}', "a", "cost"),
        ('{"nodes": {"a": {"eclass": "0"}}}', "a", "op"),
        (
            '{"nodes": {"a": {"op": "x", "eclass": "0"}}, "root_eclasses": ["9"]}',
            None,
            "root_eclasses",
        ),
        ('{"root_eclasses": []}', None, "nodes"),
    ],
)
def test_bad_input_names_the_place(text: str, node: str | None, field: str) -> None:
    with pytest.raises(EGraphFormatError) as err:
        egraph_json.loads(text, path="g.json")
    assert err.value.node == node and err.value.field == field
    assert str(err.value).startswith("g.json")


def test_invalid_json_has_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"nodes": {\n  "a": {"op": "x",, }\n}}')
    with pytest.raises(EGraphFormatError) as err:
        egraph_json.load(path)
    assert (err.value.line, err.value.column) == (2, 19)
    assert str(err.value).startswith(f"{path}:2:19: invalid JSON")
    with pytest.raises(EGraphFormatError):
        egraph_json.load(tmp_path / "missing.json")
