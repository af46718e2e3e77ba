"""The sweep of public architectures: 25 models (torchvision, timm, Hugging Face in tiny
random configurations) x float32 and bfloat16, as ``reprokit sweep`` runs them, then writes
their reports.

Runs the sweep once per setting (``-n 1`` warm, ``-n 2`` warm, ``-n 2`` cold; the results cache
off so that every stage runs) and prints, side by side, the total wall time of each, the
per-model median and worst (capture + both dtypes' variants), then the outcome of every
architecture in each dtype, or its refusal in one line, from the last run's sweep.json.

    python bench/sweep.py [-o DIR] [--settings n1,n2,n2cold,n2all,before] [--only NAME,NAME]
                          [--before CHECKOUT] [--list]

``before`` is ``-n 2`` warm with another checkout's reprokit (``git worktree add /tmp/before
COMMIT``; ``--before /tmp/before``, put first on PYTHONPATH): today's code against an older
one, on the same machine in one run.

On two shared cores the whole sweep takes long (tens of minutes per setting): ``--only``
runs a subset, ``--settings n2`` one setting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# name, config, input shape: small inputs (64 px images, 16 tokens) that two cores can run.
IMAGE = [1, 3, 64, 64]
MODELS: list[tuple[str, dict, list[int] | None]] = [
    ("torchvision:resnet18", {}, IMAGE),
    ("torchvision:mobilenet_v2", {}, IMAGE),
    ("torchvision:mobilenet_v3_small", {}, IMAGE),
    ("torchvision:squeezenet1_1", {}, IMAGE),
    ("torchvision:shufflenet_v2_x0_5", {}, IMAGE),
    ("torchvision:efficientnet_b0", {}, IMAGE),
    ("torchvision:mnasnet0_5", {}, IMAGE),
    ("torchvision:regnet_x_400mf", {}, IMAGE),
    ("torchvision:googlenet", {"aux_logits": False, "init_weights": True}, IMAGE),
    ("torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", {}, IMAGE),  # a refusal, clearly
    ("timm:convnext_atto", {}, IMAGE),
    ("timm:test_vit", {}, [1, 3, 160, 160]),
    ("timm:test_efficientnet", {}, IMAGE),
    ("timm:test_resnet", {}, IMAGE),
    ("timm:test_byobnet", {}, IMAGE),
    ("hf:LlamaForCausalLM", {}, None),
    ("hf:gpt2", {}, None),
    ("hf:bert", {}, None),
    ("hf:t5", {}, None),
    ("hf:bart", {}, None),
    ("hf:MistralForCausalLM", {}, None),
    ("hf:Qwen2ForCausalLM", {}, None),
    ("hf:OPTForCausalLM", {}, None),
    ("hf:vit", {}, None),
    ("hf:deberta-v2", {}, None),  # a float32-min mask fill: bfloat16 once ended in a false error
]
# -n, cold, and the run's --set: n2all records every operation always (nodes=all), as the
# default did before outputs first (docs/capture.md): its wall time against n2's is the saving
SETTINGS = {"n1": ("1", False, []), "n2": ("2", False, []), "n2cold": ("2", True, []),
            "n2all": ("2", False, ["--set", "nodes=all"]), "before": ("2", False, [])}  # fmt: skip


def model_list(path: Path, only: set[str]) -> Path:
    """The models as a sweep's TOML list."""
    lines = []
    for name, config, shape in MODELS:
        if only and name not in only and name.partition(":")[2] not in only:
            continue
        lines += ["[[model]]", f"name = {json.dumps(name)}"]
        if config:
            pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in config.items())
            lines += [f"config = {{{pairs}}}"]
        lines += [f"shape = {shape}"] if shape else []
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def sweep(listed: Path, out: Path, jobs: str, cold: bool, sets: list[str],
          checkout: Path | None = None) -> float:  # fmt: skip
    """``reprokit sweep`` in float32 and bfloat16 into ``out`` (with ``checkout``'s reprokit);
    its wall seconds."""
    env = dict(os.environ, PYTHONPATH=str(checkout)) if checkout else None  # and run in it:
    # ``python -m`` puts the working folder first on sys.path, before PYTHONPATH
    cmd = [sys.executable, "-m", "reprokit", "sweep", str(listed), "--dtypes",
           "float32,bfloat16", "-n", jobs, "-o", str(out), "--no-cache"]  # fmt: skip
    cmd += (["--cold"] if cold else []) + sets
    start = time.perf_counter()
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run(cmd, check=False, stdout=log, stderr=subprocess.STDOUT, env=env,
                       cwd=checkout)  # fmt: skip
    return time.perf_counter() - start


