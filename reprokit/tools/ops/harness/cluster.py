"""The op sweep on a Ray cluster (``reprokit ops --executor ray``): the same tasks, judged by
the same warm workers, on the cluster's nodes.

Each of ``-n`` slots is a Ray actor of one CPU (runner/processes/ray_actors.py) holding a
:class:`NodePool`: the local sweep's :class:`Pool` with one worker, on its node. So a worker
is forked from a warm server that imported torch and torch_xla on that node, lives as long as
the sweep feeds it, and everything the local sweep does about a sample that kills its worker
(named, recorded as a crash or a hang, the next worker going on from the next sample) happens
there unchanged. The driver (:class:`RayPool`, the same methods as :class:`Pool`) hands out the
tasks in the local sweep's batches, two per slot at a time (one in the worker, one waiting, so
that it never waits for the next), takes each finished task's records as it ends (the results
cache is written here, task by task, as locally: an interrupt keeps what finished) with the
witnesses' saved tensors, which the node wrote to its own cache.

An actor that is lost (its process killed, its node gone) loses its unfinished tasks, not the
sweep: they run again from their start in a new actor; a task that was under :data:`LOSSES`
lost actors is refused, saying so. Listing the OpInfos and the new samples of the triggers
and stale graphs (``answer``) run in an actor too: the driver needs no torch.
"""

from __future__ import annotations

import itertools
import queue
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from reprokit.infra.caching import Store
from reprokit.runner.options import Options
from reprokit.runner.processes.ray_actors import RayActors, why
from reprokit.tools.ops.harness.pool import BATCH, TICK, Pool, Task

AHEAD = 2  # batches a slot holds at once: one its worker is on, the next waiting for it
LOSSES = 2  # lost actors a task may be under before it is refused
WAIT = 0.5  # seconds a node's ``take`` waits for a finished task before answering none
POLL = 0.2  # seconds the driver waits for any slot's answer before it looks at the stop flag
SCRATCH = "reprokit-ops-"  # a node's folder of its workers' job files and logs (temporary)


