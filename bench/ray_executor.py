"""Stages as Ray tasks against stages run here: the library run three ways, side by side.

    .venv/bin/python bench/ray_executor.py [--quick] [-n 2] [-k EXPR] [-o DIR]

The built-in library (``--quick``: the seed case, xser_to_spmd) through the normal run path
(``reprokit.runner.scheduler.run``), results cache off, ``-n 2``, three ways:

1. here, warm (the default: stages forked from a server that imported torch),
2. here, cold (a fresh Python per stage: what a Ray worker runs),
3. through Ray, on a private local Ray instance the executor starts (its start timed apart).

Variant by variant, the three ways in turn (the order rotating), each way with one executor
for the whole bench: a machine that gets busier or quieter meanwhile weighs on all three alike.

Printed, per way: the wall seconds summed over the variants; the seconds the stages' processes
ran, summed (where Ray slows the stages themselves down, it shows here); the median per-stage
overhead (the stage's wall time as the scheduler saw it, minus the seconds its process ran:
for Ray, the task's scheduling, the files packed and unpacked, the result carried back); then
Ray's ratios against the two local ways, and whether all three gave the same outcomes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from reprokit.generate.variants import Variant, load_variants
from reprokit.infra.torch_import import import_module
from reprokit.records import Stage, StageResult
from reprokit.runner.keywords import select
from reprokit.runner.options import Options
from reprokit.runner.processes.executors import make_executor
from reprokit.runner.processes.stage import Executor, StageJob
from reprokit.runner.scheduler import run

SEED = "xser_to_spmd"


class Timed:
    """An executor that notes each stage's wall time as the scheduler sees it."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities  # what the scheduler leaves to the inner one
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
class Way:
    """One way to run, its executor, and what it measured so far."""

    name: str
    options: Options
    executor: Timed | None = None
    start: float = 0.0  # seconds the executor took to start (Ray's local instance)
    seconds: float = 0.0  # wall seconds of its runs
    ran: float = 0.0  # seconds its stages' processes ran
    outcomes: dict[str, str] = field(default_factory=dict)

    def open(self) -> None:
        began = time.perf_counter()
        self.executor = Timed(make_executor(self.options))
        self.start = time.perf_counter() - began

    def run(self, variant: Variant, out: Path) -> None:
        assert self.executor is not None
        folder = out / self.name.replace(", ", "-") / variant.label
        began = time.perf_counter()
        summary = run([variant], run_dir=folder, options=self.options, executor=self.executor)
        self.seconds += time.perf_counter() - began
        for result in summary.variants:
            self.outcomes[result.label] = result.outcome
            self.ran += sum(stage.seconds for stage in result.stages)

    @property
    def overhead(self) -> float:
        return statistics.median(self.executor.overheads if self.executor else [0.0])


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
    ways = [
        Way("here, warm", Options(jobs=args.n, cache=False)),
        Way("here, cold", Options(jobs=args.n, cache=False, warm=False)),
        Way("Ray", Options(jobs=args.n, cache=False, executor="ray")),
    ]
    try:
        for way in ways:
            way.open()
        for index, variant in enumerate(variants):
            for way in ways[index % 3 :] + ways[: index % 3]:
                way.run(variant, out)
    finally:
        for way in ways:
            if way.executor is not None:
                way.executor.close()
    same = report(ways, len(variants), args.n)
    print(f"run folders: {out}")
    return 0 if same else 1


def report(ways: list[Way], variants: int, jobs: int) -> bool:
    """The table; whether the three ways gave the same outcomes."""
    print(f"{variants} variants, -n {jobs}, results cache off, the three ways in turn")
    print(f"{'':<12}{'start (s)':>10}{'wall (s)':>10}{'stages ran (s)':>16}{'overhead (s)':>14}")
    for w in ways:
        print(f"{w.name:<12}{w.start:>10.1f}{w.seconds:>10.1f}{w.ran:>16.1f}{w.overhead:>14.2f}")
    ray = ways[2]
    for here in (ways[1], ways[0]):
        with_start = (ray.start + ray.seconds) / (here.start + here.seconds)
        print(
            f"Ray / {here.name}: {ray.seconds / here.seconds:.2f}, {with_start:.2f} with its start"
        )
    same = all(way.outcomes == ways[0].outcomes for way in ways)
    print("same outcomes: " + ("yes" if same else f"NO: {[w.outcomes for w in ways]}"))
    return same


if __name__ == "__main__":
    sys.exit(main())
