"""torch_xla's own record of a script's graphs, read back: every graph it synced and which of
them it compiled.

Two files torch_xla writes when asked (the wrapped script is not touched):
- ``XLA_SAVE_TENSORS_FILE`` (format text): at every sync with something to run, the Python
  frames of the sync, the graph's IR (each node with ``location=fn@file:line`` under
  ``XLA_IR_DEBUG=1``), then "Graph Hash: H", the key of its compilation cache;
- ``PT_XLA_DEBUG_FILE`` (``PT_XLA_DEBUG_LEVEL=1``): a "Compilation Analysis" block at every
  compile, with torch_xla's own guess at the cause and the same hash.

Their formats are torch_xla's (torch_xla/csrc/debug_util.cpp, ir_dump_util.cpp); a block this
reader cannot parse is skipped, never guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from reprokit.records.recompiles import COMPILES, GRAPHS

_FRAME = re.compile(r"^\s+(\S+) \((.*):(\d+)\)$")
_NODE = re.compile(r"^\s*%(\d+) = (\S+) ([\w:.]+)\(([^)]*)\)(.*)$")
_HASH = re.compile(r"^Graph Hash: (\w+)", re.M)
_LOCATION = re.compile(r"(\S+)@(.+?):(\d+)$")
# Frames of these files are the libraries', not the user's: the user's line is the first other.
_LIBRARY = ("site-packages", "dist-packages", "<frozen", "/lib/python3")


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{Path(self.file).name}:{self.line}"

    @property
    def library(self) -> bool:
        return any(part in self.file for part in _LIBRARY)


@dataclass(frozen=True)
class Node:
    """One IR node: ``%3 = f32[4,8]{1,0} aten::mm(%1, %2), location=fwd@m.py:12``."""

    shape: str  # as torch_xla prints it, layout dropped: f32[4,8]
    op: str
    operands: tuple[int, ...]
    tags: tuple[tuple[str, str], ...] = ()  # its arguments, location and device left out
    location: Frame | None = None

    @property
    def input(self) -> bool:
        """A tensor already on the device: one of the graph's inputs."""
        return self.op == "xla::device_data"


@dataclass(frozen=True)
class Sync:
    """One graph torch_xla ran, in order: the Python frames that synced it, its nodes."""

    index: int
    hash: str
    frames: tuple[Frame, ...]
    nodes: tuple[Node, ...]
    compiled: bool = False
    trigger: str = ""  # torch_xla's compilation cause, when it compiled

    @property
    def step_end(self) -> bool:
        """Synced by torch_xla.sync / xm.mark_step (by hand, a loader's, torch_xla.compile)."""
        return any(f.function in ("sync", "mark_step") and "torch_xla" in f.file
                   for f in self.frames[:3])  # fmt: skip

    @property
    def user_line(self) -> Frame | None:
        """The script's own frame that synced it: the first not in a library."""
        return next((f for f in self.frames if not f.library), None)

    @property
    def place(self) -> tuple[str, ...]:
        """Where it was synced from: every frame down to the script's own (two syncs inside
        one library call from one line of the script are two places)."""
        mine = self.user_line
        frames = self.frames[: self.frames.index(mine) + 1] if mine else self.frames
        return tuple(f"{f.function}@{f}" for f in frames)

    @property
    def in_closure(self) -> bool:
        """Synced by a step closure, which torch_xla runs after the step's own graph."""
        return any(f.function == "_run_step_closures" for f in self.frames)


@dataclass
class Analysis:
    """torch_xla's "Compilation Analysis" blocks: the cause it names for each compiled hash."""

    triggers: list[tuple[str, str]] = field(default_factory=list)  # (hash, cause), in order


def graph_files(stage_dir: Path) -> list[Path]:
    """The graphs file of each device ordinal torch_xla wrote, the lowest first."""
    found = stage_dir.glob(f"{GRAPHS}.*")
    return sorted(found, key=lambda p: int(p.suffix[1:]) if p.suffix[1:].isdigit() else 1 << 30)


