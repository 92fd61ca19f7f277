"""onnxruntime as relsat runs it: one place for session options and for the machine's identity.

Everything relsat times or runs in onnxruntime — pricing one operator (``relsat.cost.ort``),
timing a whole model against its original (``relsat.onnx.latency``), verification — builds its
session from one :class:`OrtSettings`, so a price measured for a unit and the latency the user
gets come from the same runtime configuration. :meth:`OrtSettings.machine` names what a
measurement depends on (CPU model, thread count, onnxruntime version, optimization level): a cost
table measured under another identity is never reused.

>>> OrtSettings(threads=2).level
'all'
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from functools import cache
from typing import Any

from relsat.errors import SettingsError, check_choice, check_int

__all__ = ["LEVELS", "OrtSettings", "cpu_name"]

#: onnxruntime's graph optimization levels by relsat's short names.
LEVELS = ("disable", "basic", "extended", "all")


@dataclass(frozen=True)
class OrtSettings:
    """How a model runs in onnxruntime on the CPU.

    ``threads``: intra-op threads (0 = onnxruntime's default, one per physical core);
    ``level``: graph optimizations (``"all"``, onnxruntime's default, fuses Conv+bias+activation);
    ``spin``: let idle intra-op threads spin-wait (onnxruntime's default). Off by default here:
    relsat keeps several sessions alive and alternates between them (two models interleaved, a
    batch of units), and a session's spinning threads take the cores from the next one —
    measured on this 2-core machine, ResNet-50 in ``compare_latency`` (three interleaved
    sessions): 37–42 ms per run with spinning, 19.5–19.7 ms without.
    """

    threads: int = 0
    level: str = "all"
    spin: bool = False

    def __post_init__(self) -> None:
        try:
            check_int("threads", self.threads, 0)
            check_choice("level", self.level, LEVELS)
        except SettingsError as exc:
            raise RuntimeSettingsError(exc.option, exc.value, exc.wanted) from None

    def session_options(self) -> Any:
        """A fresh ``onnxruntime.SessionOptions`` with these settings (errors-only logging)."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if self.spin else "0"
        )
        options.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[self.level]
        return options

    def session(self, model: Any) -> Any:
        """An ``InferenceSession`` on the CPU for ``model`` (ModelProto, bytes or path)."""
        import onnx
        import onnxruntime as ort

        source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        return ort.InferenceSession(
            source, self.session_options(), providers=["CPUExecutionProvider"]
        )

    @property
    def effective_threads(self) -> int:
        """The thread count onnxruntime uses (its default: the cores this process may use)."""
        if self.threads:
            return self.threads
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            return os.cpu_count() or 1

    def machine(self) -> str:
        """The identity a CPU measurement belongs to, e.g.
        ``ort-cpu|AMD EPYC 7B13|2t|ort1.32.0|all``."""
        import onnxruntime as ort

        spin = "|spin" if self.spin else ""
        threads = f"{self.effective_threads}t"
        return f"ort-cpu|{cpu_name()}|{threads}|ort{ort.__version__}|{self.level}{spin}"


class RuntimeSettingsError(SettingsError):
    """An invalid onnxruntime setting (thread count, optimization level) or timing budget: a
    :class:`~relsat.errors.SettingsError`."""


@cache
def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"
