"""The report model of a run folder, built once from its summary.json records (and each
problem's repro.py, which is inlined): what both report.md and report.html say."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from reprokit.infra.redact import redact_text
from reprokit.records import MinimizeResult, Outcome, RunSummary, VariantResult
from reprokit.reports.evidence import WRAP_CASE, differs, evidence, plain, xla_table
from reprokit.reports.issue import issues
from reprokit.reports.model import (
    Cell,
    DifferenceSizes,
    EnvironmentSection,
    ErrorCurves,
    Figures,
    LossCurves,
    Minimized,
    Report,
    Table,
    Text,
)
from reprokit.reports.sweep import sweep_tables

MAX_FIGURES = 12  # per kind: a page of 500 variants must still open quickly
MAX_BARS = 40  # tensors per difference figure
MAX_EXPECTED = 10  # variants whose expectation the report spells out
MAX_CHECKS = 20  # cases whose title and description the report spells out
BUG = "🐛 Bug"  # pytorch/xla's bug template: the heading of a report with something to file


def headline(summary: RunSummary) -> Text:
    """One line: how many variants behaved as expected, and which did not."""
    failed = [v for v in summary.variants if v.passed is False]
    skipped = summary.count(None)
    text = f"{summary.count(True)} of {len(summary.variants)} variants behaved as expected"
    if failed:
        names = ", ".join(f"`{v.label}` ({v.outcome.value})" for v in failed[:5])
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        text += f"; {len(failed)} did not: {names}{more}"
    if skipped:
        text += f"; {skipped} skipped"
    if summary.interrupted:
        text += " (the run was interrupted)"
    return text + "."


def problems(summary: RunSummary) -> list[VariantResult]:
    """The variants a maintainer needs to see: those that did not behave as expected, then
    those that show a problem (an outcome other than match) as their case expected: known bugs
    are evidence too."""
    unexpected = [v for v in summary.variants if v.passed is False]
    known = [v for v in summary.variants if v.passed and v.outcome is not Outcome.MATCH]
    return unexpected + known


def noted(summary: RunSummary) -> list[VariantResult]:
    """Matches whose target parts from its reference beyond allclose's tolerance, which the
    float64 arbiter judged noise: a user who came with such a difference must see it."""
    matches = [v for v in summary.variants if v.passed and v.outcome is Outcome.MATCH]
    return [v for v in matches if any(map(differs, v.comparisons))]


def opening(summary: RunSummary, shown: list[VariantResult]) -> Text:
    """The first heading: the bug template's when there is something to file, else what ran
    and what it found (``reprokit: 1 variant ran and behaved as expected``)."""
    if shown:
        return BUG
    ran, skipped = summary.count(True), summary.count(None)
    if not ran:
        text = f"reprokit: nothing ran ({skipped} skipped)" if skipped else "reprokit: nothing ran"
        return text + (", interrupted" if summary.interrupted else "")
    text = "1 variant ran and behaved" if ran == 1 else f"{ran} variants ran, all behaved"
    text = f"reprokit: {text} as expected"
    text += f" ({skipped} skipped)" if skipped else ""
    return text + (", interrupted" if summary.interrupted else "")


def checks(variants: tuple[VariantResult, ...]) -> tuple[Text, ...]:
    """What each case checks, once per case: its title and description, and its variants."""
    cases: dict[str, list[VariantResult]] = {}
    for v in variants:
        cases.setdefault(v.case, []).append(v)
    lines = []
    for case, found in list(cases.items())[:MAX_CHECKS]:
        first = found[0]
        count = f" ({len(found)} variants)" if len(found) > 1 else ""
        line = f"`{case}`{count}"
        line += f": **{plain(first.title)}**" if first.title else ""
        line += f". {plain(first.description)}" if first.description else "."
        lines.append(line if line.endswith((".", "!", "?")) else line + ".")
    if len(cases) > MAX_CHECKS:
        lines.append(f"And {len(cases) - MAX_CHECKS} more cases (summary.json).")
    return tuple(lines)


def build_report(summary: RunSummary, run_dir: Path, *, model: bool = False) -> Report:
    """The report of ``summary``, whose run folder ``run_dir`` holds the scripts to inline;
    ``model``: one model's part of a sweep (its own report: no sweep table, its issue)."""
    shown = problems(summary)
    sweep = () if model else sweep_tables(summary, run_dir)
    found = () if sweep else issues(summary, run_dir, shown)  # a sweep: its table first
    return Report(
        headline=headline(summary),
        bug=bug(shown[0], minimized=summary.minimized is not None) if shown else None,
        command=rerun_command(summary),
        evidence=tuple(evidence(v, run_dir) for v in [*shown, *wrapped_too(summary, shown)]),
        expected=expected(shown or list(summary.variants)),
        environment=environment(summary),
        results=results_table(summary.variants),
        reused_rows=reused_rows(summary.variants),
        minimized=minimized(summary.minimized) if summary.minimized is not None else None,
        figures=figures(summary.variants),
        opening=opening(summary, shown),
        checks=checks(summary.variants),
        noted=tuple(evidence(v, run_dir) for v in noted(summary)[:MAX_FIGURES]),
        xla=xla_table(results_order(summary.variants)),
        sweep=sweep,
        issue=found[0] if found else None,
        issues=found,
    )