def read_syncs(graphs: Path, analysis: Analysis) -> list[Sync]:
    """Every sync of one graphs file, each marked compiled where torch_xla compiled it: the
    first sync of a hash it names in its compilation analysis, or of any new hash when there
    is no analysis (torch_xla wrote none: another release, or the script ended first). Only
    a compiled sync keeps its nodes: a long run's file holds its graph at every step."""
    pending = list(analysis.triggers)
    seen: set[str] = set()
    syncs = []
    for block in _blocks(graphs):
        found = _HASH.search(block)
        if found is None or "## BEGIN_GRAPH" not in block:  # cut short as the script died
            continue
        digest = found[1]
        trigger = _take(pending, digest)
        compiled = trigger is not None if analysis.triggers else digest not in seen
        seen.add(digest)
        nodes = _nodes(block) if compiled else ()
        syncs.append(Sync(len(syncs), digest, _frames(block), nodes, compiled, trigger or ""))
    return syncs


def _blocks(graphs: Path) -> Iterator[str]:
    """The file's blocks, one sync each, read a line at a time (it can be gigabytes)."""
    block: list[str] = []
    with graphs.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if line == "[ScheduleSyncTensorsGraph]\n" and block:
                yield "".join(block)
                block = []
            elif line != "[ScheduleSyncTensorsGraph]\n":
                block.append(line)
    if block:
        yield "".join(block)


def read_analysis(stage_dir: Path) -> Analysis:
    """The (hash, cause) of each compile torch_xla analysed, in order; none when absent."""
    path = stage_dir / COMPILES
    try:
        text = path.read_text("utf-8", "replace")
    except OSError:
        return Analysis()
    analysis = Analysis()
    for block in text.split("Compilation Cause\n")[1:]:
        lines = [line.removeprefix("Compilation Analysis: ") for line in block.splitlines()]
        digest = next((ln.split(": ", 1)[1] for ln in lines if "Graph Hash: " in ln), None)
        if digest is not None:
            analysis.triggers.append((digest.strip(), lines[0].strip()))
    return analysis


def _take(pending: list[tuple[str, str]], digest: str) -> str | None:
    """The cause of the first pending compile of ``digest``, taken off the list."""
    for i, (hash_, cause) in enumerate(pending):
        if hash_ == digest:
            del pending[i]
            return cause
    return None


def _frames(block: str) -> tuple[Frame, ...]:
    head = block.split("\n\n", 1)[0]
    found = (_FRAME.match(line) for line in head.splitlines())
    return tuple(Frame(m[1], m[2], int(m[3])) for m in found if m)


def _nodes(block: str) -> tuple[Node, ...]:
    body = block.split("## BEGIN_GRAPH", 1)[1].split("Graph Hash:", 1)[0]
    found = (_NODE.match(line) for line in body.splitlines())
    return tuple(_node(m) for m in found if m)


def _node(match: re.Match[str]) -> Node:
    operands = tuple(int(o.split(".")[0]) for o in re.findall(r"%(\d+(?:\.\d+)?)", match[4]))
    tags, location = [], None
    for name, value in _tags(match[5]):
        if name == "location":
            found = _LOCATION.match(value)
            location = Frame(found[1], found[2], int(found[3])) if found else None
        elif name not in ("device", "ROOT", "dynamic_dims", "xla_shape", "scope"):
            tags.append((name, value))
    return Node(_shape(match[2]), match[3], operands, tuple(tags), location)


def _tags(text: str) -> list[tuple[str, str]]:
    """``, name=value`` pairs; a value may hold commas inside brackets or parentheses."""
    tags, depth, start = [], 0, 0
    parts = []
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in (p.strip() for p in parts):
        if "=" in part:
            name, value = part.split("=", 1)
            tags.append((name.strip(), value.strip()))
    return tags


def _shape(text: str) -> str:
    """``f32[4,8]{1,0}`` without its layout: ``f32[4,8]``."""
    return re.sub(r"\{[^}]*\}", "", text)
