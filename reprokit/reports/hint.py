"""The next command a report suggests, written so that it works pasted into a shell.

A variant's folder is named by its label (``train_step[dtype=float16]``): brackets a shell
globs and a console's markup eats, spaces where a case's name has them. Every path in the
command is quoted (``shlex.quote``); the variant's ``case.toml`` holds its ``--set`` and
matrix values (reprokit.runner.prepare), so the command needs no ``--set`` of its own.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from reprokit.records.folder import VariantFolder


def minimize_hint(run_dir: Path, label: str) -> str:
    """``reprokit minimize RUN_DIR/LABEL/case.toml -o RUN_DIR-min && reprokit report ...``,
    each path quoted for a POSIX shell."""
    case = shlex.quote(str(VariantFolder(Path(run_dir) / label).case))
    out = shlex.quote(str(Path(run_dir).with_name(f"{Path(run_dir).name}-min")))
    return f"reprokit minimize {case} -o {out} && reprokit report {out}"
