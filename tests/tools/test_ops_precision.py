"""Precision apart from bugs (tools/ops/worker/precision.py, docs/ops.md): the bound on a half
type's rounding, unit by unit (ulps, the bound scaled to the terms, which does not collapse when CPU
is exact, the terms from the op's Jacobian, the dtype of the intermediates); the float32 re-run
on real XLA:CPU deciding; and a real sweep where trapezoid and interpolate's area mode are
precision, listed apart, while upsampling's 12% error, softplus's inf and poisson_nll_loss's
inf (float16 ``mean`` overflowing, named as its cause) stay groups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from reprokit.comparison.tensors import compare_tensor
from reprokit.records.ops import OPS as OPS_JSON
from reprokit.records.ops import read_ops
from reprokit.reports.ops import REPORT, markdown
from reprokit.tools.ops.worker import precision

F16, BF16 = torch.float16, torch.bfloat16


def t(*values: float, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def test_an_ulp_is_the_dtype_spacing_at_the_value():
    assert precision.ulp(t(1.0, 1.5, 0.77, 4096.0), F16).tolist() == [2**-10, 2**-10, 2**-11, 4.0]
    assert precision.ulp(t(1.0), BF16).item() == 2**-7
    assert precision.ulp(t(0.0, 1e-7), F16).tolist() == [2**-24, 2**-24]  # subnormal spacing
    assert precision.ulp(t(float("inf"), float("nan")), F16).isinf().all()


def test_the_bound_does_not_collapse_where_cpu_is_exact():
    """trapezoid's witness: CPU gives float64's 0.766602 exactly, XLA 4 ulps above it. The fp64
    rule (a few times CPU's own error, here 0) calls that a divergence; the scaled bound (its
    terms, two trapezoids of that size, sum to twice the result) does not."""
    f64 = t(0.7666015625)
    cpu, xla = f64.to(F16), t(0.7685546875).to(F16)
    fp64_rule = compare_tensor("r", cpu, xla, arbiter=f64)
    assert fp64_rule.errors[0] == 0 and not fp64_rule.allclose
    assert precision.within(xla, f64, 2 * f64.abs(), F16)
    assert precision.ulps(xla, f64, F16) == pytest.approx(4.0)
    # with no terms known, the result's own magnitude: 2 eps |y| + 2 ulps is still 5 ulps here
    assert precision.within(xla, f64, torch.zeros(1), F16)


def test_a_bug_is_beyond_the_bound():
    """upsample_bilinear's 12% in bfloat16, an inf where float64 is 541, 9 ulps of a result
    whose terms are no larger than it: none is rounding."""
    assert not precision.within(t(0.7734375).to(BF16), t(0.875), t(0.875), BF16)
    assert not precision.within(t(float("inf")).to(F16), t(541.037), t(541.037), F16)
    nine = t(0.7666015625 + 9 * 2**-11)
    assert not precision.within(nine.to(F16), t(0.7666015625), t(0.7666015625), F16)


def test_the_bound_scales_with_the_terms_not_the_result():
    """A result that cancels its terms (1024 - 1023.5 in float16) is off by their rounding:
    within eps of the terms, though thousands of ulps of the result itself."""
    f64, xla, terms = t(0.5), t(1.0).to(F16), t(2047.5)
    assert precision.within(xla, f64, terms, F16)
    assert not precision.within(xla, f64, f64.abs(), F16)
    assert precision.ulps(xla, f64, F16, terms) < 2 < precision.ulps(xla, f64, F16)


def test_terms_are_the_sum_of_the_products_magnitudes():
    """For a sum of products, sum_i |dy/dx_i| |x_i| is the terms' magnitudes, once per
    factor; a cancelling sum's terms stay large where its result is small."""
    x = t(3.0, -3.0, 1e-3)
    found, how = precision.terms(torch.sum, (x, (), {}), 0)
    assert found.item() == pytest.approx(6.001) and how == "jacobian"
    a, b = t(1.0, -2.0), t(3.0, 4.0)
    assert precision.terms(torch.dot, (a, (b,), {}), 0)[0].item() == pytest.approx(2 * (3 + 8))
    assert precision.terms(torch.sum, (torch.arange(3), (), {}), 0) is None  # no floats


