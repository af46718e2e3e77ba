"""What ``reprokit sweep`` adds to a run folder: the models it captured (or why one was
refused), the dtypes, and with ``--minimize`` the findings, each divergence once with its
witnesses; RUN_DIR/sweep.json holds it beside summary.json."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reprokit.records._json import from_json, write_json

SWEEP = "sweep.json"
CAPTURED = "captured"  # RUN_DIR/captured/NAME.toml and NAME.pt2: each model captured


def case_file(name: str) -> str:
    """A captured program's case, NAME.toml (its program NAME.pt2 beside it)."""
    return f"{name}.toml"


@dataclass(frozen=True)
class SweptModel:
    """One model of a sweep: as named, the case its capture wrote, or why it was refused."""

    model: str  # as the user named it: torchvision:resnet18
    case: str | None  # the case's name (its variants' ``case``); None when refused
    config: dict[str, Any] = field(default_factory=dict)
    shape: tuple[int, ...] | None = None
    seconds: float = 0.0  # to build and capture it
    refused: str | None = None  # why it could not be captured, in a line

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"shape": None if self.shape is None else list(self.shape)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweptModel:
        return from_json(cls, data, shape=tuple)


@dataclass(frozen=True)
class Finding:
    """One divergence, whatever model shows it: the operation, the dtypes, what differs (the
    first diverging tensor's kind: values, dtype, NaN, shape), and every variant that shows
    it; ``minimized`` is the folder (below the run folder) where one witness was shrunk to
    its short repro."""

    op: str
    dtypes: str  # the first diverging tensor's: "bool vs int64" (target's, reference's)
    kind: str
    witnesses: tuple[str, ...]  # variant labels
    minimized: str | None = None  # e.g. findings/1-cumsum (its repro.py, summary.json)
    operations: tuple[int, int] | None = None  # the witness's program before, after
    outcome: str | None = None  # what the minimal program still shows

    def to_json(self) -> dict[str, Any]:
        data = asdict(self) | {"witnesses": list(self.witnesses)}
        return data | {"operations": None if self.operations is None else list(self.operations)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding:
        return from_json(cls, data, witnesses=tuple, operations=tuple)


@dataclass(frozen=True)
class Sweep:
    """A sweep: its models, in order, the dtypes each ran in, and what --minimize found."""

    models: tuple[SweptModel, ...]
    dtypes: tuple[str, ...]
    findings: tuple[Finding, ...] = ()
    minimized: bool = False  # --minimize was asked for (no findings then: nothing diverged)

    def model_of(self, case: str) -> SweptModel | None:
        return next((m for m in self.models if m.case == case), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "models": [m.to_json() for m in self.models],
            "dtypes": list(self.dtypes),
            "findings": [f.to_json() for f in self.findings],
            "minimized": self.minimized,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sweep:
        return from_json(
            cls,
            data,
            models=lambda items: tuple(map(SweptModel.from_json, items)),
            dtypes=tuple,
            findings=lambda items: tuple(map(Finding.from_json, items)),
        )


def write_sweep(sweep: Sweep, run_dir: Path) -> Path:
    return write_json(Path(run_dir) / SWEEP, sweep.to_json())


def read_sweep(run_dir: Path) -> Sweep | None:
    """The run folder's sweep, or None for a run that is no sweep."""
    path = Path(run_dir) / SWEEP
    if not path.is_file():
        return None
    return Sweep.from_json(json.loads(path.read_text(encoding="utf-8")))
