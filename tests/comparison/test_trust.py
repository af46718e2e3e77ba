"""Verdicts you can trust (docs/verdicts.md), for real on XLA:CPU: the faithful run against the
instrumented one (fusion), each operation alone (own error), and the precision triage.

The fixture programs are tests/data/trust/models.py. One `reprokit run --triage` of three
cases, shared by every test of the module (stages and two triage reruns: the expensive part):
- moment_layer_norm: float16 E[x²] - E[x]², inputs around 8: fusion-sensitive, narrowed;
- row_sum_bf16: row sums in bfloat16 (a plain program: not fusion-sensitive), a mismatch
  that goes away in float32; triaged because of --triage (the case does not ask);
- mlp_fault: an injected fault in one operation, isolated; its case asks for the triage.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reprokit.comparison import trust
from reprokit.errors import ReprokitError
from reprokit.generate.cases import load_case
from reprokit.records import Comparison, Outcome, Stage, Triage, VariantResult, read_summary
from reprokit.tools.capture import command
from reprokit.tools.triage import ran_in_half, steps

MODELS = Path(__file__).parents[1] / "data" / "trust" / "models.py"
ROOT = Path(__file__).parents[2]

CASES = {
    "moment_layer_norm": """
[params]
program = "moment_layer_norm.pt2"
narrow = true
[compare]
method = "fp64"
""",
    "row_sum_bf16": """
[params]
program = "row_sum.pt2"
dtype = "bfloat16"
matmul_precision = "highest"  # so that its triage runs float32 alone
[expect]
outcome = "mismatch"
""",
    "mlp_fault": """