def test_terms_too_many_for_a_jacobian_are_estimated_from_below():
    """A 400 x 400 matrix product (its Jacobian 160,000 x 400 entries per input): the sum of
    |a_ik b_kj| over k, estimated by random signs, at most the exact one and within a few
    times of it."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(400, 400, dtype=torch.float64, generator=g) for _ in range(2))
    exact = 2 * (a.abs() @ b.abs())
    found, how = precision.terms(torch.matmul, (a, (b,), {}), 0)
    assert how == "estimate" and found.shape == exact.shape
    ratio = found / exact
    assert bool((ratio <= 1 + 1e-9).all()) and float(ratio.median()) > 0.05


def test_terms_of_inputs_without_a_derivative_leave_them_out():
    """batch_norm's running statistics have no derivative: x, weight and bias still count."""
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    stats = (torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    args = (x, stats, {"weight": torch.ones(3, dtype=torch.float64), "training": True})
    found, _ = precision.terms(torch.nn.functional.batch_norm, args, 0)
    assert found.shape == x.shape and bool((found > 0).all())


def test_intermediates_are_float32_where_the_result_is_its_float32_run_rounded():
    wide = t(0.1, 0.2, float("nan")).float()
    assert precision.intermediates(wide.to(F16), wide) == "float32"
    assert precision.intermediates(wide.to(F16) + t(0.001).to(F16), wide) == "float16"


JUDGED = """
import json, torch
from torch.testing._internal.common_methods_invocations import op_db
from reprokit.tools.ops.worker import judge, precision
from reprokit.tools.ops.worker.main import _device, _fallbacks
device, fallbacks = _device("xla"), _fallbacks("xla")
op = next(o for o in op_db if o.name == "trapezoid")
# trapezoid's samples in float16 whose XLA result is not CPU's bit for bit
found = []
for sample in op.sample_inputs("cpu", torch.float16):
    fallbacks(clear=True)
    verdict = judge.judge(op, sample, torch.float16, device, grad=False, fallbacks=fallbacks)
    if verdict["verdict"] == "match":
        continue
    run = judge._runner(op, sample, torch.float16, grad=False, inplace=False)
    results = (run("cpu"), run(device), run("cpu", f64=True))
    def asked(agree, fell=lambda clear=False: []):
        return precision.explain(sample, run, results, [0], made=None, agree=agree,
                                 fallbacks=fell, device=device)
    found.append({
        "verdict": verdict,
        "right": asked(lambda *a: True),
        "wrong_in_float32": asked(lambda *a: False),
        "fell_back": asked(lambda *a: True, lambda clear=False: [] if clear else ["aten::x"]),
    })
print(json.dumps(found))
"""


def test_the_float32_run_on_xla_decides(tmp_path):
    """On real XLA:CPU: trapezoid's float16 samples that differ are precision (XLA keeps its
    intermediates in float16); the same difference is not where the float32 run would be
    judged wrong, nor where XLA fell back to CPU in float32 (its answer CPU's)."""
    env = dict(os.environ, PJRT_DEVICE="CPU")
    done = subprocess.run(
        [sys.executable, "-c", JUDGED], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found, "no float16 sample of trapezoid differs: nothing checked"
    for each in found:
        assert each["verdict"]["verdict"] == "precision", each
        assert each["verdict"]["intermediates"] == "float16"
        assert each["verdict"]["ulps"] <= precision.TERMS + precision.ULPS + 2
        assert each["right"]["verdict"] == "precision"
        assert each["wrong_in_float32"] is None and each["fell_back"] is None


GROWS = """
import json, torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import SampleInput
from reprokit.tools.ops.worker import judge
from reprokit.tools.ops.worker.main import _device, _fallbacks
device, fallbacks = _device("xla"), _fallbacks("xla")
op = next(o for o in op_db if o.name == "nn.functional.avg_pool1d")
found = {}
for n in (64, 4096):  # one window over n values from 0.5 to 1.5: their mean is 1
    x = torch.linspace(0.5, 1.5, n).to(torch.bfloat16).reshape(1, 1, n)
    fallbacks(clear=True)
    v = judge.judge(op, SampleInput(x, args=(n,)), torch.bfloat16, device, grad=False,
                    fallbacks=fallbacks)
    found[n] = [v["verdict"], v.get("kind")]
print(json.dumps(found))
"""


def test_an_error_that_grows_with_the_size_stays_a_bug():
    """bfloat16 avg_pool1d over one window on real XLA:CPU: its sum kept in bfloat16 is
    right over 64 values and 2 instead of 1 over 4,096. No factor of the size in the bound:
    the large window is a divergence, not precision."""
    env = dict(os.environ, PJRT_DEVICE="CPU")
    done = subprocess.run(
        [sys.executable, "-c", GROWS], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["64"][0] in ("match", "precision"), found
    assert found["4096"] == ["differs", "value"], found


STRESSED = """
import json, torch
from torch.testing._internal.common_methods_invocations import op_db
from reprokit.tools.ops.worker import judge
from reprokit.tools.ops.worker.main import _device, _fallbacks
device, fallbacks = _device("xla"), _fallbacks("xla")
op = next(o for o in op_db if o.name == "nn.functional.batch_norm" and not o.variant_test_name)
found = []
for sample in op.sample_inputs("cpu", torch.float16):
    fallbacks(clear=True)
    v = judge.judge(op, sample, torch.float16, device, grad=False, fallbacks=fallbacks)
    found.append([v["verdict"], v.get("detail", "")])
print(json.dumps(found))
"""


def test_a_rounding_that_grows_with_the_mean_is_a_bug():
    """float16 batch_norm in training on real XLA:CPU is 1-4 ulps off at OpInfo's values, which
    the bound and the float32 run pass; its variance as E[x^2] - E[x]^2 is far off once the
    input's mean is shifted (float32 [[10000.], [10001.]]: +-158 where CPU gives +-1). The
    stressed sample tells it: a divergence saying the error grows, no sample left precision."""
    env = dict(os.environ, PJRT_DEVICE="CPU")
    done = subprocess.run(
        [sys.executable, "-c", STRESSED], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert not [v for v in found if v[0] == "precision"], found
    assert any(v[0] == "differs" and "an error that grows" in v[1] for v in found), found


OPS = [
    "trapezoid",
    "nn.functional.interpolate",
    "nn.functional.softplus",
    "nn.functional.poisson_nll_loss",
]


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    root = tmp_path_factory.mktemp("precision")
    env = dict(os.environ, REPROKIT_CACHE=str(root / "cache"), PJRT_DEVICE="CPU")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", "ops", *OPS]
    command += ["--dtypes", "float16,bfloat16", "--edge", "-n", "1", "-o", str(root / "out")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    return root / "out", done


def test_precision_is_listed_apart_and_bugs_stay_groups(swept):
    folder, done = swept
    assert done.returncode == 1, done.stdout + done.stderr
    sweep = read_ops(folder)
    listed = {(p["op"], p["variant"]): p for p in sweep.precision}
    grouped = {(g.op, g.variant, g.kind) for g in sweep.groups}
    for key in [("trapezoid", ""), ("nn.functional.interpolate", "area")]:
        assert key in listed, sorted(listed)
        assert not any(g[:2] == key for g in grouped), grouped
        found = listed[key]
        assert found["ulps"] <= 8 and found["samples"] >= 1
        assert set(found["intermediates"].values()) <= {"float16", "bfloat16"}
    assert listed[("trapezoid", "")]["witness"]["dtype"] in ("float16", "bfloat16")
    # the real bugs: 12% off in bilinear upsampling, softplus's inf where CPU is finite
    assert ("nn.functional.interpolate", "bilinear", "value") in grouped
    assert ("nn.functional.softplus", "", "nan-inf") in grouped
    assert sum(r.verdict == "precision" for r in sweep.records) == sum(
        p["samples"] for p in sweep.precision
    )


def test_a_cause_shared_by_losses_is_named_at_mean(swept):
    """poisson_nll_loss's float16 inf: its unreduced terms agree with CPU's, XLA's own mean of
    them is the inf: the group says its cause, and report.md names it once under `mean`."""
    folder, _ = swept
    sweep = read_ops(folder)
    (loss,) = [g for g in sweep.groups if g.op == "nn.functional.poisson_nll_loss"]
    assert (loss.kind, loss.cause, loss.dtypes) == ("nan-inf", "mean", ("float16",))
    report = (folder / REPORT).read_text()
    assert "## Causes shared by several ops" in report and "- `mean`:" in report
    assert "## Precision (a half type's rounding, not bugs)" in report
    section = report.split("## Precision", 1)[1].split("\n## ", 1)[0]
    assert "`trapezoid`" in section and "`nn.functional.softplus`" not in section


def test_the_report_renders_an_older_ops_json_without_precision(tmp_path, swept):
    """ops.json from before the precision field: no section, no error."""
    folder, _ = swept
    data = json.loads((folder / OPS_JSON).read_text())
    data.pop("precision")
    for g in data["groups"]:
        g.pop("cause")
    (tmp_path / OPS_JSON).write_text(json.dumps(data))
    text = markdown(read_ops(tmp_path))
    assert "## Precision" not in text and "## Causes shared" not in text
    assert textwrap.dedent(text).startswith("# reprokit ops:")
