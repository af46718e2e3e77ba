"""``reprokit ops --mesh``: each sample on XLA under SPMD with its tensor arguments sharded on a
mesh of XLA:CPU's virtual devices, against the same sample unsharded. The specs are pure
(reprokit.tools.ops.mesh); the sweep is real: workers forked warm, SPMD on 4 devices."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reprokit.errors import ReprokitError
from reprokit.records.ops import read_ops
from reprokit.tools.ops.mesh import CONTROL, parse, placements, specs


def test_specs_split_each_dim_on_each_axis_both_axes_and_views():
    found = specs((2, 2))
    assert found[0] == CONTROL
    for spec in ("0@x", "0@y", "-1@x", "-1@y", "0@xy", "-1@xy", "0@x,-1@y", "0@y,-1@x"):
        assert spec in found
    assert {s.partition("/")[2] for s in found} == {"", "slice", "transpose"}
    assert specs((4,)) == [CONTROL, "0@x", "-1@x", "0@x/slice", "0@x/transpose"]


def test_placements_as_mark_sharding_takes_them():
    assert placements("0@x", 3) == ("x", None, None)
    assert placements("-1@xy", 2) == (None, ("x", "y"))
    assert placements("0@x,-1@y/slice", 2) == ("x", "y")
    assert placements(CONTROL, 2) == (None, None)
    assert placements("0@x,-1@y", 1) is None  # one dim cannot be split twice
    assert placements("0@x", 0) is None  # a scalar has no dim to split


@pytest.mark.parametrize("text", ["1x4", "3x3", "2x2x2x2", "two", ""])
def test_a_mesh_that_cannot_be_laid_out_is_refused(text):
    with pytest.raises(ReprokitError, match="--mesh"):
        parse(text)
    assert parse("2x4") == (2, 4) and parse("4") == (4,)


def reprokit(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, REPROKIT_CACHE=str(cache), REPROKIT_WARM_IDLE="0", PJRT_DEVICE="CPU")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


def test_a_bad_mesh_is_one_clear_message_and_exit_2(tmp_path):
    done = reprokit("ops", "cumsum", "--mesh", "3x3", cache=tmp_path)
    assert done.returncode == 2
    assert "--mesh '3x3' is not a mesh" in done.stderr and "Traceback" not in done.stderr


def test_each_spec_is_judged_against_the_unsharded_sample(tmp_path):
    """cumsum's samples (5x5 and smaller: the 2-device split pads) under every spec of a 2x2
    mesh, the control among them: judged (not skipped) and equal to unsharded."""
    out = tmp_path / "out"
    done = reprokit("ops", "cumsum", "--mesh", "2x2", "--dtypes", "float32", "-n", "2",
                    "-o", str(out), cache=tmp_path / "cache")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on xla sharded on a 2x2 mesh (against unsharded)" in done.stdout
    sweep = read_ops(out)
    assert sweep.mesh == (2, 2)
    judged = {r.shard for r in sweep.records if r.verdict == "match"}
    assert judged == set(specs((2, 2)))  # each spec ran somewhere: the views and padding too
    assert all(r.backend == "xla_spmd" for r in sweep.records)
    # OpInfo's cumsum samples are 5 (S) along each dim: every split in two is padded
    assert sum(r.shard == "0@x" and r.verdict == "match" for r in sweep.records) >= 3
    skipped = {r.reason for r in sweep.records if r.verdict == "skip"}
    assert skipped <= {"no tensor argument has the dims of 0@x,-1@y",
                       "no tensor argument has the dims of 0@y,-1@x",
                       "no sharded argument of rank 2 or more to transpose",
                       "unsharded XLA raises RuntimeError"} | {
        f"no tensor argument has the dims of {s}" for s in specs((2, 2))}  # fmt: skip
