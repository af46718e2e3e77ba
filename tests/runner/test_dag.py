"""The stage DAG a script declares: its STAGES literal read without running it, what
--list-stages printed checked (each error says what is wrong), needs walked, and skips
spread to what can no longer run."""

from __future__ import annotations

import textwrap

import pytest

from reprokit.records import Stage, StageResult, Status
from reprokit.runner.dag import blocked, checked_stages, needed, parse_stages, read_stages


def script(text: str) -> str:
    return textwrap.dedent(text)


# --- read_stages: the STAGES literal ---------------------------------------------------------


def test_a_literal_is_read_with_every_field():
    found = read_stages(
        script("""
        import torch
        STAGES = [
            {"name": "cpu", "backend": "cpu"},
            {"name": "spmd", "backend": "xla_spmd", "needs": ["cpu"], "reference": "cpu",
             "devices": 4, "arbiter": "cpu"},
        ]
        """)
    )
    assert found == [
        Stage("cpu", "cpu"),
        Stage("spmd", "xla_spmd", ("cpu",), reference="cpu", devices=4, arbiter="cpu"),
    ]


def test_names_of_earlier_top_level_literals_are_read_too():
    found = read_stages(
        script("""
        SPMD_DEVICES, FIRST = 8, "a"
        STAGES = [{"name": FIRST, "backend": "cpu"},
                  {"name": "b", "backend": "xla_spmd", "needs": [FIRST],
                   "devices": SPMD_DEVICES}]
        print(STAGES)  # read, not changed
        """)
    )
    assert found == [Stage("a", "cpu"), Stage("b", "xla_spmd", ("a",), devices=8)]


def test_reading_names_leaves_the_shared_tree_as_it_was():
    # parse_python hands every caller the same tree: render compiles it, then this reads it,
    # then the next render of the same script compiles it again
    import ast

    from reprokit.infra.python_source import parse_python

    source = 'DEVICES = 4\nSTAGES = [{"name": "s", "backend": "xla_spmd", "devices": DEVICES}]\n'
    before = ast.dump(parse_python(source), include_attributes=True)
    assert read_stages(source) == [Stage("s", "xla_spmd", devices=4)]
    assert ast.dump(parse_python(source), include_attributes=True) == before
    compile(parse_python(source), "script.py", "exec")


@pytest.mark.parametrize(
    "source",
    [
        # computed: only running the script tells
        'STAGES = [{"name": n, "backend": "cpu"} for n in "ab"]',
        # a name that is no earlier literal
        'STAGES = [{"name": "a", "backend": "cpu", "devices": count()}]',
        'STAGES = [{"name": "a", "backend": BACKEND}]\nBACKEND = "cpu"',
        # bound once, then changed
        'STAGES = [{"name": "a", "backend": "cpu"}]\nSTAGES.append({"name": "b"})',
        'STAGES = [{"name": "a", "backend": "cpu"}]\nSTAGES[0]["backend"] = "xla"',
        'STAGES = [{"name": "a", "backend": "cpu"}]\nSTAGES = []',
        'STAGES = [{"name": "a", "backend": "cpu"}]\ndel STAGES',
        'STAGES = [{"name": "a", "backend": "cpu"}]\ndef f():\n    STAGES = 1',
        # not at the top level
        'def stages():\n    STAGES = [{"name": "a", "backend": "cpu"}]',
        # not a DAG the runner would accept: --list-stages answers (and says why)
        'STAGES = [{"name": "a", "backend": "tpu"}]',
        "STAGES = []",
        # no STAGES at all, or no Python
        "print('hello')",
        "STAGES = [",
        "STAGES = [{'name': 'a', 'backend': 'cpu'}]\0",
    ],
)
def test_what_cannot_be_read_for_sure_is_left_to_list_stages(source):
    assert read_stages(source) is None


# --- parse_stages and checked_stages: what --list-stages printed ----------------------------


def test_list_stages_output_is_parsed():
    text = '[{"name": "a", "backend": "cpu", "needs": null}, {"name": "b", "backend": "xla"}]'
    assert parse_stages(text) == [Stage("a", "cpu"), Stage("b", "xla")]


