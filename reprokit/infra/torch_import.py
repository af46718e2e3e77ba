"""torch, imported by one thread at a time.

The harness imports torch in background threads (the environment capture, the comparisons'
warm-up, verdicts). Two threads importing torch at once can each hold a module the other
waits for: importlib then hands one of them a partially initialized torch ("partially
initialized module 'torch' has no attribute 'nn'"), or the process dies by SIGSEGV. Seen
once the stage listing stopped taking seconds and the threads started together.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType

_LOCK = threading.Lock()


def import_module(name: str = "torch") -> ModuleType:
    """``importlib.import_module(name)``, torch first and whole, one thread at a time."""
    with _LOCK:
        importlib.import_module("torch")
        return importlib.import_module(name)
