"""The run folder of a captured program, every operation recorded: reduced once judged (the
default) vs every tensor kept (--keep-tensors) vs outputs only, side by side.

    .venv/bin/python bench/run_folder.py [--layers 6] [--batch 2] [--seq 128]
    .venv/bin/python bench/run_folder.py --model torchvision:maxvit_t --shape 1,3,224,224

Captures the 6-layer nn.TransformerEncoder of bench/capture.py, writes two cases of it
(``nodes = "all"`` and ``nodes = "outputs"``) and runs them with ``reprokit run`` into one
fresh results cache: ``all`` reduced, ``all`` again with --keep-tensors (its stages reused
from the cache: what the run folder held before tensors were reduced), ``outputs``. Prints
each run folder's size, with every regular file (scripts, the program, every stage's files)
and with its own bytes only (the program is a hard link to the case's file, as the run folder
lays it out since round 3: no second copy), the ratio of each to the kept folder with every
file (today's folder before tensors were reduced and the program linked; goal: at most 0.1),
and that the verdicts and first divergences agree. The peak memory and time of each stage are
bench/capture.py's.
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

from capture import captured, folder_size, model_arguments  # bench/capture.py, beside it


def run(case: Path, run_dir: Path, env: dict[str, str], *extra: str) -> tuple[float, dict]:
    """``reprokit run CASE``: its seconds, and what its summary says of the variant."""
    command = [sys.executable, "-m", "reprokit", "run", str(case), "-o", str(run_dir), *extra]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"reprokit run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    (variant,) = json.loads((run_dir / "summary.json").read_text())["variants"]
    return seconds, variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model_arguments(parser, batch=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reprokit-bench-") as tmp:
        env = {**os.environ, "REPROKIT_CACHE": str(Path(tmp) / "cache")}
        case = captured(args, Path(tmp))
        what = (
            f"{args.model} (inputs {args.shape or 'of its default shape'})"
            if args.model
            else f"6-layer encoder ({args.layers} layers, batch {args.batch}, seq {args.seq})"
        )
        outputs = case.with_name("model_outputs.toml")  # the same case, outputs only
        outputs.write_text(case.read_text().replace("[params]", '[params]\nnodes = "outputs"', 1))
        rows = {
            "all, reduced": run(case, Path(tmp) / "reduced", env),
            "all, kept": run(case, Path(tmp) / "kept", env, "--keep-tensors"),
            "outputs only": run(outputs, Path(tmp) / "outputs", env),
        }
        folders = dict(zip(rows, ("reduced", "kept", "outputs"), strict=True))
        every = {name: folder_size(Path(tmp) / f) for name, f in folders.items()}
        own = {name: folder_size(Path(tmp) / f, links=False) for name, f in folders.items()}
        today = every["all, kept"]
        print(f"{what}:")
        print(f"  {'':<14}{'every file':>12}{'ratio':>7}{'own bytes':>12}{'ratio':>7}")
        for name, (seconds, variant) in rows.items():
            first = variant["first_divergence"]
            print(f"  {name:<14}{every[name] / 2**20:8.1f} MiB{every[name] / today:7.3f}"
                  f"{own[name] / 2**20:8.1f} MiB{own[name] / today:7.3f}  {seconds:6.1f} s  "
                  f"{variant['outcome']}, first divergence {first}")  # fmt: skip
        same = [rows[n][1][k] for n in ("all, reduced", "all, kept") for k in
                ("outcome", "first_divergence", "comparisons")]  # fmt: skip
        print(f"  reduced and kept agree (outcome, first divergence, comparisons): "
              f"{same[:3] == same[3:]}")  # fmt: skip


if __name__ == "__main__":
    main()
