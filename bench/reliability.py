"""Reliability and safety, with figures: hostile inputs, faults, interrupts, untrusted artifacts,
secrets and load, each measured in this run (issue 7).

    .venv/bin/python bench/reliability.py [--quick] [--seed N] [--only SECTION]

A bug-report kit runs strangers' case files, checkpoints and crashing accelerator code: it must
keep working, lose nothing and leak nothing. Each check below returns figures (name, value,
target, ok); the table at the end says which hold. tests/runner/test_reliability.py runs the same
checks with small sizes (``--quick`` is close to it). The checks live with the tests, in
tests/checks/reliability_*.py (pytest's ``pythonpath`` finds them; this script adds the folder).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "checks"))
from reliability_common import Figure, table
from reliability_hostile import hostile_render, hostile_run
from reliability_runs import EXPECTED, faults, interrupts, load, test_points
from reliability_safety import artifacts, secrets

FULL = {
    "render": 3000,
    "run": 40,
    "flood_mb": 1024,
    "interrupts": 100,
    "garbage": 500,
    "load": (20, 200),
}
MODES = [m for m in EXPECTED if m != "rmworkdir"]  # apart: it may break the whole run
QUICK = {"render": 300, "run": 6, "flood_mb": 64, "interrupts": 4, "garbage": 20, "load": (20, 200)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, as in the tests")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--only", metavar="SECTION", help="run one section, e.g. interrupts")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    rng = random.Random(args.seed)
    start = time.monotonic()
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        root = Path(tmp)
        steps = [
            ("hostile case files", lambda: hostile_render(root / "render", sizes["render"])),
            ("hostile runs", lambda: hostile_run(root / "run", sizes["run"])),
            ("faults", lambda: faults(root / "faults", megabytes=sizes["flood_mb"], modes=MODES)),
            ("rmworkdir", lambda: faults(root / "rm", megabytes=1, modes=["rmworkdir", "ok"])),
            (
                "interrupts",
                lambda: interrupts(root / "interrupts", sizes["interrupts"], rng),
            ),
            ("test points", lambda: test_points(root / "points")),
            ("untrusted artifacts", lambda: artifacts(root / "artifacts", sizes["garbage"])),
            ("secrets", lambda: secrets(root / "secrets")),
            ("load", lambda: load(root / "load", sizes["load"])),
        ]
        for title, step in steps:
            if args.only and args.only != title:
                continue
            began = time.monotonic()
            found = step()
            print(f"{title}: {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
            figures += found
    print(table(figures))
    print(f"\nwall time {time.monotonic() - start:.0f} s")
    sys.exit(0 if all(f.ok for f in figures) else 1)


if __name__ == "__main__":
    main()
