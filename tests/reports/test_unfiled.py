"""report.md when there is no XLA issue to paste, from records made by hand (no stage runs): a
captured program's differences with no root repro that shows them are known, rounding or
without a standalone repro, said so, never a bug headline over the harness; a run that fails in
reprokit's own part, or on CPU, is not torch_xla's; an XLA error the known file names is known.
Through reprokit.report, as the CLI writes report.md."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

import reprokit
from reprokit.records import (
    Comparison,
    Outcome,
    Root,
    RunSummary,
    StageResult,
    Status,
    VariantResult,
    Worst,
)
from reprokit.records.issues import RootRepro, write_index
from reprokit.records.run import write_summary
from reprokit.reports.unfiled import ulps_apart

LABEL = "model[dtype=float16]"
SAID = {"node.0003.conv2d": {"op": "aten.conv2d.default", "reads": [[1, 3, 8, 8]],
                             "source": "m.py:9: x = self.conv(x)"},
        "node.0007.native_layer_norm": {"op": "aten.native_layer_norm.default",
                                        "source": "m.py:11: x = self.norm(x)"}}  # fmt: skip


def mismatch(tensor: str, op: str, error: float, bound: float = 1e-3,
             reaches: tuple[str, ...] = ("output.0",)) -> VariantResult:  # fmt: skip
    root = Root(tensor, "xla", op, SAID[tensor]["source"], "value", (bound / 3, error), bound,
                reaches)  # fmt: skip
    compared = Comparison(tensor=tensor, reference="cpu", target="xla", shape=(4,),
                          dtype="float16", max_abs=0.01, max_rel=0.01, mismatched=4, total=4,
                          allclose=False, worst=(Worst((0,), -1.12402, -1.13281, -1.13305),),
                          method="fp64", errors=root.errors, bound=bound)  # fmt: skip
    stages = tuple(StageResult(n, n, Status.OK, described=SAID) for n in ("cpu", "xla"))
    return _variant(Outcome.MISMATCH, stages, comparisons=(compared,), roots=(root,))


def _variant(outcome: Outcome, stages, **more) -> VariantResult:
    return VariantResult(case="model", label=LABEL, outcome=outcome, expected=Outcome.MATCH,
                         variant={"program": "model.pt2", "dtype": "float16"}, seconds=1.0,
                         stages=stages, **more)  # fmt: skip


def reported(tmp_path, variant: VariantResult, repro: RootRepro | None = None):
    """report.md and what the command says of it, for a run folder holding ``variant`` (and
    its root repro's record, as reprokit.tools.root_repro writes it)."""
    write_summary(RunSummary(started="now", variants=(variant,)), tmp_path)
    (tmp_path / LABEL).mkdir()
    if repro is not None:  # made for this summary.json: the report keeps it
        digest = hashlib.sha256((tmp_path / "summary.json").read_bytes()).hexdigest()[:16]
        write_index(tmp_path / LABEL, digest, [repro])
    reports = reprokit.report(tmp_path, formats="md")
    return (tmp_path / "report.md").read_text(), reports


def unshown(variant: VariantResult, why_not: str = "", code: int | None = None) -> RootRepro:
    root = variant.roots[0]
    return RootRepro("r", (root.tensor,), root.op, "random", False, returncode=code,
                     why_not=why_not)  # fmt: skip


def test_rounding_is_nothing_to_file_with_its_ulps(tmp_path):
    variant = mismatch("node.0003.conv2d", "aten.conv2d.default", error=1.6e-3)
    text, reports = reported(tmp_path, variant, unshown(variant, "within 4x the bound: rounding"))
    title = "Nothing to file: XLA's differences from CPU here are float16 rounding"
    assert text.startswith(f"# {title}\n") and reports.kind == "rounding"
    assert reports.title == title
    assert "## To Reproduce" not in text and "```python" not in text and "🐛" not in text
    assert "`m.py:9: x = self.conv(x)`" in text and "-1.13281, -1.12402, -1.13305 (9.0)" in text
    assert "Reproducible on XLA" not in text  # nothing is


def test_a_known_bug_without_a_repro_says_where_it_is_known(tmp_path):
    variant = mismatch("node.0007.native_layer_norm", "aten.native_layer_norm.default",
                       error=0.05)  # fmt: skip
    text, reports = reported(tmp_path, variant, unshown(variant, code=0))
    assert text.startswith("# Known: `native_layer_norm` in float16 on XLA")
    assert "pytorch/xla#3658, open). Post this report there as a comment" in text
    # what the model saw, in the words of a bug's title: where the user applies the workaround
    said = (
        "`aten.native_layer_norm.default` on XLA returns -1.12402 where CPU and float64 give "
        "-1.13281"
    )
    assert said in text and "`m.py:11: x = self.norm(x)`" in text
    assert reports.kind == "known" and reports.known.startswith("Known: LayerNorm generates")


def test_no_repro_that_shows_it_is_said_plainly_with_the_next_step(tmp_path):
    variant = mismatch("node.0003.conv2d", "aten.conv2d.default", error=0.05)
    text, reports = reported(tmp_path, variant, unshown(variant, code=0))
    assert text.startswith("# No standalone repro found: XLA differs from CPU at `conv2d`")
    assert "its repro agreed with CPU alone (exit 0)" in text
    assert "To get one: `reprokit minimize" in text and reports.kind == "no repro"
    assert "```python" not in text and "bundle.zip` (" not in text  # the harness is no repro


def test_a_difference_no_output_reads_is_nothing_to_file(tmp_path):
    variant = mismatch("node.0003.conv2d", "aten.conv2d.default", error=0.05, reaches=())
    text, _ = reported(tmp_path, variant, unshown(variant, "harmless to the outputs"))
    assert text.startswith("# Nothing to file")


def failed(stage: StageResult) -> VariantResult:
    ok = StageResult("ref_fp64", "cpu", Status.OK)
    return _variant(Outcome.ERROR, (ok, stage))


def test_the_protocol_failing_to_save_is_reprokits_own_failure(tmp_path):
    error = ("RuntimeError: reprokit's own failure (saving the stage's tensors, save): "
             "RuntimeError: Cannot save multiple tensors or storages")  # fmt: skip
    stage = StageResult("xla", "xla", Status.ERROR, returncode=1, error=error,
                        stderr_tail=("Traceback (most recent call last):", error))  # fmt: skip
    text, reports = reported(tmp_path, failed(stage))
    assert text.startswith("# reprokit's own failure: stage `xla` could not save its tensors")
    assert "not of torch_xla" in text and "Cannot save multiple tensors" in text
    assert reports.kind == "own failure"


def test_a_captured_program_failing_on_cpu_is_no_reference_and_says_capture_in_the_dtype(tmp_path):
    error = "RuntimeError: view_as_complex is only supported for half, float and double tensors"
    stage = StageResult("cpu", "cpu", Status.ERROR, returncode=1, error=error)
    text, _ = reported(tmp_path, failed(stage))
    assert text.startswith("# No CPU reference: the captured program fails on CPU (stage `cpu`)")
    assert "not a torch_xla bug" in text and "Capture the model in float16" in text


def test_no_cpu_kernel_in_the_dtype_is_no_reference(tmp_path):
    error = "NotImplementedError: \"compute_index_ranges_weights\" not implemented for 'Half'"
    stage = StageResult("cpu", "cpu", Status.ERROR, returncode=1, error=error)
    text, _ = reported(tmp_path, failed(stage))
    assert text.startswith("# No CPU reference: torch's CPU cannot run this program in float16")


def test_an_xla_error_the_known_file_names_is_known(tmp_path):
    error = ("RuntimeError: The size of mean should be compatible with feature count, but the "
             "size of offset factor is 0 and the feature count is 512.")  # fmt: skip
    stage = StageResult("xla", "xla", Status.ERROR, returncode=1, error=error)
    text, reports = reported(tmp_path, failed(stage))
    assert text.startswith("# Known: Cannot backprop through BatchNorm in eval mode")
    assert "pytorch/xla#3361, open). Post this page there as a comment" in text
    assert reports.kind == "known"


def test_an_xla_error_nobody_knows_stays_the_runs_report(tmp_path):
    stage = StageResult("xla", "xla", Status.ERROR, returncode=1, error="RuntimeError: new")
    text, reports = reported(tmp_path, failed(stage))
    assert text.startswith("## 🐛 Bug") and reports.kind == "bug"


def test_ulps_apart():
    assert ulps_apart(-1.13281, -1.12402, "float16") == pytest.approx(9.0, abs=0.01)  # 2**-10
    assert ulps_apart(1.0, 1.0078125, "bfloat16") == 1.0
    assert ulps_apart(float("inf"), 1.0, "float16") is None and ulps_apart(1, 2, "int64") is None


def test_several_training_steps_say_the_loss_per_step_and_the_first_that_differs(tmp_path):
    variant = mismatch("node.0003.conv2d", "aten.conv2d.default", error=1.6e-3)
    cpu = {"loss": 2.5, "loss.step2": 2.25, "loss.step3": 2.0}
    xla = {"loss": 2.5, "loss.step2": 2.375, "loss.step3": 2.125}
    stages = (StageResult("cpu", "cpu", Status.OK, metrics=cpu, described=SAID),
              StageResult("xla", "xla", Status.OK, metrics=xla, described=SAID))  # fmt: skip
    loss = Comparison(tensor="loss.step2", reference="cpu", target="xla", shape=(),
                      dtype="float16", max_abs=0.125, max_rel=0.05, mismatched=1, total=1,
                      allclose=False)  # fmt: skip
    variant = replace(variant, stages=stages, comparisons=(*variant.comparisons, loss),
                      variant={**variant.variant, "optimizer": "adam"})  # fmt: skip
    text, _ = reported(tmp_path, variant, unshown(variant, "within 4x the bound: rounding"))
    assert ("Over 3 training steps with adam, the loss first differs from CPU's at step 2 "
            "(step 1: CPU 2.5, XLA 2.5; step 2: CPU 2.25, XLA 2.375; step 3: CPU 2, XLA 2.125)."
            ) in text  # fmt: skip
