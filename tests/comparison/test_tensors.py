"""The comparison engine: per-tensor numbers, chunking that changes nothing, JSON round trips,
and first-divergence localisation on a real run of the seed template."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TEST_TEMPLATES

from reprokit.comparison import tensors
from reprokit.comparison.checkpoints import load_tensors
from reprokit.comparison.tensors import compare_tensor, compare_tensors
from reprokit.generate.render import render
from reprokit.generate.variants import load_variants
from reprokit.records import Comparison, DiffSummary, Worst, divergence_summary, first_divergence


def pairs() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Reference/target pairs with every kind of difference: small, large, NaN, inf, -0."""
    torch.manual_seed(0)
    base = torch.randn(5, 7)
    noisy = base + torch.randn(5, 7) * 1e-3
    special = base.clone()
    special[0, :4] = torch.tensor([float("nan"), float("inf"), -0.0, 1e30])
    target = special.clone()
    target[0, 0], target[0, 1], target[1, 1] = float("nan"), float("-inf"), float("nan")
    return [
        (base, base.clone()),
        (base, noisy),
        (special, target),
        (base.double(), noisy.double()),
        (base.bfloat16(), noisy.bfloat16()),
        (torch.arange(12).reshape(3, 4), torch.arange(12).reshape(3, 4).flip(0)),
        (torch.tensor(1.5), torch.tensor(2.5)),
        (torch.ones(0, 3), torch.ones(0, 3)),
    ]


@pytest.mark.parametrize("index", range(len(pairs())))
def test_chunked_comparison_gives_the_same_result(monkeypatch, index):
    expected, actual = pairs()[index]
    whole = compare_tensor("t", expected, actual)
    monkeypatch.setattr(tensors, "CHUNK", 3)  # many chunks, some of one element
    assert compare_tensor("t", expected, actual).to_json() == whole.to_json()


def test_numbers_of_one_comparison():
    expected = torch.tensor([[1.0, 2.0], [3.0, float("nan")]])
    actual = torch.tensor([[1.0, 2.5], [3.0, float("nan")]])
    c = compare_tensor("w", expected, actual, rtol=0.0, atol=0.1)
    assert (c.mismatched, c.total, c.allclose, c.equal) == (1, 4, False, False)
    assert (c.max_abs, c.max_rel, c.nan) == (0.5, 0.25, (1, 1))
    assert c.worst == (Worst((0, 1), 2.5, 2.0),)
    assert "1 / 4 mismatched" in c.describe()
    assert "reference[0, 1] = 2.0, target[0, 1] = 2.5" in c.describe()  # the reference first


def test_same_values_nan_and_inf_in_place_are_equal():
    t = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    c = compare_tensor("t", t, t.clone())
    assert c.allclose and c.equal and c.max_abs == 0.0
    assert c.nan == (1, 1) and c.inf == (2, 2)


def test_shape_and_dtype_mismatches_are_reported_not_raised():
    shape = compare_tensor("s", torch.ones(2, 3), torch.ones(3, 2))
    assert not shape.allclose and "shape [3, 2] vs [2, 3]" in shape.describe()
    dtype = compare_tensor("d", torch.ones(3), torch.ones(3, dtype=torch.float16))
    assert not dtype.allclose and dtype.mismatched == 0 and "dtype" in dtype.note


def test_json_round_trip_is_valid_json_even_with_nan_and_inf():
    expected, actual = pairs()[2]
    comparisons = compare_tensors({"a": expected, "gone": expected}, {"a": actual, "new": actual})
    text = json.dumps([c.to_json() for c in comparisons], allow_nan=False)
    back = [Comparison.from_json(d) for d in json.loads(text)]
    assert [c.to_json() for c in back] == [c.to_json() for c in comparisons]
    summary = DiffSummary.of(comparisons)
    assert summary.only_in_reference == ("gone",) and summary.only_in_target == ("new",)
    assert summary.equal + summary.close + summary.differ + 2 == summary.tensors == 3


def fake_run(bad: set[str]) -> list[Comparison]:
    names = ["param.0.weight", "act.0", "act.1", "act.2", "output"]
    ones = {n: torch.ones(4) for n in names}
    return compare_tensors(ones, {n: torch.ones(4) * (2 if n in bad else 1) for n in names})


def test_divergence_summary_in_words():
    assert divergence_summary(fake_run(set())) == "all 5 tensors agree"
    assert divergence_summary(fake_run({"act.1", "act.2"})).startswith(
        "param.0.weight through act.0 agree; act.1 is the first to differ (4 / 4 mismatched, "
        "max abs 1)"
    )
    assert divergence_summary(fake_run({"param.0.weight"})).startswith("param.0.weight is the")
    assert first_divergence(fake_run({"act.2"})).tensor == "act.2"


