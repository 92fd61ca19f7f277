"""The one error hierarchy of relsat.

Every public function raises a subclass of :class:`RelsatError`. Errors carry structured fields
(the node, op and shapes involved; the file, line and column of a bad file) so that callers never
need to parse message text. Hitting an exploration limit is not an error: it is a ``StopReason``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "AuditError",
    "CostError",
    "DatabaseError",
    "EGraphFormatError",
    "ExecutionError",
    "ExtractionError",
    "GpuUnavailableError",
    "GraphError",
    "GraphFormatError",
    "ModelFormatError",
    "RelsatError",
    "RuleError",
    "RuleSyntaxError",
    "SettingsError",
    "UnknownModelError",
]


class RelsatError(Exception):
    """Base class of every error relsat raises on purpose."""


class SettingsError(RelsatError, ValueError):
    """An argument out of its range or not one of its choices (``Limits(nodes=0)``,
    ``optimize(concat="gratis")``, a bad onnxruntime setting).

    ``option`` names the setting, ``value`` is what was given and ``wanted`` says what is valid
    (e.g. ``"an integer >= 1"``); the message reads ``nodes must be an integer >= 1, got 0``.
    """

    def __init__(self, option: str, value: object, wanted: str) -> None:
        self.option = option
        self.value = value
        self.wanted = wanted
        super().__init__(f"{option} must be {wanted}, got {value!r}")


def check_int(option: str, value: object, low: int) -> None:
    """Raise :class:`SettingsError` unless ``value`` is an integer (not a bool) ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SettingsError(option, value, f"an integer >= {low}")


def check_number(option: str, value: object, low: float, *, strict: bool = False) -> None:
    """Raise :class:`SettingsError` unless ``value`` is a real number ``>= low`` (``> low`` when
    ``strict``); NaN is refused, infinity allowed (no limit)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not (value > low if strict else value >= low):  # type: ignore[operator]
        raise SettingsError(option, value, f"a number {'>' if strict else '>='} {low:g}")


def check_choice(option: str, value: object, choices: Sequence[object]) -> None:
    """Raise :class:`SettingsError` unless ``value`` is one of ``choices``."""
    if not any(value == c and type(value) is type(c) for c in choices):
        raise SettingsError(option, value, "one of " + ", ".join(repr(c) for c in choices))


class GraphError(RelsatError, ValueError):
    """An invalid graph: wrong shapes or parameters, unknown op, cycle, dangling input.

    ``node`` is the node id (or the id the node would have had), ``op`` its operator, ``name`` its
    optional user label and ``shapes`` the input shapes involved.
    """

    def __init__(
        self,
        message: str,
        *,
        node: int | None = None,
        op: str | None = None,
        name: str | None = None,
        shapes: Sequence[Sequence[int]] | None = None,
    ) -> None:
        self.reason = message
        self.node = node
        self.op = op
        self.name = name
        self.shapes = None if shapes is None else [list(s) for s in shapes]
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.op is not None:
            where.append(self.op)
        if self.node is not None:
            where.append(f"node {self.node}")
        if self.name:
            where.append(f"'{self.name}'")
        prefix = " ".join(where)
        text = f"{prefix}: {self.reason}" if prefix else self.reason
        if self.shapes is not None:
            text += " (input shapes " + ", ".join(_fmt_shape(s) for s in self.shapes) + ")"
        return text


class GraphFormatError(GraphError):
    """A graph file (JSON) that cannot be read: bad syntax, wrong version, missing fields."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
        **fields: Any,
    ) -> None:
        self.path = path
        self.line = line
        self.column = column
        super().__init__(message, **fields)

    def _format(self) -> str:
        loc = _location(self.path, self.line, self.column)
        text = super()._format()
        return f"{loc}: {text}" if loc else text