def wrapped_too(summary: RunSummary, shown: list[VariantResult]) -> list[VariantResult]:
    """``reprokit wrap``'s variant when the script ended well too: what it printed and what
    torch_xla saw are what the report of a wrapped script is for."""
    return [v for v in summary.variants if v.case == WRAP_CASE and all(v is not s for s in shown)]


def rerun_command(summary: RunSummary) -> str | None:
    """The command that reruns the run, after the variables exported when it ran that its
    stages ran with (``XLA_USE_32BIT_LONG=1 reprokit run ...``: the case's own [variables]
    come with the case), quoted for a shell, secrets redacted."""
    if not summary.argv:
        return None
    exported = {
        name: value
        for variant in summary.variants
        for name, value in variant.variables.items()
        if name not in variant.case_variables
    }
    prefix = [f"{name}={shlex.quote(value)}" for name, value in sorted(exported.items())]
    return redact_text(" ".join([*prefix, "reprokit", *map(shlex.quote, summary.argv[1:])]))


def bug(first: VariantResult, *, minimized: bool = False) -> Text:
    """What goes wrong, from the first problem's case and verdict; in a folder ``reprokit
    minimize`` wrote, the outcome it kept (its minimal case expects it: not a known problem)."""
    what = first.title or first.case
    why = f" ({plain(first.reason)})" if first.reason else ""
    known = ", as its case expects (a known problem)."
    if minimized and first.passed:
        known = ", as the original did: the outcome the minimizer kept."
    ending = known if first.passed else f", where its case expects {first.expected.value}."
    text = f"{what}: `{first.label}` ends in **{first.outcome.value}**{why}{ending}"
    return text + (f" {plain(first.description)}" if first.description else "")


def expected(variants: list[VariantResult]) -> tuple[Text, ...]:
    """From each variant's [expect], and the tolerances it was judged with."""
    lines = []
    for v in variants[:MAX_EXPECTED]:
        if v.case == WRAP_CASE:  # a script of the user's: no reference stage, no comparison
            lines.append(f"`{v.label}`: the script ends well (exit code 0).")
            continue
        if v.expected is Outcome.MATCH:
            tolerances = sorted({(c.rtol, c.atol) for c in v.comparisons if c.shape is not None})
            within = ", ".join(f"rtol={r:g}, atol={a:g}" for r, a in tolerances[:3])
            text = "every stage ends well and agrees with its reference stage"
            text += f" within {within}" if within else ""
            if any(c.method == "fp64" for c in v.comparisons):
                text += ", or stays within a few times the reference's own error against float64"
            line = f"`{v.label}`: {text}."
        else:
            line = (
                f"`{v.label}`: the case records the known outcome `{v.expected.value}`; without "
                "the bug it would be `match`."
            )
        if v.observed or v.expected_from not in (None, "[expect]"):
            where = f"; observed: {plain(v.observed)}" if v.observed else ""
            line += f" (the case's {v.expected_from or '[expect]'}{where})"
        if v.outputs_only:
            line += (" It was judged on its outputs, which matched: no operation inside was"
                     " recorded (`--set nodes=all` records every one).")  # fmt: skip
        lines.append(line)
    return tuple(lines)


def environment(summary: RunSummary) -> EnvironmentSection:
    """The backend as the XLA stages saw it, the versions, then the environment tables."""
    seen = {(s.xla.device_kind, s.xla.devices) for v in summary.variants for s in v.stages
            if s.xla and s.xla.device_kind is not None}  # fmt: skip
    kinds = sorted({kind for kind, _ in seen}) or [summary.xla_device or "?"]
    versions = summary.env.versions
    facts = [f"Reproducible on XLA backend [{'/'.join(kinds)}]"]
    facts.append(f"torch_xla version: {versions.get('torch_xla') or '?'} "
                 f"(torch {versions.get('torch') or '?'})")  # fmt: skip
    if seen:
        counts = ", ".join(f"{n} x {kind}" for kind, n in sorted(seen))
        facts.append(f"XLA devices: {counts}")
    facts.extend(jax_backends(summary))
    rows = tuple((Cell(k), Cell(v)) for k, v in summary.env.rows())
    return EnvironmentSection(
        facts=tuple(facts),
        machine=Table(("", ""), rows, keyed=True, title="Environment"),
        machines=machines_table(summary) if summary.machines else None,
        envs=envs_table(summary.variants),
    )


