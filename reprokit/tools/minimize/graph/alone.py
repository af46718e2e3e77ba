"""The short repro run alone, as a maintainer runs it pasted from an issue: in a folder of its
own, a fresh interpreter (``-I``: no user site, no PYTHONPATH) with only PATH and XLA's
device set. minimize checks a candidate repro by it, and keeps the written repro's output
(``repro.out``), which the report shows under the script."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from reprokit.runner.backends import stage_env
from reprokit.runner.options import Options

OUTPUT = "repro.out"


@dataclass(frozen=True)
class Ran:
    returncode: int | None  # None: it ran past the timeout
    stdout: str
    stderr: str

    def shows(self) -> bool:
        """It says XLA differs and exits 1: a raise is as likely the repro's fault as XLA's."""
        return self.returncode == 1 and "XLA DIFFERS" in self.stdout

    def transcript(self, device: str) -> str:
        """What a maintainer sees in a terminal: the command, its output, its exit code (and
        stderr's last lines when it neither agreed nor differed, a crash)."""
        lines = [f"$ PJRT_DEVICE={device} python repro.py", *self.stdout.rstrip().splitlines()]
        if self.returncode not in (0, 1):
            lines += self.stderr.rstrip().splitlines()[-10:]
        ended = "timed out" if self.returncode is None else f"exit {self.returncode}"
        return "\n".join([*lines, ended]) + "\n"


def run_alone(
    write: Callable[[Path], None],
    options: Options,
    folder: Path,
    *,
    extra: Mapping[str, str] | None = None,
) -> Ran:
    """``write`` puts repro.py (and its inputs.pt) into a fresh folder under ``folder``; run
    it there with XLA as the stages get it and nothing else of this environment (but
    ``extra``: whose.py sets XLA_FLAGS)."""
    folder.mkdir(parents=True, exist_ok=True)
    kept = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR") if k in os.environ}
    env = stage_env("xla", options.xla_device, base=kept) | dict(extra or {})
    with tempfile.TemporaryDirectory(dir=folder) as where:
        write(Path(where))
        try:
            done = subprocess.run(
                [options.python, "-I", "repro.py"], cwd=where, env=env, capture_output=True,
                text=True, timeout=options.timeout, stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as stopped:
            return Ran(None, _text(stopped.stdout), _text(stopped.stderr))
    return Ran(done.returncode, done.stdout, done.stderr)


def keep_output(
    write: Callable[[Path], None], folders: list[Path], options: Options, scratch: Path
) -> Ran:
    """Run the repro ``write`` puts into a folder alone and write its transcript as repro.out
    into each of ``folders`` (those it was written to); how it ran."""
    ran = run_alone(write, options, scratch)
    for folder in folders:
        (folder / OUTPUT).write_text(ran.transcript(options.xla_device), encoding="utf-8")
    return ran


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""
