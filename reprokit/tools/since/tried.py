"""One repro run alone on one release, judged, and cached.

It runs as a maintainer runs a repro pasted from an issue (alone.run_alone: an empty folder, a
fresh ``python -I``, only PATH, HOME and XLA's device set), with the release's python. Its
exit code says what it saw: 1 it shows the bug, 0 it does not, anything else it cannot tell
(2: it cannot run here). An uncaught exception also exits 1, and on an older release that is
mostly the repro meeting an API the release lacks (an ImportError, an AttributeError): that is
"cannot tell", never "right" nor "shows"; an AssertionError is a repro's way of saying it
shows. What it printed and its exit code are cached by the repro's digest and the release
(the ``bisect`` namespace of the store), so a second bisection over the same releases runs
nothing; a run that timed out is not kept (a busy machine, not the release).
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.environment.releases import release_env
from reprokit.infra.caching import Store
from reprokit.records.since import CANNOT_TELL, DOES_NOT, SHOWS, Tried
from reprokit.runner.options import Options
from reprokit.tools.since.found import Repro

if TYPE_CHECKING:  # the minimize.graph package imports torch: only where a repro runs
    from reprokit.runner.processes.alone import Ran

NAMESPACE = "bisect"
KEPT = 4000  # characters of each stream a cache entry keeps (the end: where the verdict is)
WHY = 160  # characters of the one line why
# The exception an uncaught traceback ends with: its last line that names one
_RAISED = re.compile(r"^(\w[\w.]*(?:Error|Exception|Interrupt|Exit)\b.*)$", re.MULTILINE)
# What a process that aborts in C++ says before its stack trace: XLA's fatal Status, a failed
# CHECK, an uncaught C++ exception (the trace's last line is only an address)
_FATAL = re.compile(
    r"^(Status: .*|.*Check failed.*|terminate called.*|Fatal Python error.*)$", re.MULTILINE
)
HEAD = 1500  # characters of stderr's start a cache entry keeps too: where an abort says why


def try_release(repro: Repro, release: str, python: Path, options: Options, scratch: Path) -> Tried:
    """``repro`` run alone with ``python`` (release ``release``'s), judged; from the cache
    when it ran there before and ``options.cache``."""
    store = Store(NAMESPACE)
    key = Store.key({"repro": repro.digest(), "requirements": release_env(release).requirements})
    entry = store.get_json(key) if options.cache else None
    if isinstance(entry, dict) and entry.get("version") == 1:
        return replace(judge(_ran(entry)), seconds=entry.get("seconds", 0.0), cached=True)
    from reprokit.runner.processes.alone import run_alone

    start = time.monotonic()
    ran = run_alone(repro.write, replace(options, python=str(python)), scratch)
    seconds = round(time.monotonic() - start, 1)
    if ran.returncode is not None:  # None: past the timeout (run_alone's Ran), not kept
        store.put_json(key, _entry(ran, seconds))
    return replace(judge(ran), seconds=seconds)


def judge(ran: Ran) -> Tried:
    """Shows, does not, or cannot tell, with the one line why."""
    said = _last(ran.stdout)
    if ran.returncode is None:  # run_alone: past the timeout, then TERMed (or KILLed)
        why = f"timed out (then killed by {ran.signal})" if ran.signal else "timed out"
        return Tried(CANNOT_TELL, why)
    raised = _raised(ran.stderr)
    if ran.returncode == 1 and raised and not raised.startswith("AssertionError"):
        return Tried(CANNOT_TELL, _cut(f"raised {raised}"), 1)
    why = _cut(f"exit {ran.returncode}" + (f": {raised or said}" if raised or said else ""))
    if ran.returncode == 1:
        return Tried(SHOWS, why, 1)
    if ran.returncode == 0:
        return Tried(DOES_NOT, why, 0)
    if ran.returncode == 2:
        why = _cut(f"exit 2, cannot run: {said or _last(ran.stderr)}")
    elif ran.returncode < 0 or not said:
        fatal = _FATAL.search(ran.stderr)
        told = fatal.group(1).strip() if fatal else _last(ran.stderr) or said
        why = _cut(f"exit {ran.returncode}{_signal(ran.returncode)}: {told}")
    return Tried(CANNOT_TELL, why, ran.returncode)


def _raised(stderr: str) -> str:
    """The exception an uncaught traceback in ``stderr`` ends with, else ""."""
    _, traceback, after = stderr.rpartition("Traceback (most recent call last):")
    found = _RAISED.findall(after) if traceback else []
    return found[-1].strip() if found else ""


def _signal(returncode: int) -> str:
    """`` (SIGABRT)`` for a process a signal ended, else ""."""
    try:
        return f" ({signal.Signals(-returncode).name})" if returncode < 0 else ""
    except ValueError:
        return ""


def _last(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _cut(line: str) -> str:
    return line if len(line) <= WHY else line[: WHY - 3] + "..."


def _entry(ran: Ran, seconds: float) -> dict[str, Any]:
    return {
        "version": 1,
        "returncode": ran.returncode,
        "signal": ran.signal,
        "stdout": ran.stdout[-KEPT:],
        "stderr": _kept(ran.stderr),
        "seconds": seconds,
    }


def _kept(stderr: str) -> str:
    """Its end (where a traceback ends), and its start where it is longer (where an abort
    printed its reason, before a stack trace)."""
    if len(stderr) <= HEAD + KEPT:
        return stderr
    return f"{stderr[:HEAD]}\n[...]\n{stderr[-KEPT:]}"


def _ran(entry: dict[str, Any]) -> Ran:
    from reprokit.runner.processes.alone import Ran

    return Ran(entry.get("returncode"), entry.get("stdout", ""), entry.get("stderr", ""),
               entry.get("signal"))  # fmt: skip
