"""An argument value OpInfo's samples rarely hold: ``dim=[]``, which torch reads as every dim
and XLA as none. ``reprokit ops var std --edge`` gives a shape group for each, its trigger
``dim = []`` confirmed on new samples, known (empty_dim_reductions.md), reproducing alone; and
report.md names the condition once with every op it hits."""

from __future__ import annotations

import os
import subprocess
import sys

from reprokit.records.ops import read_ops


def test_var_and_std_with_an_empty_dim_list_are_groups_whose_trigger_says_it(tmp_path):
    env = dict(os.environ, REPROKIT_CACHE=str(tmp_path / "cache"), REPROKIT_WARM_IDLE="0")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", "ops", "var"]
    command += ["std", "--edge", "--dtypes", "float32", "-o", str(tmp_path / "out")]
    done = subprocess.run(
        command, env=env | {"PJRT_DEVICE": "CPU"}, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 1, done.stdout + done.stderr
    groups = {g.op: g for g in read_ops(tmp_path / "out").groups}
    assert set(groups) == {"var", "std"}
    for group in groups.values():
        assert group.kind == "shape" and group.witness["described"]["kwargs"] == {"dim": "[]"}
        assert group.trigger["condition"] == "dim = []" and not group.trigger["refuted"]
        assert group.known == "empty_dim_reductions.md"
        assert group.reproduces_alone is True, group.alone_output
    report = (tmp_path / "out" / "report.md").read_text()  # one cause, every op it hits
    assert "- when dim = []: `std` (forward, shape), `var` (forward, shape)." in report
