"""Stages as Ray tasks: ``reprokit run --executor ray`` spreads a run's stages over a cluster.

Each stage is one Ray task that asks for what its backend holds: a CPU for every stage (its
host process), ``{"TPU": chips}`` for an XLA stage on TPU, GPUs for an XLA stage on CUDA and
for a ``cuda`` stage. Inside the task, on the worker node, the stage runs exactly as
:class:`LocalExecutor` runs it here (cold: a fresh Python, no warm server), so every guarantee
of the local executor holds there: its own process group, its timeout, logs capped and
redacted *before* they leave the node, the ending classified; should the Ray worker die, the
worker's watchdog kills the stage's group. The stage's process also starts as it would here:
the driver's variables that steer torch and XLA, the driver's niceness and thread count rather
than Ray's (a worker's nice 15, ``OMP_NUM_THREADS=1``).

What a stage reads and makes travels as stage_files.py says: through the object store, or
through a shared folder (``Options.shared_dir``).

Where: the stage's record names the node it ran on in its ``host`` field (``HOST (Ray node
NODEID)``, the id cut to 8 characters). Which Ray: ``Options.ray_address`` (else
``$RAY_ADDRESS``); without one, a private local instance for this run, never a cluster that
happens to run on this machine. Every node needs reprokit (and Ray) installed; a stage runs
with the worker's own Python (``Options.python`` when it is not this one's), or with its
variant's environment's interpreter, which must lie at the same path on every node.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reprokit.environment.variables import NODE_OWN, RAY_SETS, STEERING
from reprokit.errors import ReprokitError
from reprokit.infra.redact import is_secret_name, secret_values
from reprokit.records import Stage, StageResult, Status
from reprokit.records.folder import last_words, stage_path
from reprokit.runner.options import Options
from reprokit.runner.processes import signals
from reprokit.runner.processes.stage import Capabilities, LocalExecutor, StageJob, cold
from reprokit.runner.processes.stage_files import Shared, inputs, made_files, pack, snapshot, unpack

INSTALL = "pip install 'reprokit[ray]'"
POLL = 0.1  # seconds between looks at a task and at the stop flag
HANDBACK = 10.0  # seconds past the grace for a cancelled task to stop its stage and return
PROBE = 5.0  # seconds to reach a cluster's address before ray.init (which would wait forever)
STARTED = cold("a Ray task starts its stage in a fresh Python")  # every stage's record
WORKSPACE = "reprokit-ray-"  # a stage's temporary folder on a node: reprokit-ray-<pid>-<random>
# Ray errors that mean the worker (or its node) died under the stage: its group was killed.
LOST = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OutOfMemoryError")


class RayExecutor:
    """Runs each stage as a Ray task; lists stages here (that runs nothing for a template).

    It finds which node has a stage's backend (a stage no node can run is skipped, saying
    so), and Ray gives each task its own chips: no device is held in turns on the driver."""

    capabilities = Capabilities(local_backends=False, exclusive_devices=False)

    def __init__(self, options: Options) -> None:
        self.options = options
        self.ray = _import_ray()
        self.connected = _connect(self.ray, options)  # False: the caller's connection, kept
        self.task = self.ray.remote(max_retries=0)(_stage_task)  # a stage is never re-run
        self.local = LocalExecutor(options)
        self.here = _AsHere.driver(options)
        # what the worker's LocalExecutor needs: a cold start there, nothing of Ray
        self.sent = replace(
            options, warm=False, executor="local", ray_address=None, shared_dir=None
        )
        self.shared = Shared(options.shared_dir) if options.shared_dir else None
        self.unpacking = threading.Lock()

    def list_stages(self, folder: Path, stop: threading.Event) -> tuple[StageResult, list[Stage]]:
        return self.local.list_stages(folder, stop)

    def run_stage(self, job: StageJob, stop: threading.Event) -> StageResult:
        stage = job.stage
        need, why = self._demand(stage)
        if why is not None:
            return StageResult(stage.name, stage.backend, Status.SKIPPED, reason=why)
        dag = list(job.dag)
        reads = inputs(job, dag)
        if self.shared:
            there, packed = self.shared.send(job, reads), None
        else:
            there, packed = job, pack(job.folder, reads, follow=True)
        task = self.task.options(**_ray_options(need), name=f"{job.folder.name}:{stage.name}")
        ref = task.remote(there, self.sent, packed, self.here)
        answer = self._await(ref, stop)
        if self.shared:
            self.shared.bring_back(job, there.folder, {s.name for s in dag})
        if isinstance(answer, StageResult):  # the task did not answer: lost, or cancelled
            lost = answer.status is Status.CRASH  # under the stage; cancelled: perhaps unstarted
            started = STARTED if lost else None
            answer = replace(answer, name=stage.name, backend=stage.backend, started=started)
            return replace(last_words(answer, job.folder), error=answer.error)  # Ray's word
        data, made, node = answer
        if made is not None:
            with self.unpacking:  # tarfile makes folders racily: two stages' stages/beside/
                shutil.rmtree(stage_path(job.folder, stage.name), ignore_errors=True)
                unpack(made, job.folder)
        return replace(StageResult.from_json(data), host=node, started=STARTED)

    def close(self) -> None:
        """Remove the shared mirror; disconnect from Ray if this executor connected (a local
        instance it started ends with it)."""
        if self.shared:
            self.shared.close()
        if self.connected:
            self.ray.shutdown()
            self.connected = False

    def _demand(self, stage: Stage) -> tuple[dict[str, float], str | None]:
        """The resources the stage asks for, and why no node can give them (else None)."""
        nodes = [n["Resources"] for n in self.ray.nodes() if n.get("Alive")]
        need = demand(stage, self.options.xla_device, nodes)
        if any(all(node.get(k, 0) >= v for k, v in need.items()) for node in nodes):
            return need, None
        asked = ", ".join(f"{k}: {v:g}" for k, v in need.items())
        return need, f"no node of the Ray cluster has {{{asked}}}"

    def _await(self, ref: Any, stop: threading.Event) -> tuple[Any, ...] | StageResult:
        """The task's answer; on ``stop``, the task cancelled: the stage stopped as an
        interrupt stops it here, and its worker killed if it does not return in time."""
        ray = self.ray
        while not ray.wait([ref], timeout=POLL)[0]:
            if stop.is_set():
                ray.cancel(ref)  # KeyboardInterrupt in the task: it stops the stage, TERM first
                if not ray.wait([ref], timeout=self.options.grace + HANDBACK)[0]:
                    ray.cancel(ref, force=True)  # kills the worker; its watchdog, the group
                    return _interrupted("its Ray task did not stop in time: worker killed")
                break
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:
            return _failed(exc, stop)


def demand(stage: Stage, xla_device: str, nodes: Iterable[dict[str, float]]) -> dict[str, float]:
    """The Ray resources of one stage: a CPU for its process, and the accelerator it holds.

    XLA on TPU asks for chips: the stage's ``devices`` when it names them (one device per chip
    since TPU v4; v2/v3 have two, so asking for ``devices`` chips errs on the safe side); else
    one chip for ``xla``, and for ``xla_spmd``/``xla_multicore`` every chip of the largest
    host, since torch_xla takes every chip it sees. XLA on CUDA asks for GPUs the same way.
    On CPU every XLA backend is one CPU, as a local run gives it one slot.
    """
    need = {"CPU": 1.0}
    if stage.backend == "cuda":
        return need | {"GPU": 1.0}
    if not stage.backend.startswith("xla") or xla_device == "CPU":
        return need
    kind = "TPU" if xla_device == "TPU" else "GPU"
    largest = max((node.get(kind, 0) for node in nodes), default=0)
    whole = 1 if stage.backend == "xla" else largest or 1
    return need | {kind: float(stage.devices or whole)}


def _ray_options(need: dict[str, float]) -> dict[str, Any]:
    others = {k: v for k, v in need.items() if k not in ("CPU", "GPU")}
    return {"num_cpus": need.get("CPU", 0), "num_gpus": need.get("GPU", 0), "resources": others}


def _interrupted(why: str) -> StageResult:
    return StageResult("", "", Status.INTERRUPTED, reason=why)


def _failed(exc: Exception, stop: threading.Event) -> StageResult:
    """A task that raised: cancelled (or failing during the interrupt) is an interrupt; a
    worker or node lost under the stage is a crash by SIGKILL (the watchdog's, or the node's
    end: never kept by the results cache); anything else an error of the harness."""
    kind = type(exc).__name__
    text = f"{kind}: {_first_line(exc)}"
    if stop.is_set() or kind == "TaskCancelledError":
        return _interrupted(f"its Ray task was cancelled ({text})")
    if kind in LOST:
        what = "the Ray worker running the stage was lost"
        return StageResult("", "", Status.CRASH, signal="SIGKILL", reason=what, error=text)
    return StageResult("", "", Status.ERROR, reason="the Ray task failed", error=text)


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else "no message"


def _import_ray() -> Any:
    """Ray, imported only when a run asks for it: it is an optional extra."""
    try:
        import ray
    except ImportError:
        raise ReprokitError(
            "--executor ray needs Ray, which is not installed here", hint=INSTALL
        ) from None
    return ray


def _connect(ray: Any, options: Options) -> bool:
    """Connect (quietly) unless connected already; True when this call connected."""
    if ray.is_initialized():
        return False
    address = options.ray_address or os.environ.get("RAY_ADDRESS") or None
    quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
    if address is None:  # "local": a private instance, not one found running on this machine
        cpus = max(options.jobs, os.cpu_count() or 1)  # the scheduler's slots bound the tasks
        # Ray starts its workers at nice 15 (its daemons first): a stage would inherit it
        _init(ray, address="local", num_cpus=cpus, include_dashboard=False,
              _system_config={"worker_niceness": 0}, **quiet)  # fmt: skip
        return True
    _reachable(address)
    try:
        _init(ray, address=address, **quiet)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ReprokitError(f"could not join the Ray cluster at {address}: {exc}") from None
    return True


def _init(ray: Any, **options: Any) -> None:
    """``ray.init``, with a stop signal held back until it returns, then Ray shut down and the
    stop raised: interrupted half way, Ray left its agents running or the process died of a
    segfault. Ray's init also sets SIGTERM handlers of its own (they end the process with
    sys.exit wherever it is, which left agents running too); they would be replaced by the
    handlers there were once it returns, so they are not set at all."""
    utils = ray._private.utils  # ray==2.60.0, as the extra pins it
    setter, utils.set_sigterm_handler = utils.set_sigterm_handler, lambda handler: None
    try:
        with signals.deferred() as came:
            ray.init(**options)
    finally:
        utils.set_sigterm_handler = setter
    if came:
        ray.shutdown()
        raise KeyboardInterrupt


def _reachable(address: str) -> None:
    """Refuse a ``host:port`` nobody listens on: ray.init would retry it forever."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return  # ray://, auto: ray.init knows them
    try:
        socket.create_connection((host, int(port)), timeout=PROBE).close()
    except OSError as exc:
        raise ReprokitError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc})",
            hint="Start one with `ray start --head`, or leave --ray-address out for a local one.",
        ) from None


