"""The report model, built from records made by hand (no stage runs, no torch): what each
section, table and figure says, decided once for report.md and report.html."""

from __future__ import annotations

from pathlib import Path

from reprokit.records import (
    Comparison,
    Environment,
    EnvSpec,
    Machine,
    MinimizeResult,
    Outcome,
    RunSummary,
    StageResult,
    Status,
    VariantResult,
)
from reprokit.records.minimize import GraphShrink
from reprokit.reports import build_report, headline
from reprokit.reports.model import Cell, Names

XLA_SAW = {
    "device_kind": "CPU",
    "devices": 1,
    "compile": {"count": 4, "seconds": 0.5},
    "execute": {"count": 4, "seconds": 0.25},
    "to_device": {"count": 2},
    "from_device": {"count": 3},
    "fallbacks": ["aten::linalg_eig"],
}


def comparison(name: str, close: bool, target: str = "xla", **extra) -> Comparison:
    return Comparison(name, "cpu", target, (4,), "float32", 0.0 if close else 0.5,
                      0.0 if close else 0.25, 0 if close else 4, 4, close, **extra)  # fmt: skip


def mismatch(label: str = "demo", first: int = 3, tensors: int = 6, **extra) -> VariantResult:
    """A variant whose xla stage first differs at act.<first>."""
    comparisons = tuple(comparison(f"act.{i}", i < first) for i in range(tensors))
    stages = (StageResult("cpu", "cpu", Status.OK, seconds=1.0),
              StageResult("xla", "xla", Status.OK, seconds=2.0))  # fmt: skip
    fields = dict(case=label.split("[")[0], label=label, variant={}, outcome=Outcome.MISMATCH,
                  expected=Outcome.MATCH, seconds=3.0, comparisons=comparisons,
                  first_divergence={"xla": f"act.{first}"}, stages=stages)  # fmt: skip
    return VariantResult(**(fields | extra))


def passing(label: str = "fine", **extra) -> VariantResult:
    return mismatch(
        label, first=6, **({"outcome": Outcome.MATCH, "first_divergence": {"xla": None}} | extra)
    )


def texts(row) -> list[str]:
    return [value.text if isinstance(value, Cell) else ", ".join(value.items) for value in row]


def test_the_problems_come_first_and_known_bugs_are_evidence_too(tmp_path):
    known = mismatch("known", outcome=Outcome.ERROR, expected=Outcome.ERROR, reason="it raised")
    summary = RunSummary(started="now", variants=(known, passing(), mismatch("bad")))
    report = build_report(summary, tmp_path)
    assert [e.label for e in report.evidence] == ["bad", "known"]
    assert report.headline == headline(summary)
    assert report.headline == ("2 of 3 variants behaved as expected; 1 did not: `bad` (mismatch).")
    assert report.bug == "bad: `bad` ends in **mismatch**, where its case expects match."
    assert report.evidence[1].reason == "it raised"  # no failed stage says it instead
    assert report.expected[1] == (
        "`known`: the case records the known outcome `error`; without the bug it would be `match`."
    )


def test_a_run_where_all_is_well_has_no_bug_and_no_evidence(tmp_path):
    report = build_report(RunSummary(started="now", variants=(passing(),)), tmp_path)
    assert report.bug is None and report.evidence == ()
    assert report.expected == ("`fine`: every stage ends well and agrees with its reference "
                               "stage within rtol=0, atol=0.",)  # fmt: skip


def test_a_match_judged_on_its_outputs_says_so_and_how_to_record_every_operation(tmp_path):
    judged = passing(outputs_only=True)
    (said,) = build_report(RunSummary(started="now", variants=(judged,)), tmp_path).expected
    assert said.endswith(" It was judged on its outputs, which matched: no operation inside was "
                         "recorded (`--set nodes=all` records every one).")  # fmt: skip
    (said,) = build_report(RunSummary(started="now", variants=(passing(),)), tmp_path).expected
    assert "judged on its outputs" not in said


def test_the_comparison_window_starts_two_before_the_first_to_differ(tmp_path):
    summary = RunSummary(started="now", variants=(mismatch(first=3, tensors=6),))
    (shown,) = build_report(summary, tmp_path).evidence
    assert shown.divergence == (
        "First divergence in `xla`: act.0 through act.2 agree; act.3 is the first to differ "
        "(4 / 4 mismatched, max abs 0.5).",
    )
    found = shown.comparisons
    (window,) = found.windows
    assert [row[0].text for row in window.rows] == ["act.1", "act.2", "act.3", "act.4", "act.5"]
    assert [row[0].tone for row in window.rows] == ["", "", "bad", "", ""]
    assert texts(window.rows[2]) == ["act.3", "xla vs cpu", "4", "0.5", "0.25", "4 / 4"]
    assert found.compared == 6 and found.rows(per_target=2) == list(window.rows[:2])
    assert found.footnote.startswith("¹ |stage - reference| / |reference|")


