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
import tempfile
import time
from pathlib import Path

import torch
from capture import rendered, stage  # bench/capture.py: the same script layout and measurement
from torch import nn
from torch.nn import functional as F

import reprokit

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
        scripts = {kind: rendered(case, Path(tmp) / kind, spmd=False, nodes="all")
                   for kind, case in cases.items()}  # fmt: skip
        print(f"{'stage':<12}{'fwd s':>9}{'train s':>9}{'ratio':>7}"
              f"{'fwd MiB':>11}{'train MiB':>11}{'ratio':>7}")  # fmt: skip
        for name in STAGES:
            print(row(name, stage(scripts["forward"], name), stage(scripts["train"], name)))
        saved = {k: len(torch.load(Path(tmp, k, "work", "xla", "tensors.pt"))) for k in scripts}
        print(f"tensors saved by the xla stage: {saved['forward']} forward-only, "
              f"{saved['train']} training step")  # fmt: skip


if __name__ == "__main__":
    main()
