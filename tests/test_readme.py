"""The README's examples run as written: every Python block, and every ``relsat`` command of its
bash blocks (the Quickstart's main job included), in a scratch folder that sees the checkout's
``relsat/`` and ``rules/`` where the commands name them."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

TEXT = (ROOT / "README.md").read_text()
GRAPHBUILDER = "from relsat import GraphBuilder"  # how the GraphBuilder example begins


def _commands() -> list[str]:
    """The ``relsat …`` commands of the README's bash blocks, comments dropped, in order; a
    ``pip install … && relsat …`` line gives its relsat part."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", TEXT, flags=re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            line = line.rpartition("&& ")[2] if "&& relsat" in line else line
            if line.startswith("relsat "):
                commands.append(line)
    return commands


def test_readme_python_blocks_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)
    assert blocks, "README has no Python example"
    for block in blocks:
        if block.startswith(GRAPHBUILDER):
            continue  # run, and what it prints compared, by the GraphBuilder test below
        exec(compile(block, "README.md", "exec"), {})


def test_readme_names_the_commands_ci_runs() -> None:
    quickstart = TEXT.split("## Quickstart", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    ci = (ROOT / ".ci" / "run").read_text()
    for line in quickstart.strip().splitlines():
        assert line in ci, f"the Quickstart's {line!r} is not what .ci/run runs"


#: Runs the argument lists of a JSON list on its input with relsat's command line, one after
#: another in one interpreter (one start-up, not one per command); the first non-zero exit ends
#: it with that code, the command named on stderr.
DRIVER = """
import json, sys
from relsat.cli import main
for args in json.load(sys.stdin):
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    if code:
        print(f"README command relsat {' '.join(args)} exited {code}", file=sys.stderr)
        sys.exit(code if isinstance(code, int) else 1)
"""


def test_readme_commands_run(tmp_path: Path) -> None:
    commands = _commands()
    assert any(c.startswith("relsat optimize relsat/models/data/encoder.onnx") for c in commands)
    for name in ("relsat", "rules"):
        (tmp_path / name).symlink_to(ROOT / name)
    runs = []
    for command in commands:
        args = shlex.split(command)[1:]
        if args[0] in ("optimize", "optimize-many") and "--threads" not in args:
            args += ["--threads", "1"]  # a test machine's cores are shared: no spinning pools
        if args[0] in ("optimize", "optimize-many") and "--timing-seconds" not in args:
            # the default 10 s budget runs out where the machine is busy; a command that names
            # its budget runs as written
            args += ["--timing-seconds", "1"]
        runs.append(args)
    done = subprocess.run(
        [sys.executable, "-c", DRIVER],
        cwd=tmp_path,
        input=json.dumps(runs),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.fail(f"exit {done.returncode}:\n{done.stderr[-4000:]}")
    assert done.stdout.count("written to ") >= 2  # the optimize commands ran to the end


def test_readme_graphbuilder_example_prints_what_it_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The GraphBuilder example optimizes something real, and the README shows what it prints
    # (the lines that do not hold times).
    block, shown = re.search(
        rf"```python\n({GRAPHBUILDER}.*?)```\n\nprints.*?\n\n```\n(.*?)```",
        TEXT,
        flags=re.S,
    ).groups()
    exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    steady = ("cost ", "verify ", "rewrites ", "ops ", "options ")
    want = [line for line in shown.splitlines() if line.startswith(steady)]
    got = [line for line in printed.splitlines() if line.startswith(steady)]
    assert got == want and "Conv 2->1" in printed
