"""The evidence of one variant, as the report model says it: how a failed stage ended and its
last words, where its stages part from their references (the comparisons in the order the
stage saved its tensors, the first to differ marked), and what torch_xla saw in each XLA
stage."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reprokit.records import Comparison, Outcome, StageResult, Triage, VariantResult
from reprokit.records.folder import SCRIPT, VariantFolder
from reprokit.records.minimize import REPRO_STAGES
from reprokit.reports.bundle import ATTACHMENT_LIMIT
from reprokit.reports.model import (
    Cell,
    Comparisons,
    Evidence,
    FailedStage,
    Names,
    Script,
    Table,
    Text,
    Wrapped,
)
from reprokit.reports.recompiles import recompile_section, stage_recompiles

COMPARISON_HEADER = ("tensor", "stage vs reference", "shape", "max abs", "max rel ¹", "mismatched")
WRAP_CASE = "wrap"  # the case of the one variant `reprokit wrap` records
WRAP_SCRIPT = "script"  # its parameter naming the copy of the script beside its stages
FP64_HEADER = (*COMPARISON_HEADER[:5], "beyond rtol / atol ²",
               "RMSE vs float64: stage / reference", "bound ³", "fp64 verdict")  # fmt: skip
XLA_HEADER = ("variant", "XLA stage", "devices", "compilations", "executions",
              "to / from device", "CPU fallbacks")  # fmt: skip


def plain(value: object) -> str:
    """A value inside a sentence or a table row: no pipe, no line break."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def evidence(variant: VariantResult, run_dir: Path) -> Evidence:
    """A variant's heading, why it ended so, its failed stages, divergence, table, XLA."""
    changed = None
    if variant.changed:  # what makes this variant itself: two runs of a case can differ here
        shown = ", ".join(f"`{k} = {plain(repr(v))}`" for k, v in variant.changed.items())
        changed = f"Parameters not at the template's defaults: {shown}."
    failed = [s for s in variant.stages if s.failed]
    return Evidence(
        label=variant.label,
        heading=f"`{variant.label}`: {variant.outcome.value} (expected {variant.expectation})",
        changed=changed,
        # else the failed stage says it, with its evidence
        reason=plain(variant.reason) if variant.reason and not failed else None,
        failed=tuple(map(failed_stage, failed)),
        reused=reused_lines(variant.stages),
        divergence=divergence_lines(variant) + trust_lines(variant) + noise_line(variant),
        comparisons=comparisons(variant),
        recompiled=recompiled(variant.stages),
        script=script(run_dir, variant),
        too_large=too_large(run_dir, variant),
        host_reads=host_reads(variant.stages),
        wrapped=wrapped(run_dir, variant),
    )


def reused_lines(stages: tuple[StageResult, ...]) -> tuple[Text, ...]:
    """Which stages the results cache gave, and from which run: a reader must know that a
    stage did not run again (``--no-cache`` runs every one)."""
    lines = []
    for run in sorted({s.reused for s in stages if s.reused}):
        names = ", ".join(f"`{s.name}`" for s in stages if s.reused == run)
        lines.append(f"Reused without running again (same script, environment, versions): "
                     f"{names}, from the run in `{run}`.")  # fmt: skip
    return tuple(lines)


def failed_stage(stage: StageResult) -> FailedStage:
    how = f"signal {stage.signal}" if stage.signal else f"exit code {stage.returncode}"
    sentence = f"Stage `{stage.name}` ({stage.backend}): {stage.status.value}, {how}."
    if stage.error:
        sentence += f" It raised `{plain(stage.error)}`."
    return FailedStage(sentence, tuple(stage.stderr_tail))


def divergence_lines(variant: VariantResult) -> tuple[Text, ...]:
    """Where each target stage first leaves its reference, which tensors agree before, and
    what the first differing one is where the stage described it (an operation of a captured
    program: its op, shape, module and the user's source line)."""
    lines = []
    for target, tensor in variant.first_divergence.items():
        if tensor is None:
            continue
        line = f"First divergence in `{target}`: {variant.divergence(target)}."
        line += judged(variant, target, tensor)
        info = _described(variant, target, tensor)
        lines.append(line + (f" {described(tensor, info)}" if info else ""))
    methods = {c.method for c in variant.comparisons}
    if lines and "fp64" in methods:
        lines.append(
            'Judged against float64 (`[compare] method = "fp64"`): a tensor differs when its '
            "error against the float64 run is well beyond the reference stage's."
        )
    return tuple(lines)


