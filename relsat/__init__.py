"""relsat: tensor-graph superoptimization by equality saturation on a relational e-graph.

The public surface is chosen here; everything else is internal.
"""

from __future__ import annotations

from relsat.engine.explore import Limits
from relsat.errors import (
    CostError,
    EGraphFormatError,
    ExecutionError,
    ExtractionError,
    GraphError,
    GraphFormatError,
    ModelFormatError,
    RelsatError,
    RuleError,
    RuleSyntaxError,
    SettingsError,
    UnknownModelError,
)
from relsat.extract import IlpOptions
from relsat.fleet import Fleet, optimize_many
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.execute import Comparison, allclose, compare, random_values, run
from relsat.graph.graph import Graph, Node, Ref
from relsat.graph.ops import TensorType
from relsat.onnx.latency import LatencyComparison, Timing, compare_latency
from relsat.onnx.runtime import OrtSettings
from relsat.pipeline.optimize import optimize
from relsat.pipeline.options import Options
from relsat.pipeline.result import Result
from relsat.pipeline.verify import VerificationError
from relsat.rewrite.rulefile import load_rules, load_tensat, parse_rules
from relsat.rewrite.rules import Rule, RuleSet

__all__ = [
    "Comparison",
    "CostError",
    "EGraphFormatError",
    "ExecutionError",
    "ExtractionError",
    "Fleet",
    "Graph",
    "GraphBuilder",
    "GraphError",
    "GraphFormatError",
    "IlpOptions",
    "LatencyComparison",
    "Limits",
    "ModelFormatError",
    "Node",
    "Options",
    "OrtSettings",
    "Ref",
    "RelsatError",
    "Result",
    "Rule",
    "RuleError",
    "RuleSet",
    "RuleSyntaxError",
    "SettingsError",
    "Tensor",
    "TensorType",
    "Timing",
    "UnknownModelError",
    "VerificationError",
    "allclose",
    "compare",
    "compare_latency",
    "load_rules",
    "load_tensat",
    "optimize",
    "optimize_many",
    "parse_rules",
    "random_values",
    "run",
]

__version__ = "0.1.0"
