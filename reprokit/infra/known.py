"""The torch_xla bugs already known, as data: the entries of known.toml (shipped beside this
module) and of the user's own files (``REPROKIT_KNOWN``, theirs first), and :func:`match`,
which finds the one an op sweep's group or a captured program's root is. Torch-free: a report
asks it without torch. The fields and how to add an entry: docs/known.md."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NoReturn

from reprokit.errors import ReprokitError
from reprokit.records.ops import KINDS

BUILTIN = Path(__file__).with_name("known.toml")
ENV = "REPROKIT_KNOWN"  # the user's files, os.pathsep-separated: their entries come first
STATES = ("open", "closed", "unknown")
UPSTREAM = re.compile(r"^[\w.-]+/[\w.-]+#\d+$")  # pytorch/xla#1958
EXAMPLES = "docs/examples"  # where a bare report name lives
_LISTS = ("ops", "dtypes", "kind", "detail")
_TEXTS = ("report", "upstream", "state", "title", "condition")
_HINT = "See docs/known.md for the fields of an entry and an example."


@dataclass(frozen=True)
class Known:
    """One known bug: what it is (``title``, ``condition``), where it is written up
    (``report``: a file of docs/examples, or the user's own path or link; ``upstream``: an
    issue, with its ``state``) and what it fits (empty: anything)."""

    title: str
    report: str = ""
    upstream: str = ""  # "pytorch/xla#1958"
    state: str = ""  # open, closed or unknown, where upstream is given
    condition: str = ""  # when it shows, in a few plain words
    ops: tuple[str, ...] = ()  # OpInfo's and aten's names; "op (variant)" for one variant
    dtypes: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    grad: bool | None = None  # the gradient (True), the forward (False), either (None)
    detail: tuple[str, ...] = ()  # any of them in the error message
    kwargs: tuple[tuple[str, tuple[str, ...]], ...] = ()  # name -> the values (reprs) it fits
    sharded: bool = False  # a bug of sharding (SPMD's partitioner): fits --mesh's groups only
    source: str = ""  # "path:line" of the entry

    @property
    def where(self) -> str:
        """``docs/examples/x.md / pytorch/xla#N, open``: each place it is known."""
        report = f"{EXAMPLES}/{self.report}" if self.report and "/" not in self.report else ""
        places = [report or self.report, f"{self.upstream}, {self.state}" if self.upstream else ""]
        return " / ".join(p for p in places if p)

    def line(self) -> str:
        """``Known: <title> (<where>)``: the line an issue or a report adds."""
        return f"Known: {self.title} ({self.where})"

    def comment(self, seen: str = "") -> str:
        """What to paste: on an open or unknown upstream issue, a comment saying it shows here
        too (``seen``: what showed it, "softplus in float16"); otherwise :meth:`line`."""
        if not self.upstream or self.state == "closed":
            return self.line()
        where = f" ({seen})" if seen else ""
        when = f" It shows when: {self.condition}." if self.condition else ""
        report = f" Written up in {EXAMPLES}/{self.report}." if self.report else ""
        return f"Still seen with torch_xla{where}: {self.title}.{when}{report}"

    def names(self, op: str, variant: str) -> int | None:
        """How closely it names the op: 0 as "op (variant)", 1 as the op (or no op given, any
        op), None: not at all."""
        if variant and f"{op} ({variant})" in self.ops:
            return 0
        return 1 if not self.ops or op in self.ops else None

    def fits(
        self, *, dtypes: Iterable[str], kind: str, grad: bool | None, detail: str,
        kwargs: Mapping[str, Any], sharded: bool = False,
    ) -> bool:  # fmt: skip
        """Whether what was seen meets each of its conditions; a fact not given meets none.
        A sharded divergence (sharded against unsharded XLA) is never a plain bug's, which
        shows on both sides, nor a plain one a sharding bug's."""
        return (
            self.sharded is sharded
            and (not self.dtypes or bool(set(self.dtypes) & set(dtypes)))
            and (not self.kinds or kind in self.kinds)
            and (self.grad is None or self.grad is grad)
            and (not self.detail or any(d in detail for d in self.detail))
            and all(k in kwargs and str(kwargs[k]) in vs for k, vs in self.kwargs)
        )


def match(
    op: str,
    *,
    variant: str = "",
    dtypes: Iterable[str] = (),
    kind: str = "",
    grad: bool | None = None,
    detail: str = "",
    kwargs: Mapping[str, Any] | None = None,
    known: Iterable[Known] | None = None,
    sharded: bool = False,
) -> Known | None:
    """The known bug an op's divergence is, or None: the first entry that fits (the user's
    files first, then reprokit's), those matched by the error message (``detail``) first, then
    those naming ``op (variant)``, then those naming ``op``. ``op`` is OpInfo's name
    (``nn.functional.softplus``) or aten's (``softplus``); a fact not given (no dtypes, no
    kind, grad None) fits no entry that asks for it."""
    entries = load() if known is None else tuple(known)
    seen = {"dtypes": tuple(dtypes), "kind": kind, "grad": grad, "detail": detail,
            "sharded": sharded}  # fmt: skip
    fitting = [
        (not entry.detail, rank, i, entry)
        for i, entry in enumerate(entries)
        if (rank := entry.names(op, variant)) is not None
        and entry.fits(**seen, kwargs=kwargs or {})
    ]
    return min(fitting, key=lambda found: found[:3])[3] if fitting else None