def jax_backends(summary: RunSummary) -> list[str]:
    """The stages that ran on torchax (JAX), with the versions they imported: one line each
    set of versions (a torchax stage runs in an environment of its own)."""
    found: dict[str, list[str]] = {}
    for stage in (s for v in summary.variants for s in v.stages):
        imported = stage.versions or {}
        if imported.get("torchax") and not imported.get("torch_xla"):
            jax, jaxlib, torch = (imported.get(k) or "?" for k in ("jax", "jaxlib", "torch"))
            line = f"torchax {imported['torchax']} on jax {jax} (jaxlib {jaxlib}, torch {torch})"
            found.setdefault(line, []).append(stage.name)
    return [f"{line}: stage {', '.join(dict.fromkeys(names))}" for line, names in found.items()]


def machines_table(summary: RunSummary) -> Table:
    """A merged run: each machine's environment side by side, and the stages it ran."""
    machines = summary.machines
    rows: dict[str, list[str]] = {"run folder": [m.run for m in machines]}
    rows["stages it ran"] = [", ".join(m.stages) or "none" for m in machines]
    rows["XLA device asked for"] = [m.xla_device or "?" for m in machines]
    for index, machine in enumerate(machines):
        for key, value in machine.env.rows():
            rows.setdefault(key, [""] * len(machines))[index] = value
    header = ("", *(f"machine {i + 1}" for i in range(len(machines))))
    cells = tuple((Cell(key), *map(Cell, values)) for key, values in rows.items())
    return Table(header, cells, keyed=True, title="Machines")


def envs_table(variants: tuple[VariantResult, ...]) -> Table | None:
    """Variants run in environments (--env): the outcome of each in each, and what its stages
    really imported; None when none ran in one."""
    envs = list(dict.fromkeys(v.env.name for v in variants if v.env))
    if not envs:
        return None
    outcomes: dict[str, dict[str, str]] = {}
    imported: dict[str, str] = {}
    for v in (v for v in variants if v.env):
        outcomes.setdefault(v.base_label, {})[v.env.name] = v.outcome.value
        found = next((s.versions for s in v.stages if (s.versions or {}).get("torch_xla")),
                     None)  # fmt: skip
        if found:
            imported[v.env.name] = f"torch {found['torch']}, torch_xla {found['torch_xla']}"
    rows = [[label, *(row.get(e, "") for e in envs)] for label, row in outcomes.items()]
    rows.append(["imported", *(imported.get(e, "?") for e in envs)])
    cells = tuple(tuple(map(Cell, row)) for row in rows)
    return Table(("variant", *envs), cells, keyed=True, title="Environments")


def results_table(variants: tuple[VariantResult, ...]) -> Table:
    """Every variant, those that did not behave as expected first: what it ended in, what
    was expected, and its time (how many of its stages the results cache gave)."""
    marks = {"pass": Cell("yes", tone="good"), "fail": Cell("no", tone="bad"),
             "skip": Cell("skipped")}  # fmt: skip
    rows = []
    for v in results_order(variants):
        reused = sum(bool(s.reused) for s in v.stages)
        seconds = f"{v.seconds:.1f}" + (f" ({reused} stages reused)" if reused else "")
        rows.append((Cell(v.label, code=True), Cell(v.outcome.value), Cell(v.expectation),
                     marks[v.mark], Cell(seconds)))  # fmt: skip
    header = ("variant", "outcome", "expected", "as expected", "seconds")
    return Table(header, tuple(rows), (False, False, False, False, True), title="Results")


def results_order(variants: tuple[VariantResult, ...]) -> list[VariantResult]:
    """Those that did not behave as expected first: a shortened table keeps them."""
    return sorted(variants, key=lambda v: v.passed is not False)


def reused_rows(variants: tuple[VariantResult, ...]) -> tuple[int, ...]:
    """The rows of the results table whose variant the results cache gave stages of."""
    order = results_order(variants)
    return tuple(i for i, v in enumerate(order) if any(s.reused for s in v.stages))


def minimized(found: MinimizeResult) -> Minimized:
    """What the minimizer kept and how small it got (the minimal program named), or plainly
    that nothing could be removed; what the graph minimizer removed (before -> after), and
    what each strategy cost."""
    if found.graph is None:
        return Minimized(kept(found))
    rows = [(Cell(what), Cell(before), Cell(after)) for what, before, after in found.graph.rows()]
    rows += [(Cell(c.param, code=True), Cell(repr(c.before), code=True),
              Cell(repr(c.after), code=True)) for c in found.changes]  # fmt: skip
    table = Table(("", "before", "after"), tuple(rows), (False, True, True))
    steps = "; ".join(
        f"{s.strategy}: {s.candidates} runs, {s.removed} operations removed"
        for s in found.graph.steps
    )
    return Minimized(kept(found), table, f"Oracle runs by strategy: {steps or 'none'}.")


