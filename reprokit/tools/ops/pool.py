"""The sweep's workers: a few long-lived processes (``worker.py``), each forked from the warm
server that imported torch and torch_xla (runner/warm.py, as a stage is) and driven like a
stage (runner/procs.py: its own group, capped logs, TERM then KILL on a stop). Each gets a
batch of tasks (an op in a dtype, forward or backward, OpInfo's or the edge samples) and
answers one JSON line per sample. A worker that dies (a segfault, SIGFPE, SIGALRM after a
sample's timeout) names the sample it was on: that sample is recorded as a crash (or a hang),
and a new worker goes on from the next one, first writing the dead sample's source for its
repro. Torch-free."""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.records import Status
from reprokit.runner.backends import stage_env
from reprokit.runner.options import Options
from reprokit.runner.processes.stage import Launch
from reprokit.runner.processes.warm import WarmExecutor

WORKER = Path(__file__).with_name("worker.py")
BATCH = 40  # tasks a worker is given at once: its start (~5 s) spread over many samples
RESTARTS = 200  # new workers one batch may take (one per crash) before the rest is refused
CRASHES = 3  # samples of one task that may kill a worker; its other samples are then not run
TICK = 5.0  # seconds between looks at the samples judged in the workers at work
NEVER = 1 << 30  # a task's ``start`` that runs none of its samples (only ``describe`` them)
OVERALL = 3 * 3600.0  # seconds a worker may live at most (each sample has its own timeout)


@dataclass(frozen=True)
class Task:
    """One op in one dtype on one backend, forward or backward, OpInfo's or the edge samples."""

    op: str
    variant: str
    dtype: str
    backend: str
    grad: bool
    edge: bool

    @property
    def id(self) -> str:
        passed = "grad" if self.grad else "fwd"
        return f"{self.op}|{self.variant}|{self.dtype}|{self.backend}|{passed}|{int(self.edge)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "op": self.op,
            "variant": self.variant,
            "dtype": self.dtype,
            "backend": self.backend,
            "grad": self.grad,
            "edge": self.edge,
        }


@dataclass
class _Batch:
    tasks: list[dict[str, Any]]  # Task.to_json(), with "start" and "describe" where resumed
    restarts: int = 0
    found: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # id -> records


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
        self._running: set[Path] = set()  # the folders of the workers at work

    def close(self) -> None:
        self.executor.close()

    def listing(self, request: dict[str, Any]) -> dict[str, Any]:
        """The worker's listing of the OpInfos asked for (worker.listing)."""
        lines, ended = self._launch({"list": request})
        for line in lines:
            if "listing" in line:
                return line["listing"]
        raise RuntimeError(f"the worker listed nothing ({_ending(ended)}): {self._tail()}")

    def in_flight(self) -> int:
        """Samples judged so far by the workers at work (their tasks not yet done)."""
        with self._lock:
            folders = list(self._running)
        count = 0
        for folder in folders:
            try:
                count += (folder / "out.jsonl").read_bytes().count(b'"record"')
            except OSError:
                continue
        return count

    def run(
        self,
        tasks: list[Task],
        done: Callable[[Task, list[dict[str, Any]]], None],
        tick: Callable[[], None] | None = None,
    ) -> None:
        """Every task's samples judged, ``done(task, records)`` called as each task ends (from
        the workers' threads, one at a time); returns when all ended or the sweep stopped."""
        by_id = {t.id: t for t in tasks}
        todo: queue.Queue[_Batch] = queue.Queue()
        # Interleaved, not cut in runs: one op's tasks (max_pool's thousands of samples of new
        # shapes in each dtype) spread over several batches instead of making one last hours
        count = -(-len(tasks) // BATCH)
        for i in range(count):
            todo.put(_Batch([t.to_json() for t in tasks[i::count]]))
        report = threading.Lock()

        def finish(task_id: str, records: list[dict[str, Any]]) -> None:
            with report:
                done(by_id[task_id], records)

        def serve() -> None:
            while not self.stop.is_set():
                try:
                    batch = todo.get_nowait()
                except queue.Empty:
                    return
                again = self._batch(batch, finish)
                if again is not None:
                    todo.put(again)

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

    def _batch(self, batch: _Batch, finish: Callable) -> _Batch | None:
        """Run one batch in one worker; the batch left to do when it died (else None)."""
        job = {
            "backend": batch.tasks[0]["backend"],
            "tasks": batch.tasks,
            "timeout": self.timeout,
            "witness_dir": str(self.witness),
        }
        lines, ended = self._launch(job)
        begun: dict[str, Any] | None = None
        finished = set()
        for line in lines:
            if "begin" in line:
                begun = line
            elif "record" in line:
                batch.found.setdefault(line["id"], []).append(line["record"])
                begun = None
            elif "code" in line:
                _attach(batch.found.setdefault(line["id"], []), line["sample"], line["code"])
            elif "done" in line:
                finished.add(line["done"])
                cut = any(t["id"] == line["done"] and t.get("start") == NEVER for t in batch.tasks)
                finish(line["done"], batch.found.pop(line["done"], []) + ([_cut()] if cut else []))
        if self.stop.is_set() or ended.status is Status.OK:
            return None
        rest = [t for t in batch.tasks if t["id"] not in finished]
        if begun is None or batch.restarts >= RESTARTS:  # died outside a sample: give up
            where = "outside any sample" if begun is None else f"{RESTARTS} times in one batch"
            why = f"the worker failed {where} ({_ending(ended)}): {self._tail()}"
            for task in rest:
                finish(task["id"], [*batch.found.pop(task["id"], []), _refused(why)])
            return None
        dead = _death(begun, ended)
        batch.found.setdefault(begun["begin"], []).append(dead)
        first = dict(next(t for t in rest if t["id"] == begun["begin"]))
        first["start"] = begun["sample"] + 1
        deaths = sum(r.get("kind") in ("crash", "hang") for r in batch.found[begun["begin"]])
        if deaths >= CRASHES:  # the rest of the task: described, not run
            first["start"] = NEVER
        first["describe"] = [*first.get("describe", []), begun["sample"]]
        others = [t for t in rest if t["id"] != begun["begin"]]
        return _Batch([first, *others], batch.restarts + 1, batch.found)

    def _launch(self, job: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
        """One worker on ``job``, driven to its end: the lines it wrote, how it ended."""
        with self._lock:
            self._count += 1
            folder = self.scratch / f"worker-{self._count}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "job.json").write_text(json.dumps(job), "utf-8")
        command = [self.options.python, str(WORKER), "job.json", "out.jsonl"]
        env = stage_env("xla", self.options.xla_device)
        logs = [folder / "stdout.log", folder / "stderr.log"]
        how = Launch(command, "ops-worker", "xla", env, folder, logs, OVERALL)
        with self._lock:
            self._running.add(folder)
        try:
            ended, _ = self.executor.start(how, self.stop)
        finally:
            with self._lock:
                self._running.discard(folder)
        self._last = folder
        return _read_lines(folder / "out.jsonl"), ended

    def _tail(self) -> str:
        try:
            text = (self._last / "stderr.log").read_text("utf-8", "replace")
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
