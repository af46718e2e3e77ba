"""The one error type of reprokit (what went wrong, where, and what to do about it), and the
exit codes the adapters choose."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ReprokitError(Exception):
    """Bad input from the user: printed as ``path:line: message``, a blank line, the hint.

    The CLI maps it to exit code 2 and never shows a traceback (unless ``--debug``).
    """

    message: str
    path: Path | str | None = None
    line: int | None = None
    hint: str | None = None

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line else f"{self.path}: "
        text = f"{where}{self.message}"
        return f"{text}\n\n{self.hint}" if self.hint else text


class ReprokitWarning(UserWarning):
    """Something of the user's still works but should change: the message says what to do."""


class ExitCode(enum.IntEnum):
    """What a command's exit status says, the same for every command and the pytest plugin."""

    OK = 0
    FAILED = 1  # mismatches, or outcomes other than the case expects
    BAD_INPUT = 2  # a ReprokitError: the message says what to change
    INTERRUPTED = 130  # Ctrl-C, SIGTERM or SIGHUP, as a shell reports SIGINT
