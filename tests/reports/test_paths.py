"""Paths as a public issue may show them: relative to the run folder or under ``~``, never the
machine's layout (its user name, its folders), in report.md and in the bundle's text files."""

from __future__ import annotations

import zipfile

from conftest import DATA, TEST_TEMPLATES

import reprokit
from reprokit.reports.bundle import TEXT
from reprokit.reports.paths import public_paths


def test_a_path_in_the_run_folder_is_relative_to_it_and_one_under_home_uses_the_tilde():
    text = (
        "from /home/al/project/model.py:14: x = f(x)\n"
        "reprokit run /home/al/project/case.toml -o /home/al/runs/seed\n"
        "reused from /home/al/runs/seed/case/stages/xla\n"
    )
    assert public_paths(text, run_dir="/home/al/runs/seed", home="/home/al") == (
        "from ~/project/model.py:14: x = f(x)\n"
        "reprokit run ~/project/case.toml -o ~/runs/seed\n"
        "reused from case/stages/xla\n"
    )


def test_another_users_home_and_other_folders_are_left_as_they_are():
    text = "/home/alice/x and /home/al.d/y and /opt/data/z and /home/al"
    assert (
        public_paths(text, home="/home/al")
        == "/home/alice/x and /home/al.d/y and /opt/data/z and ~"
    )
    assert public_paths("/x/y", run_dir="/", home="/") == "/x/y"  # the root is no one's layout


def test_an_installed_packages_file_is_said_from_its_packages_folder_on():
    line = 'File "/home/al/.venv/lib/python3.11/site-packages/torch/nn/linear.py", line 134'
    assert (
        public_paths(line, home="/home/al") == 'File "site-packages/torch/nn/linear.py", line 134'
    )
    assert public_paths("/usr/lib/python3/dist-packages/numpy/a.py") == "dist-packages/numpy/a.py"


def test_a_folder_is_matched_as_given_and_as_resolved(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    text = f"{real}/a.py {tmp_path / 'link'}/b.py"
    assert public_paths(text, home=tmp_path / "link") == "~/a.py ~/b.py"


def test_a_case_under_home_leaves_no_absolute_path_in_the_report_or_the_bundle(
    tmp_path, monkeypatch
):
    home = tmp_path / "home" / "someone"
    project = home / "project"
    project.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    case = project / "mismatch.toml"
    case.write_text((DATA / "cases" / "mismatch.toml").read_text())
    run_dir = home / "runs" / "seed"
    variants = reprokit.load_cases([str(case)], templates=[TEST_TEMPLATES])
    argv = ["reprokit", "run", str(case), "-o", str(run_dir)]
    options = reprokit.Options(templates=(TEST_TEMPLATES,))
    reprokit.run(variants, run_dir=run_dir, options=options, argv=argv)
    summary_text = (run_dir / "summary.json").read_text()
    assert str(home) in summary_text  # the records keep what the run saw; the reports do not
    reprokit.report(run_dir)
    report = (run_dir / "report.md").read_text()
    assert str(home) not in report and str(tmp_path) not in report
    assert "reprokit run ~/project/mismatch.toml -o ~/runs/seed" in report
    for name in ("report.html", "report.json"):
        assert str(home) not in (run_dir / name).read_text()
    with zipfile.ZipFile(run_dir / "bundle.zip") as bundle:
        texts = {n: bundle.read(n).decode() for n in bundle.namelist() if n.endswith(tuple(TEXT))}
    assert "summary.json" in texts and any(n.endswith("repro.py") for n in texts)
    assert [n for n, text in texts.items() if str(home) in text or str(tmp_path) in text] == []


def test_a_path_in_the_folder_the_command_ran_in_is_written_as_the_user_typed_it():
    """A sweep list's own model (/tmp/trial/models.py:build) showed the machine's folder."""
    text = "reprokit sweep /tmp/trial/models.py:build -o /tmp/trial/runs/sw; ~ at /home/al/x"
    said = public_paths(text, run_dir="/tmp/trial/runs/sw", home="/home/al", cwd="/tmp/trial")
    assert said == "reprokit sweep models.py:build -o runs/sw; ~ at ~/x"
    # a folder holding home is no user's project: ~ says more
    assert public_paths("/home/al/x", home="/home/al", cwd="/home") == "~/x"
