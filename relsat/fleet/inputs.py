"""Which models a command names: ONNX files, folders of them, and list files.

* a ``.onnx`` file is one model (a missing one too: its row says so, the others go on);
* a folder is every ``*.onnx`` file under it, sorted by path;
* any other file is a **list file**: one model (file or folder) per line, relative to the list
  file's folder; blank lines and ``#`` comments are skipped.

Each model gets an output name, its file's stem, made unique in list order (``model``,
``model-2``, ...), so that ``<out-dir>/<name>.onnx`` never overwrites another model's output.

>>> names(["a/m.onnx", "b/m.onnx", "c.onnx"])
['m', 'm-2', 'c']
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from relsat.errors import RelsatError

__all__ = ["find_models", "names"]


def find_models(specs: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The model files ``specs`` name, in order (duplicates kept once); a list file that names
    itself, directly or not, is read once. :class:`~relsat.errors.RelsatError` for an unreadable
    list file."""
    found: list[str] = []
    seen_lists: set[Path] = set()

    def visit(spec: Path) -> None:
        if spec.suffix == ".onnx" or not spec.exists():
            found.append(str(spec))
        elif spec.is_dir():
            found.extend(str(p) for p in sorted(spec.rglob("*.onnx")) if p.is_file())
        else:
            real = spec.resolve()
            if real in seen_lists:
                return
            seen_lists.add(real)
            try:
                lines = spec.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise RelsatError(f"{spec}: not a readable list of models ({exc})") from None
            for line in lines:
                entry = line.split("#", 1)[0].strip()
                if entry:
                    path = Path(entry).expanduser()
                    visit(path if path.is_absolute() else spec.parent / path)

    for spec in specs:
        visit(Path(spec))
    return list(dict.fromkeys(found))


def names(models: Sequence[str]) -> list[str]:
    """An output name per model: its file's stem, a ``-2``, ``-3``, ... suffix for repeats."""
    taken: set[str] = set()
    out = []
    for model in models:
        stem = Path(model).stem or "model"
        name, k = stem, 1
        while name in taken:
            k += 1
            name = f"{stem}-{k}"
        taken.add(name)
        out.append(name)
    return out
