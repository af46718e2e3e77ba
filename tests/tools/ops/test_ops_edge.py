"""Edge samples where OpInfo's samples leave gaps. An argument value they rarely hold: ``dim=[]``,
which torch reads as every dim and XLA as none. ``reprokit ops var std --edge`` gives a shape
group for each, its trigger ``dim = []`` confirmed on new samples, known
(empty_dim_reductions.md), reproducing alone; and report.md names the condition once with every
op it hits. And a base that XLA lowers: ``adaptive_avg_pool2d``'s largest samples fall back to
CPU (an output size that does not divide the input), so its edge samples are made from one that
lowers, and judged, not skipped."""

from __future__ import annotations

import pytest
from ops_sweep import sweep_ops

from reprokit.records.ops import read_ops


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    ops = ["var", "std", "nn.functional.adaptive_avg_pool2d"]
    return sweep_ops(tmp_path_factory.mktemp("edge"), *ops, "--edge", "--dtypes", "float32")


def test_var_and_std_with_an_empty_dim_list_are_groups_whose_trigger_says_it(swept):
    folder, done = swept
    assert done.returncode == 1, done.stdout + done.stderr
    groups = {g.op: g for g in read_ops(folder).groups}
    assert set(groups) == {"var", "std"}
    for group in groups.values():
        assert group.kind == "shape" and group.witness["described"]["kwargs"] == {"dim": "[]"}
        assert group.trigger["condition"] == "dim = []" and not group.trigger["refuted"]
        assert group.known == "empty_dim_reductions.md"
        assert group.reproduces_alone is True, group.alone_output
    report = (folder / "report.md").read_text()  # one cause, every op it hits
    assert "- when dim = []: `std` (forward, shape), `var` (forward, shape)." in report


def test_edge_samples_are_made_from_a_base_xla_lowers(swept):
    folder, _ = swept
    pooled = [
        r for r in read_ops(folder).records
        if r.op == "nn.functional.adaptive_avg_pool2d" and r.edge
    ]  # fmt: skip
    assert pooled and not [r for r in pooled if r.reason.startswith("CPU fallback")], pooled
    assert [r for r in pooled if r.verdict in ("match", "differs", "precision")]