def run_stages(script, workdir, *waves: list[str]) -> None:
    """The script's stages, those of one wave at once (as `reprokit run` may): faster here."""
    for wave in waves:
        children = [
            subprocess.Popen(
                [sys.executable, str(script), "--stage", stage, "--workdir", str(workdir)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for stage in wave
        ]
        for child in children:
            output, _ = child.communicate(timeout=300)
            assert child.returncode == 0, output[-3000:]


def ruff_clean(script: Path) -> bool:
    config = Path(__file__).parents[2] / "pyproject.toml"
    ruff = [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", config, script]
    return subprocess.run(ruff, capture_output=True).returncode == 0


def test_capture_activations_finds_the_perturbed_layer(tmp_path):
    """The seed's evaluation with its layers' outputs captured (the test-owned layer_fault
    template), 1e-3 added to layer 1's output under SPMD: act.0 agrees, act.1 is the first to
    differ."""
    case = tmp_path / "fault.toml"
    case.write_text('[case]\ntitle = "t"\ntemplate = "layer_fault"\n[params]\nperturb_layer = 1\n')
    (variant,) = load_variants([str(case)], templates=[TEST_TEMPLATES])
    script = tmp_path / "repro.py"
    script.write_text(render(variant, templates=[TEST_TEMPLATES]))
    assert ruff_clean(script)
    run_stages(script, tmp_path / "w", ["eval_cpu", "eval_spmd"])
    cpu, spmd = (load_tensors(tmp_path / "w" / s / "tensors.pt") for s in ("eval_cpu", "eval_spmd"))
    comparisons = compare_tensors(cpu, spmd, reference="eval_cpu", target="eval_spmd")
    names = [c.tensor for c in comparisons]
    assert names.index("act.0") < names.index("act.1") < names.index("output")  # run order
    assert first_divergence(comparisons).tensor == "act.1"
    assert all(c.allclose for c in comparisons[: names.index("act.1")])
    assert "act.1 is the first to differ" in divergence_summary(comparisons)


def test_seed_captures_activations_only_when_asked(tmp_path):
    """The seed template's hooks (layer_fault has a copy, with the fault) are in its
    script with capture_activations, ruff-clean, and not at all without."""
    (hooked,) = load_variants(["xser_to_spmd"], sets={"capture_activations": True})
    script = tmp_path / "repro.py"
    script.write_text(render(hooked))
    assert ruff_clean(script)
    assert "register_forward_hook" in script.read_text()
    assert "1e-3" not in script.read_text()  # the test-only fault lives in tests/data only
    (plain,) = load_variants(["xser_to_spmd"])
    assert "register_forward_hook" not in render(plain)


def test_the_fp64_method_records_the_bound_its_verdict_rests_on():
    """bf16 results: the target may be at most 3x the reference's error against float64, plus
    tol / 10; the bound is recorded so that a report can show what the verdict rests on."""
    exact = torch.linspace(-1, 1, 2000, dtype=torch.float64)
    reference = exact.to(torch.bfloat16)
    target = (exact + 1e-3).to(torch.bfloat16)
    found = compare_tensor("x", reference, target, arbiter=exact)
    ref_error, target_error = found.errors
    assert found.method == "fp64" and found.bound == pytest.approx(3 * ref_error + 1e-5)
    assert found.allclose is (target_error <= found.bound)
    assert compare_tensor("x", reference, target).bound is None  # allclose: no bound


def test_a_dtype_only_difference_is_said_as_such_and_stays_a_mismatch():
    """XLA's cumsum of a bool tensor is bool where CPU's is int64: while the sums stay 0 or 1
    the values are equal, and the note says so; beyond, it says the dtypes alone."""
    mask = torch.tensor([False, True, False, False])
    cpu, xla = mask.cumsum(0), mask.cumsum(0).bool()  # [0, 1, 1, 1] in two dtypes
    found = compare_tensor("node.0003.cumsum", cpu, xla, reference="cpu", target="xla",
                           arbiter=cpu)  # fmt: skip
    assert not found.allclose and found.max_abs == 0 and not found.equal
    assert found.note == "values equal; dtype bool on xla, int64 on cpu"
    assert found.describe() == "node.0003.cumsum: values equal; dtype bool on xla, int64 on cpu"
    saturated = compare_tensor("c", torch.tensor([1, 2, 3]), torch.ones(3, dtype=torch.bool))
    assert saturated.note == "dtype bool on target, int64 on reference" and saturated.max_abs == 2


def test_integer_results_are_judged_with_the_float64_run_in_view():
    """An index computed from floats (T5's position buckets in bf16): where the target equals
    the float64 run's and the reference is the one off, it is not the target's mismatch."""
    fp64 = torch.tensor([0, 3, 7, 9, 12])
    cpu_off = torch.tensor([0, 3, 8, 9, 12])
    assert compare_tensor("bucket", cpu_off, fp64.clone(), arbiter=fp64).allclose
    assert not compare_tensor("bucket", fp64, cpu_off, arbiter=fp64).allclose  # target off
    assert not compare_tensor("bucket", cpu_off, fp64.clone()).allclose  # allclose: no view
