"""Roots for real on XLA:CPU: a difference is named where it is born, a write in place
included; a harmless difference earlier in the graph does not take the headline, the short
repro or minimize away from the one that reaches the gradients; each root that reaches an
output gets its own short repro."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from standalone import run_alone

from reprokit.tools.capture import command

MODELS = Path(__file__).parents[1] / "data" / "issue" / "models.py"


def roots_of(run: Path) -> list[dict]:
    (variant,) = json.loads((run / "summary.json").read_text())["variants"]
    return variant["roots"]


def test_a_fault_after_an_in_place_write_is_named_at_the_fault(cli, tmp_path):
    """The recorded new_zeros is its value at its own operation, not after the fills: before,
    a fault in the second fill's value was named at new_zeros, an operation before it."""
    case = command(f"{MODELS}:shifted_mask", out_dir=tmp_path / "captured")
    out = tmp_path / "run"
    fault = "node.0005.lift_fresh_copy"  # the second fill's value, after new_zeros (0000)
    result = cli("run", case, "-o", out, "--set", f"perturb_node={fault}", "--set", "spmd=false")
    assert result.exit_code == 1, result.output
    (variant,) = json.loads((out / "summary.json").read_text())["variants"]
    assert variant["first_divergence"] == {"xla": fault}
    assert [r["tensor"] for r in variant["roots"]] == [fault]
    assert roots_of(out)[0]["reaches"] == ["output.0"]  # through the fill into x + mask


@pytest.mark.slow
def test_the_root_reaching_the_gradients_heads_the_report_and_is_minimized(
    cli, tmp_path, monkeypatch
):
    result = cli("capture", f"{MODELS}:binary_step", "--train", "-o", tmp_path / "captured")
    assert result.exit_code == 0, result.output
    case, out = tmp_path / "captured" / "binary_step.toml", tmp_path / "run"
    assert cli("run", case, "-o", out, "--set", "spmd=false").exit_code == 1
    found = roots_of(out)
    assert [(r["op"], r["reaches"]) for r in found] == [
        ("aten.hardtanh_backward.default", ["grad.fc1.bias", "grad.fc1.weight"]),
        ("aten.nll_loss_forward.default[1]", []),  # graph order puts it first
    ]
    assert found[0]["errors"][0] < found[0]["bound"] < found[0]["errors"][1]
    assert cli("report", out).exit_code == 0
    text = (out / "report.md").read_text()
    # the gradient as autograd computes it (its repro inline); nll_loss_forward's total_weight,
    # harmless to the outputs, is no issue of its own
    assert text.startswith("# float32 gradient of `hardtanh` on XLA is 1 where CPU's is 0")
    assert "nll_loss" not in text and not (out / "issues").exists()

    monkeypatch.chdir(tmp_path)  # -o relative, as the README writes it
    minimized = tmp_path / "min"
    result = cli("minimize", case, "-o", "min", "-n", "2", "--budget", "20")
    assert result.exit_code == 0, result.output
    assert "hardtanh_backward" in (minimized / "repro.py").read_text()
    assert "nll_loss" not in (minimized / "repro.py").read_text()
    assert not (minimized / "roots").exists()  # the other root reaches nothing
    alone = run_alone(minimized)
    assert alone.returncode == 1 and "XLA DIFFERS" in alone.stdout, alone.stdout + alone.stderr
    # whose: it still differs with every XLA pass disabled, and the HLO shows why (the
    # boundaries compared inclusive: GE -1 and LE 1 pass the gradient where torch gives 0)
    assert cli("report", minimized).exit_code == 0
    text = (minimized / "report.md").read_text()
    assert "**Whose:** torch_xla lowering. Still differs with every XLA pass disabled" in text
    hlo = text.split("lines of HLO)</summary>")[1].split("</details>")[0]
    assert "direction=GE" in hlo and "direction=LE" in hlo and "select(" in hlo


@pytest.mark.slow
def test_each_root_reaching_an_output_gets_its_own_short_repro(cli, tmp_path):
    """The bool cumsum and the bilinear resize are two bugs: two repros, each alone exit 1;
    --root picks the second by its op."""
    case = command(f"{MODELS}:bookkeeper", out_dir=tmp_path / "captured")
    out = tmp_path / "min"
    result = cli("minimize", case, "-o", out, "-n", "2", "--budget", "20", "--set", "spmd=false")
    assert result.exit_code == 0, result.output
    assert "cumsum" in (out / "repro.py").read_text()
    (other,) = (out / "roots").iterdir()
    assert "upsample_bilinear2d" in (other / "repro.py").read_text()
    assert f"its own short repro: {other / 'repro.py'}" in " ".join(result.output.split())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["minimized"]["graph"]["elsewhere"] == [f"roots/{other.name}"]
    for folder in (out, other):
        alone = run_alone(folder)
        assert alone.returncode == 1, alone.stdout + alone.stderr
    chosen = tmp_path / "chosen"
    result = cli("minimize", case, "-o", chosen, "--budget", "20", "--set", "spmd=false",
                 "--root", "aten.upsample_bilinear2d.vec")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "upsample_bilinear2d" in (chosen / "repro.py").read_text()
    assert not (chosen / "roots").exists()
