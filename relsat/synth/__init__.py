"""Rules found, not written: TASO's substitution generator on the relational e-graph.

Modules, in the order a run uses them: ``vocab`` (operator templates, typed variables),
``values`` (terms built and evaluated, fingerprints), ``terms`` (enumeration as DuckDB tables),
``candidates`` (equations to rules, TASO's prunes), ``derive`` (derivability by saturation, also
``relsat rules derive``), ``verify`` (``relsat rules check`` on every rule kept), ``synthesize``
(the loop, per depth).
"""

from __future__ import annotations

from relsat.synth.derive import DERIVE_LIMITS, Derivation, Derived, derive
from relsat.synth.synthesize import DepthStats, Settings, Synthesis, synthesize

__all__ = [
    "DERIVE_LIMITS",
    "DepthStats",
    "Derivation",
    "Derived",
    "Settings",
    "Synthesis",
    "derive",
    "synthesize",
]