def judged(variant: VariantResult, target: str, tensor: str) -> str:
    """Under the fp64 method, the first differing tensor's errors against float64 and the
    bound it is beyond: what the verdict rests on."""
    c = next((c for c in variant.comparisons if c.target == target and c.tensor == tensor), None)
    if c is None or c.errors is None or c.note:  # a note (dtypes) says what it rests on
        return ""
    bound = f", beyond the bound {c.bound:.3g}" if c.bound is not None else ""
    return (f" Against float64: `{target}`'s RMSE {c.errors[1]:.3g}, `{c.reference}`'s own "
            f"{c.errors[0]:.3g}{bound}.")  # fmt: skip


def described(tensor: str, info: dict[str, Any]) -> str:
    """``node.0012.layer_norm`` is `aten.layer_norm.default` (2x16) in `encoder.layers.3`,
    from `model.py:42`: `x = self.norm(x)`; an operation in a library the line calls, also
    inside `transformers/masking_utils.py:95: ...`."""
    parts = [f"`{tensor}` is `{info.get('op', '?')}`"]
    if info.get("shape") is not None:
        parts.append(f"({'x'.join(map(str, info['shape'])) or 'scalar'})")
    if info.get("module"):
        parts.append(f"in `{info['module']}`")
    if info.get("source"):
        parts.append(f"from `{plain(info['source'])}`")
    if info.get("library_source"):  # the operation sits in a library the user's line calls
        parts.append(f"inside `{plain(info['library_source'])}`")
    return " ".join(parts) + "."


def differs(c: Comparison) -> bool:
    """Outside allclose's rtol / atol somewhere: a difference the fp64 verdict may still call
    noise (then ``c.allclose`` holds while elements mismatch)."""
    return not c.allclose or c.mismatched > 0


def comparisons(variant: VariantResult) -> Comparisons | None:
    """The comparisons in the order the stages saved their tensors, from two that agree
    before the first divergence of each target on (or, for a match whose tensors are beyond
    allclose's tolerance and judged noise against float64, before the first such); the first
    marked. Under the fp64 method each side's error against float64, the bound and the verdict
    are shown, the allclose count beside them as information. max rel is the largest
    |target - reference| / |reference| where the reference is not 0 (max abs covers those).
    None when nothing differs."""
    if not any(map(differs, variant.comparisons)):
        return None
    fp64 = any(c.method == "fp64" for c in variant.comparisons)
    windows = []
    for target in dict.fromkeys(c.target for c in variant.comparisons):
        found = [c for c in variant.comparisons if c.target == target]
        first = next((i for i, c in enumerate(found) if not c.allclose), None)
        if first is None:  # a match: where it first differs, which the verdict calls noise
            first = next((i for i, c in enumerate(found) if differs(c)), None)
        if first is None:
            continue
        rows = tuple(
            _row(c, first=c is found[first], fp64=fp64) for c in found[max(0, first - 2) :]
        )
        header = FP64_HEADER if fp64 else COMPARISON_HEADER
        numeric = (False, False, False, True, True, True) + (True, True, False) * fp64
        windows.append(Table(header, rows, numeric, title=target))
    note = (
        "¹ |stage - reference| / |reference| where the reference is not 0; max abs covers the rest."
    )
    if fp64:
        note += (
            " ² Elements beyond allclose's rtol / atol: information only; under the fp64 method "
            "the verdict is the last column. ³ The most the stage's RMSE against float64 may be: "
            "a few times the reference's own, plus tol / 10 (the dynamo accuracy minifier's rule)."
        )
    return Comparisons(tuple(windows), len(variant.comparisons), note)


def _row(c: Comparison, *, first: bool, fp64: bool = False) -> tuple[Cell, ...]:
    cells = c.cells()
    shape = cells["note"] if c.shape is None else cells["shape"]
    mismatched = cells["note"] or cells["mismatched"]
    row = (
        Cell(cells["tensor"], code=True, tone="bad" if first else ""),
        *(Cell(text) for text in (cells["stages"], shape, cells["max_abs"], cells["max_rel"])),
        Cell(mismatched),
    )
    if not fp64:
        return row
    errors = "-" if c.errors is None else f"{c.errors[1]:.3g} / {c.errors[0]:.3g}"
    bound = "-" if c.bound is None else f"{c.bound:.3g}"
    verdict = Cell("agrees", tone="good") if c.allclose else Cell("differs", tone="bad")
    return (*row, Cell(errors), Cell(bound), verdict)


