"""`reprokit run`: outcomes, the run folder, parallel agreement, interrupts, the seed case.

The misbehaving stages come from tests/data/templates/faulty.py.j2, a script written by hand
without reprokit's macros: the runner must rely on the stage protocol alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import filelock
import pytest

from reprokit.errors import ReprokitError
from reprokit.generate.variants import load_variants
from reprokit.records import Outcome, StageResult, Status, read_summary
from reprokit.runner import backends
from reprokit.runner.dag import parse_stages
from reprokit.runner.keywords import matches, select
from reprokit.runner.options import Options
from reprokit.runner.processes.stage import LOCAL, Capabilities, LocalExecutor, StageJob
from reprokit.runner.scheduler import run

DATA = Path(__file__).parents[1] / "data"
CASES, TEMPLATES = DATA / "cases", DATA / "templates"
EXPECTED = {
    "ok": Outcome.MATCH,
    "mismatch": Outcome.MISMATCH,
    "raise": Outcome.ERROR,
    "abort": Outcome.CRASH,
    "hang": Outcome.TIMEOUT,
    "grandchild": Outcome.TIMEOUT,
    "loud": Outcome.MATCH,
    "cuda": Outcome.SKIPPED,
    "badlist": Outcome.ERROR,
}
TIMEOUT = 10.0  # the hanging stages run this long; the others (no torch import) end in a blink
LOG_CAP = 64 * 1024

# What a hand-written script needs of the protocol's command line, once STAGES is defined.
PROTOCOL_ARGS = """\
args = argparse.ArgumentParser()
args.add_argument("--list-stages", action="store_true")
for option in ("--stage", "--workdir", "--xla-device"):
    args.add_argument(option)
args = args.parse_args()
if args.list_stages:
    print(json.dumps(STAGES)); sys.exit(0)
