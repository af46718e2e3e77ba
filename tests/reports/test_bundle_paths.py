"""bundle.zip holds no path of the machine's layout: not the Python environment's (sys.prefix,
site-packages in stack traces), not the home folder, not where the model and the run folder
are (a captured program's path, the command line, the .pt2's own stack traces), while the run
folder itself keeps what the run recorded; the reports name no Python environment either."""

from __future__ import annotations

import sys
import textwrap
import zipfile

import torch
from typer.testing import CliRunner

import reprokit
from reprokit.cli import app
from reprokit.reports.paths import public_paths

REPORTS = ("report.md", "report.html", "report.json")
MODEL = """
import torch


class Scale(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x) * 2


def make():
    return Scale().eval(), (torch.linspace(-1, 1, 6).reshape(2, 3),)
"""


def test_no_member_names_the_environment_the_home_or_the_folders_of_the_run(tmp_path, monkeypatch):
    home = tmp_path / "home" / "al"
    project = home / "project"
    project.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    (project / "mymodel.py").write_text(textwrap.dedent(MODEL))
    captured = CliRunner().invoke(
        app, ["capture", f"{project / 'mymodel.py'}:make", "-o", str(project / "mine")]
    )
    assert captured.exit_code == 0, captured.output
    case = project / "mine" / "make.toml"
    run_dir = tmp_path / "runs" / "seed"
    argv = [f"{sys.prefix}/bin/reprokit", "run", str(case), "-o", str(run_dir)]
    reprokit.run(reprokit.load_cases([str(case)]), run_dir=run_dir, argv=argv)
    recorded = (run_dir / "summary.json").read_text()
    assert str(project) in recorded and sys.prefix in recorded  # the run folder is as it was
    reprokit.report(run_dir)

    machine = [sys.prefix, str(home), str(tmp_path), str(tmp_path.resolve())]
    with zipfile.ZipFile(run_dir / "bundle.zip") as bundle:
        members = {name: bundle.read(name) for name in bundle.namelist()}
    assert "make/make.pt2" in members and "summary.json" in members
    leaks = [(n, p) for n, data in members.items() for p in machine if p.encode() in data]
    assert leaks == []
    reports = {name: (run_dir / name).read_bytes() for name in REPORTS}
    assert [n for n, data in reports.items() if sys.prefix.encode() in data] == []
    assert b"<venv>/bin/reprokit" in reports["report.json"]  # the environment as the bundle's
    summary = members["summary.json"].decode()
    assert '"<venv>/bin/reprokit"' in summary and '"runs/seed"' in summary
    assert '"program": "mine/make.pt2"' in summary
    program = tmp_path / "bundled.pt2"  # its stack traces rewritten, still a program
    program.write_bytes(members["make/make.pt2"])
    loaded = torch.export.load(program)
    traces = "".join(n.meta.get("stack_trace") or "" for n in loaded.graph.nodes)
    assert "mymodel.py" in traces and str(project) not in traces
    (out,) = loaded.module()(torch.linspace(-1, 1, 6).reshape(2, 3))
    assert out.shape == (2, 3)


def test_an_environment_is_written_as_venv_after_its_packages_folder():
    text = "/e/v/bin/python /e/v/lib/python3.11/site-packages/torch/a.py /e/vx/b"
    assert public_paths(text, prefixes=["/e/v"]) == (
        "<venv>/bin/python site-packages/torch/a.py /e/vx/b"
    )
    assert public_paths("/data/al/models/m.pt2 /data/al/modelsx", named=["/data/al/models"]) == (
        "models/m.pt2 /data/al/modelsx"
    )