def noise_line(variant: VariantResult) -> tuple[Text, ...]:
    """A match whose target parts from its reference beyond allclose's tolerance, judged noise
    against float64: where (the first tensor, its counts) and why, one sentence per target."""
    if variant.outcome is not Outcome.MATCH:
        return ()
    lines = []
    for target in dict.fromkeys(c.target for c in variant.comparisons):
        found = [c for c in variant.comparisons if c.target == target and c.shape is not None]
        beyond = [c for c in found if c.allclose and c.mismatched and c.errors is not None]
        if not beyond or any(not c.allclose for c in found):
            continue
        first, ref = beyond[0], beyond[0].reference
        within = "(a few times the reference's error)"
        if first.bound is not None and first.errors[1] > first.bound:  # close element-wise
            within = f"beyond the bound {first.bound:.3g} but close at the method's tolerance"
        elif first.bound is not None:
            within = f"within the bound {first.bound:.3g} {within}"
        info = _described(variant, target, first.tensor)
        lines.append(
            f"`{target}` parts from `{ref}` at `{first.tensor}` ({first.mismatched:,} of "
            f"{first.total:,} elements beyond rtol={first.rtol:g}, atol={first.atol:g}; "
            f"{len(beyond)} of {len(found)} tensors so), but judged against float64 it is "
            f"rounding noise: `{target}`'s RMSE against float64 is {first.errors[1]:.3g}, "
            f"`{ref}`'s own {first.errors[0]:.3g}, {within}, and so for every tensor."
            + (f" {described(first.tensor, info)}" if info else "")
        )
    return tuple(lines)


def _described(variant: VariantResult, target: str, tensor: str) -> dict[str, Any] | None:
    """What ``target`` said of its ``tensor`` (an operation of a captured program), if it did."""
    stage = next((s for s in variant.stages if s.name == target), None)
    return stage.described.get(tensor) if stage is not None else None


def xla_table(variants: Iterable[VariantResult]) -> Table | None:
    """What torch_xla saw in each XLA stage of each variant, passing or not: devices,
    compilations and executions, transfers, operations that fell back to the CPU."""
    rows = []
    for variant in variants:
        for stage in (s for s in variant.stages if s.xla):
            x = stage.xla
            devices = "?" if x.devices is None else x.devices
            rows.append((
                Cell(variant.label, code=True),
                Cell(stage.name, code=True),
                Cell(f"{devices} x {x.device_kind or '?'}"),
                Cell(f"{x.compile.count} ({x.compile.seconds:.2f} s)"),
                Cell(f"{x.execute.count} ({x.execute.seconds:.2f} s)"),
                Cell(f"{x.to_device.count} / {x.from_device.count}"),
                Names(x.fallbacks),
            ))  # fmt: skip
    if not rows:
        return None
    numeric = (False, False, False, True, True, True, False)
    if len({row[0].text for row in rows}) == 1:  # one variant: its name in every row says nothing
        return Table(XLA_HEADER[1:], tuple(row[1:] for row in rows), numeric[1:],
                     title="What torch_xla saw")  # fmt: skip
    return Table(XLA_HEADER, tuple(rows), numeric, title="What torch_xla saw")


def recompiled(stages: tuple[StageResult, ...]) -> tuple[Text, ...]:
    """XLA stages that compiled a graph for every execution: recompilation, flagged."""
    return tuple(
        f"`{stage.name}` compiled a graph for each of its executions ({count}), none from "
        "the cache: a training loop like that recompiles every step "
        "(`PT_XLA_DEBUG_LEVEL=1` says why)."
        for stage in stages
        if stage.xla and (count := stage.uncached())
    )


def script(run_dir: Path, variant: VariantResult) -> Script | None:
    """The variant's standalone repro.py, when its folder has one."""
    path = VariantFolder(Path(run_dir) / variant.label).script
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    short = (path.parent / REPRO_STAGES).is_file()  # as reprokit minimize writes them
    return Script(variant.label, text, text.count("\n"), short)


