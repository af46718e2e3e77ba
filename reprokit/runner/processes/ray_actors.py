"""Long-lived objects on a Ray cluster, one per slot: what keeps warm worker processes on each
node (the op sweep's workers: tools/ops/harness/cluster.py), where a stage is one Ray task
(ray_executor.py).

Each slot is a Ray actor of one CPU that builds its object on its node (``make(python,
*args)``, ``python`` the interpreter the object is to start its processes with) and answers
calls of its methods, several at once (a threaded actor: a long call such as serving batches
goes on while others feed it or take its answers). The actor's process is set up as a stage's
task is (ray_executor.py): the driver's variables that steer torch and XLA, none of Ray's own
(``OMP_NUM_THREADS=1``), the driver's niceness where the node allows it; the processes the
object starts inherit them. The cluster is joined, or a private local one started, exactly as
``reprokit run --executor ray`` does (ray_executor._connect).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from reprokit.environment.variables import RAY_SETS
from reprokit.runner.options import Options
from reprokit.runner.processes.ray_executor import (
    _AsHere,
    _connect,
    _first_line,
    _import_ray,
)

CONCURRENCY = 8  # calls an actor answers at once: one long (serving), the others short


@contextlib.contextmanager
def connected(options: Options) -> Iterator[Any]:
    """Ray, joined as ``options`` says (else a private local instance) for the block; left
    as it was found: a connection that was there stays."""
    ray = _import_ray()
    joined = _connect(ray, options)
    try:
        yield ray
    finally:
        if joined:
            ray.shutdown()


class RayActors:
    """``count`` slots, each an actor holding ``make(python, *args)`` on its node."""

    def __init__(self, options: Options, make: Callable[..., Any], *args: Any, count: int) -> None:
        self.ray = _import_ray()
        self.connected = _connect(self.ray, options)  # False: the caller's connection, kept
        self.here = _AsHere.driver(options)
        self.make, self.args = make, args
        # an actor is never restarted by Ray: a lost one is replaced by its owner, who knows
        # what it held (a restarted one would come back empty, its calls failing anyway)
        self.kind = self.ray.remote(num_cpus=1, max_concurrency=CONCURRENCY, max_restarts=0)(_Held)
        self.actors = [self._actor() for _ in range(count)]

    def call(self, slot: int, method: str, *args: Any) -> Any:
        """A reference to the answer of ``method(*args)`` of the object in ``slot``."""
        return self.actors[slot].call.remote(method, *args)

    def replace(self, slot: int) -> None:
        """A new actor (a new object) in ``slot``, the old one killed if it is not gone."""
        with contextlib.suppress(Exception):
            self.ray.kill(self.actors[slot], no_restart=True)
        self.actors[slot] = self._actor()

    def close(self, method: str | None = None, *, grace: float = 10.0) -> None:
        """Each object's ``method`` called (its own end: processes stopped, files removed),
        ``grace`` seconds given to all; then every actor killed, and Ray left if joined here."""
        if method is not None:
            ended = [self.call(slot, method) for slot in range(len(self.actors))]
            with contextlib.suppress(Exception):
                self.ray.wait(ended, num_returns=len(ended), timeout=grace)
        for actor in self.actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
        self.actors = []
        if self.connected:
            self.ray.shutdown()
            self.connected = False

    def _actor(self) -> Any:
        return self.kind.remote(self.make, self.args, self.here)


def why(exc: BaseException) -> str:
    """Ray's error in one line: ``ActorDiedError: The actor died unexpectedly ...``."""
    return f"{type(exc).__name__}: {_first_line(exc)}"  # type: ignore[arg-type]


class _Held:
    """The Ray actor: one object made on its node, its methods called by name."""

    def __init__(self, make: Callable[..., Any], args: tuple[Any, ...], here: _AsHere) -> None:
        # for the actor's whole life (a stage's task sets them only for its run: the worker is
        # reused by the next task; an actor's process is its own)
        os.environ.update(here.steering)
        for key in RAY_SETS:
            if key not in here.steering:
                os.environ.pop(key, None)
        self.nice = here.nice
        _renice(self.nice)
        self.held = make(here.python or sys.executable, *args)

    def call(self, method: str, *args: Any) -> Any:
        _renice(self.nice)  # Linux's niceness is a thread's: the processes it starts inherit it
        return getattr(self.held, method)(*args)


def _renice(nice: int) -> None:
    with contextlib.suppress(OSError):  # lowering it needs privilege: else Ray's stays
        os.setpriority(os.PRIO_PROCESS, 0, nice)
