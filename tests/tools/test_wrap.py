"""reprokit wrap: a user's own script as one stage, under torch_xla's debug settings; its exit
code is the script's, and its run folder gives the same report as a case's: the script's last
lines of output, what torch_xla saw (its devices, as the script's process saw them), reads of
a value back to Python told apart from CPU fallbacks, and the script itself in the bundle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest

from reprokit.records import XlaEvidence
from reprokit.tools.wrap import HOOK, script_of

TOKEN = "hf_" + "Zq8" * 12
SCRIPT = f"""
    import sys
    import torch
    import torch_xla

    x = torch.randn(4, 4, device=torch_xla.device())
    for step in range(3):
        loss = (x @ x).sum() + step  # a new constant each step: a new graph each step
        torch_xla.sync()
    values = torch.linalg.eigvals(x * 2).cpu()  # no XLA lowering: runs on the CPU
    torch_xla.sync()
    print("loss", loss.item(), "token {TOKEN}")
    sys.exit(3)
"""
TRAIN = f"""
    # token {TOKEN}
    import torch
    import torch_xla

    device = torch_xla.device()
    x, w = torch.randn(8, 4, device=device), torch.zeros(4, 1, device=device, requires_grad=True)
    for step in range(25):
        loss = ((x @ w - 1) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
            w.grad.zero_()
        torch_xla.sync()
        print(f"step {{step}} loss {{loss.item():.4f}}")  # .item(): a read, not a fallback
"""


def wrapped(cli, tmp_path, monkeypatch, script: str, *command: str):
    """``reprokit wrap -o run -- python train.py`` of ``script``, then its report."""
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    monkeypatch.chdir(tmp_path)
    result = cli("wrap", "-o", "run", *command, "--", sys.executable, "train.py", "--lr", "1")
    assert cli("report", "run").exit_code == 0
    return result, (tmp_path / "run" / "report.md").read_text()


def test_wrap_keeps_the_exit_code_and_reports_what_torch_xla_saw(cli, tmp_path, monkeypatch):
    result, body = wrapped(cli, tmp_path, monkeypatch, SCRIPT, "--dump-hlo")
    assert result.exit_code == 3, result.output  # the script's own
    assert "the script exited with code 3" in result.stdout
    stage = tmp_path / "run" / "train" / "stages" / "script"
    assert TOKEN not in (stage / "stdout.log").read_text()  # redacted before it is kept
    assert "HloModule" in next(stage.glob("graphs.hlo*")).read_text()
    # compilations and executions from its metrics, the devices from the script's process
    assert "| `script` | 1 x CPU | 4 (" in body
    assert "`aten::linalg_eig`" in body and "recompiles every step" in body
    assert "loss " in body.split("lines it printed (stdout)", 1)[1]  # after its last step
    assert TOKEN not in body and "--lr 1" in body  # the command that reruns it


def test_a_wrapped_training_script_reports_its_losses_metrics_and_script(
    cli, tmp_path, monkeypatch
):
    result, body = wrapped(cli, tmp_path, monkeypatch, TRAIN)
    assert result.exit_code == 0, result.output
    output = body.split("The last 20 lines it printed (stdout):", 1)[1]
    assert "step 24 loss " in output and "step 4 loss" not in body  # the last lines only
    row = next(line for line in body.splitlines() if line.startswith("| `script` |"))
    assert row.startswith("| `script` | 1 x CPU |") and row.endswith("| none |")
    assert "read a value back to Python 25 times (`aten::_local_scalar_dense`" in body
    assert "Reproducible on XLA backend [CPU]" in body
    assert "`train/train.py` in `bundle.zip`" in body and "w -= 0.1 * w.grad" in body
    with zipfile.ZipFile(tmp_path / "run" / "bundle.zip") as bundle:
        copy = bundle.read("train/train.py").decode()
    assert "w -= 0.1 * w.grad" in copy and TOKEN not in copy  # the script, redacted
    html = (tmp_path / "run" / "report.html").read_text()
    assert "step 24 loss " in html
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    xla = summary["variants"][0]["stages"][0]["xla"]
    assert xla["host_reads"] == ["aten::_local_scalar_dense"] and xla["fallbacks"] == []


def test_a_script_that_never_imports_torch_xla_still_wraps(cli, tmp_path, monkeypatch):
    script = "import sys\nfor i in range(3):\n    print('line', i)\nprint(sys.path)\n"
    result, body = wrapped(cli, tmp_path, monkeypatch, script)
    assert result.exit_code == 0, result.output
    assert "line 2" in body and str(HOOK) not in body  # the hook left the script's sys.path
    assert "XLA stage" not in body and "XLA devices the stages saw" not in body
    assert "XLA devices:" not in body
    assert not (tmp_path / "run" / "train" / "stages" / "script" / "devices.json").exists()


def test_wrap_without_a_command_is_bad_input(cli, tmp_path):
    result = cli("wrap", "-o", tmp_path / "run", "--", "no-such-program-here")
    assert result.exit_code == 2
    assert "no such program: 'no-such-program-here'" in result.stderr


def test_the_hook_imports_the_sitecustomize_it_shadows(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['THEIRS'] = 'ran'\n")
    env = os.environ | {"PYTHONPATH": os.pathsep.join((str(HOOK), str(tmp_path)))}
    code = (
        "import os, sys; print(os.environ.get('THEIRS'), any('_wrap_site' in p for p in sys.path))"
    )
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert shown.stdout.split() == ["ran", "False"], shown.stderr


@pytest.mark.parametrize(
    ("command", "script"),
    [
        (["python", "train.py", "--lr", "1"], "train.py"),
        (["/venv/bin/python3.11", "-u", "-X", "dev", "src/train.py"], "src/train.py"),
        (["./train.py", "a.py"], "./train.py"),
        (["python", "-m", "pkg.train", "x.py"], None),
        (["python", "-c", "print(1)"], None),
        (["torchrun", "train.py"], None),  # another launcher: its arguments are its own
    ],
)
def test_the_script_of_a_command(command, script):
    assert script_of(command) == script


def test_reads_of_a_value_back_to_python_are_not_fallbacks():
    """A script's executed_fallback_ops() lists .item() among the fallbacks: not the record."""
    found = XlaEvidence(fallbacks=("aten::_local_scalar_dense", "aten::nonzero"))
    assert found.fallbacks == ("aten::nonzero",)
    assert found.host_reads == ("aten::_local_scalar_dense",)
    assert found.host_read_count() is None  # a script's record: no counts
    counted = XlaEvidence.from_json(found.to_json() | {"fallback_counts": {found.host_reads[0]: 3}})
    assert counted.host_reads == found.host_reads and counted.host_read_count() == 3
