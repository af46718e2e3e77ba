"""report.md: the report model (reprokit.reports.model) in pytorch/xla's bug template.

report.md must fit one GitHub issue body (65,536 characters) whatever the run's size: when it
does not, the least important parts go first (the ``Budget``) and the report says what
bundle.zip holds instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from reprokit.infra.redact import redact_text
from reprokit.records.report import BUNDLE
from reprokit.reports.model import (
    Comparisons,
    EnvironmentSection,
    Evidence,
    FailedStage,
    Issue,
    Minimized,
    Names,
    Report,
    Table,
    Value,
)

GITHUB_BODY_LIMIT = 65_536
BUG_HEADING = "🐛 Bug"
MAX_PASTED = 40  # a repro this short is pasted as it is; a longer one is folded


@dataclass
class Budget:
    """How much of each part report.md shows; shrunk step by step until the body fits."""

    variants: int  # problem variants shown in detail
    rows: int = 12  # diff rows per failing variant
    scripts: int = 10**6  # failing variants whose script is inlined
    result_rows: int = 10**6  # rows of the all-variants table
    cut: dict[str, str] = field(default_factory=dict)  # part -> what bundle.zip holds instead

    def shrink(self, failing: int) -> bool:
        """Drop the next least important part; False when nothing is left to drop.

        A runnable script outlives everything but the verdict: it is what a maintainer needs.
        """
        if self.result_rows > 50:
            return self._set("result_rows", 50, "the results of every variant (summary.json)")
        if self.scripts > 1:
            return self._set("scripts", 1, "the scripts of all but the first variant shown")
        if self.rows > 3:
            return self._set("rows", 3, "the full diff tables (summary.json: comparisons)")
        if self.variants > 1:
            keep = self.variants // 2
            return self._set("variants", keep, f"the details of {failing - keep} variants")
        if self.result_rows:
            return self._set("result_rows", 0, "the results table (summary.json)")
        if self.scripts:
            return self._set("scripts", 0, "the repro script (*/repro.py)")
        return False

    def _set(self, part: str, value: int, note: str) -> bool:
        setattr(self, part, value)
        self.cut[part] = note
        return True


def markdown(report: Report, limit: int = GITHUB_BODY_LIMIT) -> str:
    """report.md, in pytorch/xla's bug template: at most ``limit`` characters."""
    budget = Budget(variants=max(len(report.evidence), len(report.noted)))
    while True:
        body = redact_text(_markdown(report, budget))
        if len(body) <= limit or not budget.shrink(len(report.evidence)):
            return body if len(body) <= limit else body[: limit - 20] + "\n\n(cut)\n"


def _markdown(report: Report, budget: Budget) -> str:
    if report.issue is not None:
        return _issue(report, report.issue)
    parts = [f"## {report.opening}", "", *([report.bug, ""] if report.bug else [])]
    parts += [f"reprokit: {report.headline}", ""]
    for found in report.sweep:  # reprokit sweep: its table first, each model's report linked
        parts += [*titled(found), ""]
    if report.checks:
        parts += ["What each case checks:", "", *(f"- {line}" for line in report.checks), ""]
    for shown in report.noted[: budget.variants]:  # a match that differs: where, and why noise
        parts += _evidence(shown, budget.rows)
    parts += ["## To Reproduce", ""]
    if report.command:
        parts += ["With reprokit, the whole run:", "", *fenced(report.command, "sh"), ""]
    for shown in report.evidence[: budget.scripts]:
        parts += _script(shown) + _wrapped_script(shown)
    for shown in report.evidence[: budget.variants]:
        parts += _evidence(shown, budget.rows)
    parts += ["## Expected behavior", "", *(f"- {line}" for line in report.expected), ""]
    parts += ["## Environment", "", *_environment(report.environment), ""]
    if report.xla is not None and budget.result_rows:
        parts += _rows_of(report.xla, budget.result_rows, "XLA stages")
    parts += ["## Additional context", ""]
    if report.minimized is not None:
        parts += _minimized(report.minimized)
    if budget.result_rows:
        parts += _results(report, budget.result_rows)
    too_large = [line for shown in report.evidence for line in shown.too_large]
    parts += [*too_large, ""] if too_large else []
    parts += [f"Everything else is in `{BUNDLE}` (scripts, logs, results, environment)."]
    if budget.cut:
        cut = "; ".join(budget.cut.values())
        parts.append(f"Left out of this body to fit GitHub's limit, all in `{BUNDLE}`: {cut}.")
    return "\n".join(parts) + "\n"


