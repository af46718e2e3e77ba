"""Warm start against cold: the whole built-in library, ``-n 2``, run both ways in one go.

Prints the wall time of each run and their ratio (goal: warm at most 0.5 of cold), the median
per-stage overhead (the stage's wall time as the harness saw it, minus the seconds the stage
itself reports in its result.json; goal: 0.5 s or less warm), how each stage started, and
whether both runs gave the same outcomes and bit-identical tensors. The results cache is off
(``--no-cache``) so that both runs run every stage.

    python bench/warm.py [-n 2] [-o DIR] [-k EXPR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reprokit.records.folder import VariantFolder


def run(out: Path, jobs: str, keyword: str | None, cold: bool) -> float:
    """``reprokit run`` over the library into ``out``; its wall seconds."""
    cmd = [sys.executable, "-m", "reprokit", "run", "-n", jobs, "-o", str(out), "--no-cache"]
    cmd += ["-k", keyword] if keyword else []
    cmd += ["--cold"] if cold else []
    start = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def overheads(out: Path) -> list[float]:
    """Each stage that wrote a result.json: harness wall seconds minus its own seconds."""
    found = []
    for variant in json.loads((out / "summary.json").read_text())["variants"]:
        for stage in variant["stages"]:
            result = VariantFolder(out / variant["label"]).stage(stage["name"]).result
            if stage["status"] == "ok" and result.is_file():
                own = json.loads(result.read_text()).get("seconds")
                if isinstance(own, (int, float)):
                    found.append(stage["seconds"] - own)
    return found


def starts(out: Path) -> dict[str, int]:
    """How many stages started warm, and cold for each reason given."""
    counted: dict[str, int] = {}
    for variant in json.loads((out / "summary.json").read_text())["variants"]:
        for stage in variant["stages"]:
            why = stage.get("started") or "not started"
            counted[why] = counted.get(why, 0) + 1
    return counted


def differences(cold: Path, warm: Path) -> tuple[list[str], int, int]:
    """Outcomes that differ and tensors whose bits differ; how many tensor files there are,
    and how many are byte-identical (a file may differ where a tensor's storage has bytes no
    element uses: uninitialized memory, which differs from one cold run to the next too)."""
    found = []
    runs = [json.loads((p / "summary.json").read_text())["variants"] for p in (cold, warm)]
    outcomes = [{v["label"]: v["outcome"] for v in variants} for variants in runs]
    found += [f"{k}: {outcomes[0][k]} cold, {outcomes[1].get(k)} warm" for k in outcomes[0]
              if outcomes[0][k] != outcomes[1].get(k)]  # fmt: skip
    files = sorted(cold.glob("*/stages/*/tensors.pt"))
    same = 0
    for path in files:
        other = warm / path.relative_to(cold)
        if other.is_file() and other.read_bytes() == path.read_bytes():
            same += 1
        elif not other.is_file() or not same_bits(path, other):
            found.append(f"{path.relative_to(cold)}: tensors differ")
    return found, len(files), same


def same_bits(a: Path, b: Path) -> bool:
    """The same names, dtypes, shapes and element bits."""
    import torch

    left, right = (torch.load(p, weights_only=True) for p in (a, b))
    if list(left) != list(right):
        return False
    return all(_bits(left[k]) == _bits(right[k]) for k in left)


def _bits(tensor) -> tuple:
    import torch

    flat = tensor.detach().reshape(-1).contiguous()
    return tensor.dtype, tuple(tensor.shape), bytes(flat.view(torch.uint8).numpy())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", default="2", help="stages at once (reprokit run -n)")
    parser.add_argument("-o", type=Path, help="where the two run folders go (default: temporary)")
    parser.add_argument("-k", help="only the variants matching this (reprokit run -k)")
    args = parser.parse_args()
    out = args.o or Path(tempfile.mkdtemp(prefix="reprokit-warm-"))
    seconds = {way: run(out / way, args.n, args.k, way == "cold") for way in ("cold", "warm")}
    medians = {way: statistics.median(overheads(out / way) or [0.0]) for way in seconds}
    ratio = seconds["warm"] / seconds["cold"]
    print(f"{'':<28}{'cold':>10}{'warm':>10}")
    print(f"{'library wall (s)':<28}{seconds['cold']:>10.1f}{seconds['warm']:>10.1f}")
    print(f"{'median stage overhead (s)':<28}{medians['cold']:>10.2f}{medians['warm']:>10.2f}")
    print(f"warm / cold: {ratio:.2f} (goal <= 0.5); warm overhead goal <= 0.5 s")
    print(f"stages started: {starts(out / 'warm')}")
    found, files, same = differences(out / "cold", out / "warm")
    print(f"tensor files byte-identical: {same} of {files}; the rest bit-identical tensor by")
    print("tensor: " + ("yes, and the same outcomes" if not found else "NO\n" + "\n".join(found)))
    print(f"run folders: {out}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
