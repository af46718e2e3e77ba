"""A group's trigger: the rule search over the samples' features (pure: learn, choose,
settle), the report's sentence and older ops.json files without one; then two real sweeps:
``_chunk_cat``'s zeros where an input needs padding (its witness, dim -1 and 5 chunks, once
read as "dim > 0"), and ``threshold``'s gradient where an input holds NaN, each confirmed on
new samples the workers made and judged."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from reprokit.records.ops import Group, read_ops
from reprokit.reports.ops import said
from reprokit.tools.ops import trigger
from reprokit.tools.ops.harness.repro import title
from reprokit.tools.ops.trigger import Rule, Score


def sample(**features):
    base = {"NaN": False, "-inf": False, "empty": False, "dtype": "float32"}
    return base | features


# _chunk_cat's samples as the sweep saw them: every one that needs padding differs, whatever
# its dim; dim alone separates them less well
DIFFER = [
    sample(dim="-1", num_chunks="5", **{"uneven chunks": True}),
    sample(dim="0", num_chunks="2", **{"uneven chunks": True}),
    sample(dim="1", num_chunks="5", **{"uneven chunks": True}),
    sample(dim="0", num_chunks="3", **{"uneven chunks": True}),
]
AGREE = [
    sample(dim="1", num_chunks="3", **{"uneven chunks": False}),
    sample(dim="0", num_chunks="1", **{"uneven chunks": False}),
]


def test_a_single_condition_that_separates_them_comes_first():
    (best, score), *others = trigger.learn(DIFFER, AGREE)
    assert best == Rule((("uneven chunks", "=", True),))
    assert score == Score(4, 4, 2, 2) and score.perfect
    assert all(not s.perfect or len(r.atoms) == 1 for r, s in others)
    assert best.text().startswith("uneven chunks")


def test_a_pair_only_where_no_single_condition_is_perfect():
    differ = [sample(NaN=True, dtype="float16"), sample(NaN=True, dtype="float16")]
    agree = [sample(NaN=True), sample(dtype="float16"), sample()]
    (best, score), *_ = trigger.learn(differ, agree)
    assert set(best.atoms) == {("NaN", "=", True), ("dtype", "=", "float16")}
    assert score.perfect
    assert best.text() in (
        "an input holds NaN and dtype = float16",
        "dtype = float16 and an input holds NaN",
    )


def test_facts_before_arguments_before_the_dtype_on_a_tie():
    differ = [sample(NaN=True, dim="1", dtype="float16")]
    agree = [sample(dim="0")]
    ranked = [r.names()[0] for r, _ in trigger.learn(differ, agree)]
    assert ranked[0] == "NaN" and ranked.index("dim") < ranked.index("dtype")


def test_a_value_class_is_said_of_the_argument_that_holds_it():
    """NaN in nll_loss's weight differs, NaN in its input agrees: "an input holds NaN" holds
    for both; the argument's own feature splits them, and says which."""
    differ = [sample(NaN=True, **{"NaN in weight": True, "NaN in input": False})]
    agree = [
        sample(NaN=True, **{"NaN in weight": False, "NaN in input": True}),
        sample(**{"NaN in weight": False, "NaN in input": False}),
    ]
    (best, score), *_ = trigger.learn(differ, agree)
    assert best.text() == "weight holds NaN" and score.perfect
    both = [sample(NaN=True, **{"NaN in weight": True, "NaN in input": True})]
    ranked = trigger.learn(both, [sample()])  # a tie: the named argument first
    assert ranked[0][0].text() in ("weight holds NaN", "input holds NaN")
    assert trigger.value_class("NaN in weight") == ("NaN", "weight")
    assert trigger.value_class("NaN") == ("NaN", "") and trigger.value_class("dim") is None


def test_no_rule_without_both_sides():
    assert trigger.learn(DIFFER, []) == [] and trigger.learn([], AGREE) == []


def test_new_samples_are_those_that_flip_the_rule_or_tell_candidates_apart():
    rules = [Rule((("uneven chunks", "=", True),)), Rule((("dim", "!=", "1"),))]
    made = [
        (True, sample(dim="1", **{"uneven chunks": True})),  # rules disagree
        (True, sample(dim="0", **{"uneven chunks": True})),  # both expect it to differ: no use
        (False, sample(dim="1", **{"uneven chunks": True})),  # a flip, and they disagree
        (True, sample(dim="0", **{"uneven chunks": False})),  # a flip
        (True, sample(dim="0", **{"uneven chunks": False})),  # the same features again
    ]
    assert trigger.choose(rules, made, 8) == [2, 3, 0]
    assert trigger.choose(rules, made, 1) == [2]


def test_settle_keeps_the_candidate_the_new_samples_bear_out():
    candidates = [
        (Rule((("dim", "!=", "1"),)), Score(3, 4, 2, 2)),
        (Rule((("uneven chunks", "=", True),)), Score(4, 4, 2, 2)),
    ]
    new_differ = [sample(dim="1", **{"uneven chunks": True})]
    new_agree = [sample(dim="0", **{"uneven chunks": False})]
    found = trigger.settle(candidates, new_differ, new_agree)
    assert found["rule"] == [["uneven chunks", "=", True]]
    assert (found["differs"], found["agrees"], found["confirmed"], found["refuted"]) == (
        [4, 4],
        [2, 2],
        2,
        0,
    )
    assert found["new"] == {"differs": [1, 1], "agrees": [1, 1]}


