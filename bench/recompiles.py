"""The cost of ``reprokit wrap --recompiles``: a training script run plain, under ``reprokit
wrap``, and under ``reprokit wrap --recompiles``, side by side.

    .venv/bin/python bench/recompiles.py [--steps 200] [--repeat 3]

The script is a small MLP trained with SGD on XLA:CPU (a batch whose last one is smaller, so
that it compiles again once per epoch); "plain" is ``python train.py`` with only
``PJRT_DEVICE=CPU``, as a user runs it. The three are run in turn, ``--repeat`` times; the
medians and their ratios to plain are printed (target: --recompiles at most 1.2x plain). Each
time is the whole process: Python and torch_xla's start-up, compiles, steps, and for wrap the
CLI, the logs and the reading of torch_xla's files.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TRAIN = """
import torch
import torch_xla

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
model = model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data, labels = torch.randn(1000, 128), torch.randint(0, 10, (1000,))
torch_xla.sync()
step = 0
while step < {steps}:
    for start in range(0, 1000, 64):  # 15 batches of 64, then one of 40: a second graph
        x, y = data[start:start + 64].to(device), labels[start:start + 64].to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        step += 1
        if step == {steps}:
            break
print("loss", loss.item())
"""


def timed(command: list[str], cwd: Path) -> float:
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "train.py").write_text(textwrap.dedent(TRAIN.format(steps=args.steps)))
        reprokit = [sys.executable, "-m", "reprokit", "wrap"]
        commands = {
            "plain": [sys.executable, "train.py"],
            "wrap": [*reprokit, "-o", "run_wrap", "--", sys.executable, "train.py"],
            "wrap --recompiles": [
                *reprokit,
                "--recompiles",
                "-o",
                "run_rc",
                "--",
                sys.executable,
                "train.py",
            ],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, command in commands.items():
                times[name].append(timed(command, folder))
    plain = statistics.median(times["plain"])
    print(f"{args.steps} steps, {args.repeat} runs each, medians (min - max):")
    for name, found in times.items():
        median = statistics.median(found)
        print(f"  {name:<18} {median:7.2f} s ({min(found):.2f} - {max(found):.2f})"
              f"  {median / plain:.2f}x plain")  # fmt: skip


if __name__ == "__main__":
    main()