def test_every_tensor_agreeing_gives_no_comparison_table(tmp_path):
    summary = RunSummary(started="now", variants=(passing(outcome=Outcome.ERROR),))
    (shown,) = build_report(summary, tmp_path).evidence
    assert shown.comparisons is None and shown.divergence == ()


def test_a_failed_stage_says_how_it_ended_with_its_last_words(tmp_path):
    failed = StageResult("xla", "xla", Status.CRASH, signal="SIGABRT",
                         error="RuntimeError: a | b", stderr_tail=("one", "two"))  # fmt: skip
    variant = mismatch(outcome=Outcome.CRASH, reason="xla died", stages=(failed,))
    (shown,) = build_report(RunSummary(started="now", variants=(variant,)), tmp_path).evidence
    (stage,) = shown.failed
    assert stage.sentence == (
        "Stage `xla` (xla): crash, signal SIGABRT. It raised `RuntimeError: a \\| b`."
    )
    assert stage.stderr_tail == ("one", "two")
    assert shown.reason is None  # the failed stage says why, with its evidence


def test_what_torch_xla_saw_is_one_table_of_every_xla_stage_passing_or_not(tmp_path):
    stages = (StageResult("cpu", "cpu", Status.OK),
              StageResult("xla", "xla", Status.OK, xla=XLA_SAW, reused="runs/old"))  # fmt: skip
    summary = RunSummary(started="now",
                         variants=(passing(stages=stages), mismatch(stages=stages)))  # fmt: skip
    report = build_report(summary, tmp_path)
    (shown,) = report.evidence
    failing, fine = report.xla.rows  # those not as expected first, as in the results
    assert texts(failing) == ["demo", "xla", "1 x CPU", "4 (0.50 s)", "4 (0.25 s)", "2 / 3",
                              "aten::linalg_eig"]  # fmt: skip
    assert texts(fine)[:2] == ["fine", "xla"]  # a passing variant's evidence too
    assert failing[-1] == Names(("aten::linalg_eig",))
    alone = build_report(RunSummary(started="now", variants=(passing(stages=stages),)), tmp_path)
    assert alone.xla.header[0] == "XLA stage"  # one variant: no column naming it in every row
    assert shown.recompiled[0].startswith("`xla` compiled a graph for each of its executions (4)")
    assert shown.reused == ("Reused without running again (same script, environment, "
                            "versions): `xla`, from the run in `runs/old`.",)  # fmt: skip
    assert "XLA devices: 1 x CPU" in report.environment.facts


def test_the_results_table_puts_what_failed_first_and_counts_reused_stages(tmp_path):
    reused = (StageResult("cpu", "cpu", Status.OK, reused="runs/old"),)
    skipped = passing("skip", outcome=Outcome.SKIPPED, comparisons=())
    summary = RunSummary(started="now",
                         variants=(passing(stages=reused), skipped, mismatch("bad")))  # fmt: skip
    report = build_report(summary, tmp_path)
    rows = report.results.rows
    assert [texts(r) for r in rows] == [
        ["bad", "mismatch", "match", "no", "3.0"],
        ["fine", "match", "match", "yes", "3.0 (1 stages reused)"],
        ["skip", "skipped", "match", "skipped", "3.0"],
    ]
    assert [r[3].tone for r in rows] == ["bad", "good", ""]
    assert report.reused_rows == (1,)


def test_a_merged_run_shows_each_machine_and_environments_their_outcomes(tmp_path):
    ran = (StageResult("xla", "xla", Status.OK, versions={"torch": "2.8", "torch_xla": "2.8"}),)
    in_envs = tuple(
        passing(f"demo@{name}", env=EnvSpec(name, ()), stages=ran) for name in ("a", "b")
    )
    machines = (Machine("runs/cpu", Environment(python="3.11"), ("cpu",), "CPU"),
                Machine("runs/xla", Environment(python="3.12"), ("xla",)))  # fmt: skip
    summary = RunSummary(started="now", variants=in_envs, machines=machines)
    section = build_report(summary, tmp_path).environment
    assert section.machines.header == ("", "machine 1", "machine 2")
    rows = {row[0].text: texts(row)[1:] for row in section.machines.rows}
    assert rows["stages it ran"] == ["cpu", "xla"]
    assert rows["XLA device asked for"] == ["CPU", "?"] and rows["Python"] == ["3.11", "3.12"]
    assert [texts(r) for r in section.envs.rows] == [
        ["demo", "match", "match"],
        ["imported", "torch 2.8, torch_xla 2.8", "torch 2.8, torch_xla 2.8"],
    ]


