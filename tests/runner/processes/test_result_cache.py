"""The results cache: a stage is reused only when nothing it depends on changed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import reprokit.runner.processes.result_cache as cache_module
from reprokit.errors import ReprokitWarning
from reprokit.generate.variants import load_variants
from reprokit.records import Stage, StageResult, Status
from reprokit.runner.options import Options
from reprokit.runner.processes.result_cache import CachingExecutor
from reprokit.runner.processes.stage import LOCAL, StageJob
from reprokit.runner.scheduler import run

TEMPLATES = Path(__file__).parents[2] / "data" / "cache"


@pytest.fixture
def counted(tmp_path):
    """Run the two-stage case; returns (stage -> reused from, stage -> how often it ran)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    done = []

    def run_case(mode: str = "ok", **options):
        case = tmp_path / "counted.toml"
        case.write_text(
            f'[case]\ntitle = "t"\ntemplate = "counted"\n[params]\nruns = "{runs}"\n'
            f'mode = "{mode}"\n'
        )
        (variant,) = load_variants([str(case)], templates=[TEMPLATES])
        options = Options(templates=(TEMPLATES,), **options)
        summary = run([variant], run_dir=tmp_path / f"run{len(done)}", options=options)
        done.append(summary)
        (result,) = summary.variants
        ran = {name: len(list(runs.glob(f"{name}.*"))) for name in ("first", "second")}
        return {s.name: s.reused for s in result.stages}, ran

    return run_case


def test_an_unchanged_rerun_reuses_every_stage_and_says_from_where(counted, tmp_path, cli):
    assert counted() == ({"first": None, "second": None}, {"first": 1, "second": 1})
    reused, ran = counted()
    assert ran == {"first": 1, "second": 1}  # neither ran again
    assert reused == {"first": str((tmp_path / "run0").resolve())} | {
        "second": str((tmp_path / "run0").resolve())
    }
    assert (tmp_path / "run1/counted/stages/second/copy.txt").read_text() == "1"
    summary = json.loads((tmp_path / "run1/summary.json").read_text())
    assert summary["variants"][0]["stages"][0]["reused"].endswith("run0")
    assert cli("report", tmp_path / "run1", "--format", "md").exit_code == 0
    report = (tmp_path / "run1/report.md").read_text()
    assert re.search(r"\| match \| match \| yes \| [\d.]+ \(2 stages reused\) \|", report)


def test_no_cache_runs_everything(counted):
    counted()
    assert counted(cache=False)[1] == {"first": 2, "second": 2}


def test_a_changed_script_runs_again(counted):
    counted()
    assert counted(mode="raise")[1] == {"first": 2, "second": 2}  # another mode, another script


def test_a_steering_environment_variable_runs_again(counted, monkeypatch):
    counted()
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    assert counted()[1] == {"first": 2, "second": 2}
    assert counted()[1] == {"first": 2, "second": 2}  # and that is kept in turn


def test_another_package_version_runs_again(counted, monkeypatch):
    counted()
    newer = {**cache_module.versions(), "torch_xla": "9.9.9"}
    monkeypatch.setattr(cache_module, "versions", lambda: newer)
    assert counted()[1] == {"first": 2, "second": 2}


def test_a_need_rerun_with_other_output_makes_the_stage_run_again(
    counted, monkeypatch, results_cache
):
    counted()
    _forget(results_cache, "first")
    monkeypatch.setenv("DATA", "2")  # the first stage now writes something else
    reused, ran = counted()
    assert ran == {"first": 2, "second": 2} and reused == {"first": None, "second": None}


def test_a_need_rerun_with_the_same_output_lets_the_stage_be_reused(counted, results_cache):
    counted()
    _forget(results_cache, "first")
    reused, ran = counted()
    assert ran == {"first": 2, "second": 1}
    assert reused["first"] is None and reused["second"] is not None


def test_errors_are_kept_but_timeouts_are_not(counted):
    counted(mode="raise")
    assert counted(mode="raise")[1]["second"] == 1
    counted(mode="hang", timeout=1)
    assert counted(mode="hang", timeout=1)[1]["second"] == 3  # raise once, hang twice


def test_stages_writing_beside_their_folders_are_not_kept(counted, results_cache):
    """The seed's convert wrote stages/dcp: reused without it, eval_spmd found no checkpoint."""
    said = r"wrote stages/shared, outside their own folders"
    with pytest.warns(ReprokitWarning, match=said):
        counted(mode="elsewhere")
    assert not list((results_cache / "results").glob("*/record.json"))
    with pytest.warns(ReprokitWarning, match=said):
        reused, ran = counted(mode="elsewhere")
    assert ran == {"first": 2, "second": 2} and reused == {"first": None, "second": None}