def too_large(run_dir: Path, variant: VariantResult) -> tuple[Text, ...]:
    """Files a case brought beside its script (an exported program) too large to attach."""
    folder = Path(run_dir) / variant.label
    brought = [p for p in folder.glob("*") if p.is_file() and p.name != SCRIPT]
    return tuple(
        f"`{variant.label}/{path.name}` ({path.stat().st_size / 1e6:.0f} MB) is over "
        "GitHub's 25 MB attachment limit and not in the bundle: share it another way, "
        "or capture again with `--random-inputs` and a smaller model or batch."
        for path in brought
        if path.stat().st_size > ATTACHMENT_LIMIT
    )


def host_reads(stages: tuple[StageResult, ...]) -> tuple[Text, ...]:
    """XLA stages that read values back to Python (``.item()``): torch_xla counts those among
    its CPU fallbacks, but they are transfers of values the device computed (records.xla
    HOST_READS), so the table's fallbacks leave them out and this says them."""
    lines = []
    for stage in (s for s in stages if s.xla and s.xla.host_reads):
        count = stage.xla.host_read_count()
        times = "" if count is None else f" {count} time{'s' * (count != 1)}"
        names = ", ".join(f"`{name}`" for name in stage.xla.host_reads)
        lines.append(f"`{stage.name}` read a value back to Python{times} ({names}: `.item()`, "
                     "`bool()` of a tensor, a tensor in an `if`): transfers from the device "
                     "(counted in \"What torch_xla saw\"), not CPU fallbacks.")  # fmt: skip
    return tuple(lines)


def wrapped(run_dir: Path, variant: VariantResult) -> Wrapped | None:
    """``reprokit wrap``'s variant: the copy of its script, to inline, and the last lines
    the script printed; None for a case's variant."""
    if variant.case != WRAP_CASE:
        return None
    script = None
    name = variant.variant.get(WRAP_SCRIPT)
    path = Path(run_dir) / variant.label / Path(name).name if isinstance(name, str) else None
    if path is not None and path.is_file():
        text = path.read_text(encoding="utf-8", errors="replace")
        script = Script(f"{variant.label}/{path.name}", text, text.count("\n"))
    output = next((s.stdout_tail for s in variant.stages if s.stdout_tail), ())
    found = stage_recompiles(run_dir, variant.label, variant.stages[0].name) if variant.stages \
        else None  # fmt: skip
    command = str(variant.variant.get("command", ""))
    return Wrapped(command, script, tuple(output), recompile_section(found) if found else None)


# How far a captured program's verdict can be trusted (docs/verdicts.md): the precision
# triage, the faithful run against the instrumented one, each operation's own error.
def trust_lines(variant: VariantResult) -> tuple[Text, ...]:
    """What the variant's triage, faithful and isolated runs showed, a sentence each."""
    lines = []
    if variant.triage:
        lines.append(f"Triage: run again more precisely, the mismatch {Triage(variant.triage).said}"
                     f" (`triage = \"{variant.triage}\"`).")  # fmt: skip
    if variant.fusion_sensitive:
        lines.append(fusion_line(variant))
    for stage, own in variant.own_divergence.items():
        first = variant.first_divergence.get(stage)
        if own is None:
            lines.append(f"Each operation alone on CPU's inputs: none of `{stage}`'s has an error"
                         " of its own beyond the bound; what differs is inherited.")  # fmt: skip
        else:
            lines.append(
                f"Each operation alone on CPU's inputs: `{own}` is the first whose own error "
                f"is beyond the bound (the first accumulated: `{first}`)."
            )
    return tuple(lines)


def fusion_line(variant: VariantResult) -> Text:
    """Which outputs differ between the program as captured and the instrumented program."""
    shown = [f"`{c.tensor}` {c.mismatched:,} / {c.total:,} elements, max abs {c.max_abs:.3g}"
             for c in variant.fusion if not c.allclose]  # fmt: skip
    which = f": {'; '.join(shown)}" if shown else ""
    line = (
        "The divergence is sensitive to fusion: the program as captured (`xla_faithful`, one "
        "graph of its outputs) and with every operation recorded (`xla`) give other outputs"
        f"{which}. The outputs' verdict is the faithful run's."
    )
    if variant.fusion_nodes:
        names = ", ".join(f"`{name}`" for name in variant.fusion_nodes)
        line += (f" Recording {names} alone is enough to change them (`xla_narrowed`: delta "
                 "debugging over the recorded results).")  # fmt: skip
    return line