"""


def faulty(*names: str):
    return load_variants(names, cases=[CASES], templates=[TEMPLATES])


def run_faulty(run_dir: Path, names, jobs: int):
    options = Options(jobs=jobs, timeout=TIMEOUT, templates=(TEMPLATES,), log_cap=LOG_CAP)
    return run(faulty(*names), run_dir=run_dir, options=options, argv=["test"])


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie runs no code


def test_every_outcome_in_one_run_and_nothing_left_alive(tmp_path):
    summary = run_faulty(tmp_path, list(EXPECTED), jobs=2)
    results = {v.label: v for v in summary.variants}
    assert {label: v.outcome for label, v in results.items()} == EXPECTED
    stages = {label: {s.name: s for s in v.stages} for label, v in results.items()}

    crash = stages["abort"]["second"]
    assert (crash.status, crash.returncode, crash.signal) == (Status.CRASH, -6, "SIGABRT")
    assert results["abort"].reason == "second died by SIGABRT"
    assert stages["raise"]["second"].returncode == 1
    assert stages["hang"]["second"].status is Status.TIMEOUT
    for label in ("raise", "abort", "hang", "grandchild"):  # the failure stays in its stage
        assert stages[label]["first"].status is Status.OK
        assert stages[label]["aside"].status is Status.OK
    assert "GPU" in stages["cuda"]["second"].reason and results["cuda"].passed is None
    assert "not JSON" in results["badlist"].reason

    mismatch = results["mismatch"]
    assert mismatch.first_divergence == {"second": "x"}
    assert [(c.tensor, c.mismatched, c.total) for c in mismatch.comparisons] == [("x", 1, 3)]
    assert results["ok"].first_divergence == {"second": None}

    pids = [int(p.read_text()) for p in tmp_path.glob("*/stages/*/*pid")]
    assert len(pids) > 20 and (tmp_path / "grandchild/stages/second/grandchild.pid").exists()
    assert [pid for pid in pids if not gone(pid)] == []

    loud = tmp_path / "loud/stages/second"
    for name in ("stdout.log", "stderr.log"):
        text = (loud / name).read_text()
        assert len(text) < LOG_CAP + 200 and "bytes cut from the middle" in text
        assert text.rstrip().endswith(f"the end of {name.split('.')[0]}")
    assert "cut" in stages["loud"]["second"].reason

    assert summary.count(True) == 8 and summary.count(False) == 0 and summary.count(None) == 1
    assert read_summary(tmp_path) == summary  # records round-trip through summary.json
    data = json.loads((tmp_path / "summary.json").read_text())
    assert set(data) == {"run", "variants"}
    assert {"started", "finished", "argv", "env"} <= set(data["run"])
    first = data["variants"][0]
    assert {
        "case",
        "variant",
        "outcome",
        "expected",
        "passed",
        "seconds",
        "stages",
        "comparisons",
        "first_divergence",
    } <= set(first)
    assert set(first["stages"][0]) >= {
        "name",
        "backend",
        "status",
        "returncode",
        "signal",
        "seconds",
    }
    assert (tmp_path / "ok/repro.py").is_file()
    assert (tmp_path / "ok/stages/second/tensors.pt").is_file()


def test_two_slots_give_the_same_outcomes_as_one(tmp_path):
    names = ["ok", "mismatch", "raise", "abort", "hang", "cuda", "badlist"]
    one = run_faulty(tmp_path / "one", names, jobs=1)
    two = run_faulty(tmp_path / "two", names, jobs=2)
    assert [(v.label, v.outcome, v.reason) for v in one.variants] == [
        (v.label, v.outcome, v.reason) for v in two.variants
    ]
    assert [v.label for v in one.variants] == names  # the summary keeps the order given


def test_a_second_run_into_the_same_folder_is_refused(tmp_path):
    with filelock.FileLock(tmp_path / ".reprokit.lock"):
        with pytest.raises(ReprokitError, match="another reprokit run"):
            run_faulty(tmp_path, ["ok"], jobs=1)


def test_a_rerun_clears_the_old_stage_files(tmp_path):
    stale = tmp_path / "raise/stages/second/tensors.pt"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    summary = run_faulty(tmp_path, ["raise"], jobs=1)
    assert summary.variants[0].outcome is Outcome.ERROR and not stale.exists()


@pytest.mark.parametrize(
    ("listing", "problem"),
    [
        ("nope", "not JSON"),
        ("[]", "non-empty"),
        ('[{"name": "a", "backend": "tpu9"}]', "unknown backend"),
        ('[{"name": "a", "backend": "cpu", "needs": ["b"]}]', "unknown stage 'b'"),
        ('[{"name": "a", "backend": "cpu", "reference": "z"}]', "unknown stage 'z'"),
        ('[{"name": "a", "backend": "cpu"}, {"name": "a", "backend": "cpu"}]', "same name"),
        (
            '[{"name": "a", "backend": "cpu", "needs": ["b"]},'
            ' {"name": "b", "backend": "cpu", "needs": ["a"]}]',
            "cycle",
        ),
    ],
)
def test_a_bad_stage_listing_is_named(listing, problem):
    with pytest.raises(ValueError, match=problem):
        parse_stages(listing)


def test_keyword_expressions_work_like_pytest_k():
    labels = ["xser_to_spmd[default]", "xser_to_spmd[highest]", "ok", "mismatch"]
    assert select(labels, "spmd and not high", str) == ["xser_to_spmd[default]"]
    assert select(labels, "ok or MISMATCH", str) == ["ok", "mismatch"]
    assert select(labels, "not (spmd or ok)", str) == ["mismatch"]
    assert select(labels, None, str) == labels
    assert matches("ok", "ok")
    for bad in ("and", "ok and", "(ok", "ok)"):
        with pytest.raises(ReprokitError, match="bad -k expression"):
            select(labels, bad, str)


def test_cli_exit_codes(cli, tmp_path):
    common = ["--cases", CASES, "--templates", TEMPLATES, "--timeout", TIMEOUT]
    passing = cli("run", "ok", "raise", "-o", tmp_path / "a", "-n", "2", *common)
    assert passing.exit_code == 0, passing.output
    assert (
        "2 passed, 0 failed, 0 skipped" in passing.output and str(tmp_path / "a") in passing.output
    )
    wrong = tmp_path / "wrong.toml"
    wrong.write_text((CASES / "abort.toml").read_text().replace('"crash"', '"match"'))
    failing = cli("run", wrong, "ok", "-o", tmp_path / "b", *common)
    assert failing.exit_code == 1, failing.output
    assert "FAIL  wrong  crash (expected match)" in failing.output
    assert "1 passed, 1 failed" in failing.output
    assert cli("run", "ok", "-n", "zero", *common).exit_code == 2
    nothing = cli("run", "ok", "-k", "nothing_like_it", *common)
    assert nothing.exit_code == 2 and "no variant matches" in nothing.output
    assert cli("run", "ok", "--xla-device", "GPU9", *common).exit_code == 2
    everything = cli("run", "-k", "ok or raise", "-o", tmp_path / "c", *common)
    assert "running 2 variants of 2 cases (all; name cases to run fewer)" in everything.stderr
    assert "running" not in passing.stderr  # named cases: no such line


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interrupted_run_keeps_what_finished_and_exits_130(tmp_path, signum):
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "reprokit",
        "run",
        "ok",
        "hang",
        "-n",
        "1",
        "-o",
        run_dir,
        "--cases",
        CASES,
        "--templates",
        TEMPLATES,
        "--timeout",
        "600",
    ]
    child = subprocess.Popen(
        list(map(str, command)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    hanging = run_dir / "hang/stages/second/pid"
    try:
        _wait_for(lambda: hanging.exists() and hanging.read_text(), child)
        child.send_signal(signum)
        output, _ = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130, output.decode()
    summary = read_summary(run_dir)
    assert summary.interrupted and [v.label for v in summary.variants] == ["ok"]
    assert summary.variants[0].outcome is Outcome.MATCH
    assert gone(int(hanging.read_text()))
    assert b"interrupted" in output


def _wait_for(condition, child: subprocess.Popen, limit: float = 300) -> None:
    """Poll until ``condition()`` holds; fail (not hang) if the child ends or never gets there."""
    deadline = time.monotonic() + limit
    while not condition():
        assert child.poll() is None, child.stdout.read().decode() if child.stdout else ""
        assert time.monotonic() < deadline, "the run never reached the point to interrupt"
        time.sleep(0.05)


def test_the_harness_sets_each_backends_environment(tmp_path):
    template = tmp_path / "templates/envs.py.j2"
    template.parent.mkdir()
    template.write_text(
        textwrap.dedent("""\
        import argparse, json, os, sys
        from pathlib import Path
        STAGES = [{"name": b, "backend": b, "needs": [], "reference": None}
                  for b in ("cpu", "xla", "xla_spmd", "xla_multicore")]
    """)
        + PROTOCOL_ARGS
        + textwrap.dedent("""\
        out = Path(args.workdir) / args.stage
        out.mkdir(parents=True, exist_ok=True)
        keys = ("PJRT_DEVICE", "CPU_NUM_DEVICES")
        (out / "env.json").write_text(json.dumps({k: os.environ.get(k) for k in keys}))
    """)
    )
    case = tmp_path / "envs.toml"
    case.write_text('[case]\ntitle = "environments"\ntemplate = "envs"\n')
    variants = load_variants([str(case)], templates=[template.parent])
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "CPU_NUM_DEVICES")}
    options = Options(jobs=2, templates=(template.parent,))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "environ", env)
        summary = run(variants, run_dir=tmp_path / "run", options=options)
    assert summary.variants[0].outcome is Outcome.MATCH
    seen = {
        backend: json.loads((tmp_path / f"run/envs/stages/{backend}/env.json").read_text())
        for backend in ("cpu", "xla", "xla_spmd", "xla_multicore")
    }
    assert seen == {
        "cpu": {"PJRT_DEVICE": None, "CPU_NUM_DEVICES": None},
        "xla": {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": None},
        "xla_spmd": {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"},
        "xla_multicore": {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1"},
    }


def test_the_seed_case_runs_end_to_end_and_matches(cli, tmp_path):
    result = cli("run", "xser_to_spmd", "-n", "2", "-o", tmp_path)
    assert result.exit_code == 0, result.output
    (seed,) = read_summary(tmp_path).variants
    assert seed.outcome is Outcome.MATCH and seed.passed
    assert [s.name for s in seed.stages] == ["train_multicore", "convert", "eval_cpu", "eval_spmd"]
    assert all(s.status is Status.OK for s in seed.stages)
    assert {"output", "loss"} <= {c.tensor for c in seed.comparisons}
    assert seed.first_divergence == {"eval_spmd": None}


def test_stages_on_an_exclusive_device_never_overlap(tmp_path):
    """Each stage claims the device with O_EXCL for a moment: a second holder would fail."""
    template = tmp_path / "templates/claims.py.j2"
    template.parent.mkdir()
    template.write_text(
        textwrap.dedent("""\
        import argparse, json, os, sys, time
        from pathlib import Path
        STAGES = [{"name": f"s{i}", "backend": "xla", "needs": [], "reference": None}
                  for i in range(4)]
    """)
        + PROTOCOL_ARGS
        + textwrap.dedent("""\
        claim = Path(args.workdir).resolve().parent / "device.claim"
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # fails if another holds it
        time.sleep(0.3)
        os.close(fd)
        os.unlink(claim)
    """)
    )
    case = tmp_path / "claims.toml"
    case.write_text('[case]\ntitle = "claims"\ntemplate = "claims"\n')
    variants = load_variants([str(case)], templates=[template.parent])
    options = Options(jobs=4, xla_device="TPU", templates=(template.parent,))
    summary = run(variants, run_dir=tmp_path / "run", options=options)
    assert [s.status for s in summary.variants[0].stages] == [Status.OK] * 4


def test_a_case_sets_its_own_stage_timeout(tmp_path):
    case = tmp_path / "slow.toml"
    case.write_text(
        '[case]\ntitle = "t"\ntemplate = "faulty"\ntimeout = 1\n[params]\nmode = "hang"\n'
    )
    variants = load_variants([str(case)], templates=[TEMPLATES])
    summary = run(variants, run_dir=tmp_path / "run", options=Options(templates=(TEMPLATES,)))
    second = next(s for s in summary.variants[0].stages if s.name == "second")
    assert second.status is Status.TIMEOUT
    assert second.reason == "killed after [case] timeout 1 s"
    assert second.seconds < 30  # not the run's 600 s


class Finder:
    """An executor that, as Ray's does, finds each backend and gives each stage its own chips;
    it runs nothing, and notes what it was given and how many stages it held at once."""

    capabilities = Capabilities(local_backends=False, exclusive_devices=False)

    def __init__(self, together: int) -> None:
        self.barrier = threading.Barrier(together, timeout=60)  # `together` stages at once
        self.lister = LocalExecutor(Options())  # reads the STAGES literal: runs nothing
        self.jobs: list[StageJob] = []
        self.lock = threading.Lock()
        self.holding = self.most = 0

    def list_stages(self, folder: Path, stop: threading.Event):
        return self.lister.list_stages(folder, stop)

    def run_stage(self, job: StageJob, stop: threading.Event) -> StageResult:
        with self.lock:
            self.jobs.append(job)
            self.holding += 1
            self.most = max(self.most, self.holding)
        self.barrier.wait()
        with self.lock:
            self.holding -= 1
        return StageResult(job.stage.name, job.stage.backend, Status.OK, 0, started="warm")

    def close(self) -> None:
        pass


def test_the_scheduler_leaves_backends_and_devices_to_an_executor_that_finds_them(tmp_path):
    template = tmp_path / "templates/anywhere.py.j2"
    template.parent.mkdir()
    template.write_text(
        'STAGES = [{"name": "gpu", "backend": "cuda"}, {"name": "tpu0", "backend": "xla"},\n'
        '          {"name": "tpu1", "backend": "xla"}]\n'
    )
    case = tmp_path / "anywhere.toml"
    case.write_text('[case]\ntitle = "t"\ntemplate = "anywhere"\n')
    variants = load_variants([str(case)], templates=[template.parent])
    options = Options(jobs=3, xla_device="TPU", cache=False, templates=(template.parent,))
    finder = Finder(together=3)
    run(variants, run_dir=tmp_path / "found", options=options, executor=finder)
    assert sorted(job.stage.name for job in finder.jobs) == ["gpu", "tpu0", "tpu1"]
    assert finder.most == 3  # no turns on the TPU: the executor gives each its own chips
    assert {tuple(s.name for s in job.dag) for job in finder.jobs} == {("gpu", "tpu0", "tpu1")}

    here = Finder(together=1)
    here.capabilities = LOCAL  # stages on this machine: a TPU in turns, CUDA only if here
    summary = run(variants, run_dir=tmp_path / "here", options=options, executor=here)
    assert here.most == 1
    gpu = next(s for s in summary.variants[0].stages if s.name == "gpu")
    missing = backends.unavailable("cuda")
    if missing:
        assert gpu.status is Status.SKIPPED and gpu.reason == missing
        assert sorted(job.stage.name for job in here.jobs) == ["tpu0", "tpu1"]


class Warming:
    """An executor whose XLA stages all need one warm server, which the first of them starts
    (it is ready once every CPU stage has run, or after ``patience`` seconds); it notes the
    order the stages started in."""

    capabilities = Capabilities(local_backends=False, exclusive_devices=False)

    def __init__(self, cpu_stages: int, patience: float = 10.0) -> None:
        self.lister = LocalExecutor(Options())
        self.cpu_stages, self.patience = cpu_stages, patience
        self.started: list[str] = []
        self.lock, self.ready = threading.Lock(), threading.Event()
        self.starting = self.waited_out = False

    def list_stages(self, folder: Path, stop: threading.Event):
        return self.lister.list_stages(folder, stop)

    def waits(self, job: StageJob) -> bool:
        return job.stage.backend == "xla" and self.starting and not self.ready.is_set()

    def run_stage(self, job: StageJob, stop: threading.Event) -> StageResult:
        with self.lock:
            self.started.append(f"{job.folder.name}/{job.stage.name}")
            cpu_done = sum(s.endswith("/cpu") for s in self.started) == self.cpu_stages
            first = job.stage.backend == "xla" and not self.starting
            self.starting = self.starting or first
        if job.stage.backend == "cpu" and cpu_done:
            self.ready.set()
        if job.stage.backend == "xla":  # the first starts the server, the others wait for it
            self.waited_out = self.waited_out or not self.ready.wait(self.patience)
        return StageResult(job.stage.name, job.stage.backend, Status.OK, 0, started="warm")

    def close(self) -> None:
        pass


def test_a_stage_waiting_for_its_warm_server_leaves_its_slot_to_other_work(tmp_path):
    """While the first XLA stage starts the XLA server, the other slot runs every CPU stage,
    of the next variants too, instead of waiting on the same import (-n 2 on two cores)."""
    template = tmp_path / "templates/warming.py.j2"
    template.parent.mkdir()
    template.write_text(
        'STAGES = [{"name": "xla", "backend": "xla"}, {"name": "cpu", "backend": "cpu"}]\n'
    )
    cases = []
    for name in ("a", "b", "c"):
        cases.append(tmp_path / f"{name}.toml")
        cases[-1].write_text(f'[case]\ntitle = "{name}"\ntemplate = "warming"\n')
    variants = load_variants([str(c) for c in cases], templates=[template.parent])
    options = Options(jobs=2, cache=False, templates=(template.parent,))
    warming = Warming(cpu_stages=3)
    run(variants, run_dir=tmp_path / "run", options=options, executor=warming)
    # whichever variant is listed first starts the server (listing runs side by side); every
    # CPU stage then starts before a second XLA stage does
    xla_at = [i for i, started in enumerate(warming.started) if started.endswith("/xla")]
    assert xla_at[0] <= 1 and xla_at[1:] == [4, 5], warming.started
    assert not warming.waited_out  # the CPU stages ran meanwhile: none waited the import out


@pytest.mark.parametrize("differs", [False, True])
def test_an_on_mismatch_stage_runs_only_where_the_others_do_not_match(tmp_path, differs):
    """A captured program's xla stage records every operation only where xla_faithful's
    outputs differ: the stage is left out of a match (not run, not skipped), which says it was
    judged on the stages that ran."""
    folder = DATA / "localising"
    variants = load_variants(["localise"], sets={"differs": differs}, cases=[folder],
                             templates=[folder])  # fmt: skip
    options = Options(jobs=2, timeout=TIMEOUT, templates=(folder,))
    summary = run(variants, run_dir=tmp_path / "run", options=options, argv=["test"])
    (variant,) = summary.variants
    ran = [stage.name for stage in variant.stages]
    stages = tmp_path / "run" / variant.label / "stages"
    runs = (stages / "first" / "runs.txt").read_text().split()
    if differs:
        assert variant.outcome is Outcome.MISMATCH and not variant.outputs_only
        assert ran == ["first", "second", "localise"]
        assert runs == ["plain", "localise"]  # again, localising: its second result kept
        assert variant.stages[0].metrics == {"localised": [1]}
    else:
        assert variant.outcome is Outcome.MATCH and variant.outputs_only
        assert ran == ["first", "second"]
        assert not (stages / "localise").exists()
        assert runs == ["plain"]
    assert read_summary(tmp_path / "run").variants[0].outputs_only is not differs


def test_a_stage_that_recorded_what_localises_is_not_run_again(tmp_path):
    """A captured program's CPU stage that recorded every operation on its first run (a small
    program's: few results) says so in result.json ("localised": true): where the others do
    not match, it is not run again; the on_mismatch stage runs."""
    folder = DATA / "localising"
    sets = {"differs": True, "first_localised": True}
    variants = load_variants(["localise"], sets=sets, cases=[folder], templates=[folder])
    options = Options(jobs=2, timeout=TIMEOUT, templates=(folder,))
    summary = run(variants, run_dir=tmp_path / "run", options=options, argv=["test"])
    (variant,) = summary.variants
    assert variant.outcome is Outcome.MISMATCH
    assert [stage.name for stage in variant.stages] == ["first", "second", "localise"]
    stages = tmp_path / "run" / variant.label / "stages"
    assert (stages / "first" / "runs.txt").read_text().split() == ["plain"]  # once
    assert variant.stages[0].localised and not variant.stages[1].localised
    assert read_summary(tmp_path / "run").variants[0].stages[0].localised  # in summary.json


def test_an_on_mismatch_stage_starts_before_the_stages_run_again(tmp_path):
    """Localising, the on_mismatch stage (a captured program's xla stage, recording every
    operation: the longest) takes the first free slot; the stages run again follow."""
    folder = DATA / "localising"
    variants = load_variants(["localise"], sets={"differs": True}, cases=[folder],
                             templates=[folder])  # fmt: skip
    options = Options(jobs=1, timeout=TIMEOUT, templates=(folder,))
    summary = run(variants, run_dir=tmp_path / "run", options=options, argv=["test"])
    stages = tmp_path / "run" / summary.variants[0].label / "stages"
    ended = {
        name: (stages / name / "result.json").stat().st_mtime_ns for name in ("first", "localise")
    }
    assert ended["localise"] < ended["first"]  # first's second run: after localise


def test_a_stage_run_again_is_cached_apart_from_its_first_run(tmp_path):
    """The results cache keys an again_on_mismatch stage's second run (--localise) apart from
    its first: a re-run of a mismatch reuses both, and the record is the localising one."""
    folder = DATA / "localising"
    variants = load_variants(["localise"], sets={"differs": True}, cases=[folder],
                             templates=[folder])  # fmt: skip
    options = Options(jobs=2, timeout=TIMEOUT, templates=(folder,))
    run(variants, run_dir=tmp_path / "one", options=options, argv=["test"])
    summary = run(variants, run_dir=tmp_path / "two", options=options, argv=["test"])
    (variant,) = summary.variants
    assert all(stage.reused for stage in variant.stages)
    assert variant.stages[0].metrics == {"localised": [1]}
    assert (tmp_path / "two" / variant.label / "stages" / "first" / "runs.txt").read_text() == (
        "plain\nlocalise\n"
    )
