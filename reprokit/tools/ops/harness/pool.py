"""The sweep's workers: a few long-lived processes (``worker/main.py``), each forked from the warm
server that imported torch and torch_xla (runner/processes/warm.py, as a stage is) and driven like a
stage (runner/processes/procs.py: its own group, capped logs, TERM then KILL on a stop). Each gets a
batch of tasks (an op in a dtype, forward or backward, OpInfo's or the edge samples) and
answers one JSON line per sample. A worker that dies (a segfault, SIGFPE, SIGALRM after a
sample's timeout) names the sample it was on: that sample is recorded as a crash (or a hang),
and a new worker goes on from the next one, first writing the dead sample's source for its
repro. Torch-free."""

from __future__ import annotations

import json
import math
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reprokit.infra.caching import Store
from reprokit.records import Status
from reprokit.records.folder import (
    WORKER_ANSWERS,
    WORKER_FEED,
    WORKER_FEED_END,
    WORKER_JOB,
    child_logs,
    worker_batch,
)
from reprokit.runner.backends import stage_env
from reprokit.runner.options import Options
from reprokit.runner.processes.stage import Launch
from reprokit.runner.processes.warm import WarmExecutor

WORKER = Path(__file__).parents[1] / "worker" / "main.py"
SOURCE = Path(__file__).parents[4]  # the folder holding the reprokit package
BATCH = 6  # tasks a worker is fed at once (an op's three dtypes, OpInfo's and the edge samples)
POLL = 0.05  # seconds between looks at a worker's answers
RESTARTS = 200  # new workers one batch may take (one per crash) before the rest is refused
# XLA's compiler out of the worker's resources: its memory mappings (65,530 by default) spent
# by hours of compiled programs, the sample not at fault. That sample runs again, once, in a
# new worker (measured: both workers of the whole --mesh sweep died so in linalg.svdvals)
EXHAUSTED = "Cannot allocate memory"
CRASHES = 3  # samples of one task that may kill a worker; its other samples are then not run
TICK = 5.0  # seconds between looks at the samples judged in the workers at work
NEVER = 1 << 30  # a task's ``start`` that runs none of its samples (only ``describe`` them)
OVERALL = 12 * 3600.0  # seconds a worker may live at most (each sample has its own timeout)


@dataclass(frozen=True)
class Task:
    """One op in one dtype on one backend, forward or backward, OpInfo's or the edge samples."""

    op: str
    variant: str
    dtype: str
    backend: str
    grad: bool
    edge: bool
    inplace: bool = False  # the op's in-place variant (forward)
    shard: str = ""  # --mesh: how its tensor arguments are sharded (worker/sharding.py)
    mesh: tuple[int, ...] = ()  # and the devices' mesh (2, 2)
    limit: int = 0  # --mesh-samples: the task's first samples only (0: all)

    @property
    def id(self) -> str:
        passed = "inplace" if self.inplace else "grad" if self.grad else "fwd"
        sharded = f"|{self.shard}" if self.shard else ""
        edge = int(self.edge)
        return f"{self.op}|{self.variant}|{self.dtype}|{self.backend}|{passed}|{edge}{sharded}"

    def to_json(self) -> dict[str, Any]:
        return (
            {
                "id": self.id,
                "op": self.op,
                "variant": self.variant,
                "dtype": self.dtype,
                "backend": self.backend,
                "grad": self.grad,
                "edge": self.edge,
                "inplace": self.inplace,
            }
            | ({"shard": self.shard, "mesh": list(self.mesh)} if self.shard else {})
            | ({"limit": self.limit} if self.limit else {})
        )


@dataclass(frozen=True)
class Asking:
    """How the harness asks workers beyond the tasks (a stale graph's rechecks: stale.py; a
    trigger's new samples: confirm.py) and keeps their answers: the pool (None: nothing is
    asked, as after an interrupt), how many workers at once, and what the cache keys hold
    besides the question (the versions, the workers' code)."""

    pool: Workers | None = None
    jobs: int = 1
    versions: dict[str, str] = field(default_factory=dict)
    code: list[str | None] = field(default_factory=list)
    cache: bool = True  # read the cache (it is always written)

    def cached(self, store: Store, question: Any) -> Any | None:
        return store.get_json(self._key(question)) if self.cache else None

    def keep(self, store: Store, question: Any, answer: Any) -> None:
        store.put_json(self._key(question), answer)

    def _key(self, question: Any) -> str:
        return Store.key(question, self.versions, self.code)


