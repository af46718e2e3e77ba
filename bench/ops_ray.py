"""``reprokit ops`` here against ``reprokit ops --executor ray`` on a local Ray on this machine,
side by side in one run.

    .venv/bin/python bench/ops_ray.py [NAME...] [--dtypes float32,float16] [--edge] [-n 2]
                                      [--rounds 1]

Each sweep is the CLI in a fresh process, into a fresh results cache (every sample judged) and
with ``REPROKIT_WARM_IDLE=0`` (no warm server left by an earlier sweep: each pays its worker
start, as a fresh node does). Two sweeps per way: a tiny one (``abs`` in float32: its wall time
is the fixed part, the worker's start, Ray's start, the listing, the repros) and the one asked
for; the ways alternate (here, Ray, Ray, here, ...) so that a machine getting busier weighs on
both. Printed per way: the wall seconds of each sweep, the samples phase (ops.json's timings),
the samples, the per-sample cost beyond the fixed part; then Ray's ratios against here, and
whether both found the same groups. The machine is whatever this runs on: say how loaded it
was when quoting the figures.
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
from dataclasses import dataclass, field
from pathlib import Path

OPS = ["abs", "exp", "sin", "add", "mul", "sum", "mean", "nn.functional.softplus"]
TINY = ["abs", "--dtypes", "float32"]


@dataclass
class Way:
    name: str
    flags: list[str]
    tiny: list[float] = field(default_factory=list)  # wall seconds of the tiny sweeps
    wall: list[float] = field(default_factory=list)  # ... of the sweeps asked for
    phase: list[float] = field(default_factory=list)  # their samples phase (ops.json)
    samples: int = 0
    tiny_samples: int = 0
    groups: list[str] = field(default_factory=list)


def sweep(args: list[str], scratch: Path) -> tuple[float, dict]:
    """One ``reprokit ops`` in a fresh process and cache: its wall seconds and ops.json."""
    folder = Path(tempfile.mkdtemp(dir=scratch))
    env = dict(os.environ, REPROKIT_CACHE=str(folder / "cache"), REPROKIT_WARM_IDLE="0")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", "ops", *args]
    command += ["-o", str(folder / "out")]
    begun = time.monotonic()
    subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    seconds = time.monotonic() - begun
    return seconds, json.loads((folder / "out" / "ops.json").read_text("utf-8"))


def measure(way: Way, asked: list[str], scratch: Path) -> None:
    seconds, data = sweep([*TINY, *way.flags], scratch)
    way.tiny.append(seconds)
    way.tiny_samples = len(data["records"])
    seconds, data = sweep([*asked, *way.flags], scratch)
    way.wall.append(seconds)
    way.phase.append(data["timings"].get("samples", 0.0))
    way.samples = len(data["records"])
    way.groups = sorted(g["id"] for g in data["groups"])
    print(f"  {way.name}: tiny {way.tiny[-1]:.1f} s, sweep {seconds:.1f} s", flush=True)


def per_sample(way: Way) -> float:
    """Seconds a sample beyond the fixed part (the tiny sweep's wall time), medians."""
    extra = statistics.median(way.wall) - statistics.median(way.tiny)
    return extra / max(1, way.samples - way.tiny_samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=OPS)
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("-n", default="2")
    parser.add_argument("--edge", action="store_true", help="the edge samples too")
    parser.add_argument("--rounds", type=int, default=1, help="each way this many times")
    opts = parser.parse_args()
    asked = [*opts.names, "--dtypes", opts.dtypes, *(["--edge"] if opts.edge else [])]
    here = Way("here", ["-n", opts.n])
    ray = Way("ray", ["-n", opts.n, "--executor", "ray"])
    with tempfile.TemporaryDirectory(prefix="bench-ops-ray-") as scratch:
        for i in range(opts.rounds):
            for way in (here, ray) if i % 2 == 0 else (ray, here):
                measure(way, asked, Path(scratch))
    for way in (here, ray):
        print(
            f"{way.name}: fixed part (tiny sweep, {way.tiny_samples} samples) "
            f"{statistics.median(way.tiny):.1f} s; sweep {statistics.median(way.wall):.1f} s "
            f"(samples phase {statistics.median(way.phase):.1f} s, {way.samples:,} samples); "
            f"{per_sample(way) * 1000:.1f} ms a sample beyond the fixed part"
        )
    ratio = statistics.median(ray.wall) / statistics.median(here.wall)
    phase = statistics.median(ray.phase) / statistics.median(here.phase)
    fixed = statistics.median(ray.tiny) - statistics.median(here.tiny)
    print(
        f"ray / here: sweep {ratio:.2f}, samples phase {phase:.2f}, per sample "
        f"{per_sample(ray) / per_sample(here):.2f}; Ray's fixed part {fixed:+.1f} s"
    )
    print(f"same groups: {here.groups == ray.groups} ({len(here.groups)})")


if __name__ == "__main__":
    main()
