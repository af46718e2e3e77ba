"""The one error type of reprokit: what went wrong, where, and what to do about it."""

from __future__ import annotations

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
