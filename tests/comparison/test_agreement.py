"""One comparison semantics: the table a rendered script prints (`python repro.py`) and the
harness's comparisons (`reprokit run`) agree on the same saved tensors, tensor by tensor:
NaN, inf, dtype and shape mismatches, names on one side, and the fp64 method."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TEST_TEMPLATES

from reprokit.comparison.verdict import compare_stages, verdict
from reprokit.generate.render import render
from reprokit.generate.variants import load_variants
from reprokit.records import Outcome, Stage, StageResult, Status

NAN, INF = float("nan"), float("inf")


def saved_tensors() -> dict[str, dict[str, torch.Tensor]]:
    """What three stages saved: every kind of difference a comparison meets."""
    torch.manual_seed(0)
    base = torch.randn(40, 30)
    ref = {
        "equal": base,
        "noise": base,
        "far": base,
        "nan_same": torch.tensor([1.0, NAN, 3.0]),
        "nan_one_side": torch.tensor([1.0, 2.0, 3.0]),
        "inf_same": torch.tensor([INF, -INF, 1.0]),
        "inf_flipped": torch.tensor([INF, 2.0]),
        "dtype": torch.ones(3),
        "shape": torch.ones(2, 3),
        "ints": torch.arange(6),
        "half": base.bfloat16(),
        "scalar": torch.tensor(1.5),
        "empty": torch.ones(0, 3),
        "only_in_ref": torch.ones(2),
        "nan_in_ref": torch.tensor([1.0, NAN, 3.0]),
        "one_by_one": base[:6, :1].reshape(2, 3, 1, 1),
        "zero_ref": torch.tensor([0.0, 2.0]),
        "index_ref_off": torch.tensor([0, 1, 2, 4]),  # an index computed from floats (T5)
        "index_target_off": torch.tensor([0, 1, 2, 3]),
    }
    target = {
        "equal": base.clone(),
        "noise": base + 1e-4 * torch.randn(40, 30),  # outside float32's default tolerance
        "far": base + 1.0,
        "nan_same": torch.tensor([1.0, NAN, 3.0]),
        "nan_one_side": torch.tensor([1.0, NAN, 3.0]),
        "inf_same": torch.tensor([INF, -INF, 1.0]),
        "inf_flipped": torch.tensor([-INF, 2.0]),
        "dtype": torch.ones(3, dtype=torch.float64),
        "shape": torch.ones(3, 2),
        "ints": torch.arange(6).flip(0),
        "half": (base + 0.05).bfloat16(),
        "scalar": torch.tensor(2.5),
        "empty": torch.ones(0, 3),
        "only_in_target": torch.ones(2),
        "nan_in_ref": torch.tensor([1.0, 2.0, 3.0]),
        "one_by_one": base[:6, :1].reshape(2, 3, 1, 1) + 1e-3,
        "zero_ref": torch.tensor([0.5, 2.5]),
        "index_ref_off": torch.tensor([0, 1, 2, 3]),
        "index_target_off": torch.tensor([0, 1, 2, 5]),
    }
    # float64 truth: the target's noise is as far from it as the reference is: fp64 forgives
    fp64 = {name: t.double() + 1e-4 * torch.randn(t.shape, dtype=torch.float64)
            for name, t in ref.items() if t.is_floating_point()}  # fmt: skip
    fp64["nan_in_ref"] = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)  # the target is right
    fp64["index_ref_off"] = fp64["index_target_off"] = torch.tensor([0, 1, 2, 3])  # float64's
    return {"ref": ref, "target": target, "fp64": fp64}


def same_number(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b or math.isclose(a, b, rel_tol=1e-12)


@pytest.mark.parametrize("method", ["allclose", "fp64"])
def test_script_and_harness_agree(tmp_path, write_case, method):
    case = write_case(f'[case]\ntitle = "t"\ntemplate = "agree"\n[compare]\nmethod = "{method}"\n')
    (variant,) = load_variants([str(case)], templates=[TEST_TEMPLATES])
    script = render(variant, templates=[TEST_TEMPLATES])
    for stage, tensors in saved_tensors().items():
        (tmp_path / "stages" / stage).mkdir(parents=True)
        torch.save(tensors, tmp_path / "stages" / stage / "tensors.pt")
    namespace = {"__name__": "repro", "__file__": str(tmp_path / "repro.py")}
    exec(compile(script, "repro.py", "exec"), namespace)
    rows = {row["tensor"]: row for row in namespace["compare"](tmp_path / "stages")}

    stages = [Stage.from_json(s) for s in namespace["STAGES"]]
    results = {s.name: StageResult(s.name, s.backend, Status.OK) for s in stages}
    harness = {c.tensor: c for c in compare_stages(variant, stages, results, tmp_path).comparisons}

    assert rows.keys() == harness.keys()  # the target's names, then the reference's alone
    for name, row in rows.items():
        c = harness[name]
        assert row["close"] == c.allclose, (name, row, c)
        assert (row["mismatched"], row["total"]) == (c.mismatched, c.total), name
        assert same_number(row["max_abs"], c.max_abs), (name, row["max_abs"], c.max_abs)
        assert same_number(row["max_rel"], c.max_rel), (name, row["max_rel"], c.max_rel)
    # the cases that make the test bite
    assert harness["nan_same"].allclose and not harness["nan_one_side"].allclose
    assert harness["nan_one_side"].max_abs == INF == harness["inf_flipped"].max_abs
    assert not harness["dtype"].allclose and not harness["only_in_target"].allclose
    assert harness["noise"].allclose is (method == "fp64")  # fp64 forgives float noise
    assert not harness["far"].allclose  # but not a real difference
    # relative to references that are not 0: 0.5 / 2, not 0.5 / 0
    assert (harness["zero_ref"].max_abs, harness["zero_ref"].max_rel) == (0.5, 0.25)
    assert harness["nan_in_ref"].allclose is (method == "fp64")  # dynamo: the target is better
    # integers judged with the float64 run in view: the target equal to it is not the one off
    assert harness["index_ref_off"].allclose is (method == "fp64")
    assert not harness["index_target_off"].allclose


def test_a_variant_without_a_stage_is_an_error_never_a_match(tmp_path):
    """Seen once under -n 2 (a Python SystemError ended the run): a variant recorded with no
    stages was judged a match, since no comparison disagreed."""
    (variant,) = load_variants(["xser_to_spmd"])
    found = verdict(variant, [], {}, tmp_path, 0.0)
    assert (found.outcome, found.reason) == (Outcome.ERROR, "no stage ran")
