"""The records: every one round-trips through JSON, and summary.json files written before
the records moved (older fields, fewer fields) still read."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from reprokit.records import (
    METRICS,
    Change,
    Comparison,
    DiffSummary,
    Environment,
    EnvSpec,
    MinimizeResult,
    Outcome,
    Reports,
    RunSummary,
    Stage,
    StageResult,
    Status,
    Timed,
    VariantResult,
    Worst,
    XlaEvidence,
    read_summary,
    write_summary,
)

INF = math.inf


def comparison(name: str, *, close: bool = True, **extra) -> Comparison:
    fields = dict(tensor=name, reference="cpu", target="xla", shape=(2, 3), dtype="float32",
                  max_abs=0.0 if close else 0.5, max_rel=0.0 if close else INF,
                  mismatched=0 if close else 6, total=6, allclose=close)  # fmt: skip
    return Comparison(**(fields | extra))


RECORDS = [
    Stage("eval_spmd", "xla_spmd", ("convert",), "eval_cpu", devices=4, arbiter="fp64"),
    StageResult("eval", "xla", Status.CRASH, -6, "SIGABRT", 1.5, "why", {"loss": [1.0, 0.5]}),
    comparison("w", close=False, worst=(Worst((1, 2), 0.5, INF),), nan=(1, 0), errors=(0.1, INF)),
    comparison("gone", shape=None, dtype=None, note="only in cpu", max_abs=INF),
    Environment(
        python="3.11.7",
        versions={"torch": "2.9.0"},
        xla={"device_kind": "CPU", "device_count": 4, "matmul_precision": "default"},
    ),
    MinimizeResult(
        "c", "mismatch (act.#)", (Change("layers", 8, 4),), (200, 150), 9, 3, 4.5, "done"
    ),
    DiffSummary.of([comparison("a"), comparison("b", close=False)]),
    XlaEvidence("TPU", 4, Timed(3, 1.5), 1, Timed(3, 0.25), fallbacks=("aten::linalg_eig",)),
    XlaEvidence(execute=Timed(2, 0.5), fallback_counts={"aten::nonzero": 3}),  # from wrap
    EnvSpec("2.8", ("torch==2.8.0", "torch_xla==2.8.0")),
    Reports(RunSummary("now"), (Path("run/report.md"), Path("run/bundle.zip"))),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_round_trip_through_json(record):
    text = json.dumps(record.to_json(), allow_nan=False)  # valid JSON: inf as a string
    assert type(record).from_json(json.loads(text)) == record


def test_a_run_summary_round_trips_with_every_record_inside(tmp_path):
    stage = replace(RECORDS[1], xla=RECORDS[7])
    variant = VariantResult("c", "c[a]@2.8", {"a": 1}, Outcome.MISMATCH, Outcome.MATCH, 3.0,
                            stages=(stage,), comparisons=(RECORDS[2], RECORDS[3]),
                            first_divergence={"xla": "w"}, title="t", env=RECORDS[9])  # fmt: skip
    summary = RunSummary("now", "later", ("reprokit", "run"), RECORDS[4], (variant,),
                         interrupted=True, minimized=RECORDS[5])  # fmt: skip
    write_summary(summary, tmp_path)
    assert read_summary(tmp_path) == summary
    assert variant.failed_stage == stage and variant.mark == "fail"
    assert variant.divergence("xla") == "w is the first to differ (6 / 6 mismatched, max abs 0.5)"


def test_failed_is_decided_once():
    assert {s for s in Status if s.failed} == {Status.ERROR, Status.CRASH, Status.TIMEOUT}
    assert Status.CRASH.outcome is Outcome.CRASH and Status.SKIPPED.outcome is None


def test_diff_summary_counts_add_up():
    found = DiffSummary.of([comparison("same", equal=True), comparison("near"),
                            comparison("far", close=False), RECORDS[3]])  # fmt: skip
    assert (found.tensors, found.equal, found.close, found.differ) == (4, 1, 1, 1)
    assert found.only_in_reference == ("gone",) and found.first_divergence == "far"


OLD_SUMMARY = {  # as the first release wrote it: a short env, worst as dicts, shape as a list
    "run": {"started": "s", "finished": "f", "argv": ["reprokit"], "interrupted": False,
            "env": {"python": "3.11.7", "platform": "Linux", "versions": {"torch": "2.9.0"},
                    "variables": {}}},
    "variants": [{
        "case": "c", "label": "c", "variant": {}, "outcome": "mismatch", "expected": "match",
        "passed": False, "seconds": 1.0, "reason": None, "first_divergence": {"xla": "w"},
        "stages": [{"name": "xla", "backend": "xla", "status": "ok", "returncode": 0,
                    "signal": None, "seconds": 1.0, "reason": None}],
        "comparisons": [{"tensor": "w", "reference": "cpu", "target": "xla", "shape": [2],
                         "dtype": "float32", "max_abs": "inf", "max_rel": "inf",
                         "mismatched": 1, "total": 2, "allclose": False, "rtol": 1e-05,
                         "atol": 1e-08, "equal": False, "nan": [0, 1], "inf": [0, 0],
                         "worst": [{"index": [1], "target": "nan", "reference": 1.0}],
                         "note": ""}],
    }],
}  # fmt: skip


def test_a_summary_from_the_first_release_still_reads(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(OLD_SUMMARY))
    summary = read_summary(tmp_path)
    (variant,) = summary.variants
    (c,) = variant.comparisons
    assert c.shape == (2,) and c.max_abs == INF and math.isnan(c.worst[0].target)
    assert summary.env.rows()[:2] == [("Python", "3.11.7"), ("Platform", "Linux")]
    assert variant.passed is False and variant.stages[0].metrics == {}


def test_a_label_without_its_environment():
    """bisect and the report's environment table group a variant's runs by it; a parameter
    value holding "@" stays in it."""
    plain = VariantResult("c", "c[a@b]", {"a": "a@b"}, Outcome.MATCH, Outcome.MATCH, 1.0)
    in_env = replace(plain, label="c[a@b]@2.8", env=EnvSpec("2.8", ()))
    assert plain.base_label == in_env.base_label == "c[a@b]"


# What a rendered script writes as result.json's "xla" (templates/_protocol.py.j2's
# xla_evidence()), and what `reprokit wrap` wrote: no device, and fallbacks of a last report.
SCRIPT_XLA = {"device_kind": "CPU", "devices": 1, "compile": {"count": 4, "seconds": 0.3125},
              "cached": 0, "execute": {"count": 4, "seconds": 0.0021},
              "to_device": {"count": 1, "seconds": 0.0001},
              "from_device": {"count": 2, "seconds": 0.0},
              "fallbacks": ["aten::linalg_eig"]}  # fmt: skip
WRAP_XLA = {k: v for k, v in SCRIPT_XLA.items() if k not in ("device_kind", "devices")}


def test_the_xla_evidence_scripts_write_reads_and_writes_back_the_same():
    old = {"name": "xla", "backend": "xla", "status": "ok", "xla": SCRIPT_XLA}
    stage = StageResult.from_json(old)
    assert isinstance(stage.xla, XlaEvidence)
    assert (stage.xla.device_kind, stage.xla.devices) == ("CPU", 1)
    assert stage.xla.compile == Timed(4, 0.3125) and stage.xla.fallbacks == ("aten::linalg_eig",)
    assert stage.to_json()["xla"] == SCRIPT_XLA  # summary.json keeps the script's format
    assert stage.uncached() == 4  # four compilations, four executions, none from the cache
    wrapped = StageResult.from_json(old | {"xla": WRAP_XLA})
    assert wrapped.xla is not None and wrapped.xla.device_kind is None
    assert wrapped.to_json()["xla"] == WRAP_XLA


def test_a_stage_given_result_jsons_dict_holds_the_record():
    """The executors pass result.json's "xla" as they read it."""
    stage = replace(StageResult("xla", "xla", Status.OK), xla=SCRIPT_XLA)
    assert stage.xla == XlaEvidence.from_json(SCRIPT_XLA)