def kept(found: MinimizeResult) -> Text:
    """What the minimizer kept, in a sentence or two a reader takes in at once."""
    cost = f"{found.candidates} candidate runs, {found.seconds:g} s, {found.stopped}"
    graph = found.graph
    if graph is None:
        if not found.changes:
            return (f"Nothing could be made smaller: no parameter moved with the outcome "
                    f"(`{found.target}`) kept ({cost}).")  # fmt: skip
        return found.describe()
    (before, after), program = graph.nodes, f"`{graph.program}`"
    if before == after and not found.changes:
        return (f"Nothing could be removed: all {before} operations of the captured program "
                f"are needed for the outcome (`{found.target}`), so {program} is the program "
                f"as captured ({cost}).")  # fmt: skip
    inputs, weights = graph.inputs, graph.weights
    return (f"Kept {after} of {before} operations ({inputs[1]} of {inputs[0]} inputs, "
            f"{weights[1]} of {weights[0]} weights), still `{found.target}`: the minimal "
            f"program is {program}, beside summary.json. {found.describe()}")  # fmt: skip


def figures(variants: tuple[VariantResult, ...]) -> Figures:
    """What report.html draws: loss curves, fp64 errors, difference sizes, stage timings."""
    loss = [LossCurves(v.label, loss_curves(v), loss_points(v)) for v in variants]
    loss = [found for found in loss if found.series or len(found.points) > 1]
    differences = []
    for variant in [v for v in variants if v.comparisons][:MAX_FIGURES]:
        shown = [c for c in variant.comparisons if not c.note][:MAX_BARS]
        if shown:  # equal: no difference, not a tiny one
            bars = tuple((c.tensor, _size(c), c.allclose) for c in shown)
            differences.append(DifferenceSizes(variant.label, bars))
    timings = tuple((f"{v.label} {s.name}", s.seconds if math.isfinite(s.seconds) else 0.0)
                    for v in variants[:MAX_FIGURES] for s in v.stages)  # fmt: skip
    errors = [curves for v in variants[:MAX_FIGURES] for curves in error_curves(v)]
    return Figures(tuple(loss[:MAX_FIGURES]), tuple(errors), tuple(differences), timings)


def _size(c) -> float | None:
    """A tensor's bar: None where equal; NaN where one side has NaN the other has not (its
    max abs reads inf, and a NaN is no large difference)."""
    if c.max_abs == 0:
        return None
    return math.nan if c.nan[0] != c.nan[1] else c.max_abs


def loss_curves(variant: VariantResult) -> tuple[tuple[str, tuple[float, ...]], ...]:
    """Every loss series (two or more steps) among the stages' metrics."""
    return tuple(
        (f"{stage.name} ({stage.backend}): {key}", tuple(values))
        for stage in variant.stages
        for key, values in stage.metrics.items()
        if "loss" in key and isinstance(values, list) and len(values) > 1
    )


def loss_points(variant: VariantResult) -> tuple[tuple[str, float], ...]:
    """The losses stages recorded once (an evaluation's loss on each backend): without them a
    run that trains on one backend and evaluates on two draws one curve only."""
    return tuple(
        (f"{stage.name} ({stage.backend}): {key}", float(value))
        for stage in variant.stages
        for key, value in stage.metrics.items()
        if "loss" in key and isinstance(value, int | float) and not isinstance(value, bool)
        and math.isfinite(value)
    )  # fmt: skip


def error_curves(variant: VariantResult) -> list[ErrorCurves]:
    """fp64: for each target stage, each tensor's error against float64 along the program, the
    reference's and the target's; where the target's starts to grow shows."""
    found = []
    for target in dict.fromkeys(c.target for c in variant.comparisons if c.errors is not None):
        judged = [c for c in variant.comparisons if c.target == target and c.errors]
        if not judged:
            continue
        first = variant.first_divergence.get(target)
        tensors = tuple(c.tensor for c in judged)
        found.append(ErrorCurves(
            label=variant.label,
            reference=judged[0].reference,
            target=target,
            tensors=tensors,
            reference_errors=tuple(c.errors[0] for c in judged if c.errors),
            target_errors=tuple(c.errors[1] for c in judged if c.errors),
            first=first,
            first_index=tensors.index(first) if first in tensors else None,
        ))  # fmt: skip
    return found
