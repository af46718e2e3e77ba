"""End to end: the seed scenario's rendered script runs for real on XLA:CPU."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from reprokit.generate.render import render
from reprokit.generate.variants import load_variants


def run_seed_script(tmp_path, broken: str | None = None, **sets) -> subprocess.CompletedProcess:
    """Render the seed case, run the script as a maintainer would, in tmp_path/w; ``broken``:
    a stage made to raise first thing."""
    (seed,) = load_variants(["xser_to_spmd"], sets=sets)
    script = tmp_path / "repro.py"
    text = render(seed)
    if broken:
        header = f"def {broken}(workdir: Path):\n"
        assert header in text
        text = text.replace(header, header + '    raise RuntimeError("broken on purpose")\n')
    script.write_text(text)
    return subprocess.run(
        [sys.executable, str(script), "--workdir", str(tmp_path / "w")],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_seed_script_runs_every_stage_and_compares(tmp_path):
    result = run_seed_script(tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for stage in ("train_multicore", "convert", "eval_cpu", "eval_spmd"):
        assert f"== {stage}" in result.stdout
    rows = {
        m[1]: m
        for m in re.finditer(
            r"^eval_spmd\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)/(\d+)$", result.stdout, re.M
        )
    }
    assert {"output", "loss", "param.0.weight"} <= set(rows)
    assert rows["output"][4] == "0"  # nothing mismatched on XLA:CPU
    assert (tmp_path / "w/train_multicore/model.xser.tensors").is_dir()  # xser really wrote it
    assert (tmp_path / "w/convert/dcp").is_dir()  # and CheckpointManager converted it
    train = json.loads((tmp_path / "w/train_multicore/result.json").read_text())
    assert len(train["metrics"]["train_loss"]) == 4  # the template's train_steps
    xla = json.loads((tmp_path / "w/eval_spmd/result.json").read_text())["xla"]  # torch_xla's view
    assert (xla["device_kind"], xla["devices"], xla["fallbacks"]) == ("CPU", 4, [])
    assert xla["compile"]["count"] >= 1 and xla["execute"]["count"] >= 1


def test_seed_script_exit_code_2_when_a_stage_fails(tmp_path):
    """A broken stage is reported, the stages needing it are skipped, exit code 2."""
    result = run_seed_script(tmp_path, broken="convert")
    assert result.returncode == 2
    assert "failed or skipped: convert, eval_spmd" in result.stdout
    assert "RuntimeError: broken on purpose" in result.stdout + result.stderr
