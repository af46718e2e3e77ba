"""Work that needs torch, done where torch is imported already.

A verdict compares tensors and a judged variant's tensors.pt is reduced: both need torch,
whose import (seconds of one core) would be the harness's own serial part once the stages
start warm. So the harness never calls such work directly: it calls an :data:`Offload` with
the work's name (``module:function``, a function of one JSON value returning one) and its
JSON input. :func:`here` does it in this process; a warm run's executor forks it from its
warm server instead (``WarmExecutor.offload``), and falls back on :func:`here`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

Offload = Callable[[str, Any], Any]


def here(work: str, data: Any) -> Any:
    """``work`` (``module:function``) called on ``data`` in this process. The work imports
    torch itself, as it needs it (collect_env's import keeps TorchTPU from loading)."""
    module, name = work.split(":")
    return getattr(importlib.import_module(module), name)(data)
