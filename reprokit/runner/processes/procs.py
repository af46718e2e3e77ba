"""One child process, handled the way nox's ``_parallel.py`` handles them.

No stdin; stdout and stderr go to log files that are capped in size (the head and the tail
are kept, the middle is cut with a note); the child leads its own process group, so that a
timeout or an interrupt stops it *and* everything it started (``xmp.spawn`` workers, a
grandchild that ignores SIGTERM): SIGTERM to the group, a grace period, then SIGKILL to the
group. The group is killed even when the child exits by itself, so that no process of a stage
outlives it, and a watchdog kills it should this process die first (``watchdog.py``). Then the
ending is classified: ok, error, crash (with the signal's name), timeout.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from reprokit.infra.pause import pause
from reprokit.records import Status
from reprokit.runner.processes import signals
from reprokit.runner.processes.watchdog import WATCHDOG

LOG_CAP = 512 * 1024  # bytes kept of each log: the first half and the last half
GRACE = 3.0  # seconds between SIGTERM and SIGKILL
_POLL = 0.05  # seconds between looks at the child, the clock and the stop flag
_DRAIN = 1.0  # seconds to read what is left in the pipes once the group is gone


@dataclass(frozen=True)
class Ended:
    """What became of one child process."""

    status: Status
    returncode: int | None
    signal: str | None
    seconds: float
    cut: tuple[str, ...] = ()  # the logs whose middle was cut


class _CappedLog:
    """Writes the first ``cap/2`` bytes to the file, keeps the last ``cap/2`` in memory.

    Why not let the child write to the file itself: a stage printing gigabytes would fill the
    disk before we could cut it; here the file never grows past the cap.
    """

    def __init__(self, path: Path, cap: int) -> None:
        # A forked (warm) child runs before its logs are opened here: one that removed its
        # workdir already (tests/runner/test_reliability.py) must not take the harness down with it.
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file: IO[bytes] = path.open("wb")
        self.head = cap - cap // 2
        self.tail_cap = cap // 2
        self.written = 0
        self.tail = bytearray()
        self.dropped = 0

    def write(self, data: bytes) -> None:
        if self.written < self.head:
            part = data[: self.head - self.written]
            self.file.write(part)
            self.written += len(part)
            data = data[len(part) :]
        if data:
            self.tail += data
            extra = len(self.tail) - self.tail_cap
            if extra > 0:
                del self.tail[:extra]
                self.dropped += extra

    def close(self) -> bool:
        """Write the tail after a note on what was cut; True when something was."""
        if self.dropped:
            note = f"\n[... reprokit: {self.dropped} bytes cut from the middle of this log ...]\n"
            self.file.write(note.encode())
        self.file.write(self.tail)
        self.file.close()
        return bool(self.dropped)


def run_process(
    cmd: list[str],
    *,
    stdout: Path,
    stderr: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    stop: threading.Event | None = None,
    log_cap: int = LOG_CAP,
    grace: float = GRACE,
) -> Ended:
    """Run ``cmd`` to its end, a timeout or ``stop``, and classify how it ended."""
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,  # its own process group: we can kill all it starts
        preexec_fn=signals.heard_in_child(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    child = _Popened(proc)
    return supervise(
        child, (proc.stdout, proc.stderr), stdout, stderr, start, timeout, stop, log_cap, grace
    )


@contextlib.contextmanager
def started_early(cmd: list[str]) -> Iterator[Callable[[str, float], tuple[int, str]]]:
    """A child started at once and given its one line of input later, so that its slow start
    (an import of torch) overlaps this process's own work: ``answer(line, timeout)`` sends the
    line and waits for the child's end, giving its exit code and stderr. It leads its own
    process group, killed when the block ends unanswered (the block failed first) or late."""
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=signals.heard_in_child(),
    )

    def answer(line: str, timeout: float) -> tuple[int, str]:
        _, stderr = proc.communicate(f"{line}\n", timeout=timeout)
        return proc.returncode, stderr

    try:
        yield answer
    finally:
        if proc.returncode is None:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.communicate()


class Child(Protocol):
    """A process that leads its own group and whose ending we learn: a child of ours
    (:class:`_Popened`), or one a warm-start server forked for us."""

    pid: int

    def exited(self) -> bool:
        """Whether it has exited, without reaping it: its pid, the group's id, stays ours."""

    def wait(self) -> int:
        """Reap it; the return code as Popen gives it (-N: killed by signal N)."""

    def ending(self) -> int | None:
        """A descriptor that becomes readable once it exits (to wait on rather than poll once
        its pipes are closed), or None."""