def _steering(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in environ.items()
        if STEERING.match(k) and not NODE_OWN.search(k) and not is_secret_name(k)
    }


@dataclass(frozen=True)
class _AsHere:
    """What the driver hands a task so that its stage starts as it would here."""

    python: str | None  # the run's interpreter, if not the driver's own (then: the worker's)
    secrets: list[str]  # the driver's, redacted on the worker too
    steering: dict[str, str]  # the driver's variables that steer torch and XLA
    nice: int  # the driver's niceness; a Ray worker's is 15

    @classmethod
    def driver(cls, options: Options) -> _AsHere:
        python = None if options.python == sys.executable else options.python
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        return cls(python, secret_values(), _steering(os.environ), nice)


# --- on the worker node -------------------------------------------------------------------


def _stage_task(
    job: StageJob, options: Options, packed: bytes | None, here: _AsHere
) -> tuple[dict[str, Any], bytes | None, str]:
    """The Ray task: the stage run here as a local run runs it; its record (JSON), what it
    made, packed (None when it lies in the shared folder), and where it ran."""
    node = f"{socket.gethostname()} (Ray node {_node_id()[:8]})"
    options = replace(options, python=here.python or sys.executable)
    with _environ(here.steering):
        if packed is None:  # the job's folder is in the shared folder, seen from every node
            return _run_here(job, options, here).to_json(), None, node
        with _workspace() as temp:
            folder = Path(temp) / job.folder.name
            unpack(packed, folder)
            before = snapshot(folder)
            result = _run_here(replace(job, folder=folder), options, here)
            made = made_files(folder, before, job.stage.name)
            return result.to_json(), pack(folder, [folder / m for m in made]), node


