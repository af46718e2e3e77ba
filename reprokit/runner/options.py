"""How to run: the knobs shared by the CLI, the pytest plugin, the minimizer and the benchmarks."""

from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from reprokit.errors import ReprokitError
from reprokit.runner.processes.procs import GRACE, LOG_CAP

TIMEOUT = 600.0  # seconds a stage may run by default


@dataclass(frozen=True)
class Options:
    """How to run variants; every field has the default `reprokit run` uses."""

    jobs: int = 1
    timeout: float = TIMEOUT
    xla_device: str = "CPU"
    templates: tuple[Path, ...] = ()
    log_cap: int = LOG_CAP
    grace: float = GRACE
    python: str = sys.executable
    dump_hlo: bool = False  # XLA stages save their graphs as HLO text (stages/S/graphs.hlo.*)
    warm: bool = True  # stages forked from a server that imported torch already (warm.py)
    cache: bool = True  # reuse a stage's result when nothing it depends on changed (cache.py)
    executor: str = "local"  # where stages run: "local" (this machine) or "ray" (ray_executor.py)
    ray_address: str | None = None  # the Ray cluster to join; None: ray.init()'s own choice
    shared_dir: Path | None = None  # a folder every Ray node sees: outputs there, not in objects
    stages: tuple[str, ...] = ()  # run only these stages (and what they need); () runs all
    keep_tensors: bool = False  # judged variants keep every recorded operation's tensor
    triage: bool = False  # each captured program's mismatch run again more precisely (triage.py)


def jobs(value: str) -> int:
    """``-n``: a number of parallel slots, or ``auto`` for one per CPU."""
    if value == "auto":
        return os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise ReprokitError(f"-n {value!r} is neither a positive number nor auto", hint="-n 4")
    return int(value)


def default_run_dir() -> Path:
    return Path("runs") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
