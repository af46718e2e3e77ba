"""SIGINT, SIGTERM and SIGHUP stop a run the same way, and only once.

Each raises KeyboardInterrupt in the main thread (the only one Python runs handlers in). The
first one sets all three to be ignored *before* it raises: a second Ctrl-C, or the SIGTERM a
supervisor sends after SIGINT, cannot cut the cleanup short (children left running, a verdict
dropped) nor end the process the default way (exit -15 instead of 130). They stay ignored
once a signal came: the process is on its way out with its exit code decided.

The stages lead their own sessions, so none of these reaches them: the runner stops them.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

STOPPING = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def ignore() -> None:
    """Ignore the three from now on (the outcome is decided: a late signal changes nothing)."""
    if _main_thread():
        for signum in STOPPING:
            signal.signal(signum, signal.SIG_IGN)


def install() -> dict[int, Any]:
    """From now on, the first of the three raises KeyboardInterrupt; returns the handlers
    there were."""
    if not _main_thread():
        return {}

    def handler(signum: int, frame: Any) -> None:
        ignore()
        raise KeyboardInterrupt

    return {signum: signal.signal(signum, handler) for signum in STOPPING}


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """:func:`install` inside; the handlers there were come back on leaving, unless a signal
    came (they are ignored then)."""
    previous = install()
    try:
        yield
    finally:
        if previous and not _ignored():
            for signum, old in previous.items():
                signal.signal(signum, old)


@contextlib.contextmanager
def deferred() -> Iterator[list[int]]:
    """Inside, the first of the three is only remembered, in the list yielded (and all three
    are ignored from then on, as :func:`install`'s handler does), so that a start which an
    exception would leave half done runs to its end; the caller stops after it. Without a
    signal, the handlers there were come back."""
    came: list[int] = []
    if not _main_thread():
        yield came
        return

    def handler(signum: int, frame: Any) -> None:
        ignore()
        came.append(signum)

    previous = {signum: signal.signal(signum, handler) for signum in STOPPING}
    try:
        yield came
    finally:
        if came:
            ignore()  # also over any handler set inside the block
        else:
            for signum, old in previous.items():
                signal.signal(signum, old)


@contextlib.contextmanager
def ignored() -> Iterator[None]:
    """Inside, the three are ignored (a cleanup that must finish); then as they were."""
    if not _main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOPPING}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def heard_in_child() -> Callable[[], None] | None:
    """For Popen's ``preexec_fn``: where this process ignores any of the three (after a signal,
    or the CLI's last words, in a process that goes on: a test, a notebook), a child would
    inherit SIG_IGN and be deaf to the SIGTERM of its timeout. None when none is ignored (then
    Popen keeps its fast path: no code runs between fork and exec)."""
    deaf = [s for s in STOPPING if signal.getsignal(s) is signal.SIG_IGN]
    if not deaf:
        return None

    def hear() -> None:  # sigaction alone, between fork and exec: no lock is taken
        for signum in deaf:
            signal.signal(signum, signal.SIG_DFL)

    return hear


def _ignored() -> bool:
    return signal.getsignal(STOPPING[0]) is signal.SIG_IGN


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
