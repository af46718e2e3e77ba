"""The issue report's words, from records made by hand (no stage runs): a title from the root's
op, dtype and values; the verdict's trust said without stage names; NaN and infinities as
words; one report per problem, a run of several keeping each variant's."""

from __future__ import annotations

import math

from reprokit.records import (
    Comparison,
    Outcome,
    RunSummary,
    StageResult,
    Status,
    VariantResult,
    Worst,
)
from reprokit.records.environment import Environment
from reprokit.reports import build_report
from reprokit.reports.markdown import markdown

SAID = {
    "node.0000.linear": {"op": "aten.linear.default", "inputs": [], "source": "m.py:3: y = f(x)"},
    "node.0001.relu": {"op": "aten.relu.default", "inputs": ["node.0000.linear"],
                       "source": "m.py:4: y = y.relu()", "outputs": ["output.0"]},
}  # fmt: skip


def compared(name: str, close: bool, **extra) -> Comparison:
    fields = dict(tensor=name, reference="cpu", target="xla", shape=(4,), dtype="float16",
                  max_abs=0.0 if close else 1.0, max_rel=0.0, mismatched=0 if close else 4,
                  total=4, allclose=close, method="fp64", errors=(1e-4, 1e-4 if close else 0.5),
                  bound=3e-4)  # fmt: skip
    return Comparison(**(fields | extra))


def relu_bug(label: str = "m", **extra) -> VariantResult:
    worst = (Worst((2,), math.nan, 1.5, 1.5007), Worst((0,), math.inf, 2.0, 2.0))
    comparisons = (compared("node.0000.linear", True),
                   compared("node.0001.relu", False, worst=worst, nan=(0, 1), inf=(0, 1)),
                   compared("output.0", False))  # fmt: skip
    stages = (StageResult("cpu", "cpu", Status.OK),
              StageResult("xla", "xla", Status.OK, described=SAID))  # fmt: skip
    fields = dict(case=label, label=label, variant={"program": "m.pt2"},
                  outcome=Outcome.MISMATCH, expected=Outcome.MATCH, seconds=1.0, stages=stages,
                  comparisons=comparisons, first_divergence={"xla": "node.0001.relu"})  # fmt: skip
    return VariantResult(**(fields | extra))


def report_of(*variants: VariantResult, tmp_path) -> str:
    summary = RunSummary(started="", finished="", env=Environment(python="3.11"),
                         variants=variants)  # fmt: skip
    return markdown(build_report(summary, tmp_path))


def test_the_title_and_the_table_say_nan_and_inf_with_the_values_cpu_and_float64_give(tmp_path):
    text = report_of(relu_bug(), tmp_path=tmp_path)
    assert text.startswith("# float16 `aten.relu.default` on XLA returns NaN where CPU and "
                           "float64 give 1.5\n")  # fmt: skip
    assert "1 is NaN on XLA (none on CPU); 1 is inf on XLA (none on CPU)" in text
    assert "| `[2]` | 1.5 | **NaN** | 1.5007 |" in text and "| `[0]` | 2 | **inf** | 2 |" in text
    assert "It reaches the program's output `output.0`." in text
    assert "Not run on a TPU or a GPU" in text


def test_the_verdicts_trust_is_said_in_the_issues_words_and_the_tools_evidence_is_not(tmp_path):
    bug = relu_bug(triage="persists", own_divergence={"xla": "node.0001.relu"},
                   fusion_sensitive=True, fusion_nodes=("node.0000.linear",),
                   fusion=(compared("output.0", False, target="xla_faithful"),))  # fmt: skip
    text = report_of(bug, tmp_path=tmp_path)
    assert "Run again more precisely, the mismatch persists at highest matmul precision" in text
    # fusion and each operation's own error are the tool's evidence (the run's report), not
    # what a maintainer acts on
    assert "fusion" not in text and "Keeping the result of" not in text
    assert "Run one at a time" not in text and "Found in a model" not in text
    assert "Found with reprokit" in text
    assert "xla_faithful" not in text and "node.0" not in text


def test_a_run_of_two_problems_keeps_each_variants_report(tmp_path):
    text = report_of(relu_bug("a"), relu_bug("b"), tmp_path=tmp_path)
    assert text.startswith("## 🐛 Bug") and "`a`" in text and "`b`" in text


def test_a_tensor_judged_by_float64_alone_is_not_said_to_have_no_element_differ(tmp_path):
    """DeBERTa's bf16 softmax: every element within allclose of CPU's, its RMSE against float64
    3.6x CPU's; the report read "0 of 512 elements differ from CPU's"."""
    quiet = compared(
        "node.0001.relu", False, mismatched=0, worst=(Worst((1,), 0.062, 0.063, 0.0628),)
    )
    bug = relu_bug(comparisons=(compared("node.0000.linear", True), quiet))
    text = report_of(bug, tmp_path=tmp_path)
    assert "0 of 4" not in text
    assert "each element is within rtol=0, atol=0 of CPU's, but the whole is farther" in text


def minimized(*variants: VariantResult, whose=None) -> RunSummary:
    from reprokit.records import GraphShrink, MinimizeResult

    graph = GraphShrink(nodes=(2, 1), inputs=(1, 1), weights=(0, 0), whose=whose)
    found = MinimizeResult(case="m", target="mismatch", changes=(), lines=(100, 20), candidates=3,
                           cache_hits=0, seconds=1.0, stopped="done", graph=graph)  # fmt: skip
    return RunSummary(started="", finished="", env=Environment(python="3.11"),
                      variants=variants, minimized=found)  # fmt: skip


def test_whose_is_said_from_evidence_torch_precision_or_what_minimize_found(tmp_path):
    from reprokit.records import Whose

    lowering = Whose("torch_xla lowering", "Still differs with every XLA pass disabled.",
                     hlo=("whose/g.before_optimizations.txt",))  # fmt: skip
    (tmp_path / "whose").mkdir()
    (tmp_path / "whose" / "g.before_optimizations.txt").write_text("HloModule g\nROOT x\n")
    text = markdown(build_report(minimized(relu_bug(), whose=lowering), tmp_path))
    assert "**Whose:** torch_xla lowering. Still differs with every XLA pass disabled." in text
    assert "<summary>g.before_optimizations.txt (2 lines of HLO)</summary>" in text
    # CPU itself off float64 in the minimized repro: torch's kernel, whatever XLA's passes say
    off = (Worst((1,), 1.5, 3.0, 1.5),)  # XLA 1.5 = float64, CPU 3.0
    cpu_off = relu_bug(comparisons=(compared("node.0000.linear", True),
                                    compared("node.0001.relu", False, worst=off)))  # fmt: skip
    text = markdown(build_report(minimized(cpu_off, whose=lowering), tmp_path))
    assert "**Whose:** torch. CPU gives 3 where float64 gives 1.5 at `[1]`" in text
    assert "pytorch/pytorch" in text
    # the triage took it away: precision; a whole program's run says nothing of CPU's kernel
    text = report_of(relu_bug(triage="highest"), tmp_path=tmp_path)
    assert "**Whose:** precision. The mismatch goes away at highest matmul precision" in text
    assert "**Whose:**" not in report_of(cpu_off, tmp_path=tmp_path)
