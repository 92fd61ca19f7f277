"""Stage 2, the rules: rewrite rules as data, their file formats and their checks.

``rules/*.rules`` hold the rule set as plain text, one named rule per block::

    # name: conv-pair-shared-input-to-weight-concat
    # from: converted_multi.txt:23, converted_multi.txt:24
    # two convs of one input become one conv with stacked weights, then split (ungrouped only)
    (conv2d 1 1 0 0 ?x ?w1) => (split_0 (split 1 (conv2d 1 1 0 0 ?x (concat 0 4 ?w1 ?w2))))
    (conv2d 1 1 0 0 ?x ?w2) => (split_1 (split 1 (conv2d 1 1 0 0 ?x (concat 0 4 ?w1 ?w2))))
    symmetric
    where ungrouped(?x, ?w1)
    where ungrouped(?x, ?w2)

Patterns are TENSAT's s-expressions (its operator names, argument orders and integer codes); float
literals are float32 constants (``(scalar 1.4142135)`` matches exactly the float32 ``sqrt(2)``
exporters write). Several ``lhs => rhs`` lines make a multi-pattern rule, joined on shared
``?vars``; ``symmetric`` tries each unordered pair once when the sources are equal up to renaming;
``ordered`` matches Add and Mul in the operand order written (TENSAT's rules; others match either
order, as they do ONNX's And, Or, Xor and Equal: :data:`relsat.rewrite.rules.COMMUTATIVE`);
``runtime`` says onnxruntime makes the rewrite itself when it loads a model (a model whose only
rewrites are such is kept untimed); ``where`` lines are guards from a closed vocabulary
(``ungrouped``, ``same-shape``, ``same-group-width``, ``odd-kernels``) or conditions
(:mod:`relsat.rewrite.exprs`) over typed parameter variables (``(scalar ?eps:float)``, ``(repeatkv
?n:int ?x)``; a right-hand side may compute with them: ``(* ?n 2)``) and facts of the bound tensors
(``rank(?x)``, ``dim(?x, -1)``); a shape operator's list is a variable of type ``ints`` (a reshape's
``?f:ints``), read with ``len``, ``at``, ``take``, ``append``, ``prod``, ``compose``, ``iota`` and
lists of computed items (``where ?f == [dim(?x, 0) * dim(?x, 1), dim(?x, 2)]``: the rule checker
then draws ``?f`` from the shapes, :mod:`relsat.rewrite.pins`). Errors cite ``file:line:col``
(:class:`~relsat.errors.RuleSyntaxError`) or the rule and line (:class:`~relsat.errors.RuleError`:
unknown op or guard, wrong arity, a right-hand-side variable no left-hand side binds, duplicate
names). :func:`~relsat.rewrite.rulefile.load_tensat` reads TENSAT's own ``converted*.txt`` files.

The shipped set: TENSAT's 135 distinct rules exactly (116 single-pattern rules of
``converted.txt``, TASO's 4 grouped-conv merges, its 13 learned two-pattern rules, the 2 enlarge
rules); ``bias.rules``, fusion-aware rules that fold a bias add and an activation into a conv or
Gemm and give TASO's shared-input merges bias-aware counterparts; ``transformer.rules``, rules
between exporter spellings and onnxruntime's fused kernels (GELU in its erf and tanh spellings,
LayerNorm below opset 17, SkipLayerNormalization, BiasGelu, FastGelu with its bias, attention with
and without mask, attention packed with its Q, K, V projections, a projection's bias folded into
the kernel after it); ``layout.rules``, transposes and reshapes folded, projections as one MatMul
on their N-D input;
``decoder.rules``, LLM decoders' RMSNorm (any epsilon; Div(1, y) and y^-0.5 rewritten to
reciprocal by rules), Llama's rotary embedding (``rotate_half``, any head size; the cos/sin
tables' equal halves
are made visible on import as ``concat(half, half)``, constant or computed at run time, so a rule
can require them) and grouped-query attention (keys and values repeated by ``repeat_kv``, read on
import as ``repeatkv``, a transpose or a scale moved under it by rules, fused into ``gqa`` for
any group size); ``norm.rules``, GroupNorm (torch's InstanceNormalization between two reshapes,
then the weight and bias, fused into ONNX GroupNormalization for any group count and epsilon,
the instance norm's ones and zeros read from the facts of values, and spelled out again);
``extra/``
holds rules that are off by default (moving a bias out of a conv lets TASO's add
associativity explode residual chains).

**Soundness.** Every shipped rule is checked numerically (``tests/test_rule_soundness.py``: the
constraint solver of :mod:`relsat.rewrite.shapes` draws shapes that pass the shape check, grouped
convs included, and both sides run in the NumPy executor), and dropping all of a guarded rule's
guards gives a counterexample for every one of them. A rule whose right-hand side computes
another type than the class it matched is refused each time it fires and counted as rejected in
``rule_stats``, so no e-class ever mixes shapes. ``Schedule(guards=False)`` (``--no-guards``)
reproduces TENSAT's unguarded behaviour (and its wrong rewrites on grouped convolutions), which
verification catches.

**Checking a rule file.** ``relsat rules check FILE…`` (:func:`~relsat.rewrite.check.check_rule`)
instantiates each rule on random shapes its guards allow and prints one line per rule:
``type-mismatch`` (the right-hand side computes another type, or never builds),
``numeric-mismatch`` (both sides differ on the same random values), ``untested`` (fewer than 5
instances could be compared) or ``ok``; exit 0 only when every rule is ok. A rule holding an
operator exported as a fused onnxruntime kernel (gelu, quickgelu, layernorm, rmsnorm, rotary,
attention, ...) also runs in onnxruntime at a few of those instances
(:mod:`~relsat.rewrite.ortcheck`; ``--no-ort`` leaves it out): its sides must agree there, and
with relsat's NumPy model of the kernel; a side onnxruntime cannot run is reported skipped.
``load_rules(path)`` (and so ``relsat optimize --rules FILE``) runs the cheap type half on a
user's file.

Modules: ``rules`` (the rule IR: :class:`~relsat.rewrite.rules.Rule`, ``RuleSet``), ``rulefile``
(the ``.rules`` and TENSAT formats), ``check`` (rule checks), ``inputs`` (the values a check
compares the sides on), ``ortcheck`` (the check in onnxruntime), ``shapes`` (shapes for a rule's
variables), ``instantiate`` (rule patterns as graphs).
"""