[params]
program = "mlp.pt2"
perturb_node = "node.0001.relu"
isolate = true
[compare]
method = "fp64"
[expect]
outcome = "mismatch"
triage = "persists"
""",
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The three programs captured, their cases written, one run with --triage."""
    out = tmp_path_factory.mktemp("trust")
    for model in ("moment_layer_norm", "mlp", "row_sum"):
        command(f"{MODELS}:{model}", out_dir=out)
    for name, body in CASES.items():
        head = f'[case]\ntitle = "{name}"\ntemplate = "exported_program"\n'
        (out / f"{name}.toml").write_text(head + body, encoding="utf-8")
    run_dir = out / "run"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(out),
           "REPROKIT_CACHE": str(out / "cache"), "REPROKIT_WARM_IDLE": "0"}  # fmt: skip
    cases = [str(out / f"{name}.toml") for name in CASES]
    argv = ["run", *cases, "--triage", "-n", "2", "-o", str(run_dir)]
    done = subprocess.run(
        [sys.executable, "-m", "reprokit", *argv],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert (run_dir / "summary.json").is_file(), done.stdout + done.stderr
    subprocess.run([sys.executable, "-m", "reprokit", "report", str(run_dir)], env=env,
                   capture_output=True, check=True, timeout=300)  # fmt: skip
    return run_dir, done


def variant(ran, name: str) -> VariantResult:
    return next(v for v in read_summary(ran[0]).variants if v.case == name)


@pytest.mark.slow
def test_recording_every_operation_changes_a_float16_moment_layer_norm(ran):
    found = variant(ran, "moment_layer_norm")
    assert found.fusion_sensitive is True
    (output,) = found.fusion  # the faithful run's output against the instrumented run's
    assert (output.target, output.reference, output.allclose) == ("xla_faithful", "xla", False)
    assert output.mismatched > 100
    # as measured by hand: recording E[x²], the variance or variance + eps changes them
    (alone,) = found.fusion_nodes
    assert alone in ("node.0002.mean", "node.0005.sub", "node.0006.add")
    report = (ran[0] / "report.md").read_text(encoding="utf-8")
    assert "sensitive to fusion" in report and "alone is enough to change them" in report


@pytest.mark.slow
def test_a_plain_program_is_not_fusion_sensitive(ran):
    found = variant(ran, "row_sum_bf16")
    assert found.fusion_sensitive is False
    assert [c.mismatched for c in found.fusion] == [0]


@pytest.mark.slow
def test_the_faulty_operation_alone_has_an_error_of_its_own(ran):
    found = variant(ran, "mlp_fault")
    assert found.own_divergence == {"xla": "node.0001.relu"}
    assert found.first_divergence == {"xla": "node.0001.relu"}  # the instrumented stage's
    own = {c.tensor for c in found.comparisons if c.target == "xla_isolated" and not c.allclose}
    accumulated = {c.tensor for c in found.comparisons if c.target == "xla" and not c.allclose}
    assert own == {"node.0001.relu"}  # the operations after it: only inherited error
    assert {"node.0002.linear", "node.0003.tanh"} <= accumulated
    assert "`node.0001.relu` is the first whose own error" in (ran[0] / "report.md").read_text()


@pytest.mark.slow
def test_a_bfloat16_only_mismatch_goes_away_in_float32(ran):
    found = variant(ran, "row_sum_bf16")
    assert (found.outcome, found.triage, found.expected_triage) == (
        Outcome.MISMATCH,
        "float32",
        None,
    )
    assert (ran[0] / "triage" / found.label / "float32" / "summary.json").is_file()
    assert not (ran[0] / "triage" / found.label / "highest").exists()  # it ran at highest
    assert "row_sum_bf16  triage: the mismatch goes away in float32" in ran[1].stdout


@pytest.mark.slow
def test_an_injected_fault_persists_as_its_case_expects(ran):
    found = variant(ran, "mlp_fault")
    assert (found.triage, found.expected_triage, found.passed) == ("persists", "persists", True)
    raw = json.loads((ran[0] / "summary.json").read_text())
    assert next(v for v in raw["variants"] if v["case"] == "mlp_fault")["triage"] == "persists"
    assert "the mismatch persists at highest matmul precision" in (ran[0] / "report.md").read_text()


# ---- the pure parts: no stage runs ----


def comparison(target: str, tensor: str, close: bool, reference: str = "cpu") -> Comparison:
    return Comparison(tensor, reference, target, (2,), "float32", 0.0 if close else 1.0,
                      0.0, 0 if close else 2, 2, close)  # fmt: skip


STAGES = [
    Stage("cpu", "cpu"),
    Stage("xla", "xla", reference="cpu"),
    Stage("xla_faithful", "xla", reference="cpu", role="faithful", of="xla"),
    Stage("xla_isolated", "xla", reference="cpu", role="isolated", of="xla"),
]


def test_the_outputs_verdict_is_the_faithful_runs_and_isolated_ones_are_only_told():
    found = [comparison("xla", "node.0000.add", True), comparison("xla", "output.0", False),
             comparison("xla_faithful", "output.0", True),
             comparison("xla_isolated", "node.0000.add", False)]  # fmt: skip
    judged = trust.judged(STAGES, found)
    assert [(c.target, c.tensor) for c in judged] == [
        ("xla", "node.0000.add"), ("xla_faithful", "output.0")]  # fmt: skip
    fusion = [comparison("xla_faithful", "output.0", True, reference="xla")]
    assert trust.fusion_sensitive(STAGES, found, fusion) is True  # diverges in one run only
    agreeing = [comparison("xla", "output.0", True), comparison("xla_faithful", "output.0", True)]
    assert trust.fusion_sensitive(STAGES, agreeing, fusion) is False
    assert trust.fusion_sensitive(STAGES[:2], agreeing, []) is None  # not checked
    divergence = {"xla": "node.0003.mul", "xla_faithful": "output.0",
                  "xla_isolated": "node.0001.add"}  # fmt: skip
    assert trust.own(STAGES, divergence) == {"xla": "node.0001.add"}
    assert trust.accumulated(STAGES, divergence) == {"xla": "node.0003.mul"}


def test_triage_runs_again_only_what_can_still_change():
    half = VariantResult("c", "c", {}, Outcome.MISMATCH, Outcome.MISMATCH, 0.0,
                         comparisons=(comparison("xla", "output.0", False),))  # fmt: skip
    base = {"matmul_precision": "default", "dtype": "float16"}
    assert [label for label, _ in steps(base, half)] == [Triage.HIGHEST, Triage.FLOAT32]
    assert steps(base, half)[1][1] == {"matmul_precision": "highest", "dtype": "float32"}
    assert steps({"matmul_precision": "highest", "dtype": "float32"}, half) == []
    assert not ran_in_half({"dtype": "captured"}, half)  # its diverging tensor is float32
    bf16 = VariantResult("c", "c", {}, Outcome.MISMATCH, Outcome.MISMATCH, 0.0,
                         comparisons=(Comparison("o", "cpu", "xla", (1,), "bfloat16", 1.0, 1.0,
                                                 1, 1, False),))  # fmt: skip
    assert ran_in_half({"dtype": "captured"}, bf16)


def test_old_summaries_load_without_the_new_fields():
    data = VariantResult("c", "c", {}, Outcome.MATCH, Outcome.MATCH, 1.0).to_json()
    new = ("triage", "expected_triage", "fusion_sensitive", "fusion", "fusion_nodes")
    for key in (*new, "own_divergence"):
        data.pop(key)
    found = VariantResult.from_json(data)
    assert (found.triage, found.fusion_sensitive, found.own_divergence) == (None, None, {})
    assert found.passed is True
    expecting = VariantResult("c", "c", {}, Outcome.MISMATCH, Outcome.MISMATCH, 1.0,
                              expected_triage="float32")  # fmt: skip
    assert expecting.passed is False  # a mismatch, but not triaged as the case expects


def test_a_case_asks_for_a_known_triage_label(tmp_path):
    case = tmp_path / "c.toml"
    head = '[case]\ntitle = "t"\ntemplate = "exported_program"\n[params]\nprogram = "p.pt2"\n'
    (tmp_path / "p.pt2").write_bytes(b"")
    case.write_text(head + '[expect]\noutcome = "mismatch"\ntriage = "float32"\n')
    assert load_case(case).expected_triage("CPU") is Triage.FLOAT32
    case.write_text(head + '[expect]\noutcome = "mismatch"\ntriage = "bug"\n')
    with pytest.raises(ReprokitError, match="unknown triage label 'bug'") as raised:
        load_case(case)
    assert raised.value.line == 8
