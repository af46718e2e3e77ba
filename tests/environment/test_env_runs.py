"""Cases run in environments of other torch_xla releases (`--env`, `[envs]`), and `reprokit
bisect` naming the release where an outcome changed. Real uv, real releases from PyPI.

xm_save_vs_xser is the library's case whose outcome changed between releases: torch 2.6 made
torch.load's weights_only=True the default, so on torch_xla 2.5 (torch 2.5) torch.load of an
xser file silently returns placeholders where the case's table says it raises: mismatch on 2.5,
match from 2.6 on (docs/cases.md).
"""

from __future__ import annotations

import json

import pytest
from conftest import TEST_TEMPLATES

from reprokit.environment.releases import release_env
from reprokit.records import Outcome, read_summary

CASE = "xm_save_vs_xser"


def env_flag(release: str) -> str:
    return f"{release}={' '.join(release_env(release).requirements)}"


@pytest.mark.slow
def test_a_case_runs_in_each_environment_with_the_versions_it_imported(shared_cache, cli, tmp_path):
    run = tmp_path / "run"
    result = cli("run", CASE, "--env", env_flag("2.8"), "--env", env_flag("2.9"), "-o", run)
    assert result.exit_code == 0, result.output
    variants = {v.label: v for v in read_summary(run).variants}
    assert set(variants) == {f"{CASE}@2.8", f"{CASE}@2.9"}
    for release in ("2.8", "2.9"):
        variant = variants[f"{CASE}@{release}"]
        assert variant.outcome is Outcome.MATCH
        assert variant.env == release_env(release)  # the record, read back from summary.json
        imported = {s.versions["torch_xla"] for s in variant.stages if s.versions["torch_xla"]}
        assert imported == {f"{release}.0"}
        assert all(s.versions["torch"].startswith(f"{release}.0") for s in variant.stages)
    assert cli("report", run).exit_code == 0
    table = (run / "report.md").read_text().split("### Environments")[1]
    assert f"| {CASE} | match | match |" in table
    assert "torch_xla 2.8.0" in table and "torch_xla 2.9.0" in table
    page = (run / "report.html").read_text()
    assert "<h2>Environments</h2>" in page and f"<th>{CASE}</th><td>match</td>" in page


@pytest.mark.slow
def test_a_case_file_names_its_environments(shared_cache, cli, write_case, tmp_path):
    case = write_case(f"""
        [case]
        title = "ok in 2.8"
        template = "faulty"

        [envs]
        "2.8" = {json.dumps(" ".join(release_env("2.8").requirements))}
    """)
    run = tmp_path / "run"
    result = cli("run", case, "--templates", TEST_TEMPLATES, "-o", run)
    assert result.exit_code == 0, result.output
    (variant,) = read_summary(run).variants
    assert (variant.label, variant.outcome) == ("case@2.8", Outcome.MATCH)


def test_a_bad_environment_is_refused_before_anything_runs(cli, write_case, tmp_path):
    case = write_case("""
        [case]
        title = "t"
        template = "faulty"

        [envs]
        old = "torch=2.5"
    """)
    result = cli("run", case, "--templates", TEST_TEMPLATES, "-o", tmp_path / "run")
    assert result.exit_code == 2
    assert "case.toml:6" in result.stderr and "[envs] old" in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_bisect_names_the_release_where_the_outcome_changed(shared_cache, cli, tmp_path):
    out = tmp_path / "bisect"
    result = cli("bisect", CASE, "--releases", "2.5,2.8,2.9", "-o", out)
    assert result.exit_code == 0, result.output
    assert "the outcome changed in torch_xla 2.8 (from 2.5; 3 of 3 releases run)" in result.stdout
    assert "2.5: mismatch  1 of 6 tensors outside tolerance; first: load:" in result.stdout
    found = json.loads((out / "bisect.json").read_text())
    assert (found["before"], found["changed"]) == ("2.5", "2.8")
    assert found["tried"] == {
        "2.5": {CASE: "mismatch"},
        "2.9": {CASE: "match"},
        "2.8": {CASE: "match"},
    }
    report = (out / "2.5" / "report.md").read_text()  # its rerun is a run on that release
    assert f"reprokit run {CASE} --env '2.5=torch==2.5.0 torch_xla==2.5.0'" in report


@pytest.mark.slow
def test_bisect_with_the_same_outcome_at_both_ends_says_so(shared_cache, cli, tmp_path):
    result = cli("bisect", CASE, "--releases", "2.8..2.9", "-o", tmp_path / "b")
    assert result.exit_code == 1, result.output
    assert "no change: 2.8 and 2.9 give the same outcome" in result.stdout
