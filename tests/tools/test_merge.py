"""`reprokit run --stages` and `reprokit merge`: the CPU side run in one folder, the XLA side in
another (as on two machines), merged into the verdict of a single run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reprokit.records import Outcome, Status, read_summary

SEED = "xser_to_spmd"


@pytest.fixture(scope="module")
def seed_runs(tmp_path_factory):
    """The seed case whole, its CPU side (eval_cpu and what it needs) and its SPMD side."""
    from typer.testing import CliRunner

    from reprokit.cli import app

    root = tmp_path_factory.mktemp("merge")
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as patch:  # the three share a results cache: each stage
        patch.setenv("REPROKIT_CACHE", str(root / "cache"))  # runs once, then is reused
        for name, stages in (("whole", None), ("cpu", "eval_cpu"), ("xla", "eval_spmd")):
            args = ["run", SEED, "-n", "2", "-o", str(root / name)]
            result = runner.invoke(app, args + (["--stages", stages] if stages else []))
            assert result.exit_code in (0, 1), result.output
    return root


def stages_of(run: Path) -> dict[str, Status]:
    (variant,) = read_summary(run).variants
    return {stage.name: stage.status for stage in variant.stages}


def test_stages_runs_the_named_stages_and_what_they_need(seed_runs):
    assert stages_of(seed_runs / "cpu") == {
        "train_multicore": Status.OK,
        "convert": Status.SKIPPED,
        "eval_cpu": Status.OK,
        "eval_spmd": Status.SKIPPED,
    }
    assert stages_of(seed_runs / "xla")["eval_cpu"] is Status.SKIPPED
    assert stages_of(seed_runs / "xla")["eval_spmd"] is Status.OK
    (partial,) = read_summary(seed_runs / "cpu").variants
    assert partial.outcome is Outcome.SKIPPED
    assert partial.reason == "convert was skipped (not in --stages)"


def test_stages_that_name_none_of_a_variants_stages_say_which_it_has(cli, tmp_path):
    result = cli("run", SEED, "--stages", "eval_gpu", "-o", tmp_path / "run")
    assert result.exit_code == 0, result.output  # skipped: neither passed nor failed
    (variant,) = read_summary(tmp_path / "run").variants
    assert variant.outcome is Outcome.SKIPPED
    assert variant.reason == (
        "train_multicore was skipped (--stages names none of its stages (train_multicore, "
        "convert, eval_cpu, eval_spmd))"
    )


def test_merging_the_two_sides_gives_the_single_runs_verdict(seed_runs, cli, tmp_path):
    merged = tmp_path / "merged"
    result = cli("merge", str(seed_runs / "cpu"), str(seed_runs / "xla"), "-o", str(merged))
    assert result.exit_code == 0, result.output
    (whole,) = read_summary(seed_runs / "whole").variants
    summary = read_summary(merged)
    (found,) = summary.variants
    assert found.outcome is whole.outcome is Outcome.MATCH
    assert [c.tensor for c in found.comparisons] == [c.tensor for c in whole.comparisons]
    assert [c.max_abs for c in found.comparisons] == [c.max_abs for c in whole.comparisons]
    given = {Path(m.run).name: set(m.stages) for m in summary.machines}
    assert given == {"cpu": {"train_multicore", "eval_cpu"}, "xla": {"convert", "eval_spmd"}}
    assert (merged / SEED / "stages" / "eval_spmd" / "tensors.pt").is_file()
    report = cli("report", str(merged))
    assert report.exit_code == 0, report.output
    text = (merged / "report.md").read_text()
    machines = text.split("### Machines")[1]
    assert "eval_cpu, train_multicore" in machines and "convert, eval_spmd" in machines
    assert "<td>convert, eval_spmd</td>" in (merged / "report.html").read_text()


def test_runs_of_different_scripts_are_refused(seed_runs, cli, tmp_path):
    other = tmp_path / "other"
    result = cli("run", SEED, "--set", "train_steps=2", "--stages", "eval_spmd", "-o", str(other))
    assert result.exit_code in (0, 1), result.output
    (variant,) = read_summary(other).variants  # another label: [train_steps=2]
    copy = tmp_path / "renamed"
    (copy / SEED).mkdir(parents=True)
    (copy / SEED / "repro.py").write_text((other / variant.label / "repro.py").read_text())
    data = json.loads((other / "summary.json").read_text())
    data["variants"][0]["label"] = SEED
    (copy / "summary.json").write_text(json.dumps(data))
    result = cli("merge", str(seed_runs / "cpu"), str(copy), "-o", str(tmp_path / "m"))
    assert result.exit_code == 2
    assert f"variant {SEED}: its repro.py differs between" in result.stderr


def test_runs_of_different_releases_are_refused(seed_runs, cli, tmp_path):
    older = tmp_path / "older"
    older.mkdir()
    (older / SEED).mkdir()
    (older / SEED / "repro.py").write_bytes((seed_runs / "xla" / SEED / "repro.py").read_bytes())
    data = json.loads((seed_runs / "xla" / "summary.json").read_text())
    data["run"]["env"]["versions"]["torch_xla"] = "2.8.0"
    (older / "summary.json").write_text(json.dumps(data))
    result = cli("merge", str(seed_runs / "cpu"), str(older), "-o", str(tmp_path / "m"))
    assert result.exit_code == 2
    assert "the runs used different torch_xla releases" in result.stderr
    assert "2.8.0" in result.stderr


def test_runs_of_a_case_given_by_path_merge_without_cases(cli, tmp_path):
    """Each run carries its variant's case (case.toml beside repro.py): no --cases needed."""
    case = tmp_path / "mine" / "my_matmul.toml"
    case.parent.mkdir()
    case.write_text(
        '[case]\ntitle = "mine"\ntemplate = "matmul_numerics"\n'
        '[params]\nmatmul_precision = "highest"\n[compare]\nrtol = 1e-4\natol = 1e-4\n'
    )
    for name, stages in (("cpu", "matmul_cpu"), ("xla", "matmul_xla,slice_xla")):
        result = cli("run", case, "--stages", stages, "-o", tmp_path / name)
        assert result.exit_code in (0, 1), result.output
        assert (tmp_path / name / "my_matmul" / "case.toml").read_text() == case.read_text()
    merged = cli("merge", tmp_path / "cpu", tmp_path / "xla", "-o", tmp_path / "merged")
    assert merged.exit_code == 0, merged.output
    (found,) = read_summary(tmp_path / "merged").variants
    assert found.outcome is Outcome.MATCH and found.comparisons
    assert {c.rtol for c in found.comparisons} == {1e-4}  # the carried case's tolerances


