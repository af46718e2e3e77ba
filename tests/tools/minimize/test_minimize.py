"""reprokit minimize as users call it: an injected divergence and a crash shrink to the
smallest variants that still show them, the result reproduces on its own, the budget and the
cache hold."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from reprokit.records import EnvSpec, read_summary

DATA = Path(__file__).parents[2] / "data" / "minimize"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path / "cache"))


def minimize(cli, out: Path, case: str, *extra: str):
    result = cli("minimize", DATA / case, "--templates", DATA, "-o", out, *extra)
    assert result.exit_code == 0, result.output
    return json.loads((out / "summary.json").read_text())["run"]["minimized"], result


def minimal_params(out: Path) -> dict:
    return tomllib.loads((out / "minimal.toml").read_text()).get("params", {})


def test_injected_divergence_shrinks_to_the_injected_layer(cli, tmp_path):
    report, result = minimize(cli, tmp_path / "m", "diverge.toml", "-n", "2")
    assert report["target"] == "mismatch (act.#)"
    assert minimal_params(tmp_path / "m") == {
        "layers": 4,
        "width": 1,
        "steps": 1,
        "optimizer": "sgd",
    }
    assert report["candidates"] <= 40
    assert re.search(r"layers\W+8\W+4", result.stdout)  # the table: parameter, before, after
    assert {c["param"]: (c["before"], c["after"]) for c in report["changes"]}["layers"] == (8, 4)
    # the minimal case reproduces on its own, through the ordinary runner
    rerun = cli("run", tmp_path / "m" / "minimal.toml", "--templates", DATA, "-o", tmp_path / "r")
    assert rerun.exit_code == 0, rerun.output  # its expect is mismatch, and it mismatches
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["variants"][0]["first_divergence"] == {"target": "act.3"}
    # the report of the minimize folder says what was minimized
    assert cli("report", tmp_path / "m", "--format", "md").exit_code == 0
    body = (tmp_path / "m" / "report.md").read_text()
    assert "Minimized from `layers=8" in body
    assert "| mismatch | mismatch | yes |" in body  # the outcome it kept is the expected one
    assert "| Python | ? |" not in body and "| torch |" in body  # with its environment
    # a second call finds every candidate in the cache: nothing runs twice
    again, _ = minimize(cli, tmp_path / "m2", "diverge.toml", "-n", "2")
    assert again["candidates"] == 0
    assert again["cache_hits"] >= report["candidates"]
    assert minimal_params(tmp_path / "m2") == minimal_params(tmp_path / "m")


@pytest.mark.slow
def test_crash_shrinks_and_still_crashes(cli, tmp_path):
    report, _ = minimize(cli, tmp_path / "m", "crashes.toml", "-n", "2")
    assert report["target"] == "crash (target)"
    assert minimal_params(tmp_path / "m")["layers"] == 3
    rerun = cli("run", tmp_path / "m" / "minimal.toml", "--templates", DATA, "-o", tmp_path / "r")
    assert rerun.exit_code == 0, rerun.output  # expect crash, and it crashes
    assert (
        json.loads((tmp_path / "r" / "summary.json").read_text())["variants"][0]["outcome"]
        == "crash"
    )


def test_budget_stops_with_the_best_so_far(cli, tmp_path):
    report, _ = minimize(cli, tmp_path / "m", "diverge.toml", "--budget", "3")
    assert report["candidates"] == 3
    assert report["stopped"] == "budget"
    assert (tmp_path / "m" / "minimal.toml").is_file() and (tmp_path / "m" / "repro.py").is_file()


needs_uv = pytest.mark.skipif(
    importlib.util.find_spec("uv") is None and shutil.which("uv") is None,
    reason="uv is not installed (pip install 'reprokit[envs]')",
)
SIX = ("six", "six==1.17.0")  # the smallest real environment: built in a second or so


def in_env_case(tmp_path: Path, name: str, *, env: bool) -> Path:
    """A case of in_env.py.j2, in an environment with `six` (the target then aborts on deep
    models) or in reprokit's own python (the target then raises: no `six`)."""
    text = '[case]\ntitle = "where it runs"\ntemplate = "in_env"\n'
    text += f'\n[envs]\n{SIX[0]} = "{SIX[1]}"\n' if env else ""
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


@needs_uv
def test_a_case_with_an_environment_is_minimized_in_it_and_cached_apart(cli, tmp_path):
    out = tmp_path / "m"
    result = cli("minimize", in_env_case(tmp_path, "six", env=True), "--templates", DATA,
                 "-o", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "summary.json").read_text())["run"]["minimized"]
    assert report["target"] == "crash (target)"  # the environment's python has six
    assert minimal_params(out) == {"layers": 3}
    minimal = tomllib.loads((out / "minimal.toml").read_text())
    assert minimal["envs"] == {SIX[0]: [SIX[1]]}  # the minimal case runs where it was found
    (kept,) = read_summary(out).variants
    assert kept.env == EnvSpec(SIX[0], (SIX[1],)) and kept.label == "six@six"
    # the same script in reprokit's own python is another candidate, not a cache hit
    mine = tmp_path / "mine"
    again = cli("minimize", in_env_case(tmp_path, "six", env=False), "--templates", DATA,
                "-o", mine)  # fmt: skip
    assert again.exit_code == 0, again.output
    report = json.loads((mine / "summary.json").read_text())["run"]["minimized"]
    assert report["target"] == "error (target)" and report["candidates"] >= 1
