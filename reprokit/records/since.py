"""What ``reprokit bisect`` finds for a repro: on which torch_xla releases it shows, and since
when (torch-free). bisect.json holds one :class:`ReproSince` per repro; ops.json's groups and
summary.json's roots keep its one-phrase answer as ``since``, which :func:`read_since` reads
back for the issue text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from reprokit.records._json import from_json

BISECT = "bisect.json"
VERSION = 1  # of bisect.json's repros
SHOWS, DOES_NOT, CANNOT_TELL = "shows", "does not", "cannot tell"


@dataclass(frozen=True)
class Tried:
    """One repro run alone on one release: whether it showed the bug, and the line why."""

    verdict: str  # SHOWS (exit 1), DOES_NOT (exit 0) or CANNOT_TELL (anything else)
    why: str  # "exit 1: XLA DIFFERS: ...", "raised ImportError: ...", "timed out"
    returncode: int | None = None
    seconds: float = 0.0
    cached: bool = False

    @property
    def tells(self) -> bool:
        return self.verdict != CANNOT_TELL

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tried:
        return from_json(cls, data)


@dataclass(frozen=True)
class ReproSince:
    """One repro bisected over ``releases``: every release tried, and the answer."""

    name: str  # how bisect.json names it: repro.py, a group's id, <label>/issues/<slug>
    path: str  # the script
    digest: str  # of its text (and the inputs.pt beside it)
    releases: tuple[str, ...]
    tried: dict[str, Tried] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        changed, before = change(self.releases, self.tried)
        return {
            "path": self.path,
            "digest": self.digest,
            "since": since(self.releases, self.tried),
            "changed": changed,
            "before": before,
            "tried": {r: self.tried[r].to_json() for r in self.releases if r in self.tried},
        }

    @classmethod
    def from_json(cls, name: str, releases: tuple[str, ...], data: Mapping[str, Any]) -> ReproSince:
        tried = {r: Tried.from_json(t) for r, t in data.get("tried", {}).items()}
        return cls(name, data.get("path", ""), data.get("digest", ""), releases, tried)


def change(releases: tuple[str, ...], tried: Mapping[str, Tried]) -> tuple[str | None, str | None]:
    """The first release of the last verdict's stretch, and the last release before it that
    told otherwise: (changed, before); (None, None) when no release told otherwise."""
    told = [r for r in releases if r in tried and tried[r].tells]
    if not told:
        return None, None
    last = tried[told[-1]].verdict
    changed = told[-1]
    for release in reversed(told):
        if tried[release].verdict != last:
            return changed, release
        changed = release
    return None, None


def since(releases: tuple[str, ...], tried: Mapping[str, Tried]) -> str:
    """The answer in one phrase: "on every release tried (2.8-2.9)", "since 2.9 (right on
    2.8)", "fixed in 2.9", "on no release tried (2.8-2.9)", "cannot tell (...)"."""
    told = [r for r in releases if r in tried and tried[r].tells]
    silent = [r for r in releases if r in tried and not tried[r].tells]
    blind = f"; cannot tell on {', '.join(silent)}" if silent else ""
    if not told:
        first = tried[silent[0]].why if silent else "nothing ran"
        return f"cannot tell on any release tried ({first})"
    changed, before = change(releases, tried)
    shows = tried[told[-1]].verdict == SHOWS
    if changed is None:
        span = f"{told[0]}-{told[-1]}" if len(told) > 1 else told[0]
        return f"{'on every' if shows else 'on no'} release tried ({span}{blind})"
    if shows:
        return f"since {changed} (right on {before}{blind})"
    return f"fixed in {changed} (wrong on {before}{blind})"


@dataclass(frozen=True)
class Said:
    """A ``since`` phrase read back: its kind (every, none, since, fixed, unknown) and the
    releases it names."""

    kind: str
    first: str = ""  # every/none: the span's first; since/fixed: the release it changed in
    last: str = ""  # every/none: the span's last; since/fixed: the release before it


_EVERY = re.compile(r"^on (every|no) release tried \(([\w.]+)(?:-([\w.]+))?[;)]")
_CHANGED = re.compile(r"^(since|fixed in) ([\w.]+) \((?:right|wrong) on ([\w.]+)[;)]")


def read_since(text: str) -> Said:
    """What :func:`since` wrote, as its parts (kind "unknown" for anything else)."""
    if found := _EVERY.match(text):
        kind, first, last = found.groups()
        return Said("every" if kind == "every" else "none", first, last or first)
    if found := _CHANGED.match(text):
        kind, changed, before = found.groups()
        return Said("since" if kind == "since" else "fixed", changed, before)
    return Said("unknown")
