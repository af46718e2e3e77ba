"""A repro of a recompile: the fewest lines of the script that still compile again for the
same cause at the same line, with a footer that exits 1 when torch_xla compiled more graphs
than the script has places to sync from (once each should do).

Delta debugging over the script's lines (tools/minimize/ddmin.py, the minimizers' own loop):
a rest that is not valid Python, or lacks the recompile's line, is refused without running;
each other rest is run alone (runner/processes/alone.py) under the same recording as ``wrap
--recompiles`` and holds when it ends with exit 0 and its explanation has a recompile of the
same cause at a line of the same text. At most ``budget`` rests are run: what is left then is
the repro, shorter or not.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from reprokit.infra.python_source import parse_python
from reprokit.records._json import write_json
from reprokit.records.folder import ALONE_FOLDER, SCRIPT
from reprokit.records.recompiles import (
    RECOMPILE_REPRO,
    RECOMPILES,
    Cause,
    Compile,
    RecompileRepro,
    Recompiles,
    read_recompiles,
)
from reprokit.runner.options import Options
from reprokit.runner.processes.alone import Ran, run_alone
from reprokit.tools.minimize.ddmin import ddmin, one_by_one
from reprokit.tools.recompiles import record_recompiles, recording_env

FOOTER = """
# reprokit: one graph per place that syncs should do; exit 1 when torch_xla compiled more
import sys

import torch_xla.debug.metrics as met

compiled = met.counter_value("UncachedCompile") or 0
print(f"torch_xla compiled {{compiled}} graphs where {expected} should do")
sys.exit(1 if compiled > {expected} else 0)
"""


def add_repro(stage_dir: Path, script: Path | None, options: Options, budget: int = 40) -> None:
    """Look for a repro of the script's first recompile and add it (or why there is none)
    to the stage's recompiles.json; the repro itself beside it (RECOMPILE_REPRO)."""
    path, found = stage_dir / RECOMPILES, read_recompiles(stage_dir)
    if found is None or not found.recompiles:
        return
    if script is None:
        why = "the command runs no Python file of its own to cut down"
        write_json(path, replace(found, no_repro=why).to_json())
        return
    with tempfile.TemporaryDirectory(dir=stage_dir) as scratch:
        repro = recompile_repro(script, found.recompiles[0], options=options,
                                scratch=Path(scratch), budget=budget)  # fmt: skip
    if repro is None:
        why = ("the script run alone (no arguments, an empty folder, a bare environment) does "
               "not compile again as it did")  # fmt: skip
        write_json(path, replace(found, no_repro=why).to_json())
        return
    (stage_dir / RECOMPILE_REPRO).write_text(repro.text, encoding="utf-8")
    write_json(path, replace(found, repro=repro).to_json())


def recompile_repro(
    script: Path, target: Compile, *, options: Options, scratch: Path, budget: int = 40
) -> RecompileRepro | None:
    """The fewest lines of ``script`` that still recompile as ``target`` does; None when the
    whole script run alone does not (it needs its arguments, files or environment)."""
    lines = script.read_text("utf-8").splitlines()
    wanted = lines[int(target.line.rsplit(":", 1)[1]) - 1].strip() if ":" in target.line else ""
    held: dict[tuple[str, ...], Recompiles] = {}  # each rest that held: what it recorded
    runs = [0]

    def holds(rest: list[str]) -> bool:
        if runs[0] >= budget or not _valid(rest) or not _keeps(rest, wanted):
            return False
        runs[0] += 1
        found = _record(rest, options, scratch / f"try{runs[0]}")[1]
        if found is None or not _same(found, target, wanted, rest):
            return False
        held[tuple(rest)] = found
        return True

    if not holds(lines):
        return None
    kept = ddmin(lines, one_by_one(holds))
    places = sum(c.cause is Cause.FIRST for c in held[tuple(kept)].compiles)
    text = "\n".join(kept) + "\n" + FOOTER.format(expected=places)
    ran = run_alone(
        lambda where: (where / SCRIPT).write_text(text), options, scratch / ALONE_FOLDER
    )
    shown = ran.transcript(options.xla_device)
    found = (target.number, len(kept), len(lines), text, shown, ran.returncode, runs[0])
    return RecompileRepro(*found)


def _keeps(rest: list[str], wanted: str) -> bool:
    """Whether ``rest`` still holds the line the recompile is at: without it, it cannot."""
    return not wanted or any(line.strip() == wanted for line in rest)


def _valid(rest: list[str]) -> bool:
    try:
        parse_python("\n".join(rest))
    except SyntaxError:
        return False
    return True


def _record(rest: list[str], options: Options, folder: Path) -> tuple[Ran, Recompiles | None]:
    """Run ``rest`` alone under the recording; how it ran, and its recompiles."""
    folder.mkdir(parents=True, exist_ok=True)
    extra = recording_env(folder, {})
    ran = run_alone(lambda where: (where / SCRIPT).write_text("\n".join(rest) + "\n"),
                    options, folder, extra=extra)  # fmt: skip
    return ran, record_recompiles(folder) if ran.returncode == 0 else None


def _same(found: Recompiles, target: Compile, wanted: str, rest: list[str]) -> bool:
    """A recompile of ``target``'s cause at a line whose text is ``wanted``."""
    for again in found.recompiles:
        number = again.line.rsplit(":", 1)[-1]
        at = rest[int(number) - 1].strip() if number.isdigit() and int(number) <= len(rest) else ""
        if again.cause is target.cause and (at == wanted or not wanted):
            return True
    return False
