"""Where reprokit keeps what outlives a run: its caches."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$REPROKIT_CACHE``, else ``$XDG_CACHE_HOME/reprokit``, else ``~/.cache/reprokit``."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "reprokit"
    return Path(os.environ.get("REPROKIT_CACHE", default))
