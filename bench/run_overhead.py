"""Harness overhead: ``reprokit run`` of one variant vs its stages run bare, one after the other.

    .venv/bin/python bench/run_overhead.py [--case xser_to_spmd] [--repeat 3]

"Bare" is what a maintainer would type: ``python repro.py --stage S --workdir W`` for each
stage in DAG order, nothing else (no listing, no comparison, no logs). ``reprokit run`` does
all of that too: CLI start-up, rendering, ``--list-stages``, a process per stage with capped
logs, the comparison and summary.json. Both are timed side by side, interleaved, ``--repeat``
times; the medians, the best times and their ratios are printed (target: at most 1.10 with
``-n 1``; with ``-n 2``, independent stages run side by side and the ratio may drop below 1).
``run()`` is the library call with one slot, without the CLI's own start-up and imports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reprokit.generate.render import render
from reprokit.generate.variants import load_variants
from reprokit.records.folder import SCRIPT


def bare(script: Path, stages: list[str], workdir: Path) -> float:
    start = time.perf_counter()
    for stage in stages:
        command = [sys.executable, str(script), "--stage", stage, "--workdir", str(workdir)]
        subprocess.run([*command, "--xla-device", "CPU"], check=True, capture_output=True)
    return time.perf_counter() - start


def harness(case: str, run_dir: Path, jobs: int) -> float:
    start = time.perf_counter()
    command = [sys.executable, "-m", "reprokit", "run", case, "-o", str(run_dir), "-n", str(jobs)]
    command.append("--no-cache")  # every round runs its stages
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"reprokit run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds


_API = """
import sys
from pathlib import Path
from reprokit.generate.variants import load_variants
from reprokit.runner.options import Options
from reprokit.runner.scheduler import run
options = Options(jobs=1, cache=False)
summary = run(load_variants([sys.argv[1]]), run_dir=Path(sys.argv[2]), options=options)
sys.exit(0 if summary.count(False) == 0 else 1)
"""


def library(case: str, run_dir: Path) -> float:
    """reprokit.run() without the CLI: what the harness costs, apart from CLI imports."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _API, case, str(run_dir)], capture_output=True)
    if done.returncode != 0:
        sys.exit(f"run() failed ({done.returncode}):\n{done.stderr.decode()}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="xser_to_spmd")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    (variant,) = load_variants([args.case])
    with tempfile.TemporaryDirectory(prefix="reprokit-bench-") as tmp:
        script = Path(tmp) / SCRIPT
        script.write_text(render(variant))
        listing = subprocess.run(
            [sys.executable, str(script), "--list-stages"], capture_output=True, check=True
        )
        stages = [s["name"] for s in json.loads(listing.stdout)]
        times: dict[str, list[float]] = {"bare": [], "run -n 1": [], "run -n 2": [], "run()": []}
        for i in range(args.repeat):  # interleaved, so that a busy spell hits all three alike
            times["bare"].append(bare(script, stages, Path(tmp) / f"bare{i}"))
            times["run -n 1"].append(harness(args.case, Path(tmp) / f"one{i}", 1))
            times["run -n 2"].append(harness(args.case, Path(tmp) / f"two{i}", 2))
            times["run()"].append(library(args.case, Path(tmp) / f"api{i}"))
            print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()))
    median = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    print(f"\n{args.case}: stages {', '.join(stages)}; {args.repeat} rounds")
    print(f"  {'':<10} {'median':>8} {'ratio':>6} {'best':>8} {'ratio':>6}")
    for name in times:
        print(
            f"  {name:<10} {median[name]:7.1f}s {median[name] / median['bare']:6.2f} "
            f"{best[name]:7.1f}s {best[name] / best['bare']:6.2f}"
        )
    print("target: run -n 1 / bare <= 1.10 (best of N is the figure least hurt by a busy machine)")


if __name__ == "__main__":
    main()
