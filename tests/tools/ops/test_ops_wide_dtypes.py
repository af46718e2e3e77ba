"""float64 and complex dtypes swept: ``torch.view_as_complex`` of a float64 tensor on XLA comes
back to the CPU with its imaginary parts zero. Its group's repro compares both parts of a
complex result (a real part alone would agree) and exits 1 alone."""

from __future__ import annotations

from ops_sweep import sweep_ops

from reprokit.records.ops import read_ops


def test_view_as_complex_in_float64_is_a_group_whose_repro_compares_both_parts(tmp_path):
    out, done = sweep_ops(tmp_path, "view_as_complex", "--dtypes", "float64")
    assert done.returncode == 1, done.stdout + done.stderr
    (group,) = read_ops(out).groups
    assert (group.op, group.dtypes, group.kind) == ("view_as_complex", ("float64",), "value")
    assert group.reproduces_alone is True and "xla 0  cpu" in group.alone_output
    assert "view_as_real" in (out / group.repro).read_text()
