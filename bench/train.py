"""A 6-layer encoder's training step against its forward only: capture and run time, memory.

    .venv/bin/python bench/train.py [--layers 6] [--d-model 256] [--batch 4] [--seq 64]

Captures one nn.TransformerEncoder (dropout 0) twice: ``reprokit.capture`` of the forward
(template exported_program) and ``reprokit.capture(..., train=True)`` of the same encoder with
an MSE loss on its output (template training_program: forward, backward, every gradient).
Both render with every node saved and without SPMD, and each stage (ref_fp64, cpu, xla) runs as
its own process on XLA:CPU, one after the other. Printed side by side: the capture's seconds,
the .pt2's size, each stage's wall seconds and peak resident memory (``os.wait4``: the child's
own ``ru_maxrss``), and the ratios training / forward.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import reprokit
from reprokit.generate.cases import load_case
from reprokit.generate.render import render
from reprokit.generate.variants import variants

STAGES = ("ref_fp64", "cpu", "xla")


class Regression(nn.Module):
    """The encoder and its loss, one module (what --train captures)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.encoder(x), target)


def encoder(layers: int, d_model: int) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model, 8, 4 * d_model, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def stage(script: Path, name: str) -> tuple[float, float]:
    """One stage in its own process: its wall seconds and peak resident memory in MiB."""
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1")
    command = [sys.executable, script.name, "--stage", name, "--workdir", "work"]
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=script.parent, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)  # fmt: skip
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"stage {name} failed:\n{child.stderr.read().decode()[-3000:]}")
    child.stderr.close()
    return seconds, usage.ru_maxrss / 1024  # Linux: KiB


def rendered(case: Path, folder: Path) -> Path:
    folder.mkdir()
    (variant,) = variants(load_case(case), {"spmd": False, "nodes": "all"})
    shutil.copy(case.with_suffix(".pt2"), folder)
    (folder / "repro.py").write_text(render(variant), encoding="utf-8")
    return folder / "repro.py"


def row(label: str, forward: tuple[float, float], train: tuple[float, float]) -> str:
    (tf, mf), (tt, mt) = forward, train
    return f"{label:<12}{tf:>9.1f}{tt:>9.1f}{tt / tf:>7.2f}{mf:>11.0f}{mt:>11.0f}{mt / mf:>7.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args()
    model = encoder(args.layers, args.d_model)
    x = torch.randn(args.batch, args.seq, args.d_model)
    with tempfile.TemporaryDirectory(prefix="reprokit-bench-train-") as tmp:
        cases = {}
        target = torch.randn_like(x)
        captures = [("forward", model, (x,)), ("train", Regression(model), (x, target))]
        for kind, module, inputs in captures:
            start = time.perf_counter()
            cases[kind] = reprokit.capture(
                module, inputs, name=kind, out_dir=tmp, train=kind == "train"
            )
            size = cases[kind].with_suffix(".pt2").stat().st_size / 2**20
            print(f"capture {kind}: {time.perf_counter() - start:.1f} s, {kind}.pt2 {size:.0f} MiB")
        scripts = {kind: rendered(case, Path(tmp) / kind) for kind, case in cases.items()}
        print(f"{'stage':<12}{'fwd s':>9}{'train s':>9}{'ratio':>7}"
              f"{'fwd MiB':>11}{'train MiB':>11}{'ratio':>7}")  # fmt: skip
        for name in STAGES:
            print(row(name, stage(scripts["forward"], name), stage(scripts["train"], name)))
        saved = {k: len(torch.load(Path(tmp, k, "work", "xla", "tensors.pt"))) for k in scripts}
        print(f"tensors saved by the xla stage: {saved['forward']} forward-only, "
              f"{saved['train']} training step")  # fmt: skip


if __name__ == "__main__":
    main()