def test_the_report_says_the_counts_and_whether_new_samples_confirm():
    found = {"condition": "an input holds NaN", "differs": [6, 6], "agrees": [12, 12]}
    assert said(found | {"confirmed": 8, "refuted": 0}) == (
        "differs whenever an input holds NaN (6 of 6), agrees otherwise (12 of 12); "
        "8 new samples confirm"
    )
    refuted = said(found | {"confirmed": 5, "refuted": 1})  # not stated as the cause
    assert refuted.startswith("not known: no condition the new samples bear out")
    assert refuted.endswith("is contradicted by 1 of 6 new samples)")
    assert said(found).endswith("not checked on new samples")
    assert said({"condition": None, "why": "no sample of the op agrees", "differs": [3, 3]}) == (
        "not known: every sample of the op that ran differs (3)"
    )
    assert said({}) == ""


def test_an_older_group_without_a_trigger_still_loads():
    data = Group("g", "abs", "", "xla", ("float32",), "value", False, {}, 1).to_json()
    del data["trigger"]
    group = Group.from_json(data)
    assert group.trigger == {} and "when" not in title(group)


def reprokit(*args, cache):
    env = dict(os.environ, REPROKIT_CACHE=str(cache), REPROKIT_WARM_IDLE="0", PJRT_DEVICE="CPU")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    ("args", "op", "words"),
    [
        (["_chunk_cat", "--dtypes", "float32"], "_chunk_cat", "uneven chunks"),
        (
            ["nn.functional.threshold", "--dtypes", "float32", "--edge", "--grad"],
            "nn.functional.threshold",
            "an input holds NaN",
        ),
    ],
)
def test_a_real_sweep_states_the_trigger_confirmed_by_new_samples(tmp_path, args, op, words):
    done = reprokit("ops", *args, "-o", str(tmp_path / "out"), cache=tmp_path / "cache")
    assert done.returncode == 1, done.stdout + done.stderr
    # with --grad, the gradient's group (threshold's forward NaN is a group of its own)
    grad = "--grad" in args
    (group,) = [g for g in read_ops(tmp_path / "out").groups if g.op == op and g.grad == grad]
    found = group.trigger
    assert found["condition"].startswith(words), found
    assert found["differs"][0] == found["differs"][1] == group.samples
    assert found["agrees"][0] == found["agrees"][1] > 0
    assert found["confirmed"] >= 4 and found["refuted"] == 0, found
    assert any(t["differs"] for t in found["tested"])  # new samples made to meet it, and
    assert any(not t["differs"] for t in found["tested"])  # to break it
    assert words in (tmp_path / "out" / group.repro).read_text().splitlines()[0]
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"differs whenever {found['condition']}" in report and "new samples confirm" in report


class Answers:
    """A pool that answers confirm jobs as workers would: each request's new samples (three
    here), all of them, or the one ``only`` names; every job kept."""

    def __init__(self) -> None:
        self.jobs: list[dict] = []

    def answer(self, job: dict) -> list[dict]:
        self.jobs.append(job)
        lines = []
        for request in job["confirm"]:
            picked = range(3) if "only" not in request else range(3)[request["only"] :][:1]
            for k in picked:
                said = {"what": f"new {k}", "dtype": "float32", "features": {"dim": "[]"}}
                lines.append({"confirm": request["id"], "record": {"verdict": "match"} | said})
            lines.append({"confirm": request["id"], "done": True})
        return lines


def test_an_op_whose_graph_ignores_an_argument_has_each_new_sample_judged_alone(
    tmp_path, monkeypatch
):
    """Its new samples change one argument: in one worker each would get an earlier one's
    compiled graph. One job each for its group, one shared job for another op's."""
    from reprokit.records.ops import Sample
    from reprokit.tools.ops.harness import confirm
    from reprokit.tools.ops.harness.pool import Asking

    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path))

    def record(op: str, i: int, differs: bool, kind: str = "value") -> Sample:
        task = {"op": op, "variant": "", "dtype": "float32", "backend": "xla", "grad": False}
        answer = {"sample": i, "verdict": "differs" if differs else "match", "edge": False}
        features = {"dim": "[]" if differs else "0", "empty": False}
        answer |= {"kind": kind, "described": {"features": features, "numel": 4}}
        return Sample.from_json(task | answer)

    def group(op: str, kind: str) -> Group:
        return Group(f"{op}_{kind}", op, "", "xla", ("float32",), kind, False, {}, 1)

    records = [record(op, i, i == 0) for op in ("var", "avg") for i in range(3)]
    groups = [group("var", "value"), group("avg", "value"), group("avg", "stale-graph")]
    pool = Answers()
    found = confirm.triggers(groups, records, Asking(pool, jobs=2))
    alone = [j for j in pool.jobs if "only" in j["confirm"][0]]
    assert sorted(j["confirm"][0]["only"] for j in alone) == list(range(confirm.LIMIT))
    assert {j["confirm"][0]["id"] for j in alone} == {"avg_value"}
    shared = [j for j in pool.jobs if "only" not in j["confirm"][0]]
    assert [r["id"] for j in shared for r in j["confirm"]] == ["var_value"]
    by_id = {g.id: g.trigger for g in found}
    assert [t["what"] for t in by_id["avg_value"]["tested"]] == ["new 0", "new 1", "new 2"]


def test_a_reduction_past_float16s_largest_count_is_said_so():
    """float16 var over 70,000 ones is NaN on XLA (its count is inf): the size is the fact that
    splits them, not a value class the large samples happen to lack."""
    differ = [sample(dtype="float16", **{"over 65504 elements": True})] * 2
    agree = [sample(dtype="float16", **{"over 65504 elements": False}), sample()]
    agree += [sample(**{"over 65504 elements": True, "+inf": True})]
    (best, score), *_ = trigger.learn(differ, agree)  # float32 that large agrees: with the dtype
    assert "an input has more than 65,504 elements" in best.text() and score.perfect
    assert "float16" in best.text() and "+inf" not in best.text()
