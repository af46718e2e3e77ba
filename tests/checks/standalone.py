"""A repro run as a maintainer runs it: alone in an empty folder, without reprokit (the tests
of the graph minimizer and of training captures share it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_alone(folder: Path, script: str = "repro.py") -> subprocess.CompletedProcess:
    """The script copied alone (with the short repro's inputs.pt or the stage version's
    inputs file, if any) into an empty folder, run without reprokit."""
    alone = folder.parent / f"alone-{folder.name}-{script}"
    alone.mkdir()
    for name in (script, "inputs.pt", "repro_stages.inputs.pt"):
        if (folder / name).is_file():
            (alone / name).write_bytes((folder / name).read_bytes())
    env = {"PATH": "/usr/bin:/bin", "PJRT_DEVICE": "CPU", "HOME": str(alone)}
    return subprocess.run(
        [sys.executable, "-I", script], cwd=alone, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