def load(paths: Iterable[Path] | None = None) -> tuple[Known, ...]:
    """The entries of ``paths`` (else those ``REPROKIT_KNOWN`` names), then the built-in
    file's. A bad file is a :class:`ReprokitError` naming it and the line."""
    if paths is None:
        paths = [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    mine = [entry for path in paths for entry in read(Path(path))]
    return (*mine, *read(BUILTIN))


def not_op_bugs() -> tuple[str, ...]:
    """The reports of docs/examples the built-in file says are no op's bug."""
    return _parsed(BUILTIN, BUILTIN.stat().st_mtime_ns)[1]


def read(path: Path) -> tuple[Known, ...]:
    """One file's entries (read again only when it changes)."""
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as exc:
        raise ReprokitError(f"cannot read the known-bugs file: {exc}", path, hint=_HINT) from None
    return _parsed(path, stamp)[0]


@lru_cache(maxsize=16)
def _parsed(path: Path, stamp: int) -> tuple[tuple[Known, ...], tuple[str, ...]]:
    try:
        text = path.read_bytes().decode("utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ReprokitError(f"cannot read the known-bugs file: {exc}", path, hint=_HINT) from None
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_in(str(exc))
        raise ReprokitError(f"not valid TOML: {exc}", path, line, hint=_HINT) from None
    where = _Where(path, text)
    for key in data:
        if key not in ("bug", "not_op_bugs"):
            where.fail(key, None, f"unknown key {key!r}: entries are [[bug]] tables")
    bugs = data.get("bug", [])
    if not isinstance(bugs, list):
        where.fail("bug", None, "bug must be [[bug]] tables, one per entry")
    skipped = data.get("not_op_bugs", [])
    if not isinstance(skipped, list) or not all(isinstance(s, str) for s in skipped):
        where.fail("not_op_bugs", None, "not_op_bugs must be a list of report names")
    return tuple(_entry(bug, i, where) for i, bug in enumerate(bugs)), tuple(skipped)


def _entry(bug: Any, index: int, where: _Where) -> Known:
    """One [[bug]] table as a :class:`Known`, each field checked."""
    if not isinstance(bug, dict):
        where.fail("bug", index, "each bug must be a [[bug]] table")
    for key, value in bug.items():
        if key not in (*_LISTS, *_TEXTS, "grad", "kwargs", "sharded"):
            where.fail(key, index, f"unknown field {key!r}")
        elif key in _LISTS and not _strings(value):
            where.fail(key, index, f"{key} must be a list of strings")
        elif key in _TEXTS and not isinstance(value, str):
            where.fail(key, index, f"{key} must be a string")
    if not bug.get("title"):
        where.fail("bug", index, "the entry has no title")
    if not bug.get("report") and not bug.get("upstream"):
        where.fail("bug", index, "the entry names neither a report nor an upstream issue")
    if bug.get("upstream") and not UPSTREAM.match(bug["upstream"]):
        where.fail("upstream", index, f"upstream {bug['upstream']!r} is not owner/repo#N")
    if bug.get("state", "unknown" if bug.get("upstream") else "") not in (*STATES, ""):
        where.fail("state", index, f"state must be one of {', '.join(STATES)}")
    if bad := [k for k in bug.get("kind", []) if k not in KINDS]:
        where.fail("kind", index, f"kind {bad[0]!r} is not one of {', '.join(KINDS)}")
    if not isinstance(bug.get("grad", False), bool):
        where.fail("grad", index, "grad must be true or false (leave it out for either)")
    if not isinstance(bug.get("sharded", False), bool):
        where.fail("sharded", index, "sharded must be true or false (leave it out: false)")
    if not bug.get("ops") and not bug.get("detail"):
        where.fail("bug", index, "an entry without ops must give a detail (else it fits anything)")
    return Known(
        title=bug["title"], report=bug.get("report", ""), upstream=bug.get("upstream", ""),
        state=bug.get("state", "unknown" if bug.get("upstream") else ""),
        condition=bug.get("condition", ""), ops=tuple(bug.get("ops", ())),
        dtypes=tuple(bug.get("dtypes", ())), kinds=tuple(bug.get("kind", ())),
        grad=bug.get("grad"), detail=tuple(bug.get("detail", ())),
        kwargs=_kwargs(bug.get("kwargs", {}), index, where), sharded=bug.get("sharded", False),
        source=f"{where.path}:{where.header(index) or 0}",
    )  # fmt: skip


def _kwargs(value: Any, index: int, where: _Where) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(value, dict) or not all(_strings(v) for v in value.values()):
        where.fail("kwargs", index, 'kwargs must map a name to a list of values: { dim = ["[]"] }')
    return tuple((k, tuple(v)) for k, v in value.items())


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


@dataclass(frozen=True)
class _Where:
    """Points an error at its line: tomllib gives lines only for syntax errors."""

    path: Path
    text: str

    def header(self, index: int) -> int | None:
        """The line of the ``index``-th ``[[bug]]``."""
        headers = [n for n, line in enumerate(self.text.splitlines(), 1)
                   if re.match(r"\s*\[\[\s*bug\s*\]\]", line)]  # fmt: skip
        return headers[index] if index < len(headers) else None

    def line_of(self, key: str, index: int | None) -> int | None:
        """The line of ``key`` in the ``index``-th entry (at the top level for None)."""
        lines = self.text.splitlines()
        start = 0 if index is None else (self.header(index) or 1) - 1
        for number in range(start, len(lines)):
            line = lines[number]
            if number > start and line.lstrip().startswith("["):
                break
            if re.match(rf"\s*[\"']?{re.escape(key)}[\"']?\s*=", line):
                return number + 1
        return None if index is None else self.header(index)

    def fail(self, key: str, index: int | None, message: str) -> NoReturn:
        raise ReprokitError(message, self.path, self.line_of(key, index), _HINT)


def _line_in(message: str) -> int | None:
    found = re.search(r"line (\d+)", message)
    return int(found[1]) if found else None
