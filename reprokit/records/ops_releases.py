"""What ``reprokit ops --releases A..B`` (or ``--env`` given more than once) writes: one sweep
per environment in ``DIR/<name>/`` (an ordinary ops folder: ops.json, report.md, repros), and
``DIR/ops_releases.json``, the op x release table made of them (report.md and report.html
beside it render it). Torch-free."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reprokit.records._json import from_json, write_json
from reprokit.records.report import REPORT_HTML, REPORT_MD

OPS_RELEASES = "ops_releases.json"
# the op x release table (and a link to each release's own), and its matrix of coloured cells
MARKDOWN, HTML = REPORT_MD, REPORT_HTML
# A cell's state: some group of the op's there, all its samples judged without one, not swept
DIFFERS, AGREES, NOT_SWEPT = "differs", "agrees", "not swept"


def release_folder(out_dir: Path, name: str) -> Path:
    """The folder of one environment's sweep: ``DIR/2.8``."""
    return Path(out_dir) / name


@dataclass(frozen=True)
class ReleaseSweep:
    """One environment's sweep, as the table names it."""

    name: str  # the environment's name: 2.8
    requirements: tuple[str, ...]
    versions: dict[str, str]  # torch's, torch_xla's, expecttest's there
    groups: int
    samples: int
    seconds: float
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"requirements": list(self.requirements)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReleaseSweep:
        return from_json(cls, data, requirements=tuple)


@dataclass(frozen=True)
class ReleaseCell:
    """One op on one release: its state and its groups there (id, kind, pass, dtypes, repro
    relative to DIR)."""

    state: str  # DIFFERS, AGREES or NOT_SWEPT
    groups: tuple[dict[str, Any], ...] = ()

    def said(self) -> str:
        """``nan-inf forward float16; error backward float32`` or the state."""
        if self.state != DIFFERS:
            return self.state
        return "; ".join(f"{g['kind']} {g['passed']} {'/'.join(g['dtypes'])}" for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "groups": list(self.groups)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReleaseCell:
        return cls(data["state"], tuple(data.get("groups", ())))


@dataclass(frozen=True)
class OpRow:
    """One OpInfo (its variant) across the releases."""

    op: str
    variant: str
    cells: dict[str, ReleaseCell]  # release name -> cell

    @property
    def name(self) -> str:
        return f"{self.op}.{self.variant}" if self.variant else self.op

    @property
    def changed(self) -> bool:
        """Whether the releases swept disagree about it (a regression, or a fix)."""
        swept = {c.said() for c in self.cells.values() if c.state != NOT_SWEPT}
        return len(swept) > 1

    def to_json(self) -> dict[str, Any]:
        cells = {name: cell.to_json() for name, cell in self.cells.items()}
        return {"op": self.op, "variant": self.variant, "cells": cells}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OpRow:
        cells = {name: ReleaseCell.from_json(c) for name, c in data["cells"].items()}
        return cls(data["op"], data["variant"], cells)


@dataclass(frozen=True)
class OpsReleases:
    """The same sweep in several environments, merged: one row per OpInfo."""

    argv: list[str]
    releases: tuple[ReleaseSweep, ...]
    rows: tuple[OpRow, ...]
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "releases": [r.to_json() for r in self.releases],
            "rows": [r.to_json() for r in self.rows],
            "interrupted": self.interrupted,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OpsReleases:
        return cls(
            list(data.get("argv", ())),
            tuple(ReleaseSweep.from_json(r) for r in data["releases"]),
            tuple(OpRow.from_json(r) for r in data["rows"]),
            bool(data.get("interrupted", False)),
        )


def write_ops_releases(folder: Path, table: OpsReleases) -> Path:
    return write_json(Path(folder) / OPS_RELEASES, table.to_json())


def read_ops_releases(folder: Path) -> OpsReleases:
    return OpsReleases.from_json(json.loads((Path(folder) / OPS_RELEASES).read_text("utf-8")))


def is_ops_releases_folder(folder: Path) -> bool:
    return (Path(folder) / OPS_RELEASES).is_file()
