"""A bisection over torch_xla releases, measured beside running every release.

    .venv/bin/python bench/bisect_releases.py [--case xm_save_vs_xser] [--releases 2.5..2.9] [-n 2]

Into one fresh results cache and environment cache (REPROKIT_CACHE in a temporary folder;
uv's own cache is left as it is, so environments are built from wheels already downloaded
where there are some; bench/envs.py measures a cold build):

1. each release's environment built (seconds each);
2. ``reprokit run CASE --env R=... --no-cache`` once per release of the span: what finding
   the release by running them all costs;
3. ``reprokit bisect CASE --releases SPAN``: the wall time, the releases it ran, and the
   release it names. Its results cache starts empty (the runs of 2. kept nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reprokit.environment.releases import release_env, releases
from reprokit.environment.uv import env_python


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    return time.perf_counter() - start, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="xm_save_vs_xser")
    parser.add_argument("--releases", default="2.5..2.9")
    parser.add_argument("-n", default="2")
    args = parser.parse_args()
    span = releases(args.releases)
    with tempfile.TemporaryDirectory(prefix="reprokit-bench-bisect-") as folder:
        os.environ["REPROKIT_CACHE"] = str(Path(folder) / "cache")
        for release in span:
            start = time.perf_counter()
            env_python(release_env(release))
            print(f"environment {release}: built in {time.perf_counter() - start:.0f} s")
        reprokit = [sys.executable, "-m", "reprokit"]
        every = 0.0
        for release in span:
            flag = f"{release}={' '.join(release_env(release).requirements)}"
            run = [*reprokit, "run", args.case, "--env", flag, "--no-cache", "-n", args.n]
            taken, done = timed([*run, "-o", str(Path(folder) / f"all-{release}")])
            every += taken
            print(f"  run on {release}: {taken:.0f} s, {done.stdout.strip().splitlines()[-1]}")
        print(f"every release: {len(span)} runs, {every:.0f} s")
        out = Path(folder) / "bisect"
        command = [*reprokit, "bisect", args.case, "--releases", args.releases, "-n", args.n]
        seconds, done = timed([*command, "-o", str(out)])
        if done.returncode not in (0, 1):
            sys.exit(f"bisect failed ({done.returncode}):\n{done.stderr[-2000:]}")
        found = json.loads((out / "bisect.json").read_text())
        tried = ", ".join(found["tried"])
        print(f"bisect: {len(found['tried'])} runs ({tried}), {seconds:.0f} s; "
              f"changed in {found['changed']} (from {found['before']})")  # fmt: skip
        print(f"bisect / every release: {seconds / every:.2f}")


if __name__ == "__main__":
    main()
