"""What ``reprokit.report`` gives back: the summary it read, and the files it wrote."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit.records.run import RunSummary

# What `reprokit report` writes into a run (or ops) folder
REPORT_MD = "report.md"  # the issue-ready body
REPORT_HTML = "report.html"  # the self-contained page with plots
REPORT_JSON = "report.json"  # the verdict and the summary, as data
BUNDLE = "bundle.zip"  # what to attach
LEFT_OUT = "LEFT_OUT.txt"  # in the bundle: what was too large to carry


@dataclass(frozen=True)
class Reports:
    """The run's summary and the reports written from it (report.md, report.html, report.json
    as asked, and bundle.zip), in that order."""

    summary: RunSummary
    written: tuple[Path, ...]
    title: str | None = None  # report.md's issue title, for the title field
    next_step: str | None = None  # the command that makes a short repro to paste, when none is
    known: str | None = None  # where report.md's bug is already known (reprokit.infra.known)
    kind: str = "bug"  # report.md's issue: a bug to file, or known, rounding, no repro

    def __iter__(self) -> Iterator[Any]:
        """``summary, written = reprokit.report(...)``: as when it returned the pair."""
        return iter((self.summary, list(self.written)))

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary.to_json(), "written": [str(p) for p in self.written],
                "title": self.title, "next_step": self.next_step, "known": self.known,
                "kind": self.kind}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reports:
        written = tuple(map(Path, data["written"]))
        said = {k: data.get(k) for k in ("title", "next_step", "known")}
        said["kind"] = data.get("kind") or "bug"
        return cls(RunSummary.from_json(data["summary"]), written, **said)
