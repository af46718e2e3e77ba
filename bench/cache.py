"""The results cache and the static stage listing, measured side by side in one run.

    .venv/bin/python bench/cache.py [-n 2] [-k KEYWORDS]

1. Listing a script's stages: ``python repro.py --list-stages`` (a process that imports torch
   before it parses its arguments) vs reading its STAGES literal (runner/dag.py's
   ``read_stages``), for every built-in case's first variant; medians.
2. The built-in library (or the variants ``-k`` selects) run twice with ``reprokit run`` into
   a fresh results cache: the first run, then the same run unchanged (goal: the second takes
   at most 0.05 of the first), and how many stages the second reused.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reprokit.generate.render import render
from reprokit.generate.variants import load_variants
from reprokit.runner.dag import read_stages


def listing(folder: Path) -> tuple[list[float], list[float]]:
    """Seconds to list each built-in case's stages: by a process, and by reading the source."""
    processes, reads = [], []
    seen = set()
    for variant in load_variants([]):
        if variant.case.name in seen:
            continue
        seen.add(variant.case.name)
        script = folder / f"{variant.case.name}.py"
        script.write_text(render(variant))
        start = time.perf_counter()
        subprocess.run([sys.executable, str(script), "--list-stages"], capture_output=True)
        processes.append(time.perf_counter() - start)
        start = time.perf_counter()
        found = read_stages(script.read_text())
        reads.append(time.perf_counter() - start)
        if found is None:
            print(f"  {variant.case.name}: no STAGES literal, --list-stages needed")
    return processes, reads


def library(folder: Path, jobs: str, keyword: str | None) -> list[tuple[float, int, int]]:
    """Two runs of the same variants into one fresh cache: (seconds, stages, reused) each."""
    env = dict(os.environ, REPROKIT_CACHE=str(folder / "cache"))
    rounds = []
    for n in range(2):
        run_dir = folder / f"run{n}"
        command = [sys.executable, "-m", "reprokit", "run", "-n", jobs, "-o", str(run_dir)]
        command += ["-k", keyword] if keyword else []
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, env=env)
        seconds = time.perf_counter() - start
        summary = json.loads((run_dir / "summary.json").read_text())
        stages = [s for v in summary["variants"] for s in v["stages"]]
        rounds.append((seconds, len(stages), sum(bool(s.get("reused")) for s in stages)))
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", default="2", help="stages at once")
    parser.add_argument("-k", default=None, help="only the variants matching these keywords")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        processes, reads = listing(Path(tmp))
        first, second = library(Path(tmp), args.n, args.k)
    cold, static = statistics.median(processes), statistics.median(reads)
    print(f"listing stages, median of {len(reads)} scripts:")
    print(f"  python repro.py --list-stages  {cold:8.3f} s")
    print(f"  STAGES literal read (ast)      {static:8.4f} s   ratio {static / cold:.4f}")
    print(f"library (-n {args.n}{f', -k {args.k}' if args.k else ''}), one fresh cache:")
    print(f"  first run        {first[0]:7.1f} s  {first[1]} stages, {first[2]} reused")
    print(f"  unchanged re-run {second[0]:7.1f} s  {second[1]} stages, {second[2]} reused")
    print(f"  ratio {second[0] / first[0]:.3f} (goal: at most 0.05)")


if __name__ == "__main__":
    main()
