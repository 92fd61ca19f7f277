"""The relational e-graph: a Graph loaded into DuckDB tables, inspected and audited with SQL.

One row per e-node in ``enode`` (op, integer parameters ``p0…p5`` in TENSAT's argument order — an
opaque e-node's ``p0`` the key of its ONNX type, :func:`relsat.graph.ops.opaque_key`, and ``p1…``
the integer attributes rules may name, :data:`~relsat.graph.ops.OPAQUE_INT_ATTRS` — a
string parameter ``s``, child classes ``c0…c7``, its class), one row per e-class in ``eclass``
(TENSAT's analysis: shape, split history, all-weights flag), ``uf`` for union-find and ``output``
for the graph outputs. See ``sql/schema/egraph.sql`` and the README's "Inspecting the e-graph with
SQL". Loading hash-conses, so identical subgraphs of the input collapse into one e-class.

>>> from relsat.graph import GraphBuilder
>>> b = GraphBuilder(); x = b.input([2, 2])
>>> eg = EGraph.from_graph(b.build(b.add(b.relu(x), b.relu(x))))
>>> eg.counts()
(3, 3)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from relsat.engine.db import SCHEMA_VERSION, SQL_DIR, Database
from relsat.engine.facts import insert_facts
from relsat.errors import DatabaseError, GraphError
from relsat.graph.facts import Facts, analyse
from relsat.graph.graph import Graph, Node, Ref
from relsat.graph.ops import (
    ACTIVATIONS,
    FLOAT_PARAMS,
    INT_PARAMS,
    MIXED_PARAMS,
    OPAQUE_INT_ATTRS,
    PADDINGS,
    Params,
    infer,
    opaque_ints,
    opaque_key,
    opaque_type,
    param_ints,
)
from relsat.rewrite.rules import COMMUTATIVE, onnx_type

__all__ = ["MAX_CHILDREN", "EGraph", "encode_node"]

#: Children an e-node can have (columns c0…c7).
MAX_CHILDREN = 8

_SCHEMA = ("schema/egraph", "schema/stats", "schema/program", "schema/work")


def encode_node(node: Node) -> tuple[str, list[int], str]:
    """A graph node's e-node encoding ``(op, [p0…p5], s)``: TENSAT's integer arguments in order.

    >>> from relsat.graph import GraphBuilder
    >>> b = GraphBuilder(); x = b.input([1, 4, 8, 8])
    >>> y = b.conv2d(x, b.weight([4, 4, 3, 3]), stride=1, padding="SAME", activation="RELU")
    >>> encode_node(b.build(y).nodes[-1])
    ('conv2d', [1, 1, 0, 2, -1, -1], '')
    """
    p, op = node.params, node.op
    ints: list[int] = []
    s = ""
    if op in ("input", "weight"):
        s = node.name or ""
    elif op in ("matmul", "matmul_bias"):
        ints = [ACTIVATIONS.index(p["activation"])]
    elif op in ("conv2d", "conv2d_bias"):
        ints = [*p["stride"], PADDINGS.index(p["padding"]), ACTIVATIONS.index(p["activation"])]
    elif op in ("poolmax", "poolavg"):
        ints = [
            *p["kernel"],
            *p["stride"],
            PADDINGS.index(p["padding"]),
            ACTIVATIONS.index(p["activation"]),
        ]
    elif op == "concat":
        ints = [p["axis"] % len(node.shape), len(node.shape)]
    elif op == "merge":
        ints = [p["count"]]
    elif op == "transpose":
        s, ints = "_".join(map(str, p["perm"])), [int(p["shuffle"])]
    elif op in ("reshape", "expand"):
        s = "_".join(map(str, p["shape"]))
    elif op == "opaque":  # the type's key in p0, for rules to test (relsat.graph.ops.opaque_key)
        s = f"{p['type']}|{p['attrs']}|{json.dumps(p['shapes'], separators=(',', ':'))}"
        kind = opaque_type(p["type"], p["attrs"])
        named = json.loads(p["attrs"]) if kind in OPAQUE_INT_ATTRS else {}
        ints = [opaque_key(kind), *opaque_ints(kind, named)]  # then attributes rules name
    elif op in FLOAT_PARAMS or op in INT_PARAMS or op in MIXED_PARAMS:  # float32 bits, ints
        ints = param_ints(op, p) or []  # bits, a slice's bounds: so that rules can spell them
    return op, [*ints, -1, -1, -1, -1, -1, -1][:6], s


class EGraph:
    """An e-graph stored in DuckDB (in memory, or in a database file)."""

    def __init__(self, db: Database | str | Path | None = None) -> None:
        self.db = db if isinstance(db, Database) else Database(db)
        version = self._stored_version()
        if version is not None and version != SCHEMA_VERSION:
            raise DatabaseError(
                f"e-graph schema version {version}, this relsat reads {SCHEMA_VERSION}",
                path=self.db.path,
            )
        if version is None:  # a new database: create the tables (an existing one is left as is,
            if self.db.read_only:  # so that a read-only file can be inspected)
                raise DatabaseError("not a relsat e-graph (an empty database)", path=self.db.path)
            for name in _SCHEMA:
                self.db.script(name)
            keys = sorted(opaque_key(kind) for kind in map(onnx_type, COMMUTATIVE) if kind)
            self.db.execute("INSERT INTO commuting SELECT unnest($keys)", {"keys": keys})
            self.db.execute("INSERT INTO meta VALUES ('schema_version', $v)", {"v": SCHEMA_VERSION})

    def _stored_version(self) -> str | None:
        """The stored schema version; None for an empty database. A database that holds tables
        but no relsat version (another program's DuckDB file) is refused untouched."""
        tables = {
            str(r[0])
            for r in self.db.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_catalog = current_database()"
            )
        }
        value = None
        if "meta" in tables:
            try:
                value = self.db.scalar("SELECT max(value) FROM meta WHERE key = 'schema_version'")
            except DatabaseError:  # another program's table named meta
                value = None
        if value is None and tables:
            some = ", ".join(sorted(tables)[:5]) + (", …" if len(tables) > 5 else "")
            raise DatabaseError(
                f"not a relsat e-graph (it holds other tables: {some})", path=self.db.path
            )
        return None if value is None else str(value)

    @classmethod
    def from_graph(
        cls,
        graph: Graph,
        db: Database | str | Path | None = None,
        facts: Mapping[Ref, Facts] | None = None,
    ) -> EGraph:
        eg = cls(db)
        eg.load(graph, facts)
        return eg

    # --- loading --------------------------------------------------------------------------

    def load(self, graph: Graph, facts: Mapping[Ref, Facts] | None = None) -> None:
        """Insert ``graph`` (hash-consed) into empty tables: one Arrow batch per table.
        ``facts``: what is known of its tensors' values (default: :func:`relsat.graph.facts.
        analyse` of the graph alone), table ``fact``."""
        if self.db.scalar("SELECT count(*) FROM enode"):
            raise DatabaseError("the e-graph database already holds an e-graph", path=self.db.path)
        rows = _Rows()
        add = rows.add
        classes: dict[Ref, int] = {}
        weights = graph.all_weights()

        for node in graph.nodes:
            kids = [classes[r] for r in node.inputs]
            if node.op == "concat" and len(kids) > MAX_CHILDREN:
                kids = _nest_concat(graph, node, kids, add, weights)
            if len(kids) > MAX_CHILDREN:
                raise GraphError(
                    f"{len(kids)} inputs; the e-graph supports {MAX_CHILDREN}",
                    node=node.id,
                    op=node.op,
                    name=node.name,
                )
            if node.op == "split":
                self._add_split(node, kids[0], add, classes, weights[node.id])
                continue
            if len(node.outputs) != 1:
                raise GraphError(
                    "operators with several outputs other than split are not "
                    "supported in the e-graph yet",
                    node=node.id,
                    op=node.op,
                    name=node.name,
                )
            op, ints, s = encode_node(node)
            t = node.outputs[0]
            kind = "unit" if op == "noop" else "tensor"
            classes[Ref(node.id, 0)] = add(
                op, ints, s, kids, kind, [t.shape], [list(x) for x in t.splits], weights[node.id]
            )
        self.db.insert_arrow("enode", pa.Table.from_pylist(rows.enodes))
        self.db.insert_arrow("eclass", pa.Table.from_pylist(rows.eclasses))
        outputs = [{"pos": i, "class": classes[r]} for i, r in enumerate(graph.outputs)]
        self.db.insert_arrow("output", pa.Table.from_pylist(outputs))
        by_class: dict[int, Facts] = {}
        for ref, f in (analyse(graph) if facts is None else facts).items():
            if ref in classes:
                by_class[classes[ref]] = f.merge(by_class.get(classes[ref]))
        if by_class:
            insert_facts(self.db, by_class)

    @staticmethod
    def _add_split(
        node: Node, source: int, add: Any, classes: dict[Ref, int], all_weights: bool
    ) -> None:
        """A k-way split becomes TENSAT's split / split_0 / split_1, chained for k > 2."""
        outs = node.outputs
        axis = node.params["axis"] % outs[0].rank
        remaining = sum(t.shape[axis] for t in outs)
        for i, piece in enumerate(outs[:-1]):
            remaining -= piece.shape[axis]
            rest = tuple(remaining if d == axis else n for d, n in enumerate(piece.shape))
            pair = add(
                "split",
                [axis, piece.shape[axis], -1, -1, -1, -1],
                "",
                [source],
                "pair",
                [piece.shape, rest],
                None,
                all_weights,
            )
            classes[Ref(node.id, i)] = add(
                "split_0",
                [-1] * 6,
                "",
                [pair],
                "tensor",
                [piece.shape],
                [list(x) for x in piece.splits],
                all_weights,
            )
            last = i == len(outs) - 2
            source = add(
                "split_1",
                [-1] * 6,
                "",
                [pair],
                "tensor",
                [rest],
                [list(x) for x in outs[-1].splits] if last else None,
                all_weights,
            )
        classes[Ref(node.id, len(outs) - 1)] = source

    # --- inspection -----------------------------------------------------------------------

    def counts(self) -> tuple[int, int]:
        """(e-nodes, e-classes)."""
        (row,) = self.db.execute(
            "SELECT (SELECT count(*) FROM enode), (SELECT count(*) FROM eclass)"
        )
        return int(row[0]), int(row[1])

    def interface(self) -> tuple[set[tuple[str, str, tuple[int, ...]]], list[tuple[int, ...]]]:
        """What a stored e-graph was built from: its input graph's leaves as ``(op, name,
        shape)`` and its outputs' shapes in order."""
        leaves = {
            (op, name or "", tuple(shape))
            for op, name, shape in self.db.run("analysis/input_leaves")
        }
        outputs = [tuple(shape) for (shape,) in self.db.run("analysis/output_shapes")]
        return leaves, outputs

    def table(self, name: str) -> pa.Table:
        """A whole table (``enode``, ``eclass``, ``iteration_stats``, …) as Arrow."""
        return self.db.arrow(f"SELECT * FROM {_identifier(name)}")

    def sql(self, query: str, params: dict[str, Any] | None = None) -> pa.Table:
        """Run any read query against the e-graph tables."""
        return self.db.arrow(query, params)

    def audit(self) -> dict[str, int]:
        """Run every invariant check (``sql/check/*.sql`` and the shape audit); returns the
        number of violating rows of each, all zero when the e-graph is sound."""
        from relsat.engine.shapecheck import shape_disagreements

        out = {}
        for path in sorted((SQL_DIR / "check").glob("*.sql")):
            rows = self.db.execute(path.read_text())
            out[path.stem] = len(rows)
        out["shapes"] = len(shape_disagreements(self.db))
        return out

    def close(self) -> None:
        self.db.close()


