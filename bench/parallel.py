"""Parallel speed-up: a suite of cheap variants with ``reprokit run -n 2`` vs ``-n 1``.

    .venv/bin/python bench/parallel.py [--repeat 1] [--jobs 2] [--small] [--idle 0]

The suite is bench/cases/bench_matmul.toml: eight variants, each a CPU stage and an XLA stage
(a small matmul, compared), so process start-up and imports dominate, as they do for most
repros. Both runs are timed side by side, interleaved; the ratios of the medians and of the
best times are printed (target on a 2-core machine: -n 2 takes at most 0.60 of the time of
-n 1); the best of N rounds is the figure least hurt by other work on the machine.
``--small``: the first four variants only. On a machine that others load, each round runs the
two sides back to back, in alternating order (ABBA), and prints its own ratio and the load
average: the median of the rounds' ratios is the figure to quote, each pair having shared
much the same load.

Before the rounds, one untimed run starts the warm servers, as a user's previous run left
them (they wait ``REPROKIT_WARM_IDLE`` seconds for the next run). ``--idle 0``: every run
starts and ends its own servers, as before they lingered (their imports are then most of a
run, and the same on both sides).

Each run's CPU is read from /proc/stat (Linux; the whole machine's busy time, so on an idle
machine the run's: the CLI, the servers' forks and every stage): a run's core-seconds over
``--jobs`` cores is the least time ``-n JOBS`` could take, packed perfectly, and that over
the ``-n 1`` time is the lowest ratio this much work allows. Each round also runs one
variant at ``-n 1``, which tells the run's fixed part (what runs before the first stage and
after the last, whatever -n); with it on one core and the rest packed perfectly, Amdahl's
bound is printed too: the least ratio any scheduling of this work could reach.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def busy() -> float | None:
    """Core-seconds the machine has been busy since boot (Linux), None elsewhere: user, nice,
    system, irq and softirq time; not idle, iowait or steal (the hypervisor running another
    guest on our core: none of this run's work)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def suite(
    run_dir: Path, jobs: int, count: int = 8, idle: str | None = None
) -> tuple[float, float | None]:
    """One run of the first ``count`` variants: its wall seconds, and the machine's busy
    core-seconds meanwhile (or None)."""
    command = [
        sys.executable,
        "-m",
        "reprokit",
        "run",
        "bench_matmul",
        "-n",
        str(jobs),
        "--no-cache",
    ]
    command += ["--cases", str(BENCH / "cases"), "--templates", str(BENCH / "templates")]
    command += ["-k", " or ".join(f"[{i}]" for i in range(count))]
    env = dict(os.environ, **({"REPROKIT_WARM_IDLE": idle} if idle is not None else {}))
    cpu, start = busy(), time.perf_counter()
    done = subprocess.run([*command, "-o", str(run_dir)], capture_output=True, text=True, env=env)
    seconds, after = time.perf_counter() - start, busy()
    if done.returncode != 0:
        sys.exit(f"reprokit run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds, None if cpu is None or after is None else after - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="the parallel side's -n")
    parser.add_argument("--small", action="store_true", help="four variants, not eight")
    parser.add_argument("--idle", help="REPROKIT_WARM_IDLE for every run (0: no lingering)")
    args = parser.parse_args()
    count = 4 if args.small else 8
    one: list[float] = []
    many: list[float] = []
    single: list[float] = []  # one variant at -n 1: the run's fixed part and one variant's work
    cpu: list[float] = []  # both sides' runs: the work is the same whatever -n
    with tempfile.TemporaryDirectory(prefix="reprokit-bench-") as tmp:
        first, _ = suite(Path(tmp) / "first", args.jobs, count, args.idle)
        print(f"first run (-n {args.jobs}, starts the warm servers unless running): {first:.1f} s")
        for i in range(args.repeat):
            load = os.getloadavg()[0]
            sides = [(1, one, "one"), (args.jobs, many, "many")]
            for jobs, times, name in sides if i % 2 == 0 else sides[::-1]:
                seconds, used = suite(Path(tmp) / f"{name}{i}", jobs, count, args.idle)
                times.append(seconds)
                cpu += [used] if used is not None else []
            single.append(suite(Path(tmp) / f"single{i}", 1, 1, args.idle)[0])
            print(f"round {i + 1}: -n 1 {one[-1]:.1f} s, -n {args.jobs} {many[-1]:.1f} s, "
                  f"ratio {many[-1] / one[-1]:.2f} (load average {load:.1f})")  # fmt: skip
    for name, pick in (("median", statistics.median), ("best", min)):
        ratio = pick(many) / pick(one)
        print(
            f"{name} of {args.repeat}: -n 1 {pick(one):.1f} s, -n {args.jobs} {pick(many):.1f} s, "
            f"ratio {ratio:.2f} (target <= 0.60)"
        )
    ratios = [m / o for m, o in zip(many, one, strict=True)]
    print(f"median of the rounds' ratios: {statistics.median(ratios):.2f} (target <= 0.60)")
    if cpu:
        bounds(statistics.median(one), statistics.median(single), statistics.median(cpu),
               count, args.jobs)  # fmt: skip


def bounds(one: float, single: float, used: float, count: int, jobs: int) -> None:
    """The least ratio this much work allows. Packed perfectly on ``jobs`` cores, a run's CPU
    takes ``used / jobs``; but the run's fixed part (the interpreter, the CLI's imports, the
    rendering before any stage, the summary after the last) runs before and after the
    variants whatever -n. It is estimated from the -n 1 times: ``single`` (one variant) less
    one variant's share of ``one`` (``count`` variants), taken to be one core's work; the rest
    of the CPU packed perfectly on ``jobs`` cores then gives Amdahl's bound."""
    each = (one - single) / (count - 1)
    fixed = max(0.0, single - each)
    packed = fixed + max(0.0, used - fixed) / jobs
    print(f"a run's CPU: {used:.2f} core-s (median of both sides' runs); -n 1 keeps "
          f"{used / one:.2f} cores busy; that CPU packed perfectly on {jobs} cores: "
          f"ratio {used / jobs / one:.2f}")  # fmt: skip
    print(f"the fixed part: {fixed:.2f} s of -n 1's {one:.2f} s (one variant {single:.2f} s, "
          f"each further {each:.2f} s); with it on one core, the rest packed perfectly: "
          f"ratio {packed / one:.2f} (Amdahl's bound)")  # fmt: skip


if __name__ == "__main__":
    main()
