"""float64 and complex dtypes swept: ``torch.view_as_complex`` of a float64 tensor on XLA comes
back to the CPU with its imaginary parts zero. Its group's repro compares both parts of a
complex result (a real part alone would agree) and exits 1 alone."""

from __future__ import annotations

import os
import subprocess
import sys

from reprokit.records.ops import read_ops


def test_view_as_complex_in_float64_is_a_group_whose_repro_compares_both_parts(tmp_path):
    env = dict(os.environ, REPROKIT_CACHE=str(tmp_path / "cache"), REPROKIT_WARM_IDLE="0")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", "ops"]
    command += ["view_as_complex", "--dtypes", "float64", "-o", str(tmp_path / "out")]
    done = subprocess.run(
        command, env=env | {"PJRT_DEVICE": "CPU"}, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (group,) = read_ops(tmp_path / "out").groups
    assert (group.op, group.dtypes, group.kind) == ("view_as_complex", ("float64",), "value")
    assert group.reproduces_alone is True and "xla 0  cpu" in group.alone_output
    assert "view_as_real" in (tmp_path / "out" / group.repro).read_text()