def _identifier(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise DatabaseError(f"not a table name: {name!r}")
    return name


def _nest_concat(
    graph: Graph, node: Node, kids: list[int], add: Any, weights: Sequence[bool]
) -> list[int]:
    """The children of a concat of more than :data:`MAX_CHILDREN` inputs (DenseNet's dense blocks
    concatenate up to 25), with the leading ones folded into nested concats on the same axis
    until the rest fit: the same tensor and the same split history, since a concat keeps the
    boundaries of its inputs."""
    types = [graph.nodes[r.node].outputs[r.index] for r in node.inputs]
    flags = [weights[r.node] for r in node.inputs]
    op, ints, s = encode_node(node)
    while len(kids) > MAX_CHILDREN:
        (head,) = infer("concat", Params(axis=node.params["axis"]), types[:MAX_CHILDREN])
        w = all(flags[:MAX_CHILDREN])
        cid = add(
            op,
            ints,
            s,
            kids[:MAX_CHILDREN],
            "tensor",
            [head.shape],
            [list(x) for x in head.splits],
            w,
        )
        kids, types, flags = (
            [cid, *kids[MAX_CHILDREN:]],
            [head, *types[MAX_CHILDREN:]],
            [w, *flags[MAX_CHILDREN:]],
        )
    return kids


class _Rows:
    """The rows of a graph being loaded: e-nodes and their e-classes, hash-consed on
    ``(op, integer parameters, string parameter, children)``."""

    def __init__(self) -> None:
        self.enodes: list[dict[str, Any]] = []
        self.eclasses: list[dict[str, Any]] = []
        self.by_key: dict[tuple[Any, ...], int] = {}

    def add(  # the columns of one e-node and its class: a row each, not a public API
        self,
        op: str,
        ints: list[int],
        s: str,
        children: Sequence[int],
        kind: str,
        shapes: Sequence[tuple[int, ...]],
        splits: Any,
        all_weights: bool,
    ) -> int:
        """The class of the e-node ``(op, ints, s, children)``, added unless already there."""
        key = (op, *ints, s, *children)
        if key in self.by_key:
            return self.by_key[key]
        cid = len(self.eclasses)
        self.by_key[key] = cid
        kids = [*children, *([-1] * (MAX_CHILDREN - len(children)))]
        self.enodes.append(
            {
                "id": len(self.enodes),
                "op": op,
                **{f"p{i}": v for i, v in enumerate(ints)},
                "s": s,
                "arity": len(children),
                **{f"c{i}": c for i, c in enumerate(kids)},
                "class": cid,
                "born": 0,
                "stamp": 0,
                "filtered": False,
                "rule": None,
            }
        )
        self.eclasses.append(
            {
                "id": cid,
                "kind": kind,
                "shape": list(shapes[0]),
                "shape2": list(shapes[1]) if len(shapes) > 1 else None,
                "splits": splits,
                "all_weights": all_weights,
                "born": 0,
            }
        )
        return cid