def test_the_figures_say_what_to_draw(tmp_path):
    metrics = {"loss": [1.0, 0.5], "accuracy": [0.1, 0.2], "final_loss": 0.5}
    fp64 = tuple(
        comparison(f"n.{i}", i < 2, method="fp64", errors=(1e-7, 1e-7 if i < 2 else 1e-3))
        for i in range(4)
    )
    stages = (StageResult("xla", "xla", Status.OK, seconds=float("nan"), metrics=metrics),)
    variant = mismatch(comparisons=fp64, stages=stages, first_divergence={"xla": "n.2"})
    drawn = build_report(RunSummary(started="now", variants=(variant,)), tmp_path).figures
    (loss,) = drawn.loss
    assert loss.series == (("xla (xla): loss", (1.0, 0.5)),)  # no loss: not drawn
    assert loss.points == (("xla (xla): final_loss", 0.5),)  # a loss recorded once: a point
    (errors,) = drawn.errors
    assert errors.tensors == ("n.0", "n.1", "n.2", "n.3") and errors.first_index == 2
    assert errors.target_errors == (1e-7, 1e-7, 1e-3, 1e-3)
    (sizes,) = drawn.differences
    assert sizes.bars[1:3] == (("n.1", None, True), ("n.2", 0.5, False))  # None: equal
    assert drawn.timings == (("demo xla", 0.0),)  # a stage that never timed draws as 0


def test_a_run_that_evaluates_once_per_backend_draws_each_backends_loss():
    """The seed's stages: training records a series, each evaluation one loss: both backends'
    evaluations are drawn, not the training curve alone."""
    stages = (StageResult("train", "xla_multicore", Status.OK, metrics={"train_loss": [1.0, 0.9]}),
              StageResult("eval_cpu", "cpu", Status.OK, metrics={"loss": 1.1, "w": [1.0, 2.0]}),
              StageResult("eval_spmd", "xla_spmd", Status.OK, metrics={"loss": 1.1}))  # fmt: skip
    report = build_report(RunSummary(started="now", variants=(passing(stages=stages),)), Path())
    (loss,) = report.figures.loss
    assert [label for label, _ in loss.series] == ["train (xla_multicore): train_loss"]
    assert loss.points == (("eval_cpu (cpu): loss", 1.1), ("eval_spmd (xla_spmd): loss", 1.1))


def test_scripts_are_inlined_and_files_too_large_to_attach_are_named(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "repro.py").write_text("print(1)\nprint(2)\n")
    with (tmp_path / "demo" / "model.pt2").open("wb") as file:
        file.truncate(26_000_000)  # sparse
    summary = RunSummary(started="now", argv=("/bin/reprokit", "run", "demo"),
                         variants=(mismatch(), mismatch("gone")))  # fmt: skip
    report = build_report(summary, tmp_path)
    assert report.command == "reprokit run demo"
    demo, gone = report.evidence
    assert demo.script.text == "print(1)\nprint(2)\n" and demo.script.lines == 2
    assert gone.script is None  # no folder: nothing to inline
    (line,) = demo.too_large
    assert line.startswith("`demo/model.pt2` (26 MB) is over GitHub's 25 MB attachment limit")


def test_the_model_is_built_from_a_summary_read_back_from_json(tmp_path):
    """What summary.json gives back builds the same model as the records that wrote it."""
    summary = RunSummary(started="now", variants=(mismatch(), passing()))
    again = RunSummary.from_json(summary.to_json())
    assert build_report(again, Path(tmp_path)) == build_report(summary, Path(tmp_path))


def fp64_match() -> VariantResult:
    """pytorch/xla#8372's bf16 ``q @ (kᵀ/√128)``: XLA parts from CPU at the matmul, 254 of
    10,000 elements beyond rtol, and float64 calls it noise (XLA's RMSE 2.07e-3, CPU's 2.06e-3)."""
    agree = Comparison("q", "cpu", "xla", (100, 128), "bfloat16", 0.0, 0.0, 0, 12_800, True,
                       rtol=0.016, atol=1e-5, equal=True, method="fp64",
                       errors=(1e-3, 1e-3), bound=3.01e-3)  # fmt: skip
    matmul = Comparison("matmul", "cpu", "xla", (100, 100), "bfloat16", 0.0625, 0.0078, 254,
                        10_000, True, rtol=0.016, atol=1e-5, method="fp64",
                        errors=(2.06e-3, 2.07e-3), bound=6.19e-3)  # fmt: skip
    described = {"matmul": {"op": "aten.matmul.default", "source": "model.py:9: q @ k"}}
    stages = (StageResult("cpu", "cpu", Status.OK),
              StageResult("xla", "xla", Status.OK, described=described))  # fmt: skip
    return passing("qk", comparisons=(agree, matmul), stages=stages, title="bf16 attention scores",
                   description="q @ (kᵀ/√128) on XLA and CPU.")  # fmt: skip


