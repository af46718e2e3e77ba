"""The records: every one round-trips through JSON, and summary.json files written before
the records moved (older fields, fewer fields) still read."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from reprokit.records import (
    Change,
    Comparison,
    DiffSummary,
    Environment,
    MinimizeResult,
    Outcome,
    RunSummary,
    Stage,
    StageResult,
    Status,
    VariantResult,
    Worst,
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
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_round_trip_through_json(record):
    text = json.dumps(record.to_json(), allow_nan=False)  # valid JSON: inf as a string
    assert type(record).from_json(json.loads(text)) == record


def test_a_run_summary_round_trips_with_every_record_inside(tmp_path):
    variant = VariantResult("c", "c[a]", {"a": 1}, Outcome.MISMATCH, Outcome.MATCH, 3.0,
                            stages=(RECORDS[1],), comparisons=(RECORDS[2], RECORDS[3]),
                            first_divergence={"xla": "w"}, title="t")  # fmt: skip
    summary = RunSummary("now", "later", ("reprokit", "run"), RECORDS[4], (variant,),
                         interrupted=True, minimized=RECORDS[5])  # fmt: skip
    write_summary(summary, tmp_path)
    assert read_summary(tmp_path) == summary
    assert variant.failed_stage == RECORDS[1] and variant.mark == "fail"
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
    in_env = replace(plain, label="c[a@b]@2.8", env={"name": "2.8", "requirements": []})
    assert plain.base_label == in_env.base_label == "c[a@b]"