def test_runs_made_with_templates_merge_without_them(cli, tmp_path):
    """The run folders hold each variant's script and case: the template the case names, from
    --templates when the runs were made, is not needed again to judge the merged stages."""
    from reliability_common import FAULT_TEMPLATES

    case = tmp_path / "mine" / "faulty_pair.toml"
    case.parent.mkdir()
    case.write_text(
        '[case]\ntitle = "mine"\ntemplate = "faults"\n[params]\nnap = 0.0\n'
        "[matrix]\ni = [0, 1]\n[compare]\nrtol = 1e-3\natol = 0\n"
    )
    for name, stages in (("first", "first,aside"), ("second", "second")):
        made = cli("run", case, "--templates", FAULT_TEMPLATES, "--stages", stages, "-o",
                   tmp_path / name)  # fmt: skip
        assert made.exit_code == 0, made.output
    merged = cli("merge", tmp_path / "first", tmp_path / "second", "-o", tmp_path / "merged")
    assert merged.exit_code == 0, merged.output
    found = read_summary(tmp_path / "merged").variants
    assert [v.label for v in found] == ["faulty_pair[0]", "faulty_pair[1]"]
    assert all(v.outcome is Outcome.MATCH and v.passed for v in found)
    assert {(c.target, c.reference, c.rtol, c.atol) for v in found for c in v.comparisons} == {
        ("second", "first", 1e-3, 0.0)  # the carried case's tolerances
    }
    assert [v.changed for v in found] == [{}, {"i": 1}]  # as the runs recorded them
