"""The results cache and the static stage listing, measured side by side in one run.

    .venv/bin/python bench/cache.py [-n 2] [-k KEYWORDS] [--small] [--repeat 5]

1. Listing a script's stages: ``python repro.py --list-stages`` (a process that imports torch
   before it parses its arguments) vs reading its STAGES literal (runner/dag.py's
   ``read_stages``), for every built-in case's first variant; medians.
2. The built-in library (or the variants ``-k`` selects) run twice with ``reprokit run`` into
   a fresh results cache: the first run, then the same run unchanged (goal: the second takes
   at most 0.05 of the first), and how many stages the second reused.
3. The floor of that re-run: ``python -c "import reprokit.cli"``, timed beside it (interleaved,
   ``--repeat`` times each; best and median): an unchanged re-run should cost little more
   than the interpreter starting and importing the CLI (goal: at most 0.4 s where that
   import takes 0.2 s). The floor ends as the CLI does, its objects frozen (``gc.freeze``,
   cli/app.py): else its teardown's collection (40 ms) would be counted there alone.
   ``--small``: the variants are bench/cases' first four bench_matmul ones (two stages each,
   cheap), not the library, and 1. is left out.
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

BENCH = Path(__file__).resolve().parent
SMALL = [  # four cheap variants: a CPU and an XLA stage each, a small matmul compared
    "bench_matmul",
    "--cases",
    str(BENCH / "cases"),
    "--templates",
    str(BENCH / "templates"),
    "-k",
    "[0] or [1] or [2] or [3]",
]


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


def library(
    folder: Path, jobs: str, selection: list[str], repeat: int
) -> tuple[list[tuple[float, int, int]], list[float]]:
    """The same variants run into one fresh cache, first, then unchanged ``repeat`` times,
    each re-run beside an import of reprokit.cli: (seconds, stages, reused) of each run, and
    the imports' seconds."""
    env = dict(os.environ, REPROKIT_CACHE=str(folder / "cache"))
    rounds, imports = [], []
    for n in range(1 + repeat):
        run_dir = folder / f"run{n}"
        command = [sys.executable, "-m", "reprokit", "run", "-n", jobs, "-o", str(run_dir)]
        start = time.perf_counter()
        subprocess.run([*command, *selection], capture_output=True, env=env)
        seconds = time.perf_counter() - start
        summary = json.loads((run_dir / "summary.json").read_text())
        stages = [s for v in summary["variants"] for s in v["stages"]]
        rounds.append((seconds, len(stages), sum(bool(s.get("reused")) for s in stages)))
        if n:
            start = time.perf_counter()
            floor = "import gc, reprokit.cli; gc.freeze()"  # as the CLI exits
            subprocess.run([sys.executable, "-c", floor], env=env, check=True)
            imports.append(time.perf_counter() - start)
    return rounds, imports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", default="2", help="stages at once")
    parser.add_argument("-k", default=None, help="only the variants matching these keywords")
    parser.add_argument("--small", action="store_true", help="four cheap variants of bench/")
    parser.add_argument("--repeat", type=int, default=5, help="unchanged re-runs, each timed")
    args = parser.parse_args()
    selection = SMALL if args.small else ["-k", args.k] if args.k else []
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        processes, reads = ([], []) if args.small else listing(Path(tmp))  # the library's
        (first, *again), imports = library(Path(tmp), args.n, selection, args.repeat)
    if reads:
        cold, static = statistics.median(processes), statistics.median(reads)
        print(f"listing stages, median of {len(reads)} scripts:")
        print(f"  python repro.py --list-stages  {cold:8.3f} s")
        print(f"  STAGES literal read (ast)      {static:8.4f} s   ratio {static / cold:.4f}")
    what = "four small variants" if args.small else f"-k {args.k}" if args.k else "the library"
    print(f"{what} (-n {args.n}), one fresh cache:")
    print(f"  first run        {first[0]:7.2f} s  {first[1]} stages, {first[2]} reused")
    for name, pick in (("best", min), ("median", statistics.median)):
        second = pick(s for s, _, _ in again)
        print(
            f"  unchanged re-run {second:7.2f} s  ({name} of {len(again)}; {again[0][1]} stages, "
            f"{again[0][2]} reused)  ratio {second / first[0]:.3f} (goal: at most 0.05)"
        )
        floor = pick(imports)
        print(
            f"  import reprokit.cli {floor:4.2f} s  ({name} of {len(imports)}, beside each re-run)"
            f"  re-run - import {second - floor:.2f} s, re-run / import {second / floor:.2f}"
        )


if __name__ == "__main__":
    main()
