"""The evidence of one variant, as Markdown: how a failed stage ended and its last words, where
its stages part from their references (the comparison table in the order the stage saved its
tensors, the first to differ marked), and what torch_xla saw in each XLA stage."""

from __future__ import annotations

from reprokit.records import Comparison, StageResult, VariantResult


def cell(value: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def fenced(text: str, language: str = "") -> list[str]:
    """A code block whose fence cannot be closed by the text inside."""
    fence = "~~~~" if "```" in text else "```"
    return [f"{fence}{language}", text.rstrip("\n"), fence]


def collapsed(summary: str, lines: list[str]) -> list[str]:
    return [f"<details><summary>{summary}</summary>", "", *lines, "", "</details>", ""]


def variant_section(variant: VariantResult, rows: int) -> list[str]:
    """A variant's heading, why it ended so, its failed stages, divergence, table, XLA."""
    lines = [
        f"### `{variant.label}`: {variant.outcome.value} (expected {variant.expectation})",
        "",
    ]
    if variant.changed:  # what makes this variant itself: two runs of a case can differ here
        shown = ", ".join(f"`{k} = {cell(repr(v))}`" for k, v in variant.changed.items())
        lines += [f"Parameters not at the template's defaults: {shown}.", ""]
    failed = [s for s in variant.stages if s.failed]
    if variant.reason and not failed:  # else the failed stage says it, with its evidence
        lines += [cell(variant.reason), ""]
    for stage in failed:
        lines += failed_stage(stage)
    lines += reused_lines(variant.stages)
    lines += divergence_lines(variant)
    lines += comparison_table(variant, rows)
    lines += xla_table(variant.stages)
    return lines


def reused_lines(stages: tuple[StageResult, ...]) -> list[str]:
    """Which stages the results cache gave, and from which run: a reader must know that a
    stage did not run again (``--no-cache`` runs every one)."""
    lines = []
    for run in sorted({s.reused for s in stages if s.reused}):
        names = ", ".join(f"`{s.name}`" for s in stages if s.reused == run)
        lines.append(f"Reused without running again (same script, environment, versions): "
                     f"{names}, from the run in `{run}`.")  # fmt: skip
    return [*lines, ""] if lines else []


def failed_stage(stage: StageResult) -> list[str]:
    how = f"signal {stage.signal}" if stage.signal else f"exit code {stage.returncode}"
    lines = [f"Stage `{stage.name}` ({stage.backend}): {stage.status.value}, {how}."]
    if stage.error:
        lines[0] += f" It raised `{cell(stage.error)}`."
    lines.append("")
    if stage.stderr_tail:
        lines += collapsed("the last lines of its stderr", fenced("\n".join(stage.stderr_tail)))
    return lines


def divergence_lines(variant: VariantResult) -> list[str]:
    """Where each target stage first leaves its reference, which tensors agree before, and
    what the first differing one is where the stage described it (an operation of a captured
    program: its op, shape, module and the user's source line)."""
    lines = []
    stages = {stage.name: stage for stage in variant.stages}
    for target, tensor in variant.first_divergence.items():
        if tensor is None:
            continue
        line = f"First divergence in `{target}`: {variant.divergence(target)}."
        info = stages[target].described.get(tensor) if target in stages else None
        lines.append(line + (f" {described(tensor, info)}" if info else ""))
    methods = {c.method for c in variant.comparisons}
    if lines and "fp64" in methods:
        lines.append(
            'Judged against float64 (`[compare] method = "fp64"`): a tensor differs when its '
            "error against the float64 run is well beyond the reference stage's."
        )
    return [*lines, ""] if lines else []


def described(tensor: str, info: dict) -> str:
    """``node.0012.layer_norm`` is `aten.layer_norm.default` (2x16) in `encoder.layers.3`,
    from `model.py:42`: `x = self.norm(x)`."""
    parts = [f"`{tensor}` is `{info.get('op', '?')}`"]
    if info.get("shape") is not None:
        parts.append(f"({'x'.join(map(str, info['shape'])) or 'scalar'})")
    if info.get("module"):
        parts.append(f"in `{info['module']}`")
    if info.get("source"):
        parts.append(f"from `{cell(info['source'])}`")
    return " ".join(parts) + "."


def comparison_table(variant: VariantResult, rows: int) -> list[str]:
    """The comparisons in the order the stages saved their tensors, from a few before the
    first divergence; the first to differ in bold. max rel is the largest
    |target - reference| / |reference| where the reference is not 0 (max abs covers those)."""
    if not any(not c.allclose for c in variant.comparisons):
        return []
    lines = [
        "| tensor | stage vs reference | shape | max abs | max rel ¹ | mismatched |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    shown = 0
    for target in dict.fromkeys(c.target for c in variant.comparisons):
        found = [c for c in variant.comparisons if c.target == target]
        first = next((i for i, c in enumerate(found) if not c.allclose), None)
        if first is None:
            continue
        window = found[max(0, first - 2) : max(0, first - 2) + rows]  # two that agree, then on
        lines += [_row(c, bold=c is found[first]) for c in window]
        shown += len(window)
    hidden = len(variant.comparisons) - shown
    if hidden:
        lines.append(f"\n({hidden} more comparisons in summary.json)")
    note = (
        "¹ |stage - reference| / |reference| where the reference is not 0; max abs covers the rest."
    )
    return [*lines, "", note, ""]


def _row(c: Comparison, *, bold: bool) -> str:
    cells = {k: cell(v) for k, v in c.cells().items()}
    name = f"**`{cells['tensor']}`**" if bold else f"`{cells['tensor']}`"
    shape = cells["note"] if c.shape is None else cells["shape"]
    mismatched = cells["note"] or cells["mismatched"]
    return (
        f"| {name} | {cells['stages']} | {shape} | {cells['max_abs']} | {cells['max_rel']} | "
        f"{mismatched} |"
    )


def xla_table(stages: tuple[StageResult, ...]) -> list[str]:
    """What torch_xla saw in each XLA stage: devices, compilations and executions, transfers,
    operations that fell back to the CPU; recompilation flagged."""
    seen = [s for s in stages if s.xla]
    if not seen:
        return []
    lines = [
        "| XLA stage | devices | compilations | executions | to / from device | CPU fallbacks |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for stage in seen:
        x = stage.xla or {}
        count = {k: x.get(k, {}).get("count", 0) for k in ("compile", "execute")}
        seconds = {k: x.get(k, {}).get("seconds", 0) for k in ("compile", "execute")}
        to, back = (x.get(k, {}).get("count", 0) for k in ("to_device", "from_device"))
        fallbacks = ", ".join(f"`{op}`" for op in x.get("fallbacks", [])) or "none"
        lines.append(
            f"| `{stage.name}` | {x.get('devices', '?')} x {x.get('device_kind', '?')} | "
            f"{count['compile']} ({seconds['compile']:.2f} s) | "
            f"{count['execute']} ({seconds['execute']:.2f} s) | {to} / {back} | {fallbacks} |"
        )
    lines.append("")
    for stage in seen:
        if count := stage.uncached():
            lines += [
                f"`{stage.name}` compiled a graph for each of its executions ({count}), none from "
                "the cache: a training loop like that recompiles every step "
                "(`PT_XLA_DEBUG_LEVEL=1` says why).",
                "",
            ]
    return lines