def test_evidence_from_metrics_adds_up_the_metrics_each_figure_names():
    seen = {"CompileTime": (2, 1.0), "ExecuteTime": (3, 0.5), "ExecuteReplicatedTime": (4, 0.25)}
    xla = XlaEvidence.from_metrics(lambda name: seen.get(name, (0, 0.0)),
                                   fallbacks=["aten::b", "aten::a", "aten::b"])  # fmt: skip
    assert xla.compile == Timed(2, 1.0) and xla.execute == Timed(7, 0.75)  # SPMD counted in
    assert xla.to_device == Timed() and xla.fallbacks == ("aten::a", "aten::b")


def test_the_scripts_copy_of_the_metric_names_agrees():
    """A script is standalone: it keeps its own copy of METRICS, which must say the same."""
    template = Path(__file__).parents[2] / "templates" / "_protocol.py.j2"
    body = template.read_text().split("def xla_evidence()", 1)[1].split("\ndef ", 1)[0]
    found = {key: tuple(re.findall(r'"(\w+)"', names))
             for key, names in re.findall(r'"(\w+)": metric\(([^)]*)\)', body)}  # fmt: skip
    assert found == METRICS
    assert 'counter_value("CachedCompile")' in body


def test_the_environment_a_variant_ran_in_reads_from_an_old_summary():
    env = {"name": "2.8", "requirements": ["torch==2.8.0", "torch_xla==2.8.0"]}
    old = {"case": "c", "label": "c@2.8", "variant": {}, "outcome": "match",
           "expected": "match", "seconds": 1.0, "env": env}  # fmt: skip
    variant = VariantResult.from_json(old)
    assert variant.env == EnvSpec("2.8", ("torch==2.8.0", "torch_xla==2.8.0"))
    assert variant.base_label == "c" and variant.env.name == "2.8"
    assert variant.to_json()["env"] == old["env"]
    assert VariantResult.from_json(old | {"env": None}).env is None


def test_reports_unpack_as_the_pair_they_were():
    summary, written = RECORDS[10]
    assert summary == RunSummary("now") and written == [Path("run/report.md"),
                                                       Path("run/bundle.zip")]  # fmt: skip


def test_a_variants_variables_round_trip_and_an_old_summary_has_none():
    old = {"case": "c", "label": "c", "variant": {}, "outcome": "match",
           "expected": "match", "seconds": 1.0}  # fmt: skip
    variant = VariantResult.from_json(old)
    assert variant.variables == {} and variant.case_variables == ()
    new = replace(variant, variables={"RK": "1", "XLA_FLAGS": "--x"}, case_variables=("RK",))
    again = VariantResult.from_json(json.loads(json.dumps(new.to_json())))
    assert again == new and again.case_variables == ("RK",)
