"""Recall of ``reprokit ops`` (docs/ops.md, "Recall"): bugs the sweep missed, found end to end
on real XLA:CPU, and the pieces that find them, each checked on its own:

- NaN in, a number out (``threshold(NaN, t, v)`` is v on XLA, ``softshrink(NaN)`` 0): float64's
  NaN had made both errors NaN, which the fp64 rule passes;
- a reference that knows the dtype's defaults: bfloat16 ``nan_to_num`` leaves inf on XLA, and
  CPU's bfloat16 max is right, not ``cpu_wrong``;
- dtypes beyond OpInfo's list (cumsum of bool) and call forms it leaves out (clamp with one
  number bound).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import SampleInput

from reprokit.records.ops import read_ops
from reprokit.tools.ops.worker import dtypes, forms, reference, samples


def _op(name: str):
    return next(o for o in op_db if o.name == name and not o.variant_test_name)


def reprokit(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, REPROKIT_CACHE=str(root / "cache"), REPROKIT_WARM_IDLE="0")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", *args]
    return subprocess.run(
        command, env=env | {"PJRT_DEVICE": "CPU"}, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    root = tmp_path_factory.mktemp("recall-edge")
    ops = ["nn.functional.threshold", "nn.functional.softshrink", "nan_to_num"]
    args = ["--dtypes", "float32,bfloat16", "--edge", "-n", "1", "-o", str(root / "out")]
    return root / "out", reprokit("ops", *ops, *args, root=root)


@pytest.fixture(scope="module")
def beyond(tmp_path_factory):
    root = tmp_path_factory.mktemp("recall-beyond")
    args = ["--dtypes", "float32,bool,int32", "-n", "1", "-o", str(root / "out")]
    return root / "out", reprokit("ops", "cumsum", "clamp", *args, root=root)


def test_nan_in_a_number_out_is_a_group_for_threshold_and_softshrink(edge):
    folder, done = edge
    assert done.returncode == 1, done.stdout + done.stderr
    sweep = read_ops(folder)
    for op in ("nn.functional.threshold", "nn.functional.softshrink"):
        (group,) = [g for g in sweep.groups if g.op == op]
        assert group.kind == "nan-inf" and group.backend == "xla"
        assert set(group.dtypes) == {"float32", "bfloat16"}
        assert group.reproduces_alone is True
    said = [g.witness["detail"] for g in sweep.groups if g.op == "nn.functional.softshrink"]
    assert "are numbers on the backend" in said[0] and "cpu nan, float64 nan" in said[0]


def test_an_op_whose_arguments_are_required_gets_its_edge_line_with_them(edge):
    folder, _ = edge
    threshold = [r for r in read_ops(folder).records if r.op == "nn.functional.threshold"]
    assert not [r for r in threshold if "TypeError" in r.reason]
    lines = [r for r in threshold if r.edge and r.described.get("tensors")]
    assert any(r.described["tensors"][0].endswith("[45]") for r in lines)


def test_bfloat16_nan_to_num_is_xlas_group_and_cpu_is_not_blamed(edge):
    folder, _ = edge
    sweep = read_ops(folder)
    (group,) = [g for g in sweep.groups if g.op == "nan_to_num"]
    assert group.dtypes == ("bfloat16",)
    assert group.kind == "nan-inf" and group.owner != "torch"
    assert not [e for e in sweep.cpu_wrong if e["op"] == "nan_to_num"]


def test_cumsum_of_bool_swept_though_opinfo_leaves_bool_out(beyond):
    folder, done = beyond
    assert done.returncode == 1, done.stdout + done.stderr
    sweep = read_ops(folder)
    (entry,) = [e for e in sweep.ops if e["op"] == "cumsum"]
    assert entry["dtypes_added"] == ["bool"] and "int32" in entry["dtypes"]
    (group,) = [g for g in sweep.groups if g.op == "cumsum" and g.kind == "dtype"]
    assert set(group.dtypes) == {"bool", "int32"} and group.known == "cumsum_bool_int32.md"


def test_clamp_with_one_number_bound_is_found_and_known(beyond):
    folder, _ = beyond
    sweep = read_ops(folder)
    (group,) = [g for g in sweep.groups if g.op == "clamp"]
    assert group.kind == "nan-inf" and group.known == "clamp_omitted_bound.md"
    assert group.witness["described"]["name"] == forms.NAME
    assert "None" in group.witness["described"]["args"]


def test_clamp_forms_are_the_number_ones_opinfo_lacks():
    op = _op("clamp")
    made = list(op.sample_inputs("cpu", torch.float32))
    found = forms.forms(op, made, torch.float32)
    shapes = [tuple(type(a).__name__ for a in f.args) for f in found]
    assert sorted(shapes) == sorted([("float", "NoneType"), ("NoneType", "float"), ("float",) * 2])
    assert found[0].input.reshape(-1)[:2].tolist() == [float("inf"), float("-inf")]
    (low, high), *_ = [f.args for f in found if None not in f.args]
    assert low <= high
    assert forms.forms(_op("abs"), [], torch.float32) == []


def test_the_float64_reference_takes_the_dtypes_own_limits():
    op, x = _op("nan_to_num"), torch.tensor([float("inf")], dtype=torch.bfloat16)
    pinned = reference.pinned(op, SampleInput(x), torch.bfloat16)
    assert pinned.kwargs["posinf"] == torch.finfo(torch.bfloat16).max
    given = SampleInput(x, kwargs={"posinf": 1.0, "neginf": -1.0})
    assert reference.pinned(op, given, torch.bfloat16) is given
    assert reference.pinned(_op("abs"), SampleInput(x), torch.bfloat16).kwargs == {}


def test_nan_lost_names_the_numbers_where_cpu_and_float64_give_nan():
    nan = float("nan")
    c, t, f = torch.tensor([nan, 1.0]), torch.tensor([7.0, 1.0]), torch.tensor([nan, 1.0]).double()
    assert "1/2 NaN" in reference.nan_lost(c, t, f) and "backend 7" in reference.nan_lost(c, t, f)
    assert reference.nan_lost(c, c.clone(), f) is None
    assert reference.nan_lost(c, t, None) is None


def test_a_dtype_cpu_refuses_is_not_added_and_one_it_runs_is():
    assert dtypes.swept(_op("cumsum"), ["bool", "float32"]) == (["bool", "float32"], ["bool"])
    assert dtypes.swept(_op("nn.functional.softshrink"), ["int32"]) == ([], [])
    assert dtypes.swept(_op("cumsum"), ["bool"], probe=False) == ([], [])


def test_a_small_floating_input_gets_a_nan_seeded_edge_sample():
    op = _op("nn.functional.hardtanh")
    made = list(samples.op_samples(op, torch.float32, grad=False, edge=True))
    seeded = [s for s in made if s.name == samples.NAN]
    assert seeded and all(bool(s.input.reshape(-1)[0].isnan()) for s in seeded)


def test_a_generator_that_raises_in_an_added_dtype_is_a_skip_not_a_dead_worker(tmp_path):
    """svd's OpInfo generator calls torch.linalg.svd, which CPU lacks in bfloat16 after the
    first samples (bfloat16 added beyond OpInfo's list): one skip said as CPU's, the samples
    made before it judged, no worker lost."""
    args = ["--dtypes", "bfloat16", "-n", "1", "-o", str(tmp_path / "out")]
    done = reprokit("ops", "linalg.svd", *args, root=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    swept = read_ops(tmp_path / "out")
    assert swept.skips.get("CPU raises NotImplementedError") == 1
    assert not any("worker failed" in reason for reason in swept.skips)
    assert sum(swept.skips.values()) > 1  # the samples made before it were run