def _issue(report: Report, found: Issue) -> str:
    """The issue a maintainer reads, in pytorch/xla's bug template: its title first (for the
    title field), the bug with its values, the repro and its output, expected values."""
    parts = [f"# {found.title}", ""] + ([f"> {found.known}", ""] if found.known else [])
    if found.kind != "bug":
        return _unfiled(report, found, parts)
    parts += [f"## {BUG_HEADING}", "", *_paragraphs(found.bug[:1])]
    if found.witnesses is not None:  # the values first, then how far to trust the verdict
        parts += [*table(found.witnesses), ""]
    parts += _paragraphs(found.bug[1:])
    for hlo in found.hlo:  # what the whose line rests on
        parts += collapsed(f"{hlo.label} ({hlo.lines} lines of HLO)", fenced(hlo.text))
    if found.others:
        parts += ["Other differences of the same program, each born where its inputs agree:", ""]
        parts += [*(f"- {line}" for line in found.others), ""]
    parts += ["## To Reproduce", ""]
    if found.repro is not None and found.repro.lines <= MAX_PASTED:
        parts += [*fenced(found.repro.text, "python"), ""]
    elif found.repro is not None:
        summary = f"repro.py ({found.repro.lines} lines)"
        parts += collapsed(summary, fenced(found.repro.text, "python"))
    parts += [*fenced(found.output), ""] if found.output else []
    parts += [found.elsewhere, ""] if found.elsewhere else []
    parts += ["## Expected behavior", "", *_paragraphs(found.expected)]
    parts += ["## Environment", "", *_environment(report.environment), ""]
    parts += [found.not_run, ""] if found.not_run else []
    parts += ["## Additional context", "", *_paragraphs(found.context)]
    parts.append(f"Attached: `{BUNDLE}` (the scripts, their logs and results, the environment).")
    return "\n".join(parts) + "\n"


def _unfiled(report: Report, found: Issue, parts: list[str]) -> str:
    """No issue to paste (reprokit.reports.unfiled): what the differences are, in plain words,
    one row per root, and the environment they were seen in; no bug template, no repro."""
    parts += _paragraphs(found.bug[:1])
    parts += [*table(found.witnesses), ""] if found.witnesses is not None else []
    parts += _paragraphs(found.bug[1:])
    parts += [*fenced(found.output), ""] if found.output else []  # a failure's last words
    seen = replace(
        report.environment,
        facts=tuple(  # nothing here is reproducible on XLA
            f for f in report.environment.facts if not f.startswith("Reproducible on")
        ),
    )
    parts += ["## Environment", "", *_environment(seen), ""]
    parts += _paragraphs(found.context)
    return "\n".join(parts) + "\n"


def _paragraphs(lines: tuple[str, ...]) -> list[str]:
    return [part for line in lines for part in (line, "")]


