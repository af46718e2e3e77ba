"""Since when each report of docs/examples shows: its repro bisected over torch_xla releases.

    .venv/bin/python bench/examples_since.py [--releases 2.8..2.9] [-k SUBSTRING ...] [-n 1]

Each report's repro is taken as bench/examples.py takes it (the first ```python block of its
issue part), written as ``<report>.py`` into one folder, and ``reprokit bisect`` runs them all
(each alone on each release; the results cache keeps what ran, so a second run is quick).
Prints one row per report: its ``since``, and the one line why on the last release.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from examples import EXAMPLES, ROOT, repro_of


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", default="2.8..2.9")
    parser.add_argument("-k", action="append", default=[], help="only names holding this")
    parser.add_argument("-n", default="1", help="repros at once")
    parser.add_argument("--timeout", default="300", help="seconds per repro and release")
    args = parser.parse_args(argv)
    reports = [
        r for r in sorted(EXAMPLES.glob("*.md")) if not args.k or any(k in r.stem for k in args.k)
    ]
    with tempfile.TemporaryDirectory(prefix="since-") as folder:
        scripts = []
        for report in reports:
            try:
                text = repro_of(report)
            except ValueError as exc:
                print(f"skip {exc}", file=sys.stderr)
                continue
            scripts.append(Path(folder, f"{report.stem}.py"))
            scripts[-1].write_text(text, encoding="utf-8")
        out = Path(folder, "out")
        command = [str(ROOT / ".venv" / "bin" / "reprokit"), "bisect", *map(str, scripts),
                   "--releases", args.releases, "-n", args.n, "--timeout", args.timeout,
                   "-o", str(out)]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
        found = json.loads((out / "bisect.json").read_text())["repros"]
    print("| report | since | last release |\n| --- | --- | --- |")
    for name, said in found.items():
        last = list(said["tried"].values())[-1]
        print(f"| {Path(name).stem} | {said['since']} | {last['why'][:80]} |")
    print(f"\n{len(found)} repros in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
