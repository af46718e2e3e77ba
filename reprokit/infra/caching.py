"""The one content-addressed store that reprokit's caches keep their entries in.

Each cache is a namespace, a folder under :func:`cache_root` (``results/``, ``envs/``,
``comparisons/``, ``reduced/``, ``environments/``, ``minimize/``, ``bisect/``), and decides what
its key is made of (``templates/`` is Jinja's own: generate/render.py); the store decides how a
key is hashed (:meth:`Store.key`), and how an entry is written so that a reader never sees half of
one: a JSON entry is replaced atomically (:meth:`Store.put_json`), a folder entry is made under
a temporary name and renamed into place whole (:meth:`Store.put_folder`), and writers of the
same folder entry can take its file lock (:meth:`Store.lock`) so that one builds it while the
others wait.

What the store does not do is judge what an entry is worth: a cache that finds an entry it
cannot use (another version's record, a broken file) treats it as missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from reprokit.records import write_json


def cache_root() -> Path:
    """``$REPROKIT_CACHE``, else ``$XDG_CACHE_HOME/reprokit``, else ``~/.cache/reprokit``."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "reprokit"
    return Path(os.environ.get("REPROKIT_CACHE", default))


def content_digest(path: Path) -> bytes:
    """A file's bytes, hashed (torch.save writes the same tensors to the same bytes)."""
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").digest()


def file_digest(path: Path) -> str | None:
    """A file's digest as a key part (hex), or None when there is no such file to read."""
    try:
        return content_digest(path).hex()
    except OSError:
        return None


class Store:
    """One namespace of the cache: ``root/namespace/KEY.json`` entries and ``root/namespace/KEY/``
    folder entries. ``root``: :func:`cache_root` (read when the store is made) unless given."""

    def __init__(self, namespace: str, root: Path | None = None) -> None:
        self.namespace = namespace
        self.folder = Path(root if root is not None else cache_root()) / namespace

    @staticmethod
    def key(*parts: Any) -> str:
        """A stable hash of JSON-able ``parts`` (dicts in any order; file digests as hex).

        One part is hashed as itself, several as the list of them: a cache whose key was one
        dict keeps its old keys (the results cache, the environments' digests)."""
        content = parts[0] if len(parts) == 1 else list(parts)
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()

    def path(self, key: str, suffix: str = ".json") -> Path:
        """Where the entry ``key`` lives (``suffix=""``: a folder entry)."""
        return self.folder / f"{key}{suffix}"

    def get_json(self, key: str) -> Any | None:
        """The JSON entry ``key``, or None when there is none (or it is unreadable)."""
        return read_json(self.path(key))

    def put_json(self, key: str, data: Any) -> Path:
        """Write the JSON entry ``key`` atomically: a temporary file beside it, then a rename."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return write_json(self.path(key), data)

    def get_folder(self, key: str, *, ready: Callable[[Path], bool] | None = None) -> Path | None:
        """The folder entry ``key``, when it is there (and ``ready`` says it is usable)."""
        folder = self.path(key, "")
        if not folder.is_dir() or (ready is not None and not ready(folder)):
            return None
        return folder

    def put_folder(self, key: str, fill: Callable[[Path], None]) -> Path | None:
        """Make the folder entry ``key`` whole or not at all: ``fill`` writes into a new
        temporary folder, which is then renamed into place. None when another writer put
        the entry first, or ``fill`` failed with an OSError (a full disk): no entry then."""
        self.folder.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(dir=self.folder, prefix=".new-"))
        try:
            fill(temp)
            os.rename(temp, self.path(key, ""))  # fails when the entry is there already
        except OSError:
            shutil.rmtree(temp, ignore_errors=True)
            return None
        except BaseException:  # interrupted: nothing half-made is left behind either
            shutil.rmtree(temp, ignore_errors=True)
            raise
        return self.path(key, "")

    def lock(self, key: str) -> FileLock:
        """The file lock of entry ``key`` (``KEY.lock``), for writers that must take turns."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return FileLock(self.path(key, ".lock"))


def read_json(path: Path) -> Any:
    """A JSON file of an entry, or None when it is missing or unreadable (half a file cannot
    be: every entry is written atomically)."""
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
