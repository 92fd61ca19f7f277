"""Loading graphs into the relational e-graph, and its invariants."""

from __future__ import annotations

from pathlib import Path

import pytest

from relsat import GraphBuilder, GraphError, models
from relsat.engine.db import Database
from relsat.engine.egraph import EGraph
from relsat.engine.explore import explore
from relsat.errors import DatabaseError

# Initial e-graph sizes of TENSAT (reference/MODELS.md §1), which count Num/Var leaves as e-nodes:
# TENSAT = relsat's e-nodes + one Var per input/weight name + Num leaves + other Var leaves.
TENSAT_INITIAL = {  # model: (TENSAT e-nodes, Num leaves, other Var leaves)
    "nasrnn": (403, 1, 0),
    "bert": (192, 2, 3),
    "resnext50": (198, 4, 0),
    "nasneta": (806, 5, 0),
    "squeezenet": (127, 6, 1),
    "vgg19": (96, 3, 3),
    "inceptionv3": (334, 6, 0),
}


@pytest.mark.parametrize("name", list(TENSAT_INITIAL))
def test_initial_sizes_match_tensat(name: str) -> None:
    graph = models.load(name)
    eg = EGraph.from_graph(graph)
    enodes, eclasses = eg.counts()
    tensat, nums, vars_ = TENSAT_INITIAL[name]
    leaves = len(graph.inputs) + len(graph.weights)
    assert enodes + leaves + nums + vars_ == tensat
    assert enodes == eclasses  # one e-node per class before any rewrite
    assert not any(eg.audit().values())


def test_identical_subgraphs_collapse() -> None:
    b = GraphBuilder()
    x, w = b.input([4, 8], name="x"), b.weight([8, 8], name="w")
    left = b.relu(b.matmul(x, w))
    right = b.relu(b.matmul(x, w))  # the same computation, built twice
    eg = EGraph.from_graph(b.build(b.add(left, right)))
    assert eg.counts() == (5, 5)  # x, w, matmul, relu, ewadd
    (row,) = eg.db.execute("SELECT c0, c1 FROM enode WHERE op = 'ewadd'")
    assert row[0] == row[1]
    # NasNet-A: the two identical pools of every cell merge (383 ops as built, 365 in TENSAT)
    nasnet = models.load("nasneta")
    ops = EGraph.from_graph(nasnet).db.scalar(
        "SELECT count(*) FROM enode WHERE op NOT IN ('input', 'weight')"
    )
    assert (sum(nasnet.op_counts().values()), ops) == (383, 365)


def test_encoding_and_analysis() -> None:
    b = GraphBuilder()
    x = b.input([1, 4, 8, 8], name="x")
    y = b.conv2d(x, b.weight([4, 4, 3, 3], name="w"), stride=2, padding="SAME", activation="RELU")
    p, q = b.split(b.concat(1, [y, y]), 1, [3, 5])
    eg = EGraph.from_graph(b.build(p, q))
    rows = eg.sql(
        "SELECT e.op, e.p0, e.p1, e.p2, e.p3, e.s, e.arity, c.kind, c.shape, "
        "c.all_weights FROM enode e JOIN eclass c ON c.id = e.class "
        "ORDER BY e.id"
    ).to_pylist()
    ops = [(r["op"], r["p0"], r["p1"], r["p2"], r["p3"], r["s"]) for r in rows]
    assert ops == [
        ("input", -1, -1, -1, -1, "x"),
        ("weight", -1, -1, -1, -1, "w"),
        ("conv2d", 2, 2, 0, 2, ""),
        ("concat", 1, 4, -1, -1, ""),
        ("split", 1, 3, -1, -1, ""),
        ("split_0", -1, -1, -1, -1, ""),
        ("split_1", -1, -1, -1, -1, ""),
    ]
    assert [r["kind"] for r in rows] == ["tensor"] * 4 + ["pair", "tensor", "tensor"]
    assert rows[2]["shape"] == [1, 4, 4, 4]
    assert rows[1]["all_weights"] and not rows[2]["all_weights"]
    assert eg.sql("SELECT shape FROM eclass c JOIN output o ON o.class = c.id ORDER BY o.pos")[
        "shape"
    ].to_pylist() == [[1, 3, 4, 4], [1, 5, 4, 4]]


def test_three_way_split_chains() -> None:
    b = GraphBuilder()
    parts = b.split(b.input([2, 9], name="x"), 1, [2, 3, 4])
    eg = EGraph.from_graph(b.build(parts))
    assert eg.db.scalar("SELECT count(*) FROM enode WHERE op = 'split'") == 2
    shapes = eg.sql("SELECT c.shape FROM output o JOIN eclass c ON c.id = o.class ORDER BY o.pos")[
        "shape"
    ].to_pylist()
    assert shapes == [[2, 2], [2, 3], [2, 4]]
    assert not any(eg.audit().values())


def test_too_many_inputs_is_a_graph_error() -> None:
    b = GraphBuilder()
    xs = [b.input([1, 2]) for _ in range(9)]
    with pytest.raises(GraphError, match="9 inputs"):  # (a concat this wide nests instead)
        EGraph.from_graph(b.build(b.noop(*xs)))


