"""Outputs first: a captured program's default run against `--set nodes=outputs` and `nodes=all`.

    .venv/bin/python bench/outputs_first.py [--repeat 2] [--jobs 2] [--only NAME,...]

A captured program's default (`nodes = "auto"`) judges the outputs first (ref_fp64, cpu and
xla_faithful compute the outputs only) and records every operation only where they differ (the
CPU stages run again with --localise, and the xla stage runs). Side by side, for each model:

- one that matches (torchvision's swin_t at 64 px, the 6-layer encoder of bench/capture.py):
  the default against `--set nodes=outputs` (target: at most 1.2x the wall time, 1.1x the
  peak memory) and against `--set nodes=all` (every operation recorded, as before);
- one that differs (swin_t with a fault injected, bfloat16 mobilenet_v3_small, and a small
  head over float16 softplus, whose outputs XLA gets wrong: fp16_softplus_overflow.md in
  docs/examples): the default against `--set nodes=all` (target: at most 1.1x), with the
  first divergence each names (the same, where the outputs differ: a perturb_node records
  every operation always, and bfloat16 mobilenet_v3_small's mean differs inside, its outputs
  agree).

Each run is `reprokit run CASE -o DIR --no-cache -n JOBS` in a fresh folder, the sides taking
turns (ABBA: each pair shares much the same load), after one untimed run that leaves the warm
servers as a user's previous run would. The wall time is the median over the rounds. Peak
memory is each side's largest stage, measured once per side with `--cold` (every stage a
child of the run, so that RUSAGE_CHILDREN's ru_maxrss is the largest one's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPROKIT = [sys.executable, "-m", "reprokit"]


def captured(folder: Path) -> dict[str, tuple[Path, list[str]]]:
    """Each model's case and the --set it runs with."""
    sys.path.insert(0, str(HERE))
    from capture import encoder  # bench/capture.py's 6-layer encoder

    from reprokit.tools.capture import capture
    from reprokit.tools.capture.zoo import capture_named, parse

    swin = capture_named(parse("torchvision:swin_t"), out_dir=folder / "swin")
    mobilenet = capture_named(parse("torchvision:mobilenet_v3_small"), out_dir=folder / "mnet")
    model, inputs = encoder(6, 8, 128)
    enc = capture(model, inputs, out_dir=folder / "encoder", name="encoder")
    head, inputs = softplus_head()
    softplus = capture(head, inputs, out_dir=folder / "softplus", name="softplus")
    return {
        "swin_t": (swin, []),
        "encoder": (enc, []),
        "swin_t fault": (swin, ["--set", f"perturb_node={_layer_norm(swin)}"]),
        "mobilenet_v3_small bf16": (mobilenet, ["--set", "dtype=bfloat16"]),
        "softplus head fp16": (softplus, ["--set", "dtype=float16"]),
    }


def softplus_head():
    """Linear layers around a softplus whose inputs lie in 12..20, where XLA's float16
    softplus overflows (CPU's does not): the outputs differ."""
    import torch

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body, self.head = torch.nn.Linear(256, 256), torch.nn.Linear(256, 10)

        def forward(self, x):
            return self.head(torch.nn.functional.softplus(x * 16) + self.body(x))

    torch.manual_seed(0)
    return Head().eval(), (torch.rand(32, 256) * 0.4 + 0.8,)


def _layer_norm(case: Path) -> str:
    """The name of the program's fifth layer_norm, where a fault reaches the outputs."""
    import torch

    program = torch.export.load(next(case.parent.glob("*.pt2")))
    graph = program.graph_module.graph
    tensor = torch.Tensor
    nodes = [n for n in graph.nodes
             if n.op == "call_function" and isinstance(n.meta.get("val"), tensor)]  # fmt: skip
    found = [f"node.{i:04d}.layer_norm" for i, n in enumerate(nodes)
             if n.target.__name__.startswith("layer_norm")]  # fmt: skip
    return found[4]


# a run in a process of its own, which prints the largest peak of the processes it waited for
MEASURED = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
            "sys.exit(code)")  # fmt: skip


def run(case: Path, sets: list[str], jobs: int, cold: bool = False) -> tuple[float, str, int]:
    """Wall seconds, the first divergence it named, and (cold) the largest stage's peak KiB."""
    out = Path(tempfile.mkdtemp(prefix="outputs-first-"))
    start = time.monotonic()
    command = [*REPROKIT, "run", str(case), "-o", str(out), "--no-cache", "-n", str(jobs), *sets]
    wrapped = [sys.executable, "-c", MEASURED, *command, *(["--cold"] if cold else [])]
    done = subprocess.run(wrapped, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(command)} exit {done.returncode}:\n{done.stdout}\n{done.stderr}")
    (variant,) = json.loads((out / "summary.json").read_text())["variants"]
    first = next((t for t in variant["first_divergence"].values() if t), "-")
    shutil.rmtree(out)
    return seconds, first, int(done.stderr.strip().splitlines()[-1])


def compare(name: str, case: Path, sets: list[str], other: list[str], args) -> None:
    """The default against ``other``, side by side; wall time, memory, first divergence."""
    sides = {"default": sets, " ".join(other[1::2]): [*sets, *other]}
    times: dict[str, list[float]] = {side: [] for side in sides}
    firsts: dict[str, str] = {}
    for round_ in range(args.repeat):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for side in order:
            seconds, firsts[side], _ = run(case, sides[side], args.jobs)
            times[side].append(seconds)
    peaks = {side: run(case, sides[side], args.jobs, cold=True)[2] for side in sides}
    (a, b) = sides
    wall = {side: statistics.median(times[side]) for side in sides}
    print(f"{name}: {a} {wall[a]:.1f} s, {b} {wall[b]:.1f} s: {wall[a] / wall[b]:.2f}x wall; "
          f"largest stage {peaks[a] / 1024:.0f} MiB vs {peaks[b] / 1024:.0f} MiB: "
          f"{peaks[a] / max(peaks[b], 1):.2f}x; first divergence {firsts[a]} / {firsts[b]}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="models by name, comma-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        models = captured(Path(folder))
        chosen = [m for m in models if not args.only or m in args.only.split(",")]
        warm_case, warm_sets = models[chosen[0]]
        run(warm_case, [*warm_sets, "--set", "nodes=outputs"], args.jobs)  # warm servers up
        for name in chosen:
            case, sets = models[name]
            if "fault" in name or "bf16" in name or "fp16" in name:  # against full recording
                compare(name, case, sets, ["--set", "nodes=all"], args)
                continue
            compare(name, case, sets, ["--set", "nodes=outputs"], args)
            compare(name, case, sets, ["--set", "nodes=all"], args)


if __name__ == "__main__":
    main()
