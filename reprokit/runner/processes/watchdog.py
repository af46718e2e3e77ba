"""Stages never outlive their harness, even when it is SIGKILLed or the OOM killer takes it.

The harness starts one small watchdog process (this file, run with ``python -I -S``: the
standard library only, no reprokit, no torch) and keeps the write end of a pipe to its stdin.
It tells the watchdog ``+PGID`` when a stage's process group starts and ``-PGID`` once that
group is gone. However the harness ends, the kernel closes its end of the pipe; the watchdog
reads EOF and SIGKILLs every group it still knows of.

Why this and not the alternatives:

- ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits, not the process:
  our stages are started from a pool of worker threads, which may end before their stages do.
  It also reaches only the direct child, not the group (``xmp.spawn`` workers), and is
  Linux-only.
- A child subreaper (``PR_SET_CHILD_SUBREAPER``) adopts orphans while the harness lives; once
  the harness itself is killed, its orphans go to init and nobody kills them.
- A watchdog per stage would cost a process per stage; one per harness costs one in all.

The pipe's write end is opened close-on-exec (Python's default), so no stage inherits it and
keeps the watchdog from seeing EOF; the watchdog leads its own session and ignores SIGINT,
SIGTERM and SIGHUP, so the signal that stops the harness does not stop it first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading


class Watchdog:
    """The harness's side: started on first use, in each process that uses it (a fork of the
    harness, such as a pytest-xdist worker, gets its own), restarted if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self._owner: int | None = None  # the pid that started the watchdog
        self._pipe: int | None = None

    def watch(self, pgid: int) -> None:
        with self._lock:
            self._groups.add(pgid)
            self._send(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        with self._lock:
            self._groups.discard(pgid)
            self._send(f"-{pgid}\n")

    def _send(self, line: str) -> None:
        if self._owner != os.getpid():
            self._start()
        try:
            os.write(self._pipe, line.encode())  # type: ignore[arg-type]
        except OSError:  # it died (killed by hand?): a new one, told every group we know
            self._start()

    def _start(self) -> None:
        read, write = os.pipe()  # both ends close-on-exec; the watchdog gets `read` as stdin
        subprocess.Popen(
            [sys.executable, "-I", "-S", __file__],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
        )
        os.close(read)
        if self._pipe is not None and self._owner == os.getpid():
            os.close(self._pipe)
        self._owner, self._pipe = os.getpid(), write
        known = "".join(f"+{pgid}\n" for pgid in self._groups)
        if known:
            os.write(write, known.encode())


WATCHDOG = Watchdog()


def _serve() -> None:
    """The watchdog's side: keep the set of groups until EOF, then kill them all."""
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    groups: set[int] = set()
    for line in sys.stdin.buffer:  # ends at EOF: the harness has exited, however it did
        try:
            pgid = int(line[1:])
        except ValueError:  # a line cut short by the harness's death
            break
        if line.startswith(b"+"):
            groups.add(pgid)
        else:
            groups.discard(pgid)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass  # already gone


if __name__ == "__main__":
    _serve()