def supervise(
    child: Child,
    pipes: tuple[IO[bytes], IO[bytes]],
    stdout: Path,
    stderr: Path,
    start: float,
    timeout: float | None = None,
    stop: threading.Event | None = None,
    log_cap: int = LOG_CAP,
    grace: float = GRACE,
) -> Ended:
    """Drive a started ``child`` to its end: its output into capped logs, its timeout, a stop;
    then its whole group killed, and the ending classified."""
    WATCHDOG.watch(child.pid)
    logs = {stdout.name: _CappedLog(stdout, log_cap), stderr.name: _CappedLog(stderr, log_cap)}
    reader = _Pipes({pipes[0]: logs[stdout.name], pipes[1]: logs[stderr.name]})
    why: Status | None = None
    try:
        pause("stage-started")
        why = _wait(child, reader, start, timeout, stop)
        if why is not None:  # ask politely, then insist
            _signal_group(child.pid, signal.SIGTERM)
            _wait(child, reader, time.monotonic(), grace, None)
    finally:
        # The leader is not reaped yet, so its group id cannot have been reused.
        _signal_group(child.pid, signal.SIGKILL)
        returncode = child.wait()
        _wait_group_gone(child.pid, grace)
        WATCHDOG.forget(child.pid)
        reader.drain(_DRAIN)
        cut = tuple(name for name, log in logs.items() if log.close())
    seconds = round(time.monotonic() - start, 3)
    return Ended(*_classify(returncode, why), seconds, cut)


def _wait(
    child: Child,
    pipes: _Pipes,
    start: float,
    timeout: float | None,
    stop: threading.Event | None,
) -> Status | None:
    """Read the pipes until the child has exited (None), timed out, or was told to stop."""
    while not child.exited():
        if stop is not None and stop.is_set():
            return Status.INTERRUPTED
        if timeout is not None and time.monotonic() - start > timeout:
            return Status.TIMEOUT
        pipes.read(_POLL, child.ending())
    return None


@dataclass
class _Popened:
    """A child we started with Popen."""

    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exited(self) -> bool:
        """Where there is no waitid (macOS), poll() reaps it: a tiny window for pid reuse."""
        if not hasattr(os, "waitid"):
            return self.proc.poll() is not None
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def wait(self) -> int:
        return self.proc.wait()

    def ending(self) -> int | None:
        return None  # polled: a cold stage's seconds of imports dwarf the poll's 50 ms


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_group_gone(pgid: int, limit: float) -> None:
    """SIGKILL is delivered asynchronously: wait until no member of the group still runs.

    Reads /proc (Linux); members that are zombies count as gone (they run no code, and their
    new parent reaps them). Elsewhere, or past ``limit``, it returns without waiting.
    """
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and _group_members(pgid):
        time.sleep(0.01)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as file:
                fields = file.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry.name))
    return members


def _classify(returncode: int, why: Status | None) -> tuple[Status, int, str | None]:
    name = _signal_name(-returncode) if returncode < 0 else None
    if why is not None:
        return why, returncode, name
    if returncode == 0:
        return Status.OK, 0, None
    return (Status.CRASH if name else Status.ERROR), returncode, name


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _Pipes:
    """The child's stdout and stderr, read without blocking into their capped logs."""

    def __init__(self, targets: dict[IO[bytes] | None, _CappedLog]) -> None:
        self.selector = selectors.DefaultSelector()
        for pipe, log in targets.items():
            assert pipe is not None
            self.selector.register(pipe, selectors.EVENT_READ, log)

    def read(self, wait: float, ending: int | None = None) -> bool:
        """Copy what is ready; False once every pipe is closed (then wait for ``ending``, a
        descriptor readable when the child has exited, or sleep)."""
        if not self.selector.get_map():
            if ending is None:
                time.sleep(wait)
            else:
                select.select([ending], [], [], wait)
            return False
        for key, _ in self.selector.select(wait):
            data = os.read(key.fd, 1 << 16)
            if data:
                key.data.write(data)
            else:
                self.selector.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]
        return bool(self.selector.get_map())

    def drain(self, limit: float) -> None:
        """Read to the end; a process that left the group may hold a pipe open: give up then."""
        deadline = time.monotonic() + limit
        while self.selector.get_map() and time.monotonic() < deadline:
            self.read(_POLL)  # not once they are closed: it would sleep (50 ms a stage)
        for key in list(self.selector.get_map().values()):
            self.selector.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
        self.selector.close()
