"""The HLO module XLA compiled for each graph (``XLA_FLAGS=--xla_dump_to``, before its
optimizations), to say what differs where torch_xla's IR text does not print it: a constant's
value (``roll``'s shifts, a Python 0 or 1), an operation's attributes, the inputs' sharding.

XLA dumps one module per compile, numbered in the order it compiled them; torch_xla names its
graphs' modules ``SyncTensorsGraph.N``. The k-th such module is the k-th compiled graph, which
holds as long as both counts agree (hlo_of checks it). Instructions are compared without their
names and ids (``%add.11``), each with the Python line torch_xla put in its metadata
(``XLA_HLO_DEBUG=1``). Hand-written: no library diffs HLO text.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from pathlib import Path

from reprokit.records.recompiles import HLO_DUMP

_MODULE = re.compile(r"module_(\d+)\.SyncTensorsGraph\.\d+\.before_optimizations\.txt$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%[\w.-]+ = (.*)$")
_METADATA = re.compile(r",? metadata=\{([^}]*)\}")
_NAME = re.compile(r"%[\w.-]+")
_OPCODE = re.compile(r"\s([\w-]+)\(")
SHOWN = 3


def dump_flags(stage_dir: Path) -> str:
    """The XLA flags that dump each compiled module as text into the stage's HLO_DUMP."""
    return f"--xla_dump_to={stage_dir / HLO_DUMP} --xla_dump_hlo_as_text"


def hlo_of(stage_dir: Path, compiles: int) -> list[str] | None:
    """Each compiled graph's module text, in compile order; None when XLA dumped another
    number of modules than torch_xla compiled graphs (they cannot be told apart then). Every
    other file XLA dumps (LLVM IR, buffer assignments) is removed: only these are read."""
    folder = stage_dir / HLO_DUMP
    if not folder.is_dir():
        return None
    modules = sorted((int(m[1]), p) for p in folder.iterdir() if (m := _MODULE.search(p.name)))
    for path in folder.iterdir():
        if not _MODULE.search(path.name) and path.is_file():
            path.unlink()
    if len(modules) != compiles:
        return None
    return [path.read_text("utf-8", "replace") for _, path in modules]


def hlo_difference(old: str, new: str) -> tuple[str, str] | None:
    """What differs between two modules, in words, and the first differing line of the
    script; None when they are the same program."""
    a, b = _instructions(old), _instructions(new)
    if [key for key, _ in a] == [key for key, _ in b]:
        return None
    said, line = [], ""
    blocks = SequenceMatcher(None, [k for k, _ in a], [k for k, _ in b], autojunk=False)
    for tag, i1, i2, j1, j2 in blocks.get_opcodes():
        if tag == "equal":
            continue
        gone, came = a[i1:i2], b[j1:j2]
        where = (came or gone)[0][1]
        line = line or where[1]
        at = f" at line {where[1]}" if where[1] else ""
        said.append(f"`{where[0]}`{at}: {_shown(gone)} → {_shown(came)}")
    more = f"; {len(said) - SHOWN} more" if len(said) > SHOWN else ""
    return "the compiled programs differ: " + "; ".join(said[:SHOWN]) + more, line


def _instructions(text: str) -> list[tuple[str, tuple[str, str]]]:
    """Each instruction without names or metadata, with its (operation, file:line); the
    module's header too (its layouts, aliasing and sharding)."""
    found = [(_NAME.sub("%", text.split("\n", 1)[0].split(",", 1)[-1]), ("module", ""))]
    for match in filter(None, map(_INSTRUCTION.match, text.splitlines())):
        rest = match[1]
        meta = _METADATA.search(rest)
        fields = dict(re.findall(r'(\w+)="?([^" ]*)"?', meta[1])) if meta else {}
        source = fields.get("source_file", "")
        line = f"{Path(source).name}:{fields['source_line']}" if "source_line" in fields else ""
        opcode = _OPCODE.search(rest)
        op = fields.get("op_type", "").replace("__", "::") or (opcode[1] if opcode else "?")
        found.append((_NAME.sub("%", _METADATA.sub("", rest)), (op, line)))
    return found


def _shown(items: list[tuple[str, tuple[str, str]]]) -> str:
    if not items:
        return "(none)"
    text = "; ".join(f"`{key}`" for key, _ in items[:2])
    return text + (f" and {len(items) - 2} more" if len(items) > 2 else "")
