"""``reprokit wrap --recompiles`` in a report: how many graphs the script compiled, and for
each cause of a compile after the first, which line, what differs, which compiles and steps."""

from __future__ import annotations

from pathlib import Path

from reprokit.records.folder import RunFolder
from reprokit.records.recompiles import Compile, Recompiles, read_recompiles
from reprokit.reports.model import Cell, Recompiled, Table

HEADER = ("cause", "line", "what differs", "which compiles", "in steps")
ALL_HEADER = ("compile", "step", "cause", "line", "what differs", "torch_xla's word")


def stage_recompiles(run_dir: Path, label: str, stage: str) -> Recompiles | None:
    """The stage's recompiles.json, when the script was wrapped with --recompiles."""
    return read_recompiles(RunFolder(run_dir).variant(label).stage(stage).path)


def recompile_section(found: Recompiles) -> Recompiled:
    """The section: a sentence, one row per cause and line, every compile, compiles per step."""
    count, again = len(found.compiles), len(found.recompiles)
    said = (f"torch_xla compiled {count} graph{'s' * (count != 1)} in {found.steps} "
            f"step{'s' * (found.steps != 1)} ({found.syncs} graph executions).")  # fmt: skip
    if not again:
        said += (" **No step compiled again**: each place in the script that syncs compiled "
                 "its graph once, then found it in the cache.")  # fmt: skip
    else:
        said += (f" **{again} recompile{'s' * (again != 1)}**: graphs compiled again where "
                 "the script had compiled one already, or cut short by a value read; "
                 "by cause:")  # fmt: skip
    rows = tuple(
        (Cell(cause.value, tone="bad" if cause.torch_xla else ""), Cell(line, code=True),
         Cell(compiles[0].what), Cell(", ".join(str(c.number) for c in compiles)),
         Cell(steps_shown(compiles)))
        for cause, line, compiles in found.by_cause()
    )  # fmt: skip
    every = tuple(
        (Cell(str(c.number)), Cell(str(c.step)), Cell(c.cause.value), Cell(c.line, code=True),
         Cell(c.what), Cell(c.trigger))
        for c in found.compiles
    )  # fmt: skip
    return Recompiled(
        said,
        Table(HEADER, rows, title="Why it compiled again"),
        Table(ALL_HEADER, every, title="Every compile"),
        tuple(found.per_step()),
        **_repro(found),
    )


def _repro(found: Recompiles) -> dict[str, str]:
    """The repro's sentence, text and output; or why there is none."""
    if found.no_repro:
        return {"repro": f"No repro of compile {found.recompiles[0].number}: {found.no_repro}."}
    repro = found.repro
    if repro is None:
        return {}
    shows = "exits 1 alone" if repro.returncode == 1 else f"exits {repro.returncode} alone"
    said = (f"A repro of compile {repro.compile}: {repro.lines} of the script's {repro.of} lines "
            f"still compile again (found in {repro.tried} runs of shorter copies); with the "
            f"check at its end it {shows}:")  # fmt: skip
    return {"repro": said, "repro_text": repro.text, "repro_output": repro.transcript}


def steps_shown(compiles: tuple[Compile, ...], most: int = 8) -> str:
    """The steps the compiles were in, each once, the first ``most`` of them."""
    shown = sorted({c.step for c in compiles})
    more = f" (+{len(shown) - most})" if len(shown) > most else ""
    return ", ".join(map(str, shown[:most])) + more
