"""The Ray executor on a real Ray cluster of two nodes on 127.0.0.1 (started once per module).

The head has CPUs only; the second node pretends to have 4 TPU chips (a Ray resource, no
hardware): XLA stages with ``xla_device="TPU"`` must go there. The scripts are hand-written
(tests/data/templates/faulty.py.j2, tests/data/ray/templates/nodes.py.j2) and import no torch,
so that a stage starts in a blink. Ray is not mocked: the tests skip only where it is missing.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_scheduler import EXPECTED, LOG_CAP, faulty, gone

from reprokit.errors import ReprokitError
from reprokit.generate.render import render
from reprokit.generate.variants import load_variants
from reprokit.infra.redact import MARKER
from reprokit.records import Outcome, Stage, StageResult, Status, read_summary
from reprokit.runner.options import Options
from reprokit.runner.processes.executors import make_executor
from reprokit.runner.processes.stage import StageJob
from reprokit.runner.scheduler import run

NODES = Path(__file__).parents[1] / "data/ray/templates"
WORKER_SECRET = "worker-only-value-5eb1c0de"  # in the nodes' environment, not in ours
DRIVER_SECRET = "driver-only-value-0ddba11e"  # in ours only: the worker learns it from us
SHAPED = "hf_a1B2c3D4e5F6g7H8i9J0k1L2"  # a Hugging Face token's shape: redacted anywhere
QUICK = {"timeout": 10.0, "grace": 1.0, "log_cap": LOG_CAP, "cache": False}  # as test_scheduler


@dataclass(frozen=True)
class Cluster:
    address: str
    head: str  # node ids
    tpu: str


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster as RayCluster

    with pytest.MonkeyPatch.context() as patch:
        # Every address 127.0.0.1 rather than this machine's: nothing listens on the network.
        # (Ray's switch for machines without clusters; read at import, and by its processes.)
        patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        patch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
        local = {"node_ip_address": "127.0.0.1"}
        with pytest.MonkeyPatch.context() as nodes_only:
            nodes_only.setenv("REPROKIT_WORKER_TOKEN", WORKER_SECRET)  # the nodes inherit it
            cluster = RayCluster(
                initialize_head=True,
                head_node_args={"num_cpus": 2, "include_dashboard": False, **local},
            )
            tpu = cluster.add_node(num_cpus=1, resources={"TPU": 4}, **local)
        try:
            cluster.wait_for_nodes()
            yield Cluster(cluster.address, cluster.head_node.node_id, tpu.node_id)
        finally:
            if ray.is_initialized():  # a test that failed while connected
                ray.shutdown()
            cluster.shutdown()


def through_ray(cluster: Cluster, **changes) -> Options:
    return Options(executor="ray", ray_address=cluster.address, **QUICK | changes)


def nodes_variant(write_case, **params):
    """The variant of nodes.py.j2 with ``params`` (marks, hang, say)."""
    lines = "".join(f"{key} = {str(value)!r}\n" for key, value in params.items())
    case = write_case(f'[case]\ntitle = "nodes"\ntemplate = "nodes"\n[params]\n{lines}', "nodes")
    (variant,) = load_variants([str(case)], templates=[NODES])
    return variant


def rendered(tmp_path: Path, write_case, **params) -> Path:
    """The variant's folder, as the scheduler writes it, for the executor to run one stage."""
    variant = nodes_variant(write_case, **params)
    folder = tmp_path / "run" / variant.label
    folder.mkdir(parents=True)
    (folder / "repro.py").write_text(render(variant, templates=[NODES]))
    return folder


