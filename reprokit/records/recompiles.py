"""Why a step compiled again (``reprokit wrap --recompiles``): every graph torch_xla compiled,
and for each after the first, what differs from the nearest earlier one (torch-free).

The wrapped script's stage folder holds torch_xla's own files (GRAPHS: every graph it synced,
its IR with each node's Python line; COMPILES: its "Compilation Analysis" of each compile) and
reprokit's reading of them, RECOMPILES, which the report shows."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reprokit.records._json import from_json

GRAPHS = "graphs.txt"  # XLA_SAVE_TENSORS_FILE: torch_xla adds ".<device ordinal>" to it
COMPILES = "compiles.txt"  # PT_XLA_DEBUG_FILE: torch_xla's compilation analysis
RECOMPILES = "recompiles.json"
HLO_DUMP = "hlo"  # XLA_FLAGS=--xla_dump_to: the module XLA compiled for each graph
RECOMPILE_REPRO = "recompile_repro.py"  # --repro: the fewest lines that still recompile
VERSION = 1  # of recompiles.json


class Cause(enum.Enum):
    """What differs between a compiled graph and the nearest graph compiled before it."""

    FIRST = "first graph"  # the first synced from its place in the script: it must compile
    SETUP = "setup ran with the first step"  # the first graph held work from before the loop
    INPUT_SHAPE = "input shape"  # an input (a device tensor) has another shape
    DTYPE = "dtype"  # an input or an operation has another dtype
    CONSTANT = "constant baked in"  # a value or argument written into the graph changed
    OPERATIONS = "operations changed"  # operations added, removed or replaced
    VALUE_READ = "graph cut by a value read"  # .item(), print, bool() or a CPU fallback
    NEW_GRAPH = "new graph"  # nothing like an earlier graph (an eval loop, say)
    SHARDING = "sharding"  # the compiled programs differ in an input's or output's sharding
    NOT_IN_IR = "not in the IR"  # the same IR text, another hash (sharding, aliasing, donation)
    SAME_HASH = "same hash compiled again"  # torch_xla compiled a hash it had compiled
    SAME_PROGRAM = "equal graphs compiled again"  # the same HLO under another hash

    @property
    def torch_xla(self) -> bool:
        """A cause that is torch_xla's to explain, not the script's to change."""
        return self in (Cause.SAME_HASH, Cause.SAME_PROGRAM)


@dataclass(frozen=True)
class Compile:
    """One graph torch_xla compiled: when, for which sync, and why (the nearest earlier
    compile, what differs from it, and the Python line that made the difference)."""

    number: int  # 1 for the first graph compiled
    sync: int  # which graph execution (0-based, in the order torch_xla ran them)
    step: int  # 1-based: the steps ended (a sync or mark_step) before it, plus one
    hash: str
    cause: Cause
    what: str = ""  # in the user's words: "input `x`'s shape [4, 16] → [5, 16]"
    line: str = ""  # file:line that made the difference (or that synced)
    nearest: int | None = None  # the number of the compile it is compared with
    nodes: int = 0  # operations in its graph
    trigger: str = ""  # torch_xla's own compilation cause, as it printed it

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"cause": self.cause.value}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Compile:
        return from_json(cls, data, cause=Cause)


@dataclass(frozen=True)
class RecompileRepro:
    """A repro of one recompile: which, its text, and how it ran alone."""

    compile: int  # the number of the compile it reproduces
    lines: int  # of the script's own, kept (of ``of``)
    of: int
    text: str
    transcript: str  # the command, its output and exit code, run alone
    returncode: int | None
    tried: int  # shorter scripts run to find it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Recompiles:
    """Every compile of one wrapped script, and how many graphs it ran in all."""

    syncs: int  # graph executions
    steps: int  # steps ended (syncs of torch_xla.sync, mark_step, a loader's step end)
    compiles: tuple[Compile, ...] = ()
    files: tuple[str, ...] = ()  # torch_xla's files it was read from
    repro: RecompileRepro | None = None  # --repro: the fewest lines that still compile again
    no_repro: str = ""  # --repro, and none was found: why

    @property
    def recompiles(self) -> tuple[Compile, ...]:
        """Every compile after the first of its place: the ones a script could do without."""
        return tuple(c for c in self.compiles if c.cause is not Cause.FIRST)

    def by_cause(self) -> list[tuple[Cause, str, tuple[Compile, ...]]]:
        """The recompiles grouped by cause and line, in order of first appearance."""
        groups: dict[tuple[Cause, str], list[Compile]] = {}
        for found in self.recompiles:
            groups.setdefault((found.cause, found.line), []).append(found)
        return [(cause, line, tuple(found)) for (cause, line), found in groups.items()]

    def per_step(self) -> list[int]:
        """How many graphs each step compiled (index 0: step 1)."""
        counts = [0] * max(self.steps, max((c.step for c in self.compiles), default=0))
        for found in self.compiles:
            counts[found.step - 1] += 1
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "syncs": self.syncs,
            "steps": self.steps,
            "files": list(self.files),
            "compiles": [c.to_json() for c in self.compiles],
            "repro": self.repro.to_json() if self.repro else None,
            "no_repro": self.no_repro,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recompiles:
        compiles = tuple(Compile.from_json(c) for c in data.get("compiles", ()))
        repro = from_json(RecompileRepro, data["repro"]) if data.get("repro") else None
        return from_json(cls, data | {"compiles": compiles, "repro": repro}, files=tuple)


def read_recompiles(stage_dir: Path) -> Recompiles | None:
    """A stage's recompiles.json; None when there is none (no --recompiles) or it is not one."""
    try:
        return Recompiles.from_json(json.loads((stage_dir / RECOMPILES).read_text("utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