def _workspace() -> tempfile.TemporaryDirectory[str]:
    """A temporary folder for one stage on this node, named after this worker's pid; the
    folders of workers that are gone (force-killed after a stop's grace: nothing removed
    theirs) are removed first."""
    for path in Path(tempfile.gettempdir()).glob(f"{WORKSPACE}*-*"):
        pid = path.name.removeprefix(WORKSPACE).split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{WORKSPACE}{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        pass
    return True


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _run_here(job: StageJob, options: Options, here: _AsHere) -> StageResult:
    """The stage through :class:`LocalExecutor`, in a thread: ray.cancel raises
    KeyboardInterrupt in this one, which then stops the stage the way an interrupt does."""
    local = LocalExecutor(options)
    local.secrets = sorted(set(local.secrets) | set(here.secrets), key=len, reverse=True)
    stop = threading.Event()

    def run_stage() -> StageResult:
        # Linux's niceness is a thread's: the stage, started from this thread, inherits this
        # one. Lowering it needs privilege (root, CAP_SYS_NICE): else Ray's stays.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, here.nice)
        return local.run_stage(job, stop)

    with cf.ThreadPoolExecutor(1, thread_name_prefix="reprokit-stage") as pool:
        future = pool.submit(run_stage)
        try:
            while not future.done():
                cf.wait([future], timeout=POLL)
        except KeyboardInterrupt:
            stop.set()
        return future.result()


@contextlib.contextmanager
def _environ(changes: dict[str, str]) -> Iterator[None]:
    """The driver's steering variables over the node's, and none of Ray's own, for this task
    only (a Ray worker runs one task at a time, and is reused for the next)."""
    unset = [k for k in RAY_SETS if k not in changes]
    before = {k: os.environ.get(k) for k in [*changes, *unset]}
    os.environ.update(changes)
    for key in unset:
        os.environ.pop(key, None)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
