"""The README's Python examples run as written."""

from __future__ import annotations

import re

from conftest import ROOT


def test_readme_python_blocks_run() -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no Python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
