"""What reprokit's caches share: where they live, and how a file is fingerprinted."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_root() -> Path:
    """``$REPROKIT_CACHE``, else ``$XDG_CACHE_HOME/reprokit``, else ``~/.cache/reprokit``."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "reprokit"
    return Path(os.environ.get("REPROKIT_CACHE", default))


def content_digest(path: Path) -> bytes:
    """A file's bytes, hashed (torch.save writes the same tensors to the same bytes)."""
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").digest()
