"""Environments built with uv, measured side by side in one run: cold, cached, warm.

    .venv/bin/python bench/envs.py [--release 2.8]

1. cold: an empty uv cache (UV_CACHE_DIR in a temporary folder, deleted after, so that the
   real ~/.cache/uv is left as it was) and an empty environments cache: uv downloads every
   wheel, then the environment is built from them.
2. cached: the same spec again, into the same environments cache: reprokit reuses it.
3. warm: a new environments cache (REPROKIT_CACHE) with uv's own cache: the same wheels,
   hardlinked from ~/.cache/uv (it should hold this release's already).

Disk: ``du`` of the environment counts its hardlinked files in full; the drop in the disk's
free space (statvfs, before and after) is what the environment really took. Other writers on
the same disk blur the second figure by their own writes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from reprokit.environment.releases import release_env
from reprokit.environment.uv import EnvSpec, env_python

GB = 1e9


def free(path: Path) -> int:
    """Bytes free on the disk that holds ``path``."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def du(folder: Path) -> int:
    """Bytes allocated to the files under ``folder``, each inode once (as ``du`` counts)."""
    seen, total = set(), 0
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            stat = os.lstat(os.path.join(root, name))
            if stat.st_ino not in seen:
                seen.add(stat.st_ino)
                total += stat.st_blocks * 512
    return total


def build(spec: EnvSpec, cache: Path, **env: str) -> tuple[float, int, int]:
    """Seconds to get ``spec``'s python with REPROKIT_CACHE=cache, its du, the space it took."""
    os.environ.update(REPROKIT_CACHE=str(cache), **env)
    before = free(cache.parent)
    start = time.perf_counter()
    python = env_python(spec, announce=lambda line: print(f"    {line}", flush=True))
    seconds = time.perf_counter() - start
    return seconds, du(python.parent.parent), before - free(cache.parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="2.8", help="the torch_xla release (2.8)")
    args = parser.parse_args()
    spec = release_env(args.release)
    saved = dict(os.environ)
    print(f"environment {spec.label()}:")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-envs-") as tmp:
            folder = Path(tmp)
            cold = build(spec, folder / "cold", UV_CACHE_DIR=str(folder / "uv-cache"))
            cached = build(spec, folder / "cold")
            os.environ.pop("UV_CACHE_DIR", None)  # from here on, uv's own cache
            warm = build(spec, folder / "warm")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    rows = [
        ("cold   (empty uv cache)", cold),
        ("cached (same spec again)", cached),
        ("warm   (new env, uv's cache)", warm),
    ]
    for label, (seconds, used, taken) in rows:
        print(f"  {label:29} {seconds:8.3f} s   du {used / GB:5.2f} GB   disk {taken / GB:5.2f} GB")
    print(
        f"  warm / cold: {warm[0] / cold[0]:.2f} of the time, {warm[2] / cold[2]:.3f} of the disk"
    )
    if warm[2] > GB:
        print("  (the warm run took gigabytes: uv's cache did not hold this release's wheels)")


if __name__ == "__main__":
    main()