class ModelFormatError(RelsatError, ValueError):
    """A malformed TASO ``.model`` file; ``path`` and 1-based ``line`` name the place."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.reason = message
        self.path = path
        self.line = line
        loc = _location(path, line, None)
        super().__init__(f"{loc}: {message}" if loc else message)


class UnknownModelError(RelsatError, KeyError):
    """``relsat.models.load`` was asked for a model it does not have."""

    def __init__(self, name: str, available: Sequence[str]) -> None:
        self.name = name
        self.available = list(available)
        super().__init__(f"unknown model {name!r}; available: {', '.join(self.available)}")

    def __str__(self) -> str:  # KeyError would otherwise print the repr of the message
        return str(self.args[0])


class ExecutionError(RelsatError):
    """The NumPy executor cannot run a node (missing input, opaque op without a kernel, …)."""

    def __init__(self, message: str, *, node: int | None = None, op: str | None = None) -> None:
        self.reason = message
        self.node = node
        self.op = op
        where = " ".join(p for p in (op, None if node is None else f"node {node}") if p)
        super().__init__(f"{where}: {message}" if where else message)


def _fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _location(path: str | None, line: int | None, column: int | None) -> str:
    parts = [p for p in (path, line, column) if p is not None]
    return ":".join(str(p) for p in parts)


class RuleError(RelsatError, ValueError):
    """A rule that cannot be used: unknown op or guard, wrong arity, unbound variable, duplicate
    name, …

    ``path``, ``line`` and ``col`` (1-based; any may be None) name the place, ``rule`` the rule's
    name when known; ``reason`` is the message without the place.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        col: int | None = None,
        rule: str | None = None,
    ) -> None:
        self.reason = message
        self.path = path
        self.line = line
        self.col = col
        self.rule = rule
        self.part: tuple[str, int] | None = None  # which body line caused it (set by Rule checks)
        parts = [path or "<string>", line, col] if line is not None else [path]
        where = ":".join(str(p) for p in parts if p is not None)
        text = f"rule {rule!r}: {message}" if rule else message
        super().__init__(f"{where}: {text}" if where else text)

    def located(
        self, path: str | None, line: int | None, col: int | None = None, rule: str | None = None
    ) -> RuleError:
        """The same error (same class) with the place filled in: given values win."""
        err = type(self)(
            self.reason,
            path=path if path is not None else self.path,
            line=line if line is not None else self.line,
            col=col if col is not None else self.col,
            rule=self.rule or rule,
        )
        err.part = self.part
        return err


class RuleSyntaxError(RuleError):
    """A rule text that cannot be read: bad token, unbalanced parentheses, missing ``=>``, an
    integer where a tensor is expected or the reverse. Always carries ``line`` and ``col``."""


class DatabaseError(RelsatError):
    """The e-graph database cannot be opened or used: locked, read-only, wrong schema version, or a
    statement failed. ``path`` names the database file (None: in memory)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.reason = message
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class AuditError(RelsatError):
    """An e-graph invariant does not hold (``violations``: check name → violating row count)."""

    def __init__(self, violations: dict[str, int], *, where: str = "") -> None:
        self.violations = violations
        bad = ", ".join(f"{k} ({v} rows)" for k, v in violations.items() if v)
        super().__init__(f"e-graph invariants violated{' ' + where if where else ''}: {bad}")


class ExtractionError(RelsatError, ValueError):
    """Extraction is impossible or the problem is malformed.

    ``field`` names the bad Problem field, ``index`` the offending entry, ``solver_status`` the
    HiGHS model status when the solver failed, ``classes`` the classes involved (e.g. a root class
    with no usable node).
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        index: int | None = None,
        solver_status: str | None = None,
        classes: Sequence[int] | None = None,
    ) -> None:
        self.reason = message
        self.field = field
        self.index = index
        self.solver_status = solver_status
        self.classes = None if classes is None else [int(c) for c in classes]
        where = f"{field}[{index}]" if field and index is not None else field or ""
        text = f"{where}: {message}" if where else message
        if solver_status:
            text += f" (solver status: {solver_status})"
        super().__init__(text)


class EGraphFormatError(RelsatError, ValueError):
    """An egraph-serialize file that cannot be read.

    ``path``, ``line`` and ``column`` (1-based, for JSON syntax errors) name the place in the file,
    ``node`` the node id and ``field`` the field at fault; any may be None.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
        node: str | None = None,
        field: str | None = None,
    ) -> None:
        self.reason = message
        self.path = path
        self.line = line
        self.column = column
        self.node = node
        self.field = field
        loc = ":".join(str(p) for p in (path, line, column) if p is not None)
        what = f"node {node!r}: " if node is not None else ""
        super().__init__(f"{loc}: {what}{message}" if loc else f"{what}{message}")


class CostError(RelsatError, ValueError):
    """A cost model cannot price an operator: unknown op, or shapes the op cannot take.

    ``op``, ``inputs`` (input shapes) and ``output`` name the signature, ``model`` the model that
    refused it; ``reason`` is the message without them.
    """

    def __init__(
        self,
        message: str,
        *,
        op: str,
        inputs: Sequence[Sequence[int]] = (),
        output: Sequence[int] = (),
        model: str | None = None,
    ) -> None:
        self.reason = message
        self.op = op
        self.inputs = [list(s) for s in inputs]
        self.output = list(output)
        self.model = model
        shapes = ", ".join(_fmt_shape(s) for s in self.inputs)
        by = f" ({model})" if model else ""
        super().__init__(
            f"cannot price {op}({shapes}) -> {_fmt_shape(self.output)}{by}: {message}",
        )


class GpuUnavailableError(RelsatError):
    """No usable GPU: CuPy missing, no CUDA device, or no cuDNN path (``reason`` says which)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"no usable GPU: {reason}")
