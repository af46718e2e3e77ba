"""The records a run produces, and summary.json (DESIGN.md "The run folder").

Frozen dataclasses that round-trip through JSON, so that the CLI, the pytest plugin, the
reports and the tests all read the same things. summary.json is always replaced atomically:
a reader (or an interrupted run) never sees half a file.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit import env
from reprokit.cases import Outcome
from reprokit.procs import Status
from reprokit.redact import redact_env

if TYPE_CHECKING:
    from reprokit.compare import Comparison

SUMMARY = "summary.json"


@dataclass(frozen=True)
class StageResult:
    """How one stage of one variant ended."""

    name: str
    backend: str
    status: Status
    returncode: int | None = None
    signal: str | None = None  # e.g. SIGABRT, when the stage died by a signal
    seconds: float = 0.0
    reason: str | None = None  # why it was skipped, or what else went wrong

    def ended(self) -> str:
        """How the stage ended, in words: 'exited with code 3', 'died by SIGABRT'..."""
        if self.status is Status.SKIPPED:
            return f"was skipped ({self.reason})"
        if self.status is Status.TIMEOUT:
            return f"timed out ({self.reason})" if self.reason else "timed out"
        if self.signal:
            return f"died by {self.signal}"
        return f"exited with code {self.returncode}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageResult:
        return cls(**{**data, "status": Status(data["status"])})


@dataclass(frozen=True)
class VariantResult:
    """One variant's verdict, its stages, and its comparisons."""

    case: str
    label: str  # the folder name under RUN_DIR: ``case`` or ``case[a-b]``
    variant: dict[str, Any]  # its params
    outcome: Outcome
    expected: Outcome
    seconds: float
    stages: tuple[StageResult, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    first_divergence: dict[str, str | None] = field(default_factory=dict)
    reason: str | None = None  # why it was skipped or failed, in a line

    @property
    def passed(self) -> bool | None:
        """Outcome as expected; None when skipped (neither passed nor failed)."""
        return None if self.outcome is Outcome.SKIPPED else self.outcome == self.expected

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "label": self.label,
            "variant": self.variant,
            "outcome": self.outcome.value,
            "expected": self.expected.value,
            "passed": self.passed,
            "seconds": self.seconds,
            "reason": self.reason,
            "stages": [s.to_json() for s in self.stages],
            "comparisons": [c.to_json() for c in self.comparisons],
            "first_divergence": self.first_divergence,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VariantResult:
        comparisons = ()
        if data["comparisons"]:
            from reprokit.compare import Comparison  # imports torch: only when there are some

            comparisons = tuple(map(Comparison.from_json, data["comparisons"]))
        return cls(
            case=data["case"],
            label=data["label"],
            variant=data["variant"],
            outcome=Outcome(data["outcome"]),
            expected=Outcome(data["expected"]),
            seconds=data["seconds"],
            stages=tuple(map(StageResult.from_json, data["stages"])),
            comparisons=comparisons,
            first_divergence=data["first_divergence"],
            reason=data.get("reason"),
        )


@dataclass(frozen=True)
class RunSummary:
    """The whole run: what summary.json holds."""

    started: str
    finished: str | None = None
    argv: tuple[str, ...] = ()
    env: dict[str, Any] = field(default_factory=dict)
    variants: tuple[VariantResult, ...] = ()
    interrupted: bool = False

    def count(self, passed: bool | None) -> int:
        return sum(v.passed is passed for v in self.variants)

    def to_json(self) -> dict[str, Any]:
        run = {
            "started": self.started,
            "finished": self.finished,
            "argv": list(self.argv),
            "env": self.env,
            "interrupted": self.interrupted,
        }
        return {"run": run, "variants": [v.to_json() for v in self.variants]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSummary:
        run = data["run"]
        return cls(
            started=run["started"],
            finished=run["finished"],
            argv=tuple(run["argv"]),
            env=run["env"],
            variants=tuple(map(VariantResult.from_json, data["variants"])),
            interrupted=run.get("interrupted", False),
        )


def write_summary(summary: RunSummary, run_dir: Path) -> Path:
    """Write RUN_DIR/summary.json atomically: a temporary file, then os.replace."""
    path = run_dir / SUMMARY
    text = json.dumps(summary.to_json(), indent=2, default=str) + "\n"
    fd, temp = tempfile.mkstemp(dir=run_dir, prefix=".summary.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def read_summary(run_dir: Path) -> RunSummary:
    """RUN_DIR/summary.json as a :class:`RunSummary`."""
    return RunSummary.from_json(json.loads((Path(run_dir) / SUMMARY).read_text("utf-8")))


def run_env() -> dict[str, Any]:
    """A minimal environment record, redacted; ``reprokit env`` has the full one."""
    variables = {k: v for k, v in sorted(os.environ.items()) if env.XLA_VARIABLES.match(k)}
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": env.versions(),
        "variables": redact_env(variables),
    }
