"""The torchax stage of a captured program (`--set torchax=true`): every operation through
torchax on JAX, in a uv environment of its own (torch 2.9.0, torchax 0.0.13, jax[cpu]), judged
against float64; torch_xla's bundled torchax untouched.

The environment is built once per session (under the session's shared cache: about 30 s with
uv's cache warm, a minute or two from PyPI: jax and jaxlib are the new downloads), and one run
of both dtypes serves every assertion here (about 90 s on two busy cores).
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reprokit.cli import app
from reprokit.records import Outcome, Stage, Status, read_summary
from reprokit.runner.dag import checked_stages

MODELS = Path(__file__).parents[1] / "data" / "torchax" / "models.py"

MATRIX = '\n[matrix]\ndtype = ["float32", "bfloat16"]\n'


@pytest.fixture(scope="module")
def torchax_run(shared_root, tmp_path_factory) -> Path:
    """mlp_norm captured, run in float32 and bfloat16 with the torchax stage, every operation
    recorded (nodes = all: by default, only where the outputs differ); its run folder."""
    folder = tmp_path_factory.mktemp("torchax")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REPROKIT_CACHE", str(shared_root))  # the environment: built once
        captured = CliRunner().invoke(app, ["capture", f"{MODELS}:mlp_norm", "-o", str(folder)])
        assert captured.exit_code == 0, captured.output
        case = folder / "mlp_norm.toml"
        text = case.read_text().replace("\n[compare]", MATRIX + "\n[compare]")
        case.write_text(text)
        run = folder / "run"
        result = CliRunner().invoke(
            app, ["run", str(case), "--set", "torchax=true", "--set", "nodes=all", "-o", str(run)]
        )
        assert result.exit_code == 0, result.output
        assert CliRunner().invoke(app, ["report", str(run)]).exit_code == 0
    return run


def variant(run: Path, dtype: str):
    return next(v for v in read_summary(run).variants if v.label.startswith(f"mlp_norm[{dtype}"))


@pytest.mark.slow
def test_the_torchax_stage_ran_in_its_own_environment_and_matches_in_float32(torchax_run):
    found = variant(torchax_run, "float32")
    stage = next(s for s in found.stages if s.name == "torchax")
    assert stage.status is Status.OK
    assert stage.versions["torchax"] == "0.0.13" and stage.versions["jax"]
    assert stage.versions["torch_xla"] is None  # an environment without torch_xla
    compared = [c for c in found.comparisons if c.target == "torchax"]
    assert [c.tensor for c in compared] == [
        "node.0000.linear",
        "node.0001.layer_norm",
        "node.0002.linear",
        "output.0",
    ]  # fmt: skip  (every operation recorded)
    assert all(c.allclose and c.reference == "cpu" for c in compared)
    assert found.outcome is Outcome.MATCH


@pytest.mark.slow
def test_the_bfloat16_difference_is_found_at_layer_norm_and_judged_by_float64(torchax_run):
    found = variant(torchax_run, "bfloat16")
    compared = [c for c in found.comparisons if c.target == "torchax"]
    first = next(c for c in compared if c.mismatched)  # beyond bf16's rtol, elementwise
    assert first.tensor == "node.0001.layer_norm"  # layer_norm's statistics in bfloat16
    assert first.method == "fp64"
    cpu_error, torchax_error = first.errors
    assert torchax_error > cpu_error  # worse than CPU against float64...
    assert torchax_error <= first.bound  # ...but within the rule's bound: rounding, not a bug
    assert found.outcome is Outcome.MATCH


@pytest.mark.slow
def test_the_report_names_torchax_jax_and_jaxlib(torchax_run):
    report = (torchax_run / "report.md").read_text()
    assert "torchax 0.0.13 on jax " in report and "(jaxlib " in report
    assert "torchax vs cpu" in report


@pytest.mark.slow
def test_torch_xla_keeps_its_own_torchax(torchax_run):
    """The main environment's torchax is torch_xla's copy, byte for byte as it installed it."""
    code = (
        "import importlib.util, torch_xla; "
        "print(importlib.util.find_spec('torchax').origin); print(torch_xla.__version__)"
    )
    env = {"PJRT_DEVICE": "CPU", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True)  # fmt: skip
    origin, version = done.stdout.split()[-2:]
    site = Path(origin).parents[1]
    record = next(site.glob("torch_xla-*.dist-info")) / "RECORD"
    line = next(r for r in record.read_text().splitlines() if r.startswith("torchax/__init__.py,"))
    digest = base64.urlsafe_b64encode(hashlib.sha256(Path(origin).read_bytes()).digest())
    assert line.split(",")[1] == "sha256=" + digest.decode().rstrip("=")
    assert '__version__ = "0.0.6"' in Path(origin).read_text() and version.startswith("2.9")


def test_a_stage_names_its_environment_and_a_bad_one_is_refused():
    item = {"name": "t", "backend": "cpu", "needs": [], "env": "tx=torch==2.9.0 torchax==0.0.13"}
    (stage,) = checked_stages([item])
    assert stage.env == "tx=torch==2.9.0 torchax==0.0.13"
    assert Stage.from_json(stage.to_json()) == stage
    assert "env" not in Stage("a", "cpu").to_json()  # summary.json as before for the others
    with pytest.raises(ValueError, match="stage 't': env"):
        checked_stages([item | {"env": "no requirements"}])


def test_the_standalone_script_says_what_the_torchax_stage_needs(cli, tmp_path):
    """Run by a python without torchax and jax (the main one: torch_xla's torchax needs jax),
    the stage ends with what to install, and the script is as ruff-clean as every other."""
    script = tmp_path / "repro.py"
    assert cli("render", "captured_cnn_bf16", "--set", "torchax=true", "-o", script).exit_code == 0
    config = Path(__file__).parents[2] / "pyproject.toml"
    ruff = [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", config, script]
    assert subprocess.run(ruff, capture_output=True).returncode == 0
    done = subprocess.run([sys.executable, script, "--stage", "torchax"], capture_output=True,
                          text=True, cwd=tmp_path)  # fmt: skip
    assert done.returncode != 0
    assert "pip install torch==2.9.0 torchax==0.0.13 jax[cpu]==0.10.2" in done.stderr
