"""The plan of a variant's stages: --stages, backends the executor cannot run, a skip that
blocks what needs it, an older template's device counts. Pure: no process, no torch."""

from __future__ import annotations

from reprokit.records import Stage, Status
from reprokit.runner.plan import NOT_ASKED, Plan, Skipped, plan, selected

# cpu -> xla -> spmd, and a cuda stage beside them that compares with cpu
STAGES = (
    Stage("cpu", "cpu"),
    Stage("xla", "xla", ("cpu",), reference="cpu"),
    Stage("spmd", "xla_spmd", ("xla",)),
    Stage("gpu", "cuda", ("cpu",), reference="cpu"),
)


def reasons(found: Plan) -> dict[str, str]:
    return {skip.stage.name: skip.reason for skip in found.skipped}


def test_everything_runs_when_nothing_is_asked_or_missing():
    found = plan(STAGES)
    assert found.runs == ("cpu", "xla", "spmd", "gpu")
    assert found.skipped == () and found.notes == ()
    assert found.stages == STAGES and found.compares


def test_stages_runs_those_named_and_what_they_need_however_indirectly():
    found = plan(STAGES, asked=["spmd"])
    assert found.runs == ("cpu", "xla", "spmd")
    assert reasons(found) == {"gpu": NOT_ASKED}


def test_stages_that_names_none_of_them_says_which_there_are():
    found = plan(STAGES, asked=["cpu_forward"])  # a typo
    assert found.runs == ()
    why = "--stages names none of its stages (cpu, xla, spmd, gpu)"
    assert reasons(found) == dict.fromkeys(["cpu", "xla", "spmd", "gpu"], why)


def test_a_name_of_another_variant_is_ignored_beside_one_of_this():
    assert plan(STAGES, asked=["elsewhere", "xla"]).runs == ("cpu", "xla")


def test_a_missing_backend_skips_its_stage_and_blocks_what_needs_it():
    found = plan(STAGES, unavailable={"xla": "no TPU here"})
    assert found.runs == ("cpu", "gpu")
    assert reasons(found) == {
        "xla": "no TPU here",
        "spmd": "needs xla, which was skipped (no TPU here)",
    }


def test_a_stage_not_asked_for_is_skipped_as_not_asked_even_when_its_backend_is_missing():
    found = plan(STAGES, asked=["xla"], unavailable={"cuda": "no NVIDIA GPU here"})
    assert reasons(found) == {"spmd": NOT_ASKED, "gpu": NOT_ASKED}


def test_the_skipped_records_say_why():
    (skip,) = plan(STAGES, unavailable={"cuda": "no GPU"}).skipped
    assert skip == Skipped(STAGES[3], "no GPU")
    result = skip.result()
    assert (result.name, result.backend, result.status, result.reason) == (
        "gpu",
        "cuda",
        Status.SKIPPED,
        "no GPU",
    )


def test_an_older_template_gets_its_spmd_devices_and_a_note_saying_what_to_add():
    found = plan(STAGES, params={"spmd_devices": 3}, template="old.py.j2")
    assert [s.devices for s in found.stages] == [None, None, 3, None]
    (note,) = found.notes
    assert note.startswith("old.py.j2: stage 'spmd' gives no \"devices\"")
    assert '"devices": SPMD_DEVICES' in note and "(3)" in note


def test_a_stage_that_names_its_devices_keeps_them_and_earns_no_note():
    stages = [Stage("a", "xla_spmd", devices=8), Stage("b", "xla", ("a",))]
    found = plan(stages, params={"spmd_devices": 3})
    assert [s.devices for s in found.stages] == [8, None] and found.notes == ()
    assert plan(stages, params={"spmd_devices": "3"}).notes == ()  # not a count: not read


def test_no_reference_means_nothing_to_compare():
    assert not plan([Stage("a", "cpu"), Stage("b", "xla", ("a",))]).compares


def test_selected_is_every_stage_when_none_is_named():
    assert selected(STAGES, []) == {"cpu", "xla", "spmd", "gpu"}
    assert selected(STAGES, ["gpu"]) == {"cpu", "gpu"}