class Workers(Protocol):
    """What a sweep asks of its workers, here (:class:`Pool`) or on a Ray cluster
    (cluster.py's RayPool)."""

    def close(self) -> None: ...

    def listing(self, request: dict[str, Any]) -> dict[str, Any]: ...

    def answer(self, job: dict[str, Any]) -> list[dict[str, Any]]: ...

    def in_flight(self) -> int: ...

    def run(
        self,
        tasks: list[Task],
        done: Callable[[Task, list[dict[str, Any]]], None],
        tick: Callable[[], None] | None = None,
    ) -> None: ...


@dataclass
class _Batch:
    tasks: list[dict[str, Any]]  # Task.to_json(), with "start" and "describe" where resumed
    restarts: int = 0
    found: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # id -> records
    finished: set[str] = field(default_factory=set)  # ids of its tasks done
    retried: set[tuple[str, int]] = field(default_factory=set)  # (task id, sample) run again


class Pool:
    """Workers for one sweep: ``jobs`` at a time, under ``scratch`` (their job files, logs)."""

    def __init__(
        self,
        options: Options,
        scratch: Path,
        witness: Path,
        *,
        timeout: float,
        stop: threading.Event,
    ) -> None:
        self.options, self.scratch, self.witness = options, scratch, witness
        self.timeout, self.stop = timeout, stop
        self.executor = WarmExecutor(options)
        self._count = 0
        self._lock = threading.Lock()
        self._judged: dict[Path, int] = {}  # per worker at work: samples of tasks not done

    def close(self) -> None:
        self.executor.close()

    def listing(self, request: dict[str, Any]) -> dict[str, Any]:
        """The worker's listing of the OpInfos asked for (worker.listing)."""
        folder = self._folder()
        ended = self._start(folder, {"list": request})
        with self._lock:
            self._judged.pop(folder, None)
        for line in _read_lines(folder / WORKER_ANSWERS):
            if "listing" in line:
                return line["listing"]
        raise RuntimeError(f"the worker listed nothing ({_ending(ended)}): {_tail(folder)}")

    def answer(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """One worker on one ``job`` besides the tasks (a trigger's new samples: confirm.py):
        its answer's lines, those before its death where it died."""
        folder = self._folder()
        self._start(folder, job | {"timeout": self.timeout, "witness_dir": str(self.witness)})
        with self._lock:
            self._judged.pop(folder, None)
        return _read_lines(folder / WORKER_ANSWERS)

    def in_flight(self) -> int:
        """Samples judged so far by the workers at work (their tasks not yet done)."""
        with self._lock:
            return sum(self._judged.values())

    def run(
        self,
        tasks: list[Task],
        done: Callable[[Task, list[dict[str, Any]]], None],
        tick: Callable[[], None] | None = None,
    ) -> None:
        """Every task's samples judged, ``done(task, records)`` called as each task ends (from
        the workers' threads, one at a time); returns when all ended or the sweep stopped."""
        by_id = {t.id: t for t in tasks}
        todo: queue.Queue[list[dict[str, Any]]] = queue.Queue()
        # Small batches of consecutive tasks (an op's dtypes together) fed to long-lived
        # workers: no batch holds hours of one op family, and a worker's compiled graphs serve
        # the whole sweep (XLA:CPU's persistent cache cannot load its executables: docs/ops.md)
        for i in range(0, len(tasks), BATCH):
            todo.put([t.to_json() for t in tasks[i : i + BATCH]])
        self.serve(lambda: _next(todo), lambda task_id, found: done(by_id[task_id], found), tick)

    def serve(
        self,
        source: Callable[[], list[dict[str, Any]] | None],
        done: Callable[[str, list[dict[str, Any]]], None],
        tick: Callable[[], None] | None = None,
    ) -> None:
        """``jobs`` workers fed the batches ``source`` gives (tasks as ``Task.to_json()``; None:
        no more), ``done(task id, records)`` called as each task ends, one at a time. A source
        that waits for its next batch keeps the workers alive meanwhile (a node of a Ray
        cluster, fed by the driver: cluster.py)."""
        report = threading.Lock()

        def finish(task_id: str, records: list[dict[str, Any]]) -> None:
            with report:
                done(task_id, records)

        def take() -> _Batch | None:
            tasks = source()
            return None if tasks is None else _Batch(tasks)

        def serve() -> None:
            again: _Batch | None = None
            while not self.stop.is_set():
                if again is None:
                    again = take()
                    if again is None:
                        return
                again = self._worker(again, take, finish)

        threads = [threading.Thread(target=serve, daemon=True) for _ in range(self.options.jobs)]
        for thread in threads:
            thread.start()
        last = time.monotonic()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
                if tick and time.monotonic() - last > TICK:
                    last = time.monotonic()
                    tick()

    def _worker(
        self, batch: _Batch, take: Callable[[], _Batch | None], finish: Callable
    ) -> _Batch | None:
        """One worker, fed ``batch`` and then the next batches ``take`` gives as it asks for them
        (each a file in its ``feed`` folder), until none is left; the batch left to do when it
        died (else None)."""
        folder = self._folder()
        feed = folder / WORKER_FEED
        feed.mkdir()
        _feed(feed, 0, batch)
        job = {
            "backend": batch.tasks[0]["backend"],
            "mesh": batch.tasks[0].get("mesh"),  # a sweep's tasks share one mesh, or none
            "feed": "feed",
            "timeout": self.timeout,
            "witness_dir": str(self.witness),
        }
        ended: list[Any] = []
        runner = threading.Thread(target=lambda: ended.append(self._start(folder, job)))
        runner.start()
        lines = _Tail(folder / WORKER_ANSWERS)
        begun: dict[str, Any] | None = None
        while True:
            alive = runner.is_alive()
            for line in lines.read():
                if "fed" in line:  # its batch done: the next one, or the end
                    following = take()
                    if following is not None:
                        batch = following
                    _feed(feed, line["fed"] + 1, following)
                    continue
                begun = self._line(line, batch, begun, finish, folder)
            if not alive:
                break
            time.sleep(POLL)
        runner.join()
        with self._lock:
            self._judged.pop(folder, None)
        if self.stop.is_set() or ended[0].status is Status.OK:
            return None
        return self._died(batch, begun, ended[0], finish, folder)

    def _line(
        self, line: dict[str, Any], batch: _Batch, begun: Any, finish: Callable, folder: Path
    ) -> dict[str, Any] | None:
        """One line of a worker's answer taken in; the sample begun and not yet answered."""
        if "begin" in line:
            return line
        if "record" in line:
            batch.found.setdefault(line["id"], []).append(line["record"])
            with self._lock:
                self._judged[folder] = self._judged.get(folder, 0) + 1
            return None
        if "code" in line:
            _attach(batch.found.setdefault(line["id"], []), line["sample"], line["code"])
        elif "done" in line:
            batch.finished.add(line["done"])
            cut = any(t["id"] == line["done"] and t.get("start") == NEVER for t in batch.tasks)
            found = batch.found.pop(line["done"], [])
            with self._lock:
                self._judged[folder] = self._judged.get(folder, 0) - len(found)
            finish(line["done"], found + ([_cut()] if cut else []))
        return begun

    def _died(
        self,
        batch: _Batch,
        begun: dict[str, Any] | None,
        ended: Any,
        finish: Callable,
        folder: Path,
    ) -> _Batch | None:
        """The batch a dead worker was on, to go on with in a new one from the sample after
        the one it died on (recorded as a crash or a hang); None where there is no going on."""
        rest = [t for t in batch.tasks if t["id"] not in batch.finished]
        if not rest:
            return None
        if begun is None or batch.restarts >= RESTARTS:  # died outside a sample: give up
            where = "outside any sample" if begun is None else f"{RESTARTS} times in one batch"
            why = f"the worker failed {where} ({_ending(ended)}): {_tail(folder)}"
            for task in rest:
                finish(task["id"], [*batch.found.pop(task["id"], []), _refused(why)])
            return None
        first = dict(next(t for t in rest if t["id"] == begun["begin"]))
        others = [t for t in rest if t["id"] != begun["begin"]]
        again = (begun["begin"], begun["sample"])
        if EXHAUSTED in _tail(folder) and again not in batch.retried:  # the worker's, once
            first["start"] = begun["sample"]
            retried = batch.retried | {again}
            return _Batch([first, *others], batch.restarts + 1, batch.found, retried=retried)
        dead = _death(begun, ended)
        batch.found.setdefault(begun["begin"], []).append(dead)
        first["start"] = begun["sample"] + 1
        deaths = sum(r.get("kind") in ("crash", "hang") for r in batch.found[begun["begin"]])
        if deaths >= CRASHES:  # the rest of the task: described, not run
            first["start"] = NEVER
        first["describe"] = [*first.get("describe", []), begun["sample"]]
        return _Batch([first, *others], batch.restarts + 1, batch.found, retried=batch.retried)

    def _folder(self) -> Path:
        with self._lock:
            self._count += 1
            folder = self.scratch / f"worker-{self._count}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _start(self, folder: Path, job: dict[str, Any]) -> Any:
        """One worker on ``job`` in ``folder``, driven to its end: how it ended."""
        (folder / WORKER_JOB).write_text(json.dumps(job), "utf-8")
        command = [self.options.python, str(WORKER), WORKER_JOB, WORKER_ANSWERS]
        mesh = job.get("mesh")  # SPMD on the mesh's devices (virtual ones on XLA:CPU)
        devices = math.prod(mesh) if mesh else None
        env = stage_env("xla_spmd" if mesh else "xla", self.options.xla_device, devices=devices)
        if self.options.python != sys.executable:  # a release's environment: no reprokit
            env["PYTHONPATH"] = str(SOURCE)  # the worker imports reprokit from its source
        logs = child_logs(folder)
        how = Launch(command, "ops-worker", "xla", env, folder, logs, OVERALL)
        with self._lock:
            self._judged[folder] = 0
        ended, _ = self.executor.start(how, self.stop)
        return ended


def _tail(folder: Path) -> str:
    """The last lines a worker wrote to stderr (torch's CUDA notice left out)."""
    try:
        text = child_logs(folder)[1].read_text("utf-8", "replace")
    except OSError:
        return ""
    lines = [line for line in text.strip().splitlines() if "No CUDA runtime" not in line]
    return " | ".join(lines[-3:])


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """The worker's lines; a last one cut short by its death is left out."""
    found = []
    try:
        text = path.read_text("utf-8")
    except OSError:
        return found
    for line in text.splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return found


def _attach(records: list[dict[str, Any]], sample: int, code: dict[str, Any]) -> None:
    for record in records:
        if record.get("sample") == sample and record.get("kind") in ("crash", "hang"):
            record["code"] = code


def _death(begun: dict[str, Any], ended: Any) -> dict[str, Any]:
    """The record of the sample a worker died on: a hang when its alarm (or the worker's
    timeout) killed it, else a crash with the signal's name or the exit code."""
    hang = ended.status is Status.TIMEOUT or ended.returncode == -signal.SIGALRM
    kind = "hang" if hang else "crash"
    how = "past the sample's timeout" if hang else _ending(ended)
    return {
        "sample": begun["sample"],
        "verdict": "differs",
        "kind": kind,
        "detail": f"the process died: {how}",
        "described": begun.get("described", {}),
    }


def _ending(ended: Any) -> str:
    if ended.signal:
        return f"killed by {ended.signal}"
    return f"{ended.status.value}, exit {ended.returncode}"


def _cut() -> dict[str, Any]:
    why = f"not run: {CRASHES} samples of this op and dtype killed the worker before"
    return {"sample": -1, "verdict": "skip", "reason": why}


def _refused(why: str) -> dict[str, Any]:
    return {"sample": -1, "verdict": "skip", "reason": why[:300]}


class _Tail:
    """The complete lines a worker appended to its answer since the last read."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                text = f.read()
        except OSError:
            return []
        end = text.rfind(b"\n") + 1  # a last line not yet complete is read next time
        self.offset += end
        found = []
        for line in text[:end].splitlines():
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return found


def _next(todo: queue.Queue) -> list[dict[str, Any]] | None:
    try:
        return todo.get_nowait()
    except queue.Empty:
        return None


def _feed(folder: Path, number: int, batch: _Batch | None) -> None:
    """Batch ``number`` for a worker (written whole, then renamed), or the end of its feed."""
    if batch is None:
        (folder / WORKER_FEED_END).touch()
        return
    scratch = folder / f".{number}"
    scratch.write_text(json.dumps(batch.tasks), "utf-8")
    scratch.replace(folder / worker_batch(number))