def wait_for(condition: Callable[[], object], what: str, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def mark(path: Path, ended: Callable[[], bool]) -> tuple[int, int]:
    """(stage pid, its parent: the Ray worker) once the hanging stage wrote its mark."""

    def written() -> bool:
        assert not ended(), "the stage ended before it wrote its mark"
        return path.exists() and len(path.read_text().split()) == 2

    wait_for(written, f"{path} written")
    stage, worker = map(int, path.read_text().split())
    return stage, worker


def ends(summary) -> dict[str, tuple]:
    """Each variant's outcome and reason, and how each of its stages ended."""
    found = {}
    for variant in summary.variants:
        stages = [(s.name, s.status, s.returncode, s.signal, s.error) for s in variant.stages]
        found[variant.label] = (variant.outcome, variant.reason, stages)
    return found


def node(stage: StageResult) -> str | None:
    """The short id of the Ray node a stage ran on, from its record's host."""
    found = re.search(r"\(Ray node (\w+)\)", stage.host or "")
    return found and found[1]


def runs_a_task(pid: int) -> bool:
    """Whether Ray worker ``pid`` still runs a task (Ray titles an idle worker ray::IDLE)."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    return not gone(pid) and not title.startswith(b"ray::IDLE")


def idle(worker: int) -> None:
    """The Ray worker runs no task within seconds: it retitles itself ray::IDLE after its
    task has returned, which under load comes after the driver has the task's answer (once
    CI's only failure here). A task left running the hung stage would never be idle."""
    wait_for(lambda: not runs_a_task(worker), f"Ray worker {worker} idle", limit=10)


def test_faulty_stages_end_the_same_through_ray_as_here(cluster, tmp_path):
    here = run(faulty(*EXPECTED), run_dir=tmp_path / "here", options=Options(jobs=2, **QUICK))
    ray = run(faulty(*EXPECTED), run_dir=tmp_path / "ray", options=through_ray(cluster, jobs=2))

    # A backend no node has is skipped by the executor, which asks the cluster, not this host.
    there, local = ends(ray), ends(here)
    assert (
        there.pop("cuda")[1]
        == "second was skipped (no node of the Ray cluster has {CPU: 1, GPU: 1})"
    )
    assert local.pop("cuda")[1].startswith("second was skipped (no NVIDIA GPU here")
    assert there == local
    assert {v.label: v.outcome for v in ray.variants} == EXPECTED
    ran = [s for v in ray.variants for s in v.stages if s.status is not Status.SKIPPED]
    listed = [s for s in ran if s.name == "--list-stages"]  # listing is the driver's
    assert {node(s) for s in ran if s not in listed} <= {cluster.head[:8], cluster.tpu[:8]}
    assert None not in {node(s) for s in ran if s not in listed} and not listed[0].host

    pids = [int(p.read_text()) for p in (tmp_path / "ray").glob("*/stages/*/*pid")]
    assert len(pids) > 20 and (tmp_path / "ray/grandchild/stages/second/grandchild.pid").exists()
    assert [pid for pid in pids if not gone(pid)] == []
    loud = tmp_path / "ray/loud/stages/second"
    for name in ("stdout.log", "stderr.log"):  # capped on the node, before it traveled
        text = (loud / name).read_text()
        assert len(text) < LOG_CAP + 200 and "bytes cut from the middle" in text
    assert (tmp_path / "ray/mismatch/stages/second/tensors.pt").is_file()


def test_a_worker_killed_mid_stage_is_a_crash_and_not_waited_on(cluster, tmp_path, write_case):
    marks = tmp_path / "marks"
    folder = rendered(tmp_path, write_case, marks=str(marks), hang="c3")
    executor = make_executor(through_ray(cluster, timeout=120))  # the kill comes first
    try:
        with cf.ThreadPoolExecutor(1) as pool:
            job = StageJob(folder, Stage("c3", "cpu"))
            future = pool.submit(executor.run_stage, job, threading.Event())
            stage, worker = mark(marks / "c3.pid", future.done)
            os.kill(worker, signal.SIGKILL)
            result: StageResult = future.result(timeout=60)
    finally:
        executor.close()
    assert (result.status, result.signal) == (Status.CRASH, "SIGKILL"), result
    assert "Ray worker" in result.reason and "Error" in result.error
    assert result.ended().startswith("died by SIGKILL: ")
    wait_for(lambda: gone(stage), "the stage's group killed by the worker's watchdog", 10)


def test_a_stop_cancels_the_task_and_its_stage(cluster, tmp_path, write_case):
    marks = tmp_path / "marks"
    folder = rendered(tmp_path, write_case, marks=str(marks), hang="c3")
    executor = make_executor(through_ray(cluster, timeout=120))  # the stop comes first
    stop = threading.Event()
    try:
        with cf.ThreadPoolExecutor(1) as pool:
            future = pool.submit(executor.run_stage, StageJob(folder, Stage("c3", "cpu")), stop)
            stage, worker = mark(marks / "c3.pid", future.done)
            assert runs_a_task(worker)
            began = time.monotonic()
            stop.set()
            result: StageResult = future.result(timeout=60)
            took = time.monotonic() - began
    finally:
        executor.close()
    assert result.status is Status.INTERRUPTED and took < 60, (result, took)  # not a hang
    assert gone(stage)
    idle(worker)
    # What it printed comes back when the cancelled task returns within the grace; under load
    # the worker may be force-killed first (the stage still ends): not asserted.


def test_sigint_to_a_run_leaves_no_task_and_no_stage_running(cluster, tmp_path, write_case):
    marks = tmp_path / "marks"
    case = nodes_variant(write_case, marks=str(marks), hang="c3").case.path
    command = [sys.executable, "-m", "reprokit", "run", case, "-n", "2", "-o", tmp_path / "run"]
    command += ["--templates", NODES, "--no-cache", "--executor", "ray"]
    command += ["--ray-address", cluster.address]
    child = subprocess.Popen(
        list(map(str, command)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        stage, worker = mark(marks / "c3.pid", lambda: child.poll() is not None)
        assert runs_a_task(worker)
        child.send_signal(signal.SIGINT)
        output, _ = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130, output.decode()
    assert read_summary(tmp_path / "run").interrupted
    assert gone(stage)
    idle(worker)


def test_secrets_are_redacted_on_the_node_before_the_logs_travel(
    cluster, tmp_path, write_case, monkeypatch
):
    monkeypatch.setenv("REPROKIT_DRIVER_TOKEN", DRIVER_SECRET)
    folder = rendered(tmp_path, write_case, say=f"{DRIVER_SECRET} {SHAPED}")
    executor = make_executor(through_ray(cluster))
    try:
        result = executor.run_stage(StageJob(folder, Stage("c1", "cpu")), threading.Event())
    finally:
        executor.close()
    assert result.status is Status.OK
    printed = (folder / "stages/c1/stdout.log").read_text()
    assert printed.split() == [MARKER] * 3  # the driver's, the token's shape, the node's


def test_the_stage_gets_our_interpreter_threads_niceness_and_xla_settings(
    cluster, tmp_path, write_case, monkeypatch
):
    python = tmp_path / "env/bin/python"  # a variant's environment: here, ours by another path
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/nowhere")  # steers XLA: travels along
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # Ray's 1 must not reach the stage
    folder = rendered(tmp_path, write_case)
    executor = make_executor(through_ray(cluster))
    try:
        job = StageJob(folder, Stage("c3", "cpu"), python=str(python))
        result = executor.run_stage(job, threading.Event())
    finally:
        executor.close()
    assert result.status is Status.OK, result
    assert result.started == "cold: a Ray task starts its stage in a fresh Python"
    assert result.metrics["python"] == str(python)
    assert result.metrics["XLA_FLAGS"] == "--xla_dump_to=/nowhere"
    assert result.metrics["OMP_NUM_THREADS"] == ""  # as here: torch's own number of threads
    if os.geteuid() == 0:  # Ray's workers run at nice 15; only a privileged one can lower it
        assert result.metrics["nice"] == os.nice(0)


def test_xla_stages_go_to_the_node_with_tpu_chips(cluster, tmp_path, write_case):
    import ray

    ray.init(address=cluster.address, logging_level=logging.ERROR)  # the caller's connection
    options = through_ray(cluster, jobs=2, xla_device="TPU", templates=(NODES,))
    executor = make_executor(options)
    try:
        summary = run([nodes_variant(write_case)], run_dir=tmp_path, options=options,
                      executor=executor)  # fmt: skip
        job = StageJob(tmp_path / "nodes", Stage("big", "xla", devices=8))
        too_big = executor.run_stage(job, threading.Event())
    finally:
        executor.close()
        assert ray.is_initialized()  # not the executor's to end
        ray.shutdown()
    (variant,) = summary.variants
    assert variant.outcome is Outcome.MATCH, variant.reason
    stages = {s.name: s for s in variant.stages}
    xla, cpu = [stages[n] for n in ("x1", "x2", "x3")], [stages[n] for n in ("c1", "c2", "c3")]
    assert {node(s) for s in xla} == {cluster.tpu[:8]}
    assert {node(s) for s in cpu} <= {cluster.head[:8], cluster.tpu[:8]}
    chips = [s.metrics["TPU_VISIBLE_CHIPS"].split(",") for s in xla]  # as Ray gave them
    assert [len(c) for c in chips] == [1, 4, 4]  # xla: one; xla_spmd (devices 4), multicore: all
    assert {s.metrics["PJRT_DEVICE"] for s in xla} == {"TPU"}
    assert too_big.status is Status.SKIPPED and "TPU: 8" in too_big.reason


def test_a_shared_folder_carries_the_files(cluster, tmp_path, write_case):
    shared = tmp_path / "shared"
    shared.mkdir()
    variants = [nodes_variant(write_case)]
    for run_dir in (tmp_path / "apart", shared / "inside"):  # mirrored; in place
        options = through_ray(cluster, jobs=2, templates=(NODES,), shared_dir=shared)
        (variant,) = run(variants, run_dir=run_dir, options=options).variants
        assert variant.outcome is Outcome.MATCH, variant.reason
        assert (run_dir / "nodes/stages/beside/c1.txt").read_text() == "beside"
    assert sorted(p.name for p in shared.iterdir()) == ["inside"]  # the mirror is gone


def test_no_ray_no_cluster_say_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: import ray fails
    with pytest.raises(ReprokitError, match=r"pip install 'reprokit\[ray\]'"):
        make_executor(Options(executor="ray"))


def test_an_address_nobody_answers_at_is_refused_at_once(cluster):
    began = time.monotonic()
    with pytest.raises(ReprokitError, match=r"no Ray cluster answers at 127\.0\.0\.1:1 "):
        make_executor(Options(executor="ray", ray_address="127.0.0.1:1"))
    assert time.monotonic() - began < 60  # ray.init alone would retry forever


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=str)
def test_a_signal_while_ray_starts_exits_130_and_leaves_no_ray_process(
    tmp_path, write_case, monkeypatch, signum
):
    """The signal comes when Ray's raylet appears: its agents are still starting. Raised in the
    middle of ray.init, it left Ray's agents running (SIGTERM) or the run died of a segfault
    (SIGINT); now the start finishes, Ray is shut down, and the run exits 130."""
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a private local Ray, started by the run
    case = nodes_variant(write_case, marks=str(tmp_path / "marks")).case.path
    command = [sys.executable, "-m", "reprokit", "run", case, "-o", tmp_path / "run"]
    command += ["--templates", NODES, "--no-cache", "--executor", "ray"]
    child = subprocess.Popen(
        list(map(str, command)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    seen: dict[int, str] = {}  # every process the run started, by pid
    try:

        def raylet_started() -> bool:
            assert child.poll() is None, "the run ended before Ray started"
            seen.update(descendants(child.pid))
            return "raylet" in seen.values()

        wait_for(raylet_started, "a raylet")
        child.send_signal(signum)
        while child.poll() is None:  # the agents Ray starts from now on count too
            seen.update(descendants(child.pid))
            time.sleep(0.02)
        output = child.communicate(timeout=60)[0].decode()
    finally:
        child.kill()
    assert child.returncode == 130, output
    wait_for(lambda: all(gone(pid) for pid in seen), f"Ray's processes gone: {seen}", limit=30)


def descendants(root: int) -> dict[int, str]:
    """The processes under ``root`` (pid: name), read from /proc."""
    parents, names = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        pid = int(stat.parent.name)
        names[pid] = text[text.index("(") + 1 : text.rindex(")")]
        parents[pid] = int(text.rsplit(")", 1)[1].split()[1])
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found.update({pid: names[pid] for pid in children})
        frontier += children
    return found


def test_a_force_killed_workers_folder_is_removed_by_the_next_stage(cluster, tmp_path, write_case):
    """A task force-killed after a stop's grace leaves its temporary folder on the node; the
    next stage there removes the folders of workers that are gone (and only those)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = Path(tempfile.gettempdir()) / f"reprokit-ray-{dead.pid}-left"
    living = Path(tempfile.gettempdir()) / f"reprokit-ray-{os.getpid()}-living"
    for folder in (left, living):
        (folder / "nodes").mkdir(parents=True, exist_ok=True)
    try:
        options = through_ray(cluster, templates=(NODES,))
        summary = run([nodes_variant(write_case)], run_dir=tmp_path / "run", options=options)
        assert summary.variants[0].outcome is Outcome.MATCH
        assert not left.exists() and living.is_dir()
    finally:
        for folder in (left, living):
            shutil.rmtree(folder, ignore_errors=True)
