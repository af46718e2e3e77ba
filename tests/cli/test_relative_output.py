"""Every command's -o (and convert's target) given as a relative folder, as users type it: it
lands under the folder the command ran in, and nothing fails because some process (the warm
server, a worker) runs elsewhere. `reprokit ops -o out` ended in os.chdir's FileNotFoundError.
(sweep is capture and run into one folder, both here; bisect needs torch_xla releases.)"""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import DATA, TEST_TEMPLATES
from typer.testing import CliRunner

from reprokit.cli import app

CASE = DATA / "cases" / "mismatch.toml"
T = ("--templates", str(TEST_TEMPLATES))


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    """A folder with one run made in it by `reprokit run ... -o runs/seed`."""
    folder = tmp_path_factory.mktemp("relative")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setenv("REPROKIT_CACHE", str(folder / "cache"))
        done = invoke("run", CASE, *T, "-o", "runs/seed")
    assert done.exit_code == 0, done.output
    return folder


@pytest.fixture
def cwd(here, monkeypatch):
    monkeypatch.chdir(here)
    return here


def test_run_writes_its_folder_under_the_current_one(cwd):
    assert json.loads((cwd / "runs/seed/summary.json").read_text())["variants"][0]["passed"]


def test_report_render_merge_and_convert(cwd):
    assert invoke("report", "runs/seed", "-o", "out/report").exit_code == 0
    assert (cwd / "out/report/bundle.zip").is_file() and (cwd / "out/report/report.md").is_file()
    assert invoke("render", CASE, *T, "-o", "out/render/repro.py").exit_code == 0
    assert (cwd / "out/render/repro.py").is_file()
    merged = invoke("merge", "runs/seed", "runs/seed", *T, "-o", "out/merged")
    assert merged.exit_code == 0, merged.output
    assert (cwd / "out/merged/summary.json").is_file()
    tensors = "runs/seed/mismatch/stages/first/tensors.pt"
    converted = invoke("convert", tensors, "out/x.safetensors")  # into a folder that is there
    assert converted.exit_code == 0, converted.output
    assert (cwd / "out/x.safetensors").is_file()


def test_minimize(cwd):
    done = invoke("minimize", CASE, *T, "--budget", "2", "-o", "out/min")
    assert done.exit_code == 0, done.output
    assert (cwd / "out/min/minimal.toml").is_file() and (cwd / "out/min/repro.py").is_file()


def test_wrap(cwd):
    (cwd / "mine.py").write_text("print('hello')\n")
    done = invoke("wrap", "-o", "out/wrapped", "--", "python", "mine.py")
    assert done.exit_code == 0, done.output
    assert (cwd / "out/wrapped/summary.json").is_file()


def test_capture(cwd):
    (cwd / "tiny.py").write_text(
        textwrap.dedent("""
        import torch


        def make():
            torch.manual_seed(0)
            return torch.nn.Linear(3, 2).eval(), (torch.randn(2, 3),)
        """)
    )
    done = invoke("capture", "tiny.py:make", "-o", "out/captured")
    assert done.exit_code == 0, done.output
    assert (cwd / "out/captured/make.toml").is_file() and (cwd / "out/captured/make.pt2").is_file()


def test_ops_with_its_workers_forked_by_the_warm_server(cwd):
    done = invoke("ops", "abs", "--dtypes", "float32", "-o", "out/ops")
    assert done.exit_code == 0, done.output
    assert (cwd / "out/ops/report.md").is_file()
