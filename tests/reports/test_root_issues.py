"""A captured program's root issues from records made by hand (no stage runs): the root repro's
record as reprokit.tools.root_repro writes it, read into an issue in a maintainer's words. A
forward and its gradient are one issue; the values are those the repro printed; a known bug
says where it is known; rounding and harmless roots are no issue; the record parses what the
repro printed."""

from __future__ import annotations

from reprokit.comparison.roots import ROUNDING, rounding
from reprokit.records import Comparison, Outcome, Root, StageResult, Status, VariantResult
from reprokit.records.issues import RootRepro, read_index, write_index
from reprokit.reports.known import known_line
from reprokit.reports.root_issues import root_issues

SOFTPLUS = """$ PJRT_DEVICE=CPU python repro.py
  at [0, 0]: CPU 3.85547, float64 3.85547, XLA inf
softplus: XLA DIFFERS (1024 of 1024 elements)
  at [0, 0]: CPU 1, float64 0.999991, XLA nan
softplus gradient: XLA DIFFERS (1024 of 1024 elements)
exit 1
"""
SAID = {
    "node.0002.fwd.softplus": {"op": "aten.softplus.default", "reads": [[32, 32]],
                               "source": "m.py:5: h = F.softplus(x, beta=3, threshold=15)"},
    "node.0009.bwd.softplus_backward": {"op": "aten.softplus_backward.default",
                                        "forward": "node.0002.fwd.softplus",
                                        "reads": [[32, 32], [32, 32]], "source": "m.py:5"},
}  # fmt: skip


def softplus_step(**extra) -> VariantResult:
    roots = (Root("node.0009.bwd.softplus_backward", "xla", "aten.softplus_backward.default",
                  kind="nan-inf", reaches=("grad.fc.weight",)),
             Root("node.0002.fwd.softplus", "xla", "aten.softplus.default", kind="nan-inf",
                  reaches=()))  # fmt: skip
    comparisons = tuple(
        Comparison(tensor=r.tensor, reference="cpu", target="xla", shape=(32, 32),
                   dtype="float16", max_abs=1.0, max_rel=1.0, mismatched=1024, total=1024,
                   allclose=False)
        for r in roots
    )  # fmt: skip
    stages = (StageResult("cpu", "cpu", Status.OK, described=SAID),
              StageResult("xla", "xla", Status.OK, described=SAID))  # fmt: skip
    fields = dict(case="step", label="step[dtype=float16]", outcome=Outcome.MISMATCH,
                  variant={"program": "step.pt2", "dtype": "float16"}, expected=Outcome.MATCH,
                  seconds=1.0, stages=stages, comparisons=comparisons, roots=roots)  # fmt: skip
    return VariantResult(**(fields | extra))


def recorded(tmp_path, variant: VariantResult, output: str = SOFTPLUS, code: int = 1) -> None:
    folder = tmp_path / variant.label
    repro = RootRepro("softplus_nan_inf", tuple(r.tensor for r in variant.roots),
                      "aten.softplus.default", "constant", True, 27, code, output)  # fmt: skip
    repro.script(folder).parent.mkdir(parents=True)
    repro.script(folder).write_text("import torch\n")
    write_index(folder, "digest", [repro])


def test_a_forward_and_its_gradient_are_one_issue_with_the_repros_values(tmp_path):
    variant = softplus_step()
    recorded(tmp_path, variant)
    (issue,) = root_issues(variant, tmp_path)
    assert issue.title == ("float16 `softplus` on XLA returns inf where CPU and float64 give "
                           "3.85547, and a gradient of NaN where CPU's is 1")  # fmt: skip
    assert (
        "its gradient, by autograd, is NaN where CPU's is 1 (1024 of 1024 elements)"
        in (issue.bug[0])
    )
    assert "of float16 32x32:" in issue.bug[0]  # the forward's input, not the backward's two
    assert "`grad.fc.weight`" in issue.bug[0] and issue.name == "softplus_nan_inf"
    assert [row[4].text for row in issue.witnesses.rows] == ["inf", "NaN"]
    assert issue.repro.lines == 27 and issue.output == SOFTPLUS
    assert issue.context == ("Found with reprokit 0.1.0.",)  # no known-bugs lookup given


def test_a_known_bug_says_where_it_is_known(tmp_path):
    variant = softplus_step()
    recorded(tmp_path, variant)
    (issue,) = root_issues(variant, tmp_path, known_line)
    # written up by reprokit, not filed upstream: a line of the issue's context, which is its
    # first report upstream
    assert issue.known is None and issue.context[0].startswith("Known: float16 softplus is inf")
    assert "fp16_softplus_overflow.md" in issue.context[0] and "first report" in issue.context[0]
    said, in_issue = known_line(op="upsample_bilinear2d", dtype="float32", kind="value",
                                grad=False)  # fmt: skip
    assert in_issue and "pytorch/xla#8897, open" in said and "as a comment, not a new" in said
    assert known_line(op="softplus", dtype="float32", kind="nan-inf", grad=None) is None


def test_a_repro_that_does_not_show_it_alone_makes_no_issue(tmp_path):
    variant = softplus_step()
    recorded(tmp_path, variant, output="$ PJRT_DEVICE=CPU python repro.py\nexit 0\n", code=0)
    assert root_issues(variant, tmp_path) == ()


def test_the_record_reads_what_the_repro_printed_and_is_made_anew_for_another_run(tmp_path):
    variant = softplus_step()
    recorded(tmp_path, variant)
    (repro,) = read_index(tmp_path / variant.label)
    forward, gradient = repro.seen()
    assert (forward.name, forward.differs, forward.counts) == (
        "softplus",
        True,
        "1024 of 1024 elements",
    )
    assert gradient.rows == (("[0, 0]", "1", "0.999991", "nan"),)
    assert repro.shows
    assert read_index(tmp_path / variant.label, "another digest") is None


def test_a_value_difference_within_a_few_times_the_bound_is_rounding():
    root = Root("node.0001.addmm", "xla", "aten.addmm.default", kind="value",
                errors=(5e-5, 1.8e-4), bound=1.6e-4)  # fmt: skip
    assert rounding(root)
    assert not rounding(Root(root.tensor, "xla", root.op, kind="value", errors=(5e-5, 1.0),
                             bound=1.6e-4))  # fmt: skip
    assert not rounding(Root(root.tensor, "xla", root.op, kind="nan-inf", errors=(5e-5, 1e-4),
                             bound=1.6e-4))  # fmt: skip
    assert ROUNDING == 4.0
