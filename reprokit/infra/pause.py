"""Named points where the harness can be held still, so that a test delivers a signal exactly
there instead of at a random moment (random timing finds a window only sometimes).

``REPROKIT_PAUSE=POINT:MARKER``: the first time this process reaches POINT, it writes
``PID POINT`` into the file MARKER and waits (a minute at most) until the file is deleted.
A signal that arrives meanwhile is handled as it would be at that point: in the main thread
its exception ends the wait; a worker thread goes on once the test deletes MARKER.
Unset (always, outside tests), a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

POINTS = (
    "stage-started",  # a stage's process runs (a worker thread)
    "stage-ended",  # a stage's process ended, its record not yet handed back (worker)
    "verdict-computed",  # a variant's verdict is computed, not yet kept (worker)
    "variant-judged",  # the verdict is handed back, not yet in summary.json (main thread)
    "replacing-summary.json",  # the new summary.json is written beside the old one (main)
    "waiting-env",  # every variant is judged; the environment capture is awaited (main)
    "run-done",  # the final summary.json is written; run() is about to return (main)
)
_LIMIT = 60.0  # seconds: a test that forgot its marker must not hang the suite
_paused: set[str] = set()
_lock = threading.Lock()  # two workers at one point: only the first holds still


def pause(point: str) -> None:
    """Hold still at ``point`` when a test asked for it (see the module's docstring)."""
    spec = os.environ.get("REPROKIT_PAUSE")
    if not spec:
        return
    name, _, marker = spec.partition(":")
    with _lock:
        if name != point or point in _paused:
            return
        _paused.add(point)
    path = Path(marker)
    path.write_text(f"{os.getpid()} {point}\n", encoding="utf-8")
    deadline = time.monotonic() + _LIMIT
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
