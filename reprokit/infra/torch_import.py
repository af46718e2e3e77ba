"""torch, imported by one thread at a time.

The harness imports torch in background threads (the environment capture, the comparisons'
warm-up, verdicts). Two threads importing torch at once can each hold a module the other
waits for: importlib then hands one of them a partially initialized torch ("partially
initialized module 'torch' has no attribute 'nn'"), or the process dies by SIGSEGV. Seen
once the stage listing stopped taking seconds and the threads started together.

The harness's torch work (comparisons, the summaries of recorded results it leaves out) is
thousands of small operations, run by several threads at once next to the stages: torch's
own intra-op threads there only contend. One each: summarizing a swin_t run's 645 float64
results took 9.9 s with torch's default threads on two loaded cores, 0.74 s with one.
"""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType

_LOCK = threading.Lock()


def import_module(name: str = "torch") -> ModuleType:
    """``importlib.import_module(name)``, torch first and whole, one thread at a time."""
    with _LOCK:
        if "torch" not in sys.modules:
            importlib.import_module("torch").set_num_threads(1)
        return importlib.import_module(name)
