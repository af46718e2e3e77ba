"""report.md as the issue a maintainer reads, for real on XLA:CPU: a new user's fp16 model whose
XLA results are NaN, inf and -inf, and a module with two independent differences (a bool
cumsum, a bilinear resize). Every format is written (exit 0), report.md names the op, the dtype
and the values, lists every independent divergence, pastes the short repro of a minimize folder
with its output, and says nothing the reader cannot see (run folders, stage or node names)."""

from __future__ import annotations

import json
import re
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
    assert len(text.splitlines()) <= 150


def test_nan_inf_and_minus_inf_results_give_every_format_and_values(cli, captured, tmp_path):
    text = run_and_report(cli, captured["nonfinite"], tmp_path / "run")
    title = text.splitlines()[0]
    assert title.startswith("# float16 `aten.")
    assert "## 🐛 Bug" in text and "## Expected behavior" in text
    assert "**NaN**" in text or "**inf**" in text  # the witness table names them
    assert "float64" in text
    # every independent root: the mean (NaN), softplus (inf) and its negation (-inf)
    assert all(word in text for word in ("NaN", "inf", "-inf"))
    assert "repro.py` in the attached `bundle.zip`" in text  # the harness is never pasted
    assert "```python" not in text
    assert_nothing_the_reader_cannot_see(text, tmp_path)
    page = (tmp_path / "run" / "report.html").read_text()
    assert "NaN" in page and "<svg" in page
    json.loads((tmp_path / "run" / "report.json").read_text())
    assert plt.get_fignums() == []  # no figure left open in the process


def test_independent_divergences_are_each_listed_with_what_they_reach(cli, captured, tmp_path):
    text = run_and_report(cli, captured["bookkeeper"], tmp_path / "run")
    assert text.startswith("# `aten.cumsum.default` on XLA returns bool where CPU returns int64")
    assert "| element | CPU (int64) | XLA (bool) |\n" in text  # no float64 of an integer
    others = text.split("Other differences of the same program")[1].split("## To Reproduce")[0]
    assert "`aten.upsample_bilinear2d.vec` of 1x1x5x6 (result 1x1x8x10)" in others
    assert "it reaches `output.2`" in others
    assert "remainder" not in others  # it agrees
    assert "XLA returns int64, as CPU does" in text
    assert_nothing_the_reader_cannot_see(text, tmp_path)


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
    assert text.startswith("# float16 `aten.softplus.default` on XLA returns inf where CPU")
    assert "It reaches the program's outputs" in text and "`grad.fc1.weight`" in text
    assert "The same operation differs the same way on XLA (SPMD)." in text
    assert_nothing_the_reader_cannot_see(text, tmp_path)
