"""The bench's calls into relsat, all in one place: the API (:func:`optimize`) and the CLI
(:func:`cli`).

Every bench script that optimizes goes through one of these functions (:func:`optimize_many`
for many models at once), so a change of ``relsat.optimize``'s signature or of the CLI's options
is mended here and nowhere else.

:func:`cli` runs ``python -m relsat optimize SOURCE -o TARGET OPTIONS`` in a subprocess, as a user
runs ``relsat optimize``, with a timeout: a crash or a hang is a row of the table, not the end of
the bench. What the run printed is parsed into a :class:`CliRun`: the priced cost, the rewrites,
the operators kept opaque, the stop reason, the extraction's status, the verification and what
was kept (the final before/after table's ``stop``, ``extraction``, ``verified`` and ``kept``
rows); a refusal is the last ``relsat:`` line. The output is kept beside the target as
``<target>.log``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import relsat


def optimize(graph: Any, **settings: Any) -> Any:
    """``relsat.optimize(graph, relsat.Options(**settings))``: the bench's one call into the API
    (``ilp_time_limit`` sets the ILP's time limit)."""
    if "ilp_time_limit" in settings:
        settings["ilp"] = relsat.IlpOptions(time_limit=settings.pop("ilp_time_limit"))
    return relsat.optimize(graph, relsat.Options(**settings))


def optimize_many(
    models: Sequence[str | Path], out_dir: Path, fleet: dict[str, Any], **settings: Any
) -> Any:
    """``relsat.fleet.optimize_many(models, relsat.Options(**settings), out_dir,
    relsat.fleet.Fleet(**fleet))``: the bench's one call into the many-models API (its
    :class:`relsat.fleet.Summary`)."""
    from relsat.fleet import Fleet
    from relsat.fleet import optimize_many as many

    if "ilp_time_limit" in settings:
        settings["ilp"] = relsat.IlpOptions(time_limit=settings.pop("ilp_time_limit"))
    return many(models, relsat.Options(**settings), out_dir, Fleet(**fleet))


@dataclass
class CliRun:
    """One ``relsat optimize`` call and what its output says (None: it did not say)."""

    command: list[str]
    rc: int | None = None
    seconds: float = float("nan")
    output: Path | None = None  # the file written, if any
    error: str | None = None
    cost: tuple[float, float] | None = None
    rewrites: str | None = None
    opaque: str | None = None  # the operators relsat keeps opaque: "3 of 40 ops (Erf 2, ...)"
    stop: str | None = None  # the stop reason: saturated, node limit, ...
    extraction: str | None = None  # method and status: "ilp optimal", ...
    kept: str | None = None  # what the CLI handed back: "optimized (faster)", ...
    timing: str | None = None  # the CLI's own latency comparison, when it timed
    verified: str | None = None  # the "verified" row, or "no: ..." when outputs differed
    shapes: str | None = None  # what became of dynamic dims: "batch, sequence kept symbolic; ..."
    checked_at: str | None = None  # the dim values onnxruntime checked at: "batch=1, ... | ..."
    stdout: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.error is None


def cli_flags() -> set[str]:
    """The options ``relsat optimize`` accepts (read from its ``--help``)."""
    out = subprocess.run(
        [sys.executable, "-m", "relsat", "optimize", "--help"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out))


def cli(
    source: Path,
    target: Path,
    options: Sequence[str] = (),
    timeout: float = 1800.0,
    checkout: Path | None = None,
) -> CliRun:
    """``relsat optimize SOURCE -o TARGET OPTIONS`` in a subprocess, killed after ``timeout``
    seconds; ``checkout``: run the relsat of that source tree (first on ``PYTHONPATH``: another
    branch's code, as a baseline) instead of the one installed."""
    target.unlink(missing_ok=True)
    log = target.with_name(target.name + ".log")
    log.unlink(missing_ok=True)
    source, target = source.resolve(), target.resolve()
    command = [sys.executable, "-m", "relsat", "optimize", str(source), "-o", str(target)]
    command += list(options)
    run = CliRun(command)
    env = os.environ | {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}
    if checkout is not None:  # (run there: ``-m`` puts the working folder first on the path)
        env["PYTHONPATH"] = os.pathsep.join([str(checkout), env.get("PYTHONPATH", "")])
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
            cwd=checkout,
        )
    except subprocess.TimeoutExpired:
        run.seconds, run.error = time.perf_counter() - start, f"timed out after {timeout:.0f} s"
        return run
    run.seconds, run.rc = time.perf_counter() - start, proc.returncode
    log.write_text(
        f"$ {shlex.join(command)}\n# exit {proc.returncode}, {run.seconds:.1f} s\n"
        f"{proc.stdout}\n{proc.stderr}"
    )
    parse(run, proc.stdout, proc.stderr)
    if target.exists():
        run.output = target
    elif run.rc == 0 and run.kept is None:
        run.kept = "no file written"
    return run


_BOX = re.compile(r"[│┃║|]")
_COST = re.compile(r"^cost(?: \(ms\))?:?\s+(\d+\.\d+)\s*(?:->|→)?\s*(\d+\.\d+)")


def parse(run: CliRun, stdout: str, stderr: str) -> None:
    """Fill ``run`` from the CLI's report and its final before/after table."""
    run.stdout = stdout
    for raw in stdout.splitlines():
        line = " ".join(_BOX.sub(" ", raw).split())
        if run.cost is None and (m := _COST.match(line)):
            run.cost = (float(m[1]), float(m[2]))
        elif line.startswith(("rewrites", "gains by rule")) and run.rewrites is None:
            # Result.report()'s "rewrites rule n, ..." or the CLI's "gains by rule (model): ..."
            run.rewrites = (line.split(": ", 1)[1] if ": " in line else line[8:]).strip()
            run.rewrites = run.rewrites or "none"
        elif line.startswith("opaque: ") and run.opaque is None:
            run.opaque = line.removeprefix("opaque: ")
        elif line.startswith("stop "):
            run.stop = line.removeprefix("stop ").strip()
        elif line.startswith("extraction "):
            run.extraction = line.removeprefix("extraction ").strip()
        elif line.startswith("verified ") and not line.startswith("verified in "):
            run.verified = line.removeprefix("verified ").strip()
        elif line.startswith("onnxruntime CPU") and run.timing is None:
            run.timing = line
        elif line.startswith("at ") and ": onnxruntime CPU" in line and run.timing is None:
            run.timing = line  # symbolic dims: "at batch=1, sequence=128: onnxruntime CPU ..."
        elif line.startswith("shapes: ") and run.shapes is None:
            run.shapes = line.removeprefix("shapes: ")
        elif line.startswith("verified in onnxruntime: outputs match the original at "):
            run.checked_at = line.split(" original at ", 1)[1]
        elif line.startswith("kept ") or line == "kept":
            run.kept = line.removeprefix("kept").strip(" :")
        elif run.kept is None and re.search(r"\bkept\b|\bslower\b|\bkeeps?\b", line):
            run.kept = line
    if run.rc not in (0, None):
        lines = [s.strip() for s in stderr.splitlines() if s.strip()]
        lines += [s.strip() for s in stdout.splitlines() if "relsat:" in s]
        tagged = [s for s in lines if s.startswith("relsat:")]
        message = (tagged or lines or [f"exit code {run.rc}"])[-1]
        run.error = message.removeprefix("relsat: error: ").removeprefix("relsat: ")
        if "outputs differ" in run.error or "verification failed" in run.error:
            run.verified = "no: " + run.error
