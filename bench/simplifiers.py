"""The ONNX simplifiers relsat is compared with: onnxslim's command line, and an in-process
simplify function (onnxsim when installed, else onnxslim).

:func:`onnxslim` runs ``python -m onnxslim IN OUT`` (the ``onnxslim IN OUT`` command) in a
subprocess with a timeout, as :func:`calls.cli` runs relsat, so the two are timed alike.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx


@dataclass
class SlimRun:
    """One ``onnxslim`` call: exit code (None: timed out), seconds, the file written, why not."""

    rc: int | None = None
    seconds: float = float("nan")
    output: Path | None = None
    error: str | None = None


def onnxslim(source: Path, target: Path, timeout: float = 600.0) -> SlimRun:
    """``onnxslim SOURCE TARGET`` in a subprocess; its output kept in ``<target>.log``."""
    target.unlink(missing_ok=True)
    if importlib.util.find_spec("onnxslim") is None:
        return SlimRun(error="onnxslim is not installed (pip install -e '.[bench]')")
    command = [sys.executable, "-m", "onnxslim", str(source), str(target)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return SlimRun(None, time.perf_counter() - start, error=f"timed out after {timeout:.0f} s")
    run = SlimRun(proc.returncode, time.perf_counter() - start)
    target.with_name(target.name + ".log").write_text(f"{proc.stdout}\n{proc.stderr}")
    if target.exists() and proc.returncode == 0:
        run.output = target
    else:
        lines = [s.strip() for s in (proc.stderr + proc.stdout).splitlines() if s.strip()]
        run.error = (lines or [f"exit code {proc.returncode}"])[-1][:200]
    return run


def simplifier() -> tuple[str, Callable[[onnx.ModelProto], onnx.ModelProto]] | None:
    """("onnxsim" or "onnxslim", the simplify function), or None when neither is installed."""
    if importlib.util.find_spec("onnxsim") is not None:
        import onnxsim

        def simplify(model: onnx.ModelProto) -> onnx.ModelProto:
            simplified, ok = onnxsim.simplify(model)
            if not ok:
                raise RuntimeError("onnxsim's own check failed")
            return simplified

        return "onnxsim", simplify
    if importlib.util.find_spec("onnxslim") is not None:
        import onnxslim as slim

        return "onnxslim", slim.slim
    return None