def cell(value: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def fenced(text: str, language: str = "") -> list[str]:
    """A code block whose fence cannot be closed by the text inside."""
    fence = "~~~~" if "```" in text else "```"
    return [f"{fence}{language}", text.rstrip("\n"), fence]


def collapsed(summary: str, lines: list[str]) -> list[str]:
    return [f"<details><summary>{summary}</summary>", "", *lines, "", "</details>", ""]


def _script(shown: Evidence) -> list[str]:
    """A variant's standalone script, folded."""
    if shown.script is None:
        return []
    how = (
        f"Standalone, `PJRT_DEVICE=CPU python repro.py` for `{shown.label}` (torch and "
        "torch_xla only; one process: the operations on CPU, on XLA and in float64, then the "
        "float64 verdict; exit 1 when XLA differs or raises; `repro_stages.py` beside it is "
        "the stage version that `reprokit run minimal.toml` runs):"
        if shown.script.short
        else f"Standalone, `python repro.py` for `{shown.label}` (torch, torch_xla, numpy; "
        "every stage in a fresh process, then the comparison table):"
    )
    return [
        how,
        "",
        *collapsed(f"repro.py ({shown.script.lines} lines)", fenced(shown.script.text, "python")),
    ]


def _evidence(shown: Evidence, rows: int) -> list[str]:
    """A variant's heading, why it ended so, its failed stages, divergence, table, XLA."""
    lines = [f"### {shown.heading}", ""]
    for sentence in (shown.changed, shown.reason):
        lines += [sentence, ""] if sentence else []
    for stage in shown.failed:
        lines += _failed(stage)
    lines += _output(shown)
    for paragraph in (shown.reused, shown.divergence):
        lines += [*paragraph, ""] if paragraph else []
    if shown.comparisons is not None:
        lines += _comparisons(shown.comparisons, rows)
    for sentence in (*shown.host_reads, *shown.recompiled):
        lines += [sentence, ""]
    return lines


def _wrapped_script(shown: Evidence) -> list[str]:
    """``reprokit wrap``: the script the command above runs, as it was, folded."""
    if shown.wrapped is None or shown.wrapped.script is None:
        return []
    script = shown.wrapped.script
    return [
        f"The script it runs, as it ran (`{script.label}` in `{BUNDLE}`):",
        "",
        *collapsed(f"{script.label} ({script.lines} lines)", fenced(script.text, "python")),
    ]


def _output(shown: Evidence) -> list[str]:
    """``reprokit wrap``: the last lines the script printed, and why it compiled again."""
    if shown.wrapped is None:
        return []
    lines, found = shown.wrapped.output, shown.wrapped.recompiles
    parts = [f"The last {len(lines)} lines it printed (stdout):", "",
             *fenced("\n".join(lines)), ""] if lines else []  # fmt: skip
    if found is not None:
        parts += [found.said, ""]
        parts += [*table(found.causes), ""] if found.causes.rows else []
        parts += collapsed(f"every compile ({len(found.compiles.rows)})", table(found.compiles))
        parts += [found.repro, ""] if found.repro else []
        if found.repro_text:
            parts += [*fenced(found.repro_text, "python"), "", *fenced(found.repro_output), ""]
    return parts


def _failed(stage: FailedStage) -> list[str]:
    lines = [stage.sentence, ""]
    if stage.stderr_tail:
        lines += collapsed("the last lines of its stderr", fenced("\n".join(stage.stderr_tail)))
    return lines


def _comparisons(found: Comparisons, rows: int) -> list[str]:
    """One table of every target's window, at most ``rows`` of each, and what is left out."""
    shown = found.rows(rows)
    lines = table(found.windows[0], shown) if found.windows else []
    if hidden := found.compared - len(shown):
        lines.append(f"\n({hidden} more comparisons in summary.json)")
    return [*lines, "", found.footnote, ""]


def _environment(section: EnvironmentSection) -> list[str]:
    lines = [f"- {fact}" for fact in section.facts]
    if section.machines is not None:
        return [*lines, "", *titled(section.machines)]
    lines += ["", *table(section.machine)]
    return lines + (["", *titled(section.envs)] if section.envs is not None else [])


def _minimized(found: Minimized) -> list[str]:
    lines = [found.sentence, ""]
    if found.table is not None:
        lines += [*table(found.table), "", found.oracle, ""]
    return lines


def _rows_of(found: Table, rows: int, what: str) -> list[str]:
    """A titled table of at most ``rows`` rows, and how many more summary.json holds."""
    lines = titled(found, found.rows[:rows])
    if len(found.rows) > rows:
        lines.append(f"\n({len(found.rows) - rows} more {what} in summary.json)")
    return [*lines, ""]


def _results(report: Report, rows: int) -> list[str]:
    lines = _rows_of(report.results, rows, "variants")[:-1]
    if any(row < rows for row in report.reused_rows):
        note = "A reused stage did not run again: its script, environment and versions were"
        lines.append(f"\n{note} those of an earlier run (`reprokit run --no-cache` runs all).")
    return [*lines, ""]


def titled(found: Table, rows: tuple[tuple[Value, ...], ...] | None = None) -> list[str]:
    return [f"### {found.title}", "", *table(found, rows)]


def table(found: Table, rows: tuple[tuple[Value, ...], ...] | list | None = None) -> list[str]:
    """A GitHub table: its header, each column aligned, then ``rows`` (all when None)."""
    numeric = found.numeric or (False,) * len(found.header)
    lines = ["|" + "".join(f" {cell(h)} |" if h else " |" for h in found.header)]
    lines.append("| " + " | ".join("---:" if n else "---" for n in numeric) + " |")
    shown = found.rows if rows is None else rows
    return lines + ["| " + " | ".join(map(_value, row)) + " |" for row in shown]


def _value(value: Value) -> str:
    if isinstance(value, Names):
        return ", ".join(f"`{cell(name)}`" for name in value.items) or value.empty
    text = f"`{cell(value.text)}`" if value.code else cell(value.text)
    text = f"[{text}]({value.link}.md)" if value.link else text
    return f"**{text}**" if value.tone == "bad" else text
