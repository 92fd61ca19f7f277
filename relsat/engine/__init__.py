"""Stage 3, the relational e-graph: a graph loaded into DuckDB tables, explored by rules compiled
to SQL, inspected and audited with SQL.

Modules, in the order a run uses them: ``db`` (the only module that talks to DuckDB; SQL files
from ``sql/`` by name), ``egraph`` (the tables, loading a graph, audits), ``compile`` (rules →
batched SQL and the rule program), ``explore`` (the exploration loop, :class:`Limits`,
:class:`StopReason`, the backoff scheduler), ``phase`` (one search/apply/rebuild phase and its
stats row), ``shapecheck`` (TASO's validity check of rule-built e-nodes), ``rebuild`` (union-find
and congruence closure), ``cycles`` (cycle pre-filter and post-pass), ``decode`` (a choice of
e-nodes back to a graph), ``problem`` (the e-graph as an extraction problem), ``dot`` (pictures
of e-classes).

The tables (integer parameters follow TENSAT's argument order and codes: activation 0 none, 1
sigmoid, 2 relu, 3 tanh; padding 0 SAME, 1 VALID; absent parameters and children are -1):

==================  =========================================================================
``enode``           ``id`` (never reused), ``op``, ``p0…p5`` integer parameters (an opaque
                    e-node's ``p0``: the key of its ONNX type, what rules test), ``s`` string
                    parameter (input/weight name, reshape shape ``64_1024``, transpose perm,
                    opaque signature), ``arity``, ``c0…c7`` child classes (canonical after every
                    rebuild), ``class``, ``born`` (epoch that created it, 0 for the input),
                    ``stamp`` (epoch that last created or re-canonicalized it: the semi-naive
                    search), ``rule`` (the rule that built it, NULL for the input graph)
``eclass``          ``id``, ``kind`` (``tensor``, ``pair`` for a split, ``unit`` for a noop),
                    ``shape``/``shape2``, ``splits`` (TASO's split history), ``all_weights``
                    (computable from weights alone), ``born``
``fact``            ``class``, ``lo``/``hi`` (bounds of every value, NULL unknown), ``halves``,
                    ``pairs`` (the last axis's halves, pairs equal), ``digest`` (a constant's
                    value), ``affine`` (an integer tensor's affine form over the dims): facts
                    of values, :mod:`relsat.graph.facts`; merged on union
``uf``              ``id``, ``root``: union-find, fully path-compressed
``output``          ``pos``, ``class``: graph outputs
``iteration_stats`` one row per iteration and phase (``multi``, ``single``): ``matches``,
                    ``applied``, ``rejected``, ``capped``, ``banned``, ``new_enodes``,
                    ``unions``, ``enodes``, ``eclasses``, seconds per step, ``statements``,
                    ``plan_s``/``exec_s`` (DuckDB planning vs execution)
``rule_stats``      the same per rule and iteration
``run``             one row per exploration call: ``stop``, ``seconds``, ``settings`` (JSON)
``rule_sched``      the backoff scheduler's state per rule (bans)
``rule_info``,      the compiled rule program (``sql/schema/program.sql``)
``pnode``, ``tnode``
``commuting``       the keys of the opaque ONNX types whose two inputs commute (``And``, ``Or``…)
``enode_cost``,     the price of every e-node; the cost cache by operator signature
``cost``
``meta``            ``schema_version`` (a file of another version is refused)
==================  =========================================================================

Example: ``SELECT rule, sum(matches), sum(applied), sum(new_enodes) FROM rule_stats GROUP BY rule
ORDER BY 3 DESC``. The invariants are SQL audits in ``sql/check/*.sql``, each selecting the
violating rows (zero rows = the invariant holds); :meth:`EGraph.audit` runs them all.

Limits hold inside a phase: at the time limit the running DuckDB statement is interrupted and
the phase in progress rolled back; at the e-node limit a phase applies its matches in chunks and
stops where the next distinct e-nodes would not fit (``capped``). Every phase commits on its own,
so a run interrupted at any moment leaves an audit-clean e-graph that a later run continues.
"""
