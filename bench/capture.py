"""Capture and run a 6-layer nn.TransformerEncoder (d_model 512): every node saved vs outputs only.

    .venv/bin/python bench/capture.py [--batch 8] [--seq 128] [--layers 6] [--repeat 3]
    .venv/bin/python bench/capture.py --model torchvision:maxvit_t --shape 1,3,224,224

Captures the encoder (eval mode) with ``reprokit.capture``, or a zoo model as ``reprokit
capture ZOO:NAME`` builds it (its small default inputs), renders the case with
``nodes = "all"`` and with ``nodes = "outputs"``, and runs each stage of each
(``python repro.py --stage S``) as its own process on XLA:CPU, one after the other. Each
stage's wall time and peak resident memory (``os.wait4``: the child's own rusage, its
``ru_maxrss``) are printed side by side, with the ratio all / outputs: what recording every
intermediate costs (``--repeat N``: the medians of N runs of each, taking turns). The
capture's own time is printed too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from reprokit.generate.cases import load_case
from reprokit.generate.render import render
from reprokit.generate.variants import variants
from reprokit.records.folder import SCRIPT
from reprokit.tools.capture import capture
from reprokit.tools.capture.zoo import capture_named, parse, parse_shape

STAGES = ("ref_fp64", "cpu", "xla")


def encoder(layers: int, batch: int, seq: int) -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    return model, (torch.randn(batch, seq, 512),)


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


def rendered(case: Path, folder: Path, **params: object) -> Path:
    """The case's script with ``params``, in ``folder`` with its program beside it."""
    folder.mkdir()
    (variant,) = variants(load_case(case), params)
    shutil.copy(case.with_suffix(".pt2"), folder)
    (folder / SCRIPT).write_text(render(variant), encoding="utf-8")
    return folder / SCRIPT


def row(label: str, every: tuple[float, float], outputs: tuple[float, float]) -> str:
    (ta, ma), (to, mo) = every, outputs
    return f"{label:<12}{ta:>8.1f}{to:>11.1f}{ta / to:>7.2f}{ma:>10.0f}{mo:>13.0f}{ma / mo:>7.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model_arguments(parser, batch=8)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each stage: medians")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reprokit-bench-") as tmp:
        start = time.perf_counter()
        case = captured(args, Path(tmp))
        size = case.with_suffix(".pt2").stat().st_size / 2**20
        print(f"capture: {time.perf_counter() - start:.1f} s, {case.stem}.pt2 {size:.0f} MiB")
        scripts = {n: rendered(case, Path(tmp) / n, nodes=n) for n in ("all", "outputs")}
        print(f"{'stage':<12}{'all s':>8}{'outputs s':>11}{'ratio':>7}"
              f"{'all MiB':>10}{'outputs MiB':>13}{'ratio':>7}")  # fmt: skip
        runs = {name: medians(scripts, name, args.repeat) for name in STAGES}
        for name, (every, outputs) in runs.items():
            print(row(name, every, outputs))
        total = [(sum(r[i][0] for r in runs.values()), max(r[i][1] for r in runs.values()))
                 for i in (0, 1)]  # fmt: skip
        print(row("all stages", *total), " (time: the sum; memory: the largest stage)")
        if args.repeat > 1:
            print(f"(medians of {args.repeat} runs each, all and outputs taking turns)")
        sizes = [Path(tmp, n, "work", "xla", "tensors.pt").stat().st_size for n in scripts]
        print(f"xla tensors.pt: {sizes[0] / 2**20:.1f} MiB with every node, "
              f"{sizes[1] / 2**20:.1f} MiB outputs only")  # fmt: skip
        folders = [folder_size(Path(tmp, n)) for n in scripts]
        print(f"folder (script, program, every stage's files): {folders[0] / 2**20:.1f} MiB "
              f"with every node, {folders[1] / 2**20:.1f} MiB outputs only, "
              f"ratio {folders[0] / folders[1]:.1f}")  # fmt: skip


def model_arguments(parser: argparse.ArgumentParser, batch: int) -> None:
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--model", help="a zoo model instead (torchvision:maxvit_t)")
    parser.add_argument("--shape", help="the zoo model's input shape (1,3,224,224)")


def captured(args: argparse.Namespace, folder: Path) -> Path:
    """The case of the encoder, or of ``--model``, captured into ``folder`` as model.toml."""
    if args.model:
        named = parse(args.model, shape=parse_shape(args.shape))
        return capture_named(named, name="model", out_dir=folder)
    model, inputs = encoder(args.layers, args.batch, args.seq)
    return capture(model, inputs, name="model", out_dir=folder)


def medians(scripts: dict[str, Path], name: str, repeat: int) -> list[tuple[float, float]]:
    """The stage of each script run ``repeat`` times, taking turns: median seconds and MiB."""
    found = {n: [] for n in scripts}
    for _ in range(repeat):
        for n, script in scripts.items():
            found[n].append(stage(script, name))
    return [tuple(statistics.median(m[i] for m in found[n]) for i in (0, 1)) for n in scripts]


def folder_size(folder: Path, *, links: bool = True) -> int:
    """Bytes of the regular files under ``folder``: what a run folder of the variant holds;
    ``links=False``: its own bytes only, a hard link (a run folder's program, linked to the
    case's file) left out, as it takes no space of its own."""
    files = [p.stat() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(f.st_size for f in files if links or f.st_nlink == 1)


if __name__ == "__main__":
    main()