class Stray:
    """An executor whose one stage writes beside its own folder: stages/first and stages/x."""

    capabilities = LOCAL

    def run_stage(self, job: StageJob, stop: threading.Event) -> StageResult:
        for name in (job.stage.name, "x"):
            (job.folder / "stages" / name).mkdir(parents=True, exist_ok=True)
            (job.folder / "stages" / name / "out.txt").write_text("made")
        return StageResult(job.stage.name, "cpu", Status.OK, 0)

    def list_stages(self, folder: Path, stop: threading.Event) -> tuple[StageResult, list]:
        raise AssertionError("the cache knows the variant's stages from the job")

    def close(self) -> None:
        pass


def test_the_cache_tells_stray_folders_by_the_dag_the_job_carries(tmp_path, results_cache):
    """No listing on the same executor needed: the job says which folders are stages'."""
    caching = CachingExecutor(Stray(), Options(), tmp_path)
    assert caching.capabilities is LOCAL  # the inner's
    first = Stage("first", "cpu")
    (tmp_path / "repro.py").write_text("")
    job = StageJob(tmp_path, first, dag=(first, Stage("x", "cpu")))
    caching.run_stage(job, threading.Event())  # stages/x is a stage's: kept
    assert len(list((results_cache / "results").glob("*/record.json"))) == 1
    shutil.rmtree(results_cache / "results")
    with pytest.warns(ReprokitWarning, match=r"wrote stages/x, outside their own folders"):
        caching.run_stage(StageJob(tmp_path, first, dag=(first,)), threading.Event())
    assert not list((results_cache / "results").glob("*/record.json"))


def _forget(cache: Path, stage: str) -> None:
    """Remove the cached result of ``stage``, as if it had never run."""
    for record in (cache / "results").glob("*/record.json"):
        if json.loads(record.read_text())["result"]["name"] == stage:
            shutil.rmtree(record.parent)


def test_a_rerun_from_the_cache_compares_without_torch(tmp_path):
    """The comparisons of unchanged tensors come back from the cache: the harness of a re-run
    whose stages were all reused never imports torch, not even in the background (seconds of
    a re-run otherwise: the floor of a re-run is the interpreter's)."""
    faulty = Path(__file__).parents[2] / "data" / "templates"
    case = tmp_path / "differs.toml"
    case.write_text('[case]\ntitle = "t"\ntemplate = "faulty"\n[params]\nmode = "mismatch"\n')
    command = ["run", str(case), "--templates", str(faulty), "-o"]
    no_torch = (  # any import of torch, in any thread, is refused and said on stderr
        "import sys, threading; sys.modules['torch'] = None; "
        "threading.excepthook = lambda e: print('THREAD DIED', e.exc_value, file=sys.stderr); "
        "from reprokit.cli import main; main()"
    )
    results = []
    for n, prefix in enumerate((["-m", "reprokit"], ["-c", no_torch])):
        command_line = [sys.executable, *prefix, *command, str(tmp_path / f"run{n}")]
        done = subprocess.run(command_line, capture_output=True, text=True)
        assert done.returncode == 1, done.stderr  # a mismatch, as the case does not expect
        assert "THREAD DIED" not in done.stderr
        summary = json.loads((tmp_path / f"run{n}/summary.json").read_text())
        (variant,) = summary["variants"]
        results.append((variant["outcome"], variant["comparisons"], variant["first_divergence"]))
        assert all(bool(s["reused"]) == bool(n) for s in variant["stages"])
    assert results[0] == results[1] and results[0][0] == "mismatch"


def test_dump_hlo_after_a_plain_run_runs_the_xla_stage_and_leaves_its_hlo(tmp_path):
    """--dump-hlo asks for graphs.hlo, which a stage run without it never wrote."""
    data = Path(__file__).parents[2] / "data" / "templates"
    case = tmp_path / "eig.toml"
    case.write_text('[case]\ntitle = "eig"\ntemplate = "fallback"\n')

    def once(name: str, **options) -> dict[str, str | None]:
        (variant,) = load_variants([str(case)], templates=[data])
        summary = run(
            [variant], run_dir=tmp_path / name, options=Options(templates=(data,), **options)
        )
        return {s.name: s.reused for s in summary.variants[0].stages}

    assert once("plain") == {"eig_cpu": None, "eig_xla": None}
    dumped = once("dumped", dump_hlo=True)
    assert dumped["eig_cpu"] is not None and dumped["eig_xla"] is None  # the CPU stage: as it was
    assert list((tmp_path / "dumped/eig/stages/eig_xla").glob("graphs.hlo*"))
    assert once("again", dump_hlo=True)["eig_xla"] is not None  # kept with its HLO in turn
    assert list((tmp_path / "again/eig/stages/eig_xla").glob("graphs.hlo*"))