def test_database_file_persists_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "e.duckdb"
    eg = EGraph.from_graph(models.load("squeezenet"), path)
    counts = eg.counts()
    eg.close()
    again = EGraph(path)
    assert again.counts() == counts
    with pytest.raises(DatabaseError, match="already holds an e-graph"):
        again.load(models.load("vgg19"))
    assert again.counts() == counts
    again.close()


def test_incompatible_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    EGraph.from_graph(models.load("vgg19"), path).close()
    db = Database(path)
    db.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    db.close()
    with pytest.raises(DatabaseError, match="schema version 0"):
        EGraph(path)


def test_unreadable_database_is_a_typed_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db.duckdb"
    bad.write_text("this is not a DuckDB file")
    with pytest.raises(DatabaseError) as info:
        EGraph(bad)
    assert info.value.path == str(bad)


def test_read_only_database_can_be_inspected_not_changed(tmp_path: Path) -> None:
    path = tmp_path / "ro.duckdb"
    EGraph.from_graph(models.load("vgg19"), path).close()
    eg = EGraph(Database(path, read_only=True))
    assert eg.counts() == (70, 70)
    with pytest.raises(DatabaseError, match="read-only"):
        explore(eg)
    assert eg.counts() == (70, 70)


def test_another_programs_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "sales.duckdb"
    db = Database(path)
    db.execute("CREATE TABLE sales (a INTEGER)")
    db.execute("CREATE TABLE meta (key VARCHAR)")  # a table named like relsat's, not relsat's
    db.close()
    for read_only in (False, True):
        with pytest.raises(DatabaseError, match=r"not a relsat e-graph .*: meta, sales"):
            EGraph(Database(path, read_only=read_only))
    db = Database(path, read_only=True)
    assert db.scalar("SELECT count(*) FROM information_schema.tables") == 2
    db.close()
    empty = tmp_path / "empty.duckdb"
    Database(empty).close()
    with pytest.raises(DatabaseError, match=r"not a relsat e-graph \(an empty database\)"):
        EGraph(Database(empty, read_only=True))


def test_read_only_queries_refuse_writes(tmp_path: Path) -> None:
    path = tmp_path / "ro.duckdb"
    EGraph.from_graph(models.load("vgg19"), path).close()
    db = Database(path, read_only=True)
    assert db.query("SELECT count(*) AS n FROM enode").to_pylist() == [{"n": 70}]
    with pytest.raises(DatabaseError, match="read-only: DELETE statements are refused"):
        db.query("DELETE FROM enode")
    with pytest.raises(DatabaseError, match="read-only: DROP statements are refused"):
        db.query("SELECT 1; DROP TABLE enode")
    with pytest.raises(DatabaseError, match=r"^[^\n]*ParserException[^\n]*$"):
        db.query("SELEC 1")
    assert db.scalar("SELECT count(*) FROM enode") == 70


def test_a_failed_arrow_insert_raises_its_own_error_and_is_rolled_back() -> None:
    """A statement that fails inside a transaction aborts it, and DuckDB then refuses even
    dropping the registered Arrow view: the insert's error is the one raised (CI once saw the
    refused drop's TransactionException instead of the time limit), and after the rollback the
    next insert works."""
    import pyarrow as pa

    db = Database()
    db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY)")
    with pytest.raises(DatabaseError, match="ConstraintException"), db.transaction():
        db.insert_arrow("t", pa.table({"a": [1]}))
        db.insert_arrow("t", pa.table({"a": [1]}))
    assert db.scalar("SELECT count(*) FROM t") == 0
    db.insert_arrow("t", pa.table({"a": [2, 3]}))
    assert db.execute("SELECT a FROM t ORDER BY a") == [(2,), (3,)]


def test_locked_database_is_a_typed_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "locked.duckdb"
    EGraph.from_graph(models.load("vgg19"), path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
            "print('ready', flush=True); time.sleep(30)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(DatabaseError, match="lock") as info:
            EGraph(path)
        assert info.value.path == str(path)
    finally:
        holder.kill()
        holder.wait()


def test_a_concat_wider_than_an_enode_nests() -> None:
    """DenseNet concatenates up to 25 inputs; an e-node has 8 children: the leading inputs fold
    into nested concats on the same axis, the same tensor with the same split history."""
    from relsat import optimize
    from relsat.graph.execute import compare

    b = GraphBuilder()
    x = b.input([1, 2, 4, 4], name="x")
    parts = [b.relu(b.conv2d(x, b.weight([1 + i % 3, 2, 1, 1]))) for i in range(20)]
    g = b.build(b.concat(1, parts))
    eg = EGraph.from_graph(g)
    assert not any(eg.audit().values())
    arities = [r[0] for r in eg.db.execute("SELECT arity FROM enode WHERE op = 'concat'")]
    assert max(arities) <= 8 and len(arities) == 3  # 8 + 7 + the rest, nested
    result = optimize(g)
    assert result.verified and compare(g, result.graph).ok


def test_the_shape_check_reads_as_many_children_as_an_enode_has() -> None:
    from relsat.engine import egraph, shapecheck

    assert shapecheck.MAX_CHILDREN == egraph.MAX_CHILDREN
