"""``reprokit ops`` measured: a sweep into a fresh results cache, then the same sweep unchanged.

    .venv/bin/python bench/ops.py [--all] [NAME...] [--dtypes float32,bfloat16,float16]
                                  [--grad] [--inplace] [--no-edge] [-n 2] [-o DIR] [--cache DIR]

``--cache DIR`` keeps the results cache (a later ``--inplace`` or ``--grad`` sweep into it
then runs only what is new). Prints the first sweep's time and its phases (samples judged,
repros run alone), the re-run's (goal for ``--all --edge``: at most 20 minutes, 45 with
``--grad``; the re-run at most 2 minutes), and the coverage: OpInfos swept of torch's, samples
by verdict, skips by reason, groups by kind and how many reproduce alone. The machine
is whatever this runs on: say how loaded it was when quoting the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def sweep(args: list[str], cache: Path) -> tuple[float, int]:
    env = dict(os.environ, REPROKIT_CACHE=str(cache), PJRT_DEVICE="CPU")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", "ops", *args]
    begun = time.monotonic()
    done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, check=False)
    return time.monotonic() - begun, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--dtypes", default="float32,bfloat16,float16")
    parser.add_argument("--grad", action="store_true")
    parser.add_argument("--no-edge", action="store_true")
    parser.add_argument("-n", default="2")
    parser.add_argument("-o", type=Path, default=None)
    parser.add_argument("--inplace", action="store_true")
    parser.add_argument("--cache", type=Path, default=None, help="kept (default: a fresh one)")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ops-") as scratch:
        out = opts.o or Path(scratch) / "out"
        args = [*opts.names, "--dtypes", opts.dtypes, "-n", opts.n, "-o", str(out)]
        args += ["--all"] if opts.all else []
        args += ["--grad"] if opts.grad else []
        args += ["--inplace"] if opts.inplace else []
        args += [] if opts.no_edge or opts.all else ["--edge"]
        cache = opts.cache or Path(scratch) / "cache"
        first, code = sweep(args, cache)
        first_timings = json.loads((out / "ops.json").read_text()).get("timings")
        again, code_again = sweep(args, cache)
        data = json.loads((out / "ops.json").read_text())
    records = data["records"]
    ops = {(o["op"], o["variant"]) for o in data["ops"]}
    swept = {(r["op"], r["variant"]) for r in records}
    print(
        f"first sweep: {first:,.0f} s (exit {code}); unchanged re-run: {again:,.1f} s "
        f"(exit {code_again}, {data['cached']}/{data['tasks']} tasks from the cache)"
    )
    print(f"samples: {len(records):,}, {first / max(1, len(records)):.3f} s a sample overall")
    timings = first_timings or {}
    if "samples" in timings:
        per = timings["samples"] / max(1, len(records))
        print(
            f"phases of the first sweep: samples judged in {timings['samples']:,.0f} s "
            f"({per:.4f} s a sample), repros run alone in {timings.get('alone', 0):,.0f} s"
        )
    print(f"OpInfos: {len(swept)} swept of {len(ops)} listed")
    print("verdicts:", dict(Counter(r["verdict"] for r in records).most_common()))
    passes = Counter(
        "in-place" if r.get("inplace") else "backward" if r["grad"] else "forward" for r in records
    )
    print("samples by pass:", dict(passes.most_common()))
    print("skips by reason:", data["skips"])
    groups = data["groups"]
    print("groups by kind:", dict(Counter(g["kind"] for g in groups).most_common()))
    known = sum(1 for g in groups if g.get("known"))
    print(f"groups matching a report of docs/examples (or a public issue): {known}")
    alone = sum(1 for g in groups if g["reproduces_alone"])
    print(f"groups: {len(groups)}, {alone} reproduce alone")


if __name__ == "__main__":
    main()
