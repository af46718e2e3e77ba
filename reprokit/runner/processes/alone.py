"""A repro run alone, as a maintainer runs it pasted from an issue: in a folder of its own,
a fresh interpreter (``-I``: no user site, no PYTHONPATH) with only PATH, HOME and XLA's
device set. The one way every tool runs a repro: minimize checks a candidate by it and keeps
the written repro's output (``repro.out``, shown under the script in the report), whose runs
it under XLA's dump flags, ops checks each group's repro, a run's root repros and bisect's
releases are judged by it. It starts as a stage does (stage.run_command: its own process
group, the timeout, TERM then KILL, capped logs), or forked from a warm server that imported
torch and torch_xla in that same environment where the caller gives one (the op sweep's many
repros: seconds each instead of an interpreter's start)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from reprokit.records import Status
from reprokit.records.folder import ALONE_FOLDER, REPRO_OUT, SCRIPT, VariantFolder
from reprokit.runner.backends import stage_env
from reprokit.runner.options import Options
from reprokit.runner.processes.stage import LocalExecutor, run_command

ALONE = "alone"  # the run's name, where its logs lie


@dataclass(frozen=True)
class Ran:
    returncode: int | None  # None: it ran past the timeout, or a signal ended it
    stdout: str
    stderr: str
    signal: str | None = None  # the signal that ended it (SIGSEGV)

    def shows(self) -> bool:
        """It says XLA differs and exits 1: a raise is as likely the repro's fault as XLA's."""
        return self.returncode == 1 and "XLA DIFFERS" in self.stdout

    def transcript(self, device: str) -> str:
        """What a maintainer sees in a terminal: the command, its output, its exit code (and
        stderr's last lines when it neither agreed nor differed, a crash)."""
        lines = [f"$ PJRT_DEVICE={device} python repro.py", *self.stdout.rstrip().splitlines()]
        if self.returncode not in (0, 1):
            lines += self.stderr.rstrip().splitlines()[-10:]
        ended = f"exit {self.returncode}"
        if self.returncode is None:
            ended = f"killed by {self.signal}" if self.signal else "timed out"
        return "\n".join([*lines, ended]) + "\n"


def run_alone(
    write: Callable[[Path], None],
    options: Options,
    folder: Path,
    *,
    extra: Mapping[str, str] | None = None,
    executor: LocalExecutor | None = None,
) -> Ran:
    """``write`` puts repro.py (and what it reads) into a fresh folder under ``folder``; run
    it there with XLA as the stages get it and nothing else of this environment (but
    ``extra``: whose.py sets XLA_FLAGS), within ``options.timeout``. ``executor``: a
    WarmExecutor to fork it from (a forked interpreter has no ``-I`` to take: its server
    started in the same bare environment)."""
    folder.mkdir(parents=True, exist_ok=True)
    kept = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR") if k in os.environ}
    env = stage_env("xla", options.xla_device, base=kept) | dict(extra or {})
    command = [options.python, SCRIPT] if executor else [options.python, "-I", SCRIPT]
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        where = Path(scratch) / ALONE_FOLDER  # the repro's folder holds nothing but what it reads
        where.mkdir()
        write(where)
        result = run_command(
            command, folder=Path(scratch), name=ALONE, backend="xla", env=env,
            options=options, cwd=where, executor=executor,
        )  # fmt: skip
        logs = VariantFolder(Path(scratch)).stage(ALONE)
        stdout, stderr = (_text(logs.log(stream)) for stream in ("stdout", "stderr"))
    timed_out = result.status is Status.TIMEOUT
    return Ran(None if timed_out else result.returncode, stdout, stderr, result.signal)


def keep_output(
    write: Callable[[Path], None], folders: list[Path], options: Options, scratch: Path
) -> Ran:
    """Run the repro ``write`` puts into a folder alone and write its transcript as repro.out
    into each of ``folders`` (those it was written to); how it ran."""
    ran = run_alone(write, options, scratch)
    for folder in folders:
        (folder / REPRO_OUT).write_text(ran.transcript(options.xla_device), encoding="utf-8")
    return ran


def _text(log: Path) -> str:
    try:
        return log.read_text("utf-8", "replace")
    except OSError:
        return ""
