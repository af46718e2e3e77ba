"""``reprokit ops`` as a user runs it, into a folder of its own with a fresh results cache (the
tests of the op sweep's forms, edge samples and dtypes share it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def sweep_ops(root: Path, *args: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``reprokit ops ARGS -o ROOT/out`` with its cache in ROOT/cache and no warm server left
    behind: the sweep's folder and the finished process."""
    env = dict(os.environ, REPROKIT_CACHE=str(root / "cache"), REPROKIT_WARM_IDLE="0")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", "ops", *args]
    command += ["-o", str(root / "out")]
    done = subprocess.run(
        command, env=env | {"PJRT_DEVICE": "CPU"}, capture_output=True, text=True, timeout=900
    )
    return root / "out", done