class RayPool:
    """:class:`Pool`'s methods, with its workers on a Ray cluster: ``options.jobs`` slots."""

    def __init__(
        self,
        options: Options,
        scratch: Path,
        witness: Path,
        *,
        timeout: float,
        stop: threading.Event,
    ) -> None:
        self.options, self.witness, self.stop = options, witness, stop
        sent = replace(options, jobs=1, executor="local", ray_address=None, shared_dir=None)
        # the node's own cache holds its witnesses (``witness.name`` there); they come back
        self.actors = RayActors(options, NodePool, sent, timeout, witness.name, count=options.jobs)
        self.ray = self.actors.ray
        self._turn = itertools.count()
        self._judged: dict[int, int] = {}  # per slot: samples of its tasks not yet done
        self._driving: threading.Thread | None = None

    def close(self) -> None:
        """Every node's workers stopped (TERM, then KILL after the grace), the actors killed,
        Ray left if this pool joined it; what the driving thread was doing finished first."""
        if self._driving is not None:
            self._driving.join(self.options.grace + 5)
        if self.actors.actors:
            self.actors.close("close", grace=self.options.grace + 5)

    def listing(self, request: dict[str, Any]) -> dict[str, Any]:
        """The worker's listing of the OpInfos asked for, from a node."""
        return self._ask("listing", request)

    def answer(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """One worker on one ``job`` besides the tasks, on a node: its answer's lines."""
        lines, files = self._ask("answer", job)
        self._keep(files)
        return lines

    def in_flight(self) -> int:
        return sum(self._judged.values())

    def run(
        self,
        tasks: list[Task],
        done: Callable[[Task, list[dict[str, Any]]], None],
        tick: Callable[[], None] | None = None,
    ) -> None:
        """Every task's samples judged on the cluster, ``done(task, records)`` called as each
        ends (from one thread); returns when all ended or the sweep stopped."""
        drive = _Drive(self, tasks, done)
        self._driving = threading.Thread(target=drive.loop, daemon=True)
        self._driving.start()
        last = time.monotonic()
        while self._driving.is_alive():  # here, not in the thread, an interrupt is raised
            self._driving.join(0.2)
            if tick and time.monotonic() - last > TICK:
                last = time.monotonic()
                tick()
        if drive.failed is not None:
            raise drive.failed

    def _ask(self, method: str, payload: dict[str, Any]) -> Any:
        """``method(payload)`` on a node, the slots taken in turn; once more in a new actor
        where the first was lost."""
        slot = next(self._turn) % len(self.actors.actors)
        try:
            return self.ray.get(self.actors.call(slot, method, payload))
        except self.ray.exceptions.RayError:
            self.actors.replace(slot)
            return self.ray.get(self.actors.call(slot, method, payload))

    def _keep(self, files: dict[str, bytes]) -> None:
        """A node's saved witness tensors, into this machine's cache (the same files where the
        node is this machine), each written whole, then renamed."""
        for name, data in files.items():
            target = self.witness / name
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{name}.{threading.get_ident()}")
            partial.write_bytes(data)
            partial.replace(target)


class _Drive:
    """One run's tasks fed to the slots and their answers taken, in the driving thread."""

    def __init__(self, pool: RayPool, tasks: list[Task], done: Callable) -> None:
        self.pool, self.done = pool, done
        self.by_id = {t.id: t for t in tasks}
        self.todo = deque(tasks)
        self.left = len(tasks)
        self.held: dict[int, list[str]] = {}  # per slot: ids of the tasks fed, not yet done
        self.losses: dict[str, int] = {}
        self.waiting: dict[Any, tuple[int, str]] = {}  # reference -> (slot, "take" or "serve")
        self.failed: BaseException | None = None

    def loop(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # raised again in the caller's thread
            self.failed = exc

    def _loop(self) -> None:
        ray, stop = self.pool.ray, self.pool.stop
        for slot in range(len(self.pool.actors.actors)):
            self._begin(slot)
        while self.left and not stop.is_set():
            ready, _ = ray.wait(list(self.waiting), num_returns=1, timeout=POLL)
            for ref in ready:
                slot, what = self.waiting.pop(ref)
                try:
                    answer = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    self._lost(slot, why(exc))
                    continue
                if what == "serve":  # it returned though not told to end: gone wrong
                    self._lost(slot, f"its node's pool stopped serving ({answer})")
                    continue
                self._taken(slot, *answer)
                self._top_up(slot)
                self.waiting[self.pool.actors.call(slot, "take", WAIT)] = (slot, "take")
        if not stop.is_set():
            for slot in range(len(self.pool.actors.actors)):
                self.pool.actors.call(slot, "feed", None)  # the end: each worker exits

    def _begin(self, slot: int) -> None:
        """Slot ``slot``'s actor serving, fed its first batches."""
        actors = self.pool.actors
        self.held[slot] = []
        self.pool._judged[slot] = 0
        self.waiting[actors.call(slot, "serve")] = (slot, "serve")
        self._top_up(slot)
        self.waiting[actors.call(slot, "take", WAIT)] = (slot, "take")

    def _top_up(self, slot: int) -> None:
        """The slot's next batches, up to :data:`AHEAD` held at once, in the sweep's order."""
        while self.todo and len(self.held[slot]) <= BATCH * (AHEAD - 1):
            batch = [self.todo.popleft() for _ in range(min(BATCH, len(self.todo)))]
            self.held[slot] += [t.id for t in batch]
            self.pool.actors.call(slot, "feed", [t.to_json() for t in batch])

    def _taken(self, slot: int, answers: list[tuple], judged: int) -> None:
        for task_id, records, files in answers:
            self.pool._keep(files)
            self.held[slot].remove(task_id)
            self.left -= 1
            self.done(self.by_id[task_id], records)
        self.pool._judged[slot] = judged

    def _lost(self, slot: int, why: str) -> None:
        """The slot's actor gone: its unfinished tasks again at the front of the queue (or
        refused, lost too often), a new actor in its place."""
        self.waiting = {r: w for r, w in self.waiting.items() if w[0] != slot}
        again = []
        for task_id in self.held[slot]:
            self.losses[task_id] = self.losses.get(task_id, 0) + 1
            if self.losses[task_id] < LOSSES:
                again.append(self.by_id[task_id])
                continue
            self.left -= 1
            reason = f"not run: the Ray actor running it was lost {LOSSES} times ({why})"
            self.done(self.by_id[task_id], [{"sample": -1, "verdict": "skip", "reason": reason}])
        self.todo.extendleft(reversed(again))
        self.pool.actors.replace(slot)
        self._begin(slot)


class NodePool:
    """On a node: the local sweep's :class:`Pool` of one worker, fed batch after batch by the
    driver (``feed``; None: no more), its finished tasks taken by the driver (``take``)."""

    def __init__(self, python: str, options: Options, timeout: float, witness: str) -> None:
        self.stop = threading.Event()
        self.scratch = Path(tempfile.mkdtemp(prefix=SCRATCH))
        self.witness = Store(witness).folder  # this node's cache
        options = replace(options, python=python)
        self.pool = Pool(options, self.scratch, self.witness, timeout=timeout, stop=self.stop)
        self.fed: queue.Queue[list[dict[str, Any]] | None] = queue.Queue()
        self.answers: queue.Queue[tuple[str, list[dict[str, Any]], dict[str, bytes]]]
        self.answers = queue.Queue()

    def feed(self, tasks: list[dict[str, Any]] | None) -> None:
        self.fed.put(tasks)

    def serve(self) -> str:
        """Until fed None (or stopped): the worker waits for each next batch, alive."""
        self.pool.serve(self._source, self._done)
        return "stopped" if self.stop.is_set() else "fed to its end"

    def take(self, wait: float) -> tuple[list[tuple], int]:
        """The tasks finished since the last take (waiting up to ``wait`` seconds for one),
        each with its records and the saved tensors they name; samples judged meanwhile."""
        found = []
        try:
            found.append(self.answers.get(timeout=wait))
            while True:
                found.append(self.answers.get_nowait())
        except queue.Empty:
            pass
        return found, self.pool.in_flight()

    def listing(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.pool.listing(request)

    def answer(self, job: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
        lines = self.pool.answer(job)
        return lines, _saved(lines, self.witness)

    def close(self) -> None:
        """The worker stopped (as an interrupt stops it locally), its files removed."""
        self.stop.set()
        self.fed.put(None)
        self.pool.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _source(self) -> list[dict[str, Any]] | None:
        while not self.stop.is_set():
            try:
                return self.fed.get(timeout=POLL)
            except queue.Empty:
                continue
        return None

    def _done(self, task_id: str, records: list[dict[str, Any]]) -> None:
        self.answers.put((task_id, records, _saved(records, self.witness)))


def _saved(found: Any, witness: Path) -> dict[str, bytes]:
    """The witness tensors the records name (``"saved": NAME`` anywhere in them), read."""
    files: dict[str, bytes] = {}
    stack = [found]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            name = item.get("saved")
            if isinstance(name, str) and name and (witness / name).is_file():
                files[name] = (witness / name).read_bytes()
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
    return files
