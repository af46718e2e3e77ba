"""XLA:CPU flushes subnormal values to zero inside an op too, not only at its inputs and result:
``3 / x`` is computed as ``3 * (1 / x)`` (1 / 1e38 is subnormal), and ``atan2`` of two
subnormals is NaN. End to end on real XLA:CPU, the edge samples of ``__rdiv__`` and ``atan2``
are that one platform class (ops.json's ``platform``), not groups: the sweep judged them
artefacts of flushing before (docs/ops.md, "Artefacts"), and would again without the check."""

from __future__ import annotations

import os
import subprocess
import sys

from reprokit.records.ops import read_ops


def test_subnormals_flushed_inside_an_op_are_the_platform_class_not_groups(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, REPROKIT_CACHE=str(tmp_path / "cache"), REPROKIT_WARM_IDLE="0")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", "ops"]
    command += ["__rdiv__", "atan2", "--dtypes", "float32", "--edge", "-n", "1", "-o", str(out)]
    done = subprocess.run(command, env=env | {"PJRT_DEVICE": "CPU"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    sweep = read_ops(out)
    assert not sweep.groups
    flushed = sweep.platform["subnormal flushing"]
    assert set(flushed["ops"]) == {"__rdiv__", "atan2"}
    assert flushed["samples"] == sum(r.verdict == "platform" for r in sweep.records)
    assert any(r.verdict == "match" for r in sweep.records if r.op == "atan2")
