"""Costs: what one operator instance costs (ms) on a device, and every e-node's price.

* :class:`CostModel` prices an :class:`OpSignature`; :class:`AnalyticModel` is a roofline for a
  named :class:`Device` (:data:`DEVICES`), :class:`TableModel` reads a :class:`CostTable`
  (measured costs, shippable as Parquet) and falls back to another model; :class:`OrtModel`
  times each signature in onnxruntime on this CPU (cached per machine), each price the median of
  repeats kept with its spread and re-checked while doubtful (:class:`Stability`).
* :func:`price_egraph` prices every e-node set-at-a-time into ``enode_cost(enode, ms)``, with the
  concat and weight-precomputation policies of :class:`Pricing`.

>>> AnalyticModel("h100").cost(OpSignature("reshape", (), "2_2", ((4,),), (2, 2)))
0.0
"""

from __future__ import annotations

from relsat.cost.analytic import DEVICES, AnalyticModel, Device, Kernel, kernels
from relsat.cost.model import ZERO_COST, CostError, CostModel, OpSignature, Pricing
from relsat.cost.ort import OrtModel, OrtTiming
from relsat.cost.price import enode_signatures, price_egraph
from relsat.cost.stability import Price, Stability
from relsat.cost.table import CostTable, TableModel

__all__ = [
    "DEVICES",
    "ZERO_COST",
    "AnalyticModel",
    "CostError",
    "CostModel",
    "CostTable",
    "Device",
    "Kernel",
    "OpSignature",
    "OrtModel",
    "OrtTiming",
    "Price",
    "Pricing",
    "Stability",
    "TableModel",
    "enode_signatures",
    "kernels",
    "price_egraph",
]