def test_output_that_is_not_json_says_so():
    with pytest.raises(ValueError, match=r"^not JSON \(Expecting value: line 1 column 1"):
        parse_stages("Traceback (most recent call last):")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a non-empty JSON list of stages"),
        ({"name": "a", "backend": "cpu"}, "expected a non-empty JSON list of stages"),
        ([{"backend": "cpu"}], "a stage without a name: {'backend': 'cpu'}"),
        (["a"], "a stage without a name: 'a'"),
        ([{"name": 1, "backend": "cpu"}], "a stage without a name: {'name': 1, 'backend': 'cpu'}"),
        ([{"name": "a", "backend": "tpu"}], "stage 'a': unknown backend 'tpu'"),
        ([{"name": "a"}], "stage 'a': unknown backend None"),
        ([{"name": "a", "backend": "cpu", "needs": "b"}], "stage 'a': needs must be a list"),
        ([{"name": "a", "backend": "cpu", "needs": [1]}], "stage 'a': needs must be a list"),
        (
            [{"name": "a", "backend": "xla_spmd", "devices": 0}],
            "stage 'a': devices must be a positive number",
        ),
        (
            [{"name": "a", "backend": "xla_spmd", "devices": True}],
            "stage 'a': devices must be a positive number",
        ),
        (
            [{"name": "a", "backend": "xla_spmd", "devices": "4"}],
            "stage 'a': devices must be a positive number",
        ),
    ],
)
def test_a_bad_stage_says_what_is_wrong(data, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        checked_stages(data)


def stage(name: str, *needs: str, **fields) -> dict:
    return {"name": name, "backend": "cpu", "needs": list(needs), **fields}


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([stage("a"), stage("a")], "two stages have the same name"),
        ([stage("a"), stage("b", "c")], "stage 'b' names an unknown stage 'c'"),
        ([stage("a", reference="x")], "stage 'a' names an unknown stage 'x'"),
        ([stage("a", arbiter="x")], "stage 'a' names an unknown stage 'x'"),
        ([stage("a", "a")], "the needs form a cycle: a"),
        # what the cycle holds back is named with it, what runs before it is not
        (
            [stage("x"), stage("a", "x", "b"), stage("b", "a"), stage("c", "b")],
            "the needs form a cycle: a, b, c",
        ),
    ],
)
def test_a_bad_dag_says_what_is_wrong(stages, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        checked_stages(stages)


# --- needed and blocked ---------------------------------------------------------------------

DAG = [
    Stage("a", "cpu"),
    Stage("b", "cpu", ("a",)),
    Stage("c", "cpu", ("b",)),
    Stage("d", "cpu", ("a", "c")),
    Stage("e", "cpu"),
]


def test_needed_walks_the_needs_however_indirectly():
    assert needed(DAG, ["d"]) == {"a", "b", "c", "d"}
    assert needed(DAG, ["b", "e"]) == {"a", "b", "e"}
    assert needed(DAG, []) == set()


def test_a_name_that_is_no_stage_counts_needing_nothing():
    assert needed(DAG, ["zzz", "b"]) == {"zzz", "a", "b"}


def result(name: str, status: Status, **fields) -> StageResult:
    return StageResult(name, "cpu", status, **fields)


def test_a_failed_need_skips_every_stage_that_can_no_longer_run():
    failed = result("b", Status.ERROR, returncode=3, error="AssertionError: no")
    found = blocked(DAG, {"a": result("a", Status.OK), "b": failed})
    assert {name: r.reason for name, r in found.items()} == {
        "c": "needs b, which exited with code 3: AssertionError: no",
        "d": "needs c, which was skipped (needs b, which exited with code 3: AssertionError: no)",
    }
    assert all(r.status is Status.SKIPPED for r in found.values())


def test_nothing_is_blocked_by_a_need_that_ended_well_or_has_not_ended():
    assert blocked(DAG, {"a": result("a", Status.OK)}) == {}
    assert blocked(DAG, {}) == {}


def test_a_stage_with_a_result_is_not_skipped_again():
    crashed = result("a", Status.CRASH, signal="SIGSEGV")
    found = blocked(DAG, {"a": crashed, "b": result("b", Status.SKIPPED, reason="not asked")})
    assert sorted(found) == ["c", "d"]
    assert found["d"].reason == "needs a, which died by SIGSEGV"  # its first failed need
