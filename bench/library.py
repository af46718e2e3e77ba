"""Run the whole built-in case library and print its outcome table (a Markdown table).

One row per variant: case, variant, outcome, expected, whether it passed, the worst tensor
(largest max abs difference) and that difference, and the seconds it took. ``--summary``
prints the table of an earlier run instead of running again.

    python bench/library.py [-n 2] [-o RUN_DIR]
    python bench/library.py --summary RUN_DIR/summary.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def table(summary: dict) -> str:
    rows = [
        "| case | variant | outcome | expected | passed | worst tensor | max abs | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for v in summary["variants"]:
        compared = [c for c in v["comparisons"] if c["total"]]
        worst = max(compared, key=lambda c: float(c["max_abs"]), default=None)
        label = v["label"].removeprefix(v["case"]) or "-"
        where = f"{worst['target']}: {worst['tensor']}" if worst else "-"
        diff = f"{float(worst['max_abs']):.3g}" if worst else "-"
        rows.append(
            f"| {v['case']} | {label} | {v['outcome']} | {v['expected']} | "
            f"{'yes' if v['passed'] else 'NO'} | {where} | {diff} | {v['seconds']:.0f} |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", default="2", help="stages at once (reprokit run -n)")
    parser.add_argument("-o", type=Path, help="the run folder (default: a temporary one)")
    parser.add_argument("--summary", type=Path, help="print the table of this summary.json")
    args = parser.parse_args()
    if args.summary:
        print(table(json.loads(args.summary.read_text())))
        return 0
    out = args.o or Path(tempfile.mkdtemp(prefix="reprokit-library-"))
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "reprokit", "run", "-n", args.n, "-o", str(out), "--no-cache"]
    code = subprocess.run(cmd, check=False).returncode
    print(f"\n{time.perf_counter() - start:.0f} s, exit {code}, run folder {out}\n")
    print(table(json.loads((out / "summary.json").read_text())))
    return code


if __name__ == "__main__":
    sys.exit(main())
