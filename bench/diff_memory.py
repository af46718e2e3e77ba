"""Peak memory and wall time of ``reprokit diff`` against the naive way, on two big checkpoints.

Writes two torch.save checkpoints of SIZE (default 1 GiB) in 64 float32 tensors, the second
with one element changed, then runs, each as a fresh subprocess measured with ``os.wait4``:

- ``baseline``: ``import torch, reprokit.cli`` and nothing else (what every run pays first);
- ``naive``: torch.load both whole, then per tensor: mismatched count and max abs difference;
- ``reprokit diff A B --json`` (one tensor at a time, read on demand).

It prints each peak RSS, its ratio to one checkpoint's size, raw and above the baseline (the
issue's target: reprokit diff at most 0.30 of one checkpoint), and the wall times (target:
reprokit diff no slower than naive). The files go in a temporary folder, removed at the end.

    python bench/diff_memory.py [--gib 1.0] [--tensors 64] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WRITE = """
import sys, torch
folder, gib, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
numel = int(gib * 2**30) // 4 // count
generator = torch.Generator().manual_seed(0)
state = {f"layer{i}.weight": torch.randn(numel, generator=generator) for i in range(count)}
torch.save(state, f"{folder}/a.pt")
state[f"layer{count // 2}.weight"][numel // 3] += 1.0
torch.save(state, f"{folder}/b.pt")
"""
NAIVE = """
import sys, torch
a = torch.load(sys.argv[1], weights_only=True)
b = torch.load(sys.argv[2], weights_only=True)
for name in a:
    close = torch.isclose(b[name], a[name])
    print(name, int((~close).sum()), float((b[name] - a[name]).abs().max()))
"""
BASELINE = "import torch, reprokit.cli"
REPROKIT = [sys.executable, "-c", "from reprokit.cli import main; main()"]


def write_checkpoints(folder: Path, gib: float, count: int) -> tuple[Path, Path, int]:
    """Two checkpoints of ``count`` equal float32 tensors but for one element of one tensor.

    Written by a child: this process stays small (no torch), because a child's ru_maxrss
    counts what it shared with its parent when forked, before its exec.
    """
    write = [sys.executable, "-c", WRITE, str(folder), str(gib), str(count)]
    subprocess.run(write, check=True)
    a, b = folder / "a.pt", folder / "b.pt"
    return a, b, a.stat().st_size


def measure(cmd: list[str]) -> tuple[int, float, int]:
    """Peak RSS (bytes), wall seconds and exit code of one child, its output discarded."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, not all children's
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):
        sys.exit(f"{cmd} failed with {child.returncode}: {child.stderr.read().decode()[-2000:]}")
    child.stderr.close()
    return usage.ru_maxrss * 1024, seconds, child.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of one checkpoint, GiB")
    parser.add_argument("--tensors", type=int, default=64, help="tensors per checkpoint")
    parser.add_argument("--dir", type=Path, default=None, help="where the checkpoints go")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        a, b, size = write_checkpoints(Path(tmp), args.gib, args.tensors)
        print(f"two torch.save checkpoints of {size / 2**30:.2f} GiB, {args.tensors} tensors")
        base, _, _ = measure([sys.executable, "-c", BASELINE])
        naive, naive_s, _ = measure([sys.executable, "-c", NAIVE, str(a), str(b)])
        diff, diff_s, code = measure([*REPROKIT, "diff", str(a), str(b), "--json"])
    print(f"baseline (import torch, reprokit.cli): peak RSS {base / 2**20:,.0f} MiB")
    for name, peak, seconds in (("naive", naive, naive_s), ("reprokit diff", diff, diff_s)):
        print(
            f"{name:<14} peak RSS {peak / 2**20:7,.0f} MiB = {peak / size:.2f} x checkpoint "
            f"({(peak - base) / size:.2f} above baseline), wall {seconds:.2f} s"
        )
    ok_memory, ok_time = (diff - base) / size <= 0.30, diff_s <= naive_s
    print(f"reprokit diff exit code {code} (1 expected: one element differs)")
    print(f"memory target (<= 0.30 above baseline): {'met' if ok_memory else 'MISSED'}")
    print(f"time target (no slower than naive): {'met' if ok_time else 'MISSED'}")
    return 0 if code == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
