"""Fresh tensor and node names for the ONNX graphs relsat writes.

>>> used = {"x", "x_1"}
>>> fresh_name("x", used), fresh_name("y", used), sorted(used)
('x_2', 'y', ['x', 'x_1', 'x_2', 'y'])
"""

from __future__ import annotations

__all__ = ["fresh_name"]


def fresh_name(base: str, used: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``, … : the first not in ``used``, which it joins."""
    name, k = base, 1
    while name in used:
        name, k = f"{base}_{k}", k + 1
    used.add(name)
    return name
