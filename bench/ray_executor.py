"""Stages as Ray tasks against stages run here: the library run three ways, side by side.

    .venv/bin/python bench/ray_executor.py [--quick] [-n 2] [-k EXPR] [-o DIR]

The built-in library (``--quick``: the seed case, xser_to_spmd) through the normal run path
(``reprokit.runner.scheduler.run``), results cache off, ``-n 2``:

1. here, warm (the default: stages forked from a server that imported torch),
2. here, cold (a fresh Python per stage: what a Ray worker runs),
3. through Ray, on a private local Ray instance the executor starts (its start timed apart).

Printed: each run's wall seconds, Ray's against each local one (the overhead ratio), the
median per-stage overhead (the stage's wall time as the scheduler saw it, minus the seconds
its process ran: for Ray, the task's scheduling, the files packed and unpacked, the result
carried back), and whether the three runs gave the same outcomes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from reprokit.generate.cases import load_variants
from reprokit.records import RunSummary, Stage, StageResult
from reprokit.runner.keywords import select
from reprokit.runner.options import Options
from reprokit.runner.scheduler import run
from reprokit.runner.stage import Executor, StageJob
from reprokit.runner.warm import make_executor
from reprokit.torch_import import import_module

SEED = "xser_to_spmd"


class Timed:
    """An executor that notes each stage's wall time as the scheduler sees it."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.overheads: list[float] = []
        self.lock = threading.Lock()

    def run_stage(self, job: StageJob, stop: threading.Event) -> StageResult:
        start = time.perf_counter()
        result = self.inner.run_stage(job, stop)
        with self.lock:
            self.overheads.append(time.perf_counter() - start - result.seconds)
        return result

    def list_stages(self, folder: Path, stop: threading.Event) -> tuple[StageResult, list[Stage]]:
        return self.inner.list_stages(folder, stop)

    def close(self) -> None:
        self.inner.close()


@dataclass
class Measured:
    summary: RunSummary
    timed: Timed
    start: float  # seconds the executor took to start (Ray's local instance)
    seconds: float  # the run's wall seconds, once the executor was there

    @property
    def overhead(self) -> float:
        return statistics.median(self.timed.overheads or [0.0])


def one_run(variants: list, run_dir: Path, options: Options) -> Measured:
    """The run with the executor ``options`` names."""
    start = time.perf_counter()
    executor = Timed(make_executor(options))
    began = time.perf_counter()
    try:
        summary = run(variants, run_dir=run_dir, options=options, executor=executor)
        return Measured(summary, executor, began - start, time.perf_counter() - began)
    finally:
        executor.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"the seed case ({SEED}) only")
    parser.add_argument("-n", type=int, default=2, help="stages at once")
    parser.add_argument("-k", help="only the variants matching this (reprokit run -k)")
    parser.add_argument("-o", type=Path, help="where the run folders go (default: temporary)")
    args = parser.parse_args()
    variants = select(load_variants([SEED] if args.quick else []), args.k, lambda v: v.label)
    out = args.o or Path(tempfile.mkdtemp(prefix="reprokit-ray-"))
    import_module("reprokit.comparison.tensors")  # torch for the verdicts: in no run's time
    ways = {
        "here, warm": Options(jobs=args.n, cache=False),
        "here, cold": Options(jobs=args.n, cache=False, warm=False),
        "Ray": Options(jobs=args.n, cache=False, executor="ray"),
    }
    runs = {name: one_run(variants, out / name.replace(", ", "-"), o) for name, o in ways.items()}
    stages = sum(len(v.stages) for v in runs["Ray"].summary.variants)
    print(f"{len(variants)} variants, {stages} stages, -n {args.n}, results cache off")
    print(f"{'':<12}{'start (s)':>10}{'run (s)':>10}{'median stage overhead (s)':>28}")
    for name, m in runs.items():
        print(f"{name:<12}{m.start:>10.1f}{m.seconds:>10.1f}{m.overhead:>28.2f}")
    ray = runs["Ray"]
    for name in ("here, cold", "here, warm"):
        here = runs[name]
        with_start = (ray.start + ray.seconds) / (here.start + here.seconds)
        print(f"Ray / {name}: {ray.seconds / here.seconds:.2f}, {with_start:.2f} with its start")
    outcomes = [{v.label: v.outcome for v in m.summary.variants} for m in runs.values()]
    same = all(found == outcomes[0] for found in outcomes)
    print("same outcomes: " + ("yes" if same else f"NO: {outcomes}"))
    print(f"run folders: {out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
