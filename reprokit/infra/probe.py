"""Short probes: a child process asked one question and its answer read whole (is CUDA there,
which torch_xla this machine has, uv building or checking an environment).

Every other child process goes through reprokit/runner/processes, which gives it its own
process group, capped logs and a TERM-then-KILL stop; a probe needs none of that (it prints a
few lines and ends, or is given up after ``timeout``), and it is asked from layers below the
runner (environment/), so it has this one small helper low in the tower instead.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Answer:
    """What a probe printed, and how it ended: ``returncode`` None when it did not answer
    within its timeout (it is killed then)."""

    returncode: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def ask(
    command: Sequence[str | Path],
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
) -> Answer:
    """Run ``command`` with no input, its output captured as text. A command that cannot be
    started raises OSError (FileNotFoundError: the caller says what to install)."""
    try:
        done = subprocess.run(
            [str(part) for part in command],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=None if env is None else dict(env),
            pass_fds=tuple(pass_fds),
            check=False,
        )
    except subprocess.TimeoutExpired as late:
        return Answer(None, _text(late.stdout), _text(late.stderr))
    return Answer(done.returncode, done.stdout, done.stderr)


def _text(output: bytes | str | None) -> str:
    """A timed-out child's partial output (bytes even in text mode, on some Pythons)."""
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    return output or ""
