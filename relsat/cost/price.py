"""Pricing every e-node of an e-graph, set-at-a-time.

One query lists each e-node's operator signature (``sql/cost/enode_signatures.sql``, identical
signatures numbered alike); each *distinct* signature is priced once, through the cost table
(signatures it already holds for the model's device are not recomputed); the where-dependent
policies (:class:`~relsat.cost.model.Pricing`) are applied per e-node with NumPy; the result is
written to ``enode_cost(enode, ms)`` in one statement and returned. For a model that
``wants_constants`` the signatures carry which inputs are weight-only, as the model keys them
(:meth:`~relsat.cost.model.CostModel.canonical`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from relsat.cost.model import CostModel, OpSignature, Pricing
from relsat.cost.table import CostTable, TableModel
from relsat.engine.db import sql_text
from relsat.engine.egraph import EGraph
from relsat.graph.ops import opaque_parts

__all__ = ["ENODE_COST_SCHEMA", "enode_signatures", "price_egraph", "resize_signature"]

ENODE_COST_SCHEMA = pa.schema([("enode", pa.int64()), ("ms", pa.float64())])


def enode_signatures(
    egraph: EGraph, *, constants: bool = False
) -> tuple[pa.Table, list[OpSignature]]:
    """Every e-node's row of ``sql/cost/enode_signatures.sql`` (columns enode, op, p0…p5, s,
    inputs, output, all_weights, weight_only, sig), and the distinct signatures indexed by
    ``sig``; with ``constants`` they carry ``weight_only`` as :attr:`OpSignature.constants`."""
    db = egraph.db
    db.script("cost/schema")
    rows = db.arrow(sql_text("cost/enode_signatures"), {"constants": constants})
    # one representative row per signature (sig is dense from 0), in signature order
    _, first = np.unique(rows["sig"].to_numpy(), return_index=True)
    reps = rows.take(pa.array(first, pa.int64()))
    cols = reps.to_pydict()
    sigs = [
        OpSignature(
            op=cols["op"][i],
            params=tuple(cols[f"p{j}"][i] for j in range(6)),
            s=cols["s"][i],
            inputs=tuple(tuple(x) for x in cols["inputs"][i]),
            output=tuple(cols["output"][i]),
            constants=tuple(cols["weight_only"][i]) if constants else None,
        )
        for i in range(reps.num_rows)
    ]
    return rows, sigs


def price_egraph(
    egraph: EGraph,
    model: CostModel,
    *,
    concat: Literal["copy", "free"] = "copy",
    precompute_weights: bool = False,
    table: CostTable | None = None,
    cache: bool = True,
    size: Callable[[int], int] | None = None,
) -> pa.Table:
    """Price every e-node with ``model``; writes ``enode_cost(enode, ms)`` and returns its rows
    with each e-node's ``unit``: which priced signature it is (one number per distinct key the
    model prices, :meth:`~relsat.cost.model.CostModel.canonical`: equal units, one price).

    ``size`` maps the dims of every signature before it is priced (:func:`resize_signature`):
    an e-graph of a model with symbolic dims holds markers, priced at the pricing shape.

    ``concat`` and ``precompute_weights`` are the policies of :class:`Pricing`. ``table`` caches
    signature costs (default: a :class:`TableModel`'s own table, else the e-graph database's
    ``cost`` table); with ``cache=False`` it is neither read nor written.

    >>> from relsat.graph import GraphBuilder
    >>> from relsat.cost import AnalyticModel
    >>> b = GraphBuilder(); x = b.input([1, 64])
    >>> eg = EGraph.from_graph(b.build(b.relu(b.relu(x))))
    >>> price_egraph(eg, AnalyticModel("t4"))["ms"].to_pylist()
    [0.0, 0.005002, 0.005002]
    """
    pricing = Pricing(concat=concat, precompute_weights=precompute_weights)
    rows, sigs = enode_signatures(egraph, constants=model.wants_constants)
    if size is not None:
        sigs = [resize_signature(s, size) for s in sigs]
    # distinct signatures may become equal here (flags the model ignores): priced once below
    sigs = [model.canonical(s) for s in sigs]
    units = {s: i for i, s in enumerate(dict.fromkeys(sigs))}  # one per distinct priced key
    sig_unit = np.array([units[s] for s in sigs], dtype=np.int64)
    sig_of = rows["sig"].to_numpy()
    ops = rows["op"].to_numpy(zero_copy_only=False)
    free = pricing.free(ops, rows["all_weights"].to_numpy(zero_copy_only=False))
    # an opaque Constant (a boolean constant's class) is written as an initializer
    constant = pc.starts_with(rows["s"].fill_null(""), "Constant|").to_numpy(zero_copy_only=False)
    free = free | ((ops == "opaque") & constant)
    # Only signatures some e-node pays for are priced: weight-only work the policies make free
    # (a batch-norm fold's scaled weight and bias) is never timed.
    paid = np.zeros(len(sigs), dtype=bool)
    paid[sig_of[~free]] = True
    sig_ms = np.zeros(len(sigs), dtype=np.float64)
    wanted = np.flatnonzero(paid)
    if wanted.size:
        sig_ms[wanted] = _price_signatures(egraph, model, [sigs[i] for i in wanted], table, cache)
    ms = np.where(free, 0.0, sig_ms[sig_of])
    result = pa.table({"enode": rows["enode"], "ms": pa.array(ms, pa.float64())})
    result = result.cast(ENODE_COST_SCHEMA)
    with egraph.db.transaction():
        egraph.db.run("cost/clear_enode_cost")
        egraph.db.insert_arrow("enode_cost", result)
    return result.append_column("unit", pa.array(sig_unit[sig_of], pa.int64()))


def resize_signature(sig: OpSignature, size: Callable[[int], int]) -> OpSignature:
    """``sig`` with its shapes, a reshape's target, a slice's bounds, a pool's kernel and an
    opaque node's shape-like constants and output shapes mapped by ``size``
    (:func:`relsat.graph.specialize.substitute`); float parameters, stored as bits, are left
    alone."""
    from relsat.graph.specialize import substitute

    s, params = sig.s, sig.params
    if sig.op in ("reshape", "expand") and s:
        s = "_".join(str(size(int(d))) for d in s.split("_"))
    elif sig.op == "opaque" and s:
        kind, attrs, shapes = opaque_parts(s)
        resized = (substitute(json.loads(attrs), size), substitute(json.loads(shapes), size))
        s = f"{kind}|{json.dumps(resized[0], sort_keys=True, separators=(',', ':'))}|"
        s += json.dumps(resized[1], separators=(",", ":"))
    elif sig.op == "slice":
        params = (params[0], size(params[1]), size(params[2]), *params[3:])
    elif sig.op in ("poolmax", "poolavg"):  # a global pool's kernel is the input's side
        params = (size(params[0]), size(params[1]), *params[2:])
    return replace(
        sig,
        params=params,
        s=s,
        inputs=tuple(tuple(size(d) for d in shape) for shape in sig.inputs),
        output=tuple(size(d) for d in sig.output),
    )


def _price_signatures(
    egraph: EGraph,
    model: CostModel,
    sigs: list[OpSignature],
    table: CostTable | None,
    cache: bool,
) -> np.ndarray:
    """The cost of each distinct signature: from the cache table where it has one, else from
    the model (and then stored in the table)."""
    if not cache:
        unique = list(dict.fromkeys(sigs))
        priced = dict(zip(unique, model.costs(unique).tolist(), strict=True)) if unique else {}
        return np.array([priced[s] for s in sigs], dtype=np.float64)
    if table is None:
        table = model.table if isinstance(model, TableModel) else CostTable(egraph.db)
    known = table.lookup(model.device, sigs)
    missing = [s for s in dict.fromkeys(sigs) if s not in known]
    if missing:
        fresh = model.costs(missing)
        table.insert(model.device, missing, fresh, model.source)
        known.update(zip(missing, fresh.tolist(), strict=True))
    return np.array([known[s] for s in sigs], dtype=np.float64)
