"""reprokit wrap: a user's own script as one stage, under torch_xla's debug settings; its exit
code is the script's, and its run folder gives the same report as a case's."""

from __future__ import annotations

import sys
import textwrap

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


def test_wrap_keeps_the_exit_code_and_reports_what_torch_xla_saw(cli, tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    monkeypatch.chdir(tmp_path)
    command = ["wrap", "-o", "run", "--dump-hlo", "--", sys.executable, "train.py", "--lr", "1"]
    result = cli(*command)
    assert result.exit_code == 3, result.output  # the script's own
    assert "the script exited with code 3" in result.stdout
    stage = tmp_path / "run" / "train" / "stages" / "script"
    assert TOKEN not in (stage / "stdout.log").read_text()  # redacted before it is kept
    assert "HloModule" in next(stage.glob("graphs.hlo*")).read_text()
    assert cli("report", "run").exit_code == 0
    body = (tmp_path / "run" / "report.md").read_text()
    assert "| `script` | ? x ? | 4 (" in body  # compilations and executions, from its metrics
    assert "`aten::linalg_eig`" in body and "recompiles every step" in body
    assert TOKEN not in body and "--lr 1" in body  # the command that reruns it


def test_wrap_without_a_command_is_bad_input(cli, tmp_path):
    result = cli("wrap", "-o", tmp_path / "run", "--", "no-such-program-here")
    assert result.exit_code == 2
    assert "no such program: 'no-such-program-here'" in result.stderr
