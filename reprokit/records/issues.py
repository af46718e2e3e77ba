"""What ``reprokit report`` knows of each independent difference of a captured program before
it writes the issue: the root's own repro, made with inputs in the script and run alone
(reprokit.tools.root_repro writes these records; reprokit/reports/issue.py reads them)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reprokit.records._json import from_json, write_json
from reprokit.records.folder import ISSUES, ISSUES_INDEX, SCRIPT

VERSION = 1  # of the index: another version is made anew


@dataclass(frozen=True)
class RootRepro:
    """One root operation's repro (with its gradient's root, when training differs there
    too), as run alone in an empty folder: what it printed and its exit code."""

    slug: str  # its folder under <label>/issues/, and its issue file's name
    roots: tuple[str, ...]  # the recorded results it covers: the forward's, its gradient's
    op: str  # the aten op it calls: aten.softplus.default
    inputs: str  # how its inputs are made: literal, constant, range or random
    gradient: bool  # it judges the op's gradient by torch.autograd as well
    lines: int = 0
    returncode: int | None = None  # run alone: 1 XLA differs, 0 agrees, else it cannot tell
    output: str = ""  # the command, what it printed, its exit code
    why_not: str = ""  # when no repro could be written, why
    dtypes: tuple[str, ...] = ()  # its inputs'

    @property
    def shows(self) -> bool:
        """It printed XLA DIFFERS and exited 1 alone (and showed the model's difference: a
        repro of another difference says so in ``why_not``)."""
        return self.returncode == 1 and "XLA DIFFERS" in self.output and not self.why_not

    def seen(self) -> tuple[Seen, ...]:
        """Each result the repro judged, as it printed it run alone."""
        found: list[Seen] = []
        rows: list[tuple[str, str, str, str]] = []
        for line in self.output.splitlines():
            if at := _AT.match(line):
                rows.append(at.groups())
            elif said := _SAID.match(line):
                name, verdict, counts = said.groups()
                found.append(Seen(name, verdict == "XLA DIFFERS", counts, tuple(rows)))
                rows = []
        return tuple(found)

    def script(self, variant_dir: Path) -> Path:
        return Path(variant_dir) / ISSUES / self.slug / SCRIPT

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"roots": list(self.roots), "dtypes": list(self.dtypes)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RootRepro:
        return from_json(cls, data, roots=tuple, dtypes=tuple)


@dataclass(frozen=True)
class Seen:
    """One result of a root's repro as it printed it: whether XLA differs, in how many
    elements, and the elements that differ most (index, CPU, float64, XLA, as printed)."""

    name: str  # softplus, softplus gradient, nll_loss_forward[1]
    differs: bool
    counts: str  # 1024 of 1024 elements
    rows: tuple[tuple[str, str, str, str], ...]


# The lines templates/_root_repro.py.j2 prints
_AT = re.compile(r"^  at (\[[^\]]*\]): CPU (\S+), float64 (\S+), XLA (\S+)$")
_SAID = re.compile(r"^(.+?): (XLA DIFFERS|XLA agrees) \((.+)\)$")


def write_index(variant_dir: Path, made_for: str, repros: list[RootRepro]) -> None:
    data = {"version": VERSION, "made_for": made_for, "repros": [r.to_json() for r in repros]}
    (Path(variant_dir) / ISSUES).mkdir(parents=True, exist_ok=True)
    write_json(Path(variant_dir) / ISSUES / ISSUES_INDEX, data)


def read_index(variant_dir: Path, made_for: str | None = None) -> list[RootRepro] | None:
    """The variant's root repros, or None when there are none (or they were made for another
    run: ``made_for`` is the summary's digest)."""
    import json

    try:
        data = json.loads((Path(variant_dir) / ISSUES / ISSUES_INDEX).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("version") != VERSION or (made_for and data.get("made_for") != made_for):
        return None
    return [RootRepro.from_json(r) for r in data.get("repros", [])]
