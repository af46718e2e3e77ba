"""Variables travel with the case: a case's [variables] and the steering variables exported
when `reprokit run` ran reach every stage, are recorded per variant in summary.json, set at the
top of repro.py (which then runs alone in a clean environment), and shown in "To Reproduce";
secrets never are."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEST_TEMPLATES

from reprokit.records import Outcome, RunSummary, VariantResult
from reprokit.reports.build import rerun_command
from reprokit.tools.capture import command

CASE = """
    [case]
    title = "environ"
    template = "environ"

    [matrix]
    name = ["RK_VALUE", "XLA_RK_EXPORTED"]

    [variables]
    RK_VALUE = "{value}"
"""
TOKEN = "s3cr3t-value-42"


def run(cli, path, out):
    result = cli("run", path, "--templates", TEST_TEMPLATES, "-o", out)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    return {v["label"]: v for v in summary["variants"]}


def seen(variant):
    """What each stage of a variant saw of the variable its template reports."""
    return [stage["metrics"]["seen"] for stage in variant["stages"]]


def test_variables_reach_the_stages_summary_script_and_to_reproduce(
    cli, write_case, tmp_path, monkeypatch
):
    monkeypatch.setenv("XLA_RK_EXPORTED", "5")
    monkeypatch.setenv("XLA_RK_TOKEN", TOKEN)  # steering by its prefix, a secret by its name
    monkeypatch.setenv("XLA_RK_NOTE", "hf_" + "Zq8" * 12)  # a secret by its shape
    out = tmp_path / "run"
    found = run(cli, write_case(CASE.format(value="7")), out)
    own, exported = found["case[RK_VALUE]"], found["case[XLA_RK_EXPORTED]"]
    assert seen(own) == [[7.0], [7.0]] and seen(exported) == [[5.0], [5.0]]
    assert own["variables"] == {"RK_VALUE": "7", "XLA_RK_EXPORTED": "5"}
    assert own["case_variables"] == ["RK_VALUE"]
    script = (out / "case[XLA_RK_EXPORTED]" / "repro.py").read_text()
    assert script.index('os.environ.setdefault("XLA_RK_EXPORTED", "5")') < script.index(
        "import torch"
    )
    assert TOKEN not in script and "XLA_RK_TOKEN" not in script and "XLA_RK_NOTE" not in script
    assert cli("report", out).exit_code == 0
    body = (out / "report.md").read_text()
    to_reproduce = body.split("## To Reproduce")[1].split("##")[0]
    assert "XLA_RK_EXPORTED=5 reprokit" in to_reproduce  # (argv: in-process, pytest's)
    assert "RK_VALUE=" not in to_reproduce  # the case's come with the case
    assert TOKEN not in body and "XLA_RK_TOKEN" not in to_reproduce


def test_the_script_alone_in_a_clean_environment_sees_them(cli, write_case, tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_RK_EXPORTED", "5")
    out = tmp_path / "run"
    run(cli, write_case(CASE.format(value="7")), out)
    clean = ["env", "-i", f"PATH={os.environ['PATH']}", sys.executable, "repro.py"]
    for label, value in [("case[RK_VALUE]", 7.0), ("case[XLA_RK_EXPORTED]", 5.0)]:
        folder = out / label
        subprocess.run([*clean, "--stage", "first", "--workdir", "alone"], cwd=folder,
                       check=True)  # fmt: skip
        result = json.loads((folder / "alone" / "first" / "result.json").read_text())
        assert result["metrics"]["seen"] == [value]


def test_an_exported_value_wins_over_the_cases_and_is_recorded_as_exported(
    cli, write_case, tmp_path, monkeypatch
):
    monkeypatch.setenv("RK_VALUE", "9")  # not steering: it wins in the stage, not recorded
    monkeypatch.setenv("XLA_RK_EXPORTED", "5")
    found = run(cli, write_case(CASE.format(value="7")), tmp_path / "run")
    assert seen(found["case[RK_VALUE]"]) == [[9.0], [9.0]]
    # a steering one the case names too: the exported value is the stages', and recorded
    case = CASE.format(value="7") + '    XLA_RK_EXPORTED = "3"\n'
    found = run(cli, write_case(case, "other"), tmp_path / "other")
    variant = found["other[XLA_RK_EXPORTED]"]
    assert seen(variant) == [[5.0], [5.0]]
    assert variant["variables"]["XLA_RK_EXPORTED"] == "5"
    assert variant["case_variables"] == ["RK_VALUE"]


def test_the_results_cache_runs_a_stage_again_when_a_variable_changes(
    cli, write_case, tmp_path, monkeypatch
):
    monkeypatch.setenv("XLA_RK_EXPORTED", "5")
    out = tmp_path / "run"
    run(cli, write_case(CASE.format(value="7")), out)
    again = run(cli, write_case(CASE.format(value="7")), out)
    assert all(s["reused"] for v in again.values() for s in v["stages"])
    changed = run(cli, write_case(CASE.format(value="8")), out)  # the case's
    assert seen(changed["case[RK_VALUE]"]) == [[8.0], [8.0]]
    monkeypatch.setenv("XLA_RK_EXPORTED", "6")  # the run's
    changed = run(cli, write_case(CASE.format(value="8")), out)
    assert seen(changed["case[XLA_RK_EXPORTED]"]) == [[6.0], [6.0]]
    assert not any(s["reused"] for s in changed["case[XLA_RK_EXPORTED]"]["stages"])


def variant(variables, case_variables=()):
    return VariantResult("c", "c", {}, Outcome.MATCH, Outcome.MATCH, 1.0,
                         variables=variables, case_variables=case_variables)  # fmt: skip


def test_the_rerun_command_quotes_values_and_leaves_the_cases_and_secrets_out():
    summary = RunSummary(
        "now",
        argv=("reprokit", "run", "c.toml"),
        variants=(
            variant({"XLA_FLAGS": "--xla_a --xla_b", "RK": "1"}, ("RK",)),
            variant({"XLA_FLAGS": "--xla_a --xla_b", "XLA_NOTE": "hf_" + "Zq8" * 12}),
        ),
    )
    command = rerun_command(summary)
    assert command.startswith("XLA_FLAGS='--xla_a --xla_b' XLA_NOTE=[REDACTED] reprokit run")
    assert "RK=" not in command.replace("XLA_", "")
    assert rerun_command(RunSummary("now", argv=("reprokit", "run", "c"))) == "reprokit run c"


MODELS = Path(__file__).parents[1] / "data" / "variables" / "models.py"


@pytest.mark.slow
def test_a_case_that_fails_only_under_an_exported_variable_minimizes_to_a_repro_that_does_too(
    cli, tmp_path, monkeypatch
):
    """The issue's user: XLA_USE_32BIT_LONG=1 exported, an int64 offset no int32 holds; the
    minimized repro.py, run alone with env -i, fails the same way."""
    case = command(f"{MODELS}:offsets", out_dir=tmp_path / "captured")
    monkeypatch.setenv("XLA_USE_32BIT_LONG", "1")
    out = tmp_path / "m"
    result = cli("minimize", case, "-o", out, "--budget", "12")
    assert result.exit_code == 0, result.output
    report = json.loads((out / "summary.json").read_text())["run"]["minimized"]
    assert "value cannot be converted to type int without overflow" in report["target"]
    assert 'XLA_USE_32BIT_LONG = "1"' in (out / "minimal.toml").read_text()
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in ("repro.py", "inputs.pt"):
        if (out / name).is_file():
            shutil.copyfile(out / name, alone / name)
    clean = ["env", "-i", f"PATH={os.environ['PATH']}", f"HOME={alone}", sys.executable, "-I"]
    done = subprocess.run([*clean, "repro.py"], cwd=alone, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # the short repro: XLA raises
    assert "value cannot be converted to type int without overflow" in done.stderr
    monkeypatch.delenv("XLA_USE_32BIT_LONG")  # and the variable is what it fails by
    done = subprocess.run([*clean[:4], "XLA_USE_32BIT_LONG=0", *clean[4:], "repro.py"],
                          cwd=alone, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
