"""report.md as the issue a maintainer reads, for real on XLA:CPU: a new user's fp16 model whose
XLA results are NaN, inf and -inf, and a module with two independent differences (a bool
cumsum, a bilinear resize). Every format is written (exit 0); each independent difference is an
issue of its own (issues/NAME.md, report.md the first) with its own repro inline, at most 30
lines, that exits 1 copied alone into an empty folder; a minimize folder pastes its short repro
with its output; nothing the reader cannot see (run folders, stage or node names)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from standalone import run_alone

from reprokit.tools.capture import command

MODELS = Path(__file__).parents[1] / "data" / "issue" / "models.py"
FORMATS = ("report.md", "report.html", "report.json", "bundle.zip")


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("captured")
    return {
        name: command(f"{MODELS}:{name}", out_dir=folder) for name in ("nonfinite", "bookkeeper")
    }


def run_and_report(cli, case: Path, out: Path) -> str:
    result = cli("run", case, "-o", out, "-n", "2")
    assert result.exit_code == 1, result.output  # a mismatch
    result = cli("report", out)
    assert result.exit_code == 0, result.output
    for name in FORMATS:
        assert (out / name).is_file(), name
    return (out / "report.md").read_text()


def assert_nothing_the_reader_cannot_see(text: str, *folders: Path) -> None:
    for folder in folders:
        assert str(folder) not in text
    assert not re.search(r"node\.\d{4}|xla_faithful|ref_fp64|behaved as expected|runs/", text)
    # nor the tool's own vocabulary
    assert not re.search(r"fp64 rule|reprokit's fp64|stages? saw|Found in a model|"
                         r"sensitive to fusion|one at a time on CPU", text)  # fmt: skip
    assert len(text.splitlines()) <= 150


def first_block(text: str) -> str:
    return text.split("```python\n")[1].split("\n```")[0] + "\n"


def runs_alone(text: str, where: Path) -> subprocess.CompletedProcess:
    """The issue's first python block saved alone as repro.py and run without reprokit."""
    where.mkdir()
    (where / "repro.py").write_text(first_block(text))
    return run_alone(where)


def test_nan_inf_and_minus_inf_results_give_every_format_and_values(cli, captured, tmp_path):
    text = run_and_report(cli, captured["nonfinite"], tmp_path / "run")
    title = text.splitlines()[0]
    assert title.startswith("# float16 `")
    assert "## 🐛 Bug" in text and "## Expected behavior" in text
    assert "**NaN**" in text or "**inf**" in text  # the witness table names them
    assert "float64" in text
    # every independent root is an issue of its own: the mean (NaN), softplus (inf) and its
    # negation (-inf), each with its repro inline
    issues = sorted((tmp_path / "run" / "issues").glob("*.md"))
    bodies = [path.read_text() for path in issues]
    assert len(issues) == 3 and bodies[0] != bodies[1]
    assert all(word in "".join(bodies) for word in ("NaN", "inf", "-inf"))
    assert "filed apart" in text
    for body in (text, *bodies):
        assert len(first_block(body).splitlines()) <= 30
        assert "inputs.pt" not in first_block(body) and "repro.py` in the attached" not in body
        assert_nothing_the_reader_cannot_see(body, tmp_path)
    alone = runs_alone(text, tmp_path / "alone")
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert "XLA DIFFERS" in alone.stdout and "float64" in alone.stdout
    # where the repro itself cannot run (no torch_xla), one line and exit 2, not 1
    hide = "import sys, runpy; sys.modules['torch_xla'] = None; runpy.run_path('repro.py')"
    hidden = subprocess.run([sys.executable, "-I", "-c", hide], cwd=tmp_path / "alone",
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert hidden.returncode == 2, hidden.stdout + hidden.stderr
    assert hidden.stdout.startswith("cannot run: ") and hidden.stdout.count("\n") == 1
    page = (tmp_path / "run" / "report.html").read_text()
    assert "NaN" in page and "<svg" in page
    json.loads((tmp_path / "run" / "report.json").read_text())
    assert plt.get_fignums() == []  # no figure left open in the process


@pytest.mark.slow
def test_independent_divergences_are_each_an_issue_with_its_repro(cli, captured, tmp_path):
    text = run_and_report(cli, captured["bookkeeper"], tmp_path / "run")
    assert text.startswith("# `cumsum` on XLA returns bool [2, 16] where CPU returns int64")
    assert "upsample_bilinear2d" in text.split("filed apart")[1]  # the second, named
    (second,) = [p for p in (tmp_path / "run" / "issues").glob("*.md") if "cumsum" not in p.name]
    body = second.read_text()
    assert body.startswith("# float32 `upsample_bilinear2d` on XLA returns")
    assert "remainder" not in text + body  # it agrees
    for one in (text, body):
        assert_nothing_the_reader_cannot_see(one, tmp_path)
    alone = runs_alone(body, tmp_path / "alone")
    assert alone.returncode == 1, alone.stdout + alone.stderr


@pytest.mark.slow
def test_a_minimize_folder_pastes_its_short_repro_and_what_it_printed(cli, captured, tmp_path):
    out = tmp_path / "min"
    result = cli("minimize", captured["nonfinite"], "-o", out, "-n", "2", "--budget", "20")
    assert result.exit_code == 0, result.output
    result = cli("report", out)
    assert result.exit_code == 0, result.output
    assert all((out / name).is_file() for name in FORMATS)
    text = (out / "report.md").read_text()
    repro = text.split("```python\n")[1].split("\n```")[0]
    assert len(repro.splitlines()) <= 40 and "import torch_xla" in repro
    printed = text.split("```python\n")[1].split("```\n\n```\n")[1].split("\n```")[0]
    assert printed.startswith("$ PJRT_DEVICE=CPU python repro.py")
    assert "XLA DIFFERS" in printed and printed.endswith("exit 1")
    assert re.search(r"at \[\d+(, \d+)*\]: XLA (nan|inf|-inf)", printed)  # values, not RMSE only
    assert_nothing_the_reader_cannot_see(text, tmp_path)
    alone = run_alone(out)  # the pasted script, copied alone, exits 1
    assert alone.returncode == 1, alone.stdout + alone.stderr


@pytest.mark.slow
def test_a_training_step_names_the_root_and_the_gradients_it_reaches(cli, tmp_path):
    result = cli("capture", f"{MODELS}:softplus_step", "--train", "-o", tmp_path / "captured")
    assert result.exit_code == 0, result.output
    out = tmp_path / "run"
    result = cli("run", tmp_path / "captured" / "softplus_step.toml", "--set", "dtype=float16",
                 "-o", out, "-n", "2")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert cli("report", out).exit_code == 0
    assert all((out / name).is_file() for name in FORMATS)
    text = (out / "report.md").read_text()
    # the forward's inf and its gradient's NaN, in one issue: the forward's inf hides the
    # gradient's NaN in the model (every gradient after it is already NaN or inf)
    assert text.startswith("# float16 `softplus` on XLA returns inf where CPU")
    assert "a gradient of NaN" in text.splitlines()[0]
    assert "`grad.fc1.weight`" in text
    assert_nothing_the_reader_cannot_see(text, tmp_path)
    alone = runs_alone(text, tmp_path / "alone")
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert "softplus gradient: XLA DIFFERS" in alone.stdout