def test_a_match_that_differs_says_where_and_why_float64_calls_it_noise(tmp_path):
    report = build_report(RunSummary(started="now", variants=(fp64_match(),)), tmp_path)
    assert report.evidence == () and report.bug is None  # nothing to file
    (noted,) = report.noted
    (sentence,) = noted.divergence
    assert sentence == (
        "`xla` parts from `cpu` at `matmul` (254 of 10,000 elements beyond rtol=0.016, "
        "atol=1e-05; 1 of 2 tensors so), but judged against float64 it is rounding noise: "
        "`xla`'s RMSE against float64 is 0.00207, `cpu`'s own 0.00206, within the bound "
        "0.00619 (a few times the reference's error), and so for every tensor. `matmul` is "
        "`aten.matmul.default` from `model.py:9: q @ k`."
    )
    (window,) = noted.comparisons.windows
    assert window.header[5:] == ("beyond rtol / atol ²", "RMSE vs float64: stage / reference",
                                 "bound ³", "fp64 verdict")  # fmt: skip
    q, matmul = (texts(row) for row in window.rows)
    assert matmul[5:] == ["254 / 10,000", "0.00207 / 0.00206", "0.00619", "agrees"]
    assert q[5:] == ["0 / 12,800", "0.001 / 0.001", "0.00301", "agrees"]
    assert window.rows[1][0].tone == "bad"  # the first that differs, marked
    assert "information only" in noted.comparisons.footnote


def test_a_fp64_divergence_names_both_errors_and_the_bound(tmp_path):
    first = Comparison("mean", "cpu", "xla", (8,), "bfloat16", 0.1, 0.1, 3, 8, False,
                       method="fp64", errors=(3.8e-4, 1.9e-3), bound=1.15e-3)  # fmt: skip
    variant = mismatch(comparisons=(first,), first_divergence={"xla": "mean"})
    (shown,) = build_report(RunSummary(started="now", variants=(variant,)), tmp_path).evidence
    assert shown.divergence[0].endswith(
        " Against float64: `xla`'s RMSE 0.0019, `cpu`'s own 0.00038, beyond the bound 0.00115."
    )
    assert texts(shown.comparisons.windows[0].rows[0])[-1] == "differs"


def test_a_passing_run_opens_with_what_ran_and_says_what_each_case_checks(tmp_path):
    two = (passing("fine[a]", title="T", description="What it does."), passing("fine[b]"))
    report = build_report(RunSummary(started="now", variants=two), tmp_path)
    assert report.opening == "reprokit: 2 variants ran, all behaved as expected"
    assert report.checks == ("`fine` (2 variants): **T**. What it does.",)
    one = RunSummary(started="now", variants=(passing(), passing("gone", outcome=Outcome.SKIPPED)))
    assert build_report(one, tmp_path).opening == (
        "reprokit: 1 variant ran and behaved as expected (1 skipped)"
    )
    failing = build_report(RunSummary(started="now", variants=(mismatch(),)), tmp_path)
    assert failing.opening == "🐛 Bug" and failing.checks == ("`demo`.",)


def test_the_minimize_sentence_says_what_was_kept_or_that_nothing_could_be_removed(tmp_path):
    def sentence(nodes, changes=()):
        graph = GraphShrink(nodes, (3, 1), (10, 2))
        found = MinimizeResult("demo", "mismatch (node.#)", changes, (200, 60), 14, 2, 9.5,
                               "done", graph)  # fmt: skip
        summary = RunSummary(started="now", variants=(minimal,), minimized=found)
        report = build_report(summary, tmp_path)
        assert report.bug == ("demo: `demo` ends in **mismatch**, as the original did: the "
                              "outcome the minimizer kept.")  # not "a known problem"  # fmt: skip
        return report.minimized.sentence

    minimal = mismatch(expected=Outcome.MISMATCH)  # a minimal case expects what it kept
    assert sentence((39, 1)).startswith(
        "Kept 1 of 39 operations (1 of 3 inputs, 2 of 10 weights), still `mismatch (node.#)`: "
        "the minimal program is `minimal.pt2`, beside summary.json."
    )
    assert sentence((11, 11)) == (
        "Nothing could be removed: all 11 operations of the captured program are needed for "
        "the outcome (`mismatch (node.#)`), so `minimal.pt2` is the program as captured "
        "(14 candidate runs, 9.5 s, done)."
    )
