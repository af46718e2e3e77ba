"""Complex tensors through a captured program for real on XLA:CPU: a rotary embedding done as
Llama does it (polar, view_as_complex, view_as_real) is captured, run, recorded and compared.
Before, every stage saving a complex result beside its view_as_real view failed in torch.save
(one storage viewed as two dtypes, pytorch/pytorch#91325): an error reported as XLA's."""

from __future__ import annotations

import json
from pathlib import Path

from reprokit.tools.capture import command

MODELS = Path(__file__).parents[1] / "data" / "issue" / "models.py"


def test_complex_results_are_recorded_and_compared(cli, tmp_path):
    case = command(f"{MODELS}:complex_rope", out_dir=tmp_path / "captured")
    out = tmp_path / "run"
    result = cli("run", case, "-o", out, "--set", "spmd=false", "--set", "nodes=all")
    assert result.exit_code == 0, result.output
    (variant,) = json.loads((out / "summary.json").read_text())["variants"]
    complex_ = {c["tensor"].split(".")[-1] for c in variant["comparisons"]
                if c["dtype"] == "complex64" and c["target"] == "xla"}  # fmt: skip
    assert {"polar", "view_as_complex", "mul"} <= complex_
