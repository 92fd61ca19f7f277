"""Guards tested one at a time: which guard of a multi-guard rule is needed on its own.

    python bench/guards.py [--tries 5000] [--seed 0]

For every shipped rule with two or more guards, each guard is dropped alone (the others kept)
and a seeded search (:func:`relsat.rewrite.check.guards_alone`, ``--tries`` draws) looks for shapes
where the rule's sides differ. A guard with a counterexample is needed on its own; one without
is redundant given the others (and the engine's shape and type checks at firing), though not
necessarily removable together with another redundant one: ``tests/test_rule_soundness.py``
shows every guarded rule is wrong with all its guards dropped. Prints a Markdown table (one row
per guard) and appends it to ``bench/results/guards.csv``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import append_csv, markdown

from relsat.rewrite.check import guards_alone
from relsat.rewrite.rulefile import RULES_DIR, load_rules


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=5000, help="draws per dropped guard")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rules = [r for r in (*load_rules(), *load_rules(RULES_DIR / "extra")) if len(r.guards) > 1]
    headers = ["rule", "guard dropped", "verdict", "counterexample", "s"]
    rows = []
    for rule in rules:
        start = time.perf_counter()
        found = guards_alone(rule, tries=args.tries, seed=args.seed)
        seconds = (time.perf_counter() - start) / len(found)
        for guard, inst in found.items():
            shapes = ", ".join(f"?{n} {list(s)}" for n, s in inst.shapes.items()) if inst else ""
            verdict = "needed" if inst else "redundant"
            rows.append([rule.name, str(guard), verdict, shapes, round(seconds, 1)])
            print(" | ".join(map(str, rows[-1])), flush=True)
    print()
    print(markdown(headers, rows))
    needed = sum(r[2] == "needed" for r in rows)
    print(
        f"\n{len(rules)} rules with several guards, {len(rows)} guards: {needed} needed alone, "
        f"{len(rows) - needed} redundant alone ({args.tries} draws each)"
    )
    append_csv("guards", ["tries", "seed", *headers], [[args.tries, args.seed, *r] for r in rows])


if __name__ == "__main__":
    main()