def per_model(out: Path) -> dict[str, float]:
    """Each captured model's seconds: its capture and its variants, in every dtype."""
    swept = json.loads((out / "sweep.json").read_text())
    variants = json.loads((out / "summary.json").read_text())["variants"]
    seconds = {}
    for model in swept["models"]:
        if model["case"]:
            ran = sum(v["seconds"] for v in variants if v["case"] == model["case"])
            seconds[model["model"]] = model["seconds"] + ran
    return seconds


def outcomes(out: Path) -> list[tuple[str, str, str]]:
    """(model, dtype, outcome and where) of every architecture, or its refusal."""
    swept = json.loads((out / "sweep.json").read_text())
    variants = json.loads((out / "summary.json").read_text())["variants"]
    rows = []
    for model in swept["models"]:
        if not model["case"]:
            rows.append((model["model"], "-", f"refused: {model['refused'][:150]}"))
            continue
        for v in (v for v in variants if v["case"] == model["case"]):
            first = next((t for t in v["first_divergence"].values() if t), None)
            said = v["outcome"] + (f" at {first}" if first else "")
            said += f" ({(v['reason'] or '')[:110]})" if v["outcome"] in ("error", "crash") else ""
            rows.append((model["model"], v["variant"]["dtype"], said))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", type=Path, default=None, help="keep the run folders here")
    parser.add_argument("--settings", default="n1,n2,n2cold", help="of " + ",".join(SETTINGS))
    parser.add_argument("--only", default="", help="a subset: model names, comma-separated")
    parser.add_argument("--list", action="store_true", help="print the models and stop")
    parser.add_argument("--before", type=Path, help="the checkout the before setting runs")
    args = parser.parse_args()
    if args.list:
        print("\n".join(name for name, _, _ in MODELS))
        return
    root = args.o or Path(tempfile.mkdtemp(prefix="reprokit-bench-sweep-"))
    root.mkdir(parents=True, exist_ok=True)
    listed = model_list(root / "models.toml", set(filter(None, args.only.split(","))))
    walls, seconds = {}, {}
    for setting in args.settings.split(","):
        checkout = args.before if setting == "before" else None
        walls[setting] = sweep(listed, root / setting, *SETTINGS[setting], checkout)
        seconds[setting] = per_model(root / setting)
        print(f"{setting}: {walls[setting]:.0f} s", flush=True)
    print(f"\n{'setting':<8} {'wall s':>8} {'median/model s':>15} {'worst s':>8}  worst model")
    for setting, wall in walls.items():
        found = seconds[setting] or {"-": 0.0}
        worst = max(found, key=found.__getitem__)
        print(f"{setting:<8} {wall:>8.0f} {statistics.median(found.values()):>15.1f} "
              f"{found[worst]:>8.1f}  {worst}")  # fmt: skip
    if "n2" in walls and "n2cold" in walls:
        print(f"warm/cold at -n 2: {walls['n2'] / walls['n2cold']:.2f}")
    if "n2" in walls and "n2all" in walls:
        print(
            f"outputs first / every operation recorded, at -n 2: {walls['n2'] / walls['n2all']:.2f}"
        )
    if "n2" in walls and "before" in walls:
        print(f"-n 2 now / -n 2 with {args.before}: {walls['n2'] / walls['before']:.2f}")
    if "n1" in walls and "n2" in walls:
        print(f"-n 2 / -n 1 (warm): {walls['n2'] / walls['n1']:.2f}")
    last = root / list(walls)[-1]
    print(f"\noutcomes ({last}):")
    for model, dtype, said in outcomes(last):
        print(f"  {model:<50} {dtype:<9} {said}")
    print(reports(last))


def reports(out: Path) -> str:
    """``reprokit report`` of the sweep (its report and each model's): its seconds, exit code
    and matplotlib's warnings ("More than 20 figures have been opened" once said that every
    plot stayed in memory)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "reprokit", "report", str(out)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    warned = done.stderr.count("More than 20 figures")
    models = len(list((out / "models").glob("*/report.md")))
    return (
        f"reports: exit {done.returncode}, {time.perf_counter() - start:.0f} s, "
        f"{models} model reports, 'More than 20 figures' warnings: {warned}"
    )


if __name__ == "__main__":
    main()
