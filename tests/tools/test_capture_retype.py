"""Capture, retyped: a float32 capture run with `--set dtype=...`, through the CLI, for real.

The model is tests/data/retype/models.py: attention masked as BERT-like models mask it, with
torch.finfo(torch.float32).min written into the program as a number. Retyped, that number
stands for the new dtype's extreme, as the model's own code run in that dtype would write it:
float32's does not fit bfloat16, and CPU refused the fill (the variant ended in `error`)
where XLA saturated it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from reprokit.cli import app

MODELS = Path(__file__).parents[1] / "data" / "retype" / "models.py"


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> Path:
    """The BERT-like module captured in float32 with `reprokit capture`, once per worker."""
    out = tmp_path_factory.mktemp("retype")
    done = CliRunner().invoke(app, ["capture", f"{MODELS}:bert_like", "-o", str(out)])
    assert done.exit_code == 0, done.output
    return out / "bert_like.toml"


def masked_fills(run_dir: Path, stage: str) -> list[torch.Tensor]:
    """The stage's results of the program's masked_fill operations, in order."""
    (path,) = run_dir.glob(f"*/stages/{stage}/tensors.pt")
    tensors = torch.load(path, weights_only=True)
    return [t for name, t in tensors.items() if name.endswith(".masked_fill")]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_float32s_extreme_follows_the_dtype_a_capture_is_retyped_to(cli, case, tmp_path, dtype):
    """`--set dtype=bfloat16` (or float16): the program runs on CPU and XLA and matches; the
    mask's fill is the dtype's own min on both, the float64 reference keeps the captured one
    (was: `error`, "cpu exited with code 1: RuntimeError: value cannot be converted to type
    at::BFloat16 without overflow")."""
    run_dir = tmp_path / "run"
    every = ("--set", "nodes=all", "--keep-tensors")  # every operation: XLA's masked fills too
    done = cli("run", case, "--set", f"dtype={dtype}", *every, "-n", "2", "-o", run_dir)
    (variant,) = json.loads((run_dir / "summary.json").read_text())["variants"]
    assert variant["outcome"] == "match", done.output
    assert done.exit_code == 0
    lowest = torch.finfo(getattr(torch, dtype)).min
    for stage in ("cpu", "xla"):
        scores = masked_fills(run_dir, stage)[0]  # the scores, masked where padding is
        assert scores.dtype == getattr(torch, dtype) and scores.min().item() == lowest, stage
    reference = masked_fills(run_dir, "ref_fp64")[0]
    assert reference.min().item() == torch.finfo(torch.float32).min
