"""Reports of a run folder: an issue-ready report.md, a self-contained report.html, bundle.zip.

Everything is rendered from summary.json's records (and each failing variant's repro.py,
which is inlined), never by re-reading logs or result files. report.md must fit one GitHub
issue body (65,536 characters) whatever the run's size: when it does not, the least important
parts go first and the report says what bundle.zip holds instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reprokit.infra.redact import redact_text
from reprokit.records import MinimizeResult, Outcome, RunSummary, VariantResult
from reprokit.reports.bundle import ATTACHMENT_LIMIT
from reprokit.reports.details import cell, collapsed, fenced, variant_section

GITHUB_BODY_LIMIT = 65_536
BUNDLE = "bundle.zip"


def verdict(summary: RunSummary) -> str:
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


def problems(summary: RunSummary) -> list[VariantResult]:
    """The variants a maintainer needs to see: those that did not behave as expected, then
    those that show a problem (an outcome other than match) as their case expected: known bugs
    are evidence too."""
    unexpected = [v for v in summary.variants if v.passed is False]
    known = [v for v in summary.variants if v.passed and v.outcome is not Outcome.MATCH]
    return unexpected + known


def markdown(summary: RunSummary, run_dir: Path, limit: int = GITHUB_BODY_LIMIT) -> str:
    """report.md, in pytorch/xla's bug template: at most ``limit`` characters."""
    shown = problems(summary)
    budget = Budget(variants=len(shown))
    while True:
        body = redact_text(_markdown(summary, run_dir, shown, budget))
        if len(body) <= limit or not budget.shrink(len(shown)):
            return body if len(body) <= limit else body[: limit - 20] + "\n\n(cut)\n"


def _markdown(summary: RunSummary, run_dir: Path, shown: list, budget: Budget) -> str:
    parts = ["## 🐛 Bug", "", *_bug(summary, shown), "", "## To Reproduce", ""]
    parts += _reproduce(summary, run_dir, shown[: budget.scripts])
    for variant in shown[: budget.variants]:
        parts += variant_section(variant, budget.rows)
    parts += ["## Expected behavior", "", *_expected(shown or list(summary.variants)), ""]
    parts += ["## Environment", "", *_environment(summary), ""]
    parts += ["## Additional context", ""]
    if summary.minimized is not None:
        parts += [summary.minimized.describe(), "", *_minimized_table(summary.minimized)]
    if budget.result_rows:
        parts += _results_table(summary.variants, budget.result_rows)
    parts += _too_large(run_dir, shown)
    parts += [f"Everything else is in `{BUNDLE}` (scripts, logs, results, environment)."]
    if budget.cut:
        cut = "; ".join(budget.cut.values())
        parts.append(f"Left out of this body to fit GitHub's limit, all in `{BUNDLE}`: {cut}.")
    return "\n".join(parts) + "\n"


def _minimized_table(found: MinimizeResult) -> list[str]:
    """What the graph minimizer removed (before -> after), and what each strategy cost."""
    if found.graph is None:
        return []
    lines = ["| | before | after |", "| --- | ---: | ---: |"]
    lines += [f"| {what} | {before} | {after} |" for what, before, after in found.graph.rows()]
    lines += [f"| `{cell(c.param)}` | `{cell(repr(c.before))}` | `{cell(repr(c.after))}` |"
              for c in found.changes]  # fmt: skip
    steps = "; ".join(
        f"{s.strategy}: {s.candidates} runs, {s.removed} operations removed"
        for s in found.graph.steps
    )
    return [*lines, "", f"Oracle runs by strategy: {steps or 'none'}.", ""]


def _bug(summary: RunSummary, shown: list[VariantResult]) -> list[str]:
    """One paragraph: what goes wrong, from the first problem's case and verdict."""
    lines = []
    if shown:
        first = shown[0]
        what = first.title or first.case
        why = f" ({cell(first.reason)})" if first.reason else ""
        known = ", as its case expects (a known problem)."
        ending = known if first.passed else f", where its case expects {first.expected.value}."
        lines.append(f"{what}: `{first.label}` ends in **{first.outcome.value}**{why}{ending}")
        if first.description:
            lines[0] += f" {cell(first.description)}"
        lines.append("")
    return [*lines, f"reprokit: {verdict(summary)}"]


def _reproduce(summary: RunSummary, run_dir: Path, inline: list[VariantResult]) -> list[str]:
    """The command that reruns the run, then each inlined variant's standalone script."""
    lines = []
    if summary.argv:
        command = " ".join(["reprokit", *summary.argv[1:]]) if summary.argv else ""
        lines += ["With reprokit, the whole run:", "", *fenced(command, "sh"), ""]
    for variant in inline:
        script = Path(run_dir) / variant.label / "repro.py"
        if not script.is_file():
            continue
        text = script.read_text(encoding="utf-8", errors="replace")
        lines += [
            f"Standalone, `python repro.py` for `{variant.label}` (torch, torch_xla, numpy; "
            "every stage in a fresh process, then the comparison table):",
            "",
        ]
        summary_line = f"repro.py ({text.count(chr(10))} lines)"
        lines += collapsed(summary_line, fenced(text, "python"))
    return lines


def _expected(variants: list[VariantResult]) -> list[str]:
    """From each variant's [expect], and the tolerances it was judged with."""
    lines = []
    for v in variants[:10]:
        if v.expected is Outcome.MATCH:
            tolerances = sorted({(c.rtol, c.atol) for c in v.comparisons if c.shape is not None})
            within = ", ".join(f"rtol={r:g}, atol={a:g}" for r, a in tolerances[:3])
            text = "every stage ends well and agrees with its reference stage"
            text += f" within {within}" if within else ""
            if any(c.method == "fp64" for c in v.comparisons):
                text += ", or stays within a few times the reference's own error against float64"
            lines.append(f"- `{v.label}`: {text}.")
        else:
            lines.append(
                f"- `{v.label}`: the case records the known outcome `{v.expected.value}`; without "
                "the bug it would be `match`."
            )
        if v.observed or v.expected_from not in (None, "[expect]"):
            where = f"; observed: {cell(v.observed)}" if v.observed else ""
            lines[-1] += f" (the case's {v.expected_from or '[expect]'}{where})"
    return lines


def _environment(summary: RunSummary) -> list[str]:
    """The backend as the XLA stages saw it, the versions, then the environment table."""
    seen = {(s.xla["device_kind"], s.xla["devices"]) for v in summary.variants for s in v.stages
            if s.xla and "device_kind" in s.xla}  # fmt: skip
    kinds = sorted({kind for kind, _ in seen}) or [summary.xla_device or "?"]
    versions = summary.env.versions
    lines = [f"- Reproducible on XLA backend [{'/'.join(kinds)}]"]
    lines.append(f"- torch_xla version: {versions.get('torch_xla') or '?'} "
                 f"(torch {versions.get('torch') or '?'})")  # fmt: skip
    if seen:
        counts = ", ".join(f"{n} x {kind}" for kind, n in sorted(seen))
        lines.append(f"- XLA devices the stages saw: {counts}")
    if summary.machines:
        return [*lines, "", *_markdown_table("Machines", machines_table(summary))]
    lines += ["", "| | |", "| --- | --- |"]
    lines += [f"| {cell(k)} | {cell(v)} |" for k, v in summary.env.rows()]
    if envs := envs_table(summary.variants):
        lines += ["", *_markdown_table("Environments", envs)]
    return lines


Table = tuple[list[str], list[list[str]]]  # a header, and rows: Markdown's and HTML's


def machines_table(summary: RunSummary) -> Table:
    """A merged run: each machine's environment side by side, and the stages it ran."""
    machines = summary.machines
    rows: dict[str, list[str]] = {"run folder": [m.run for m in machines]}
    rows["stages it ran"] = [", ".join(m.stages) or "none" for m in machines]
    rows["XLA device asked for"] = [m.xla_device or "?" for m in machines]
    for index, machine in enumerate(machines):
        for key, value in machine.env.rows():
            rows.setdefault(key, [""] * len(machines))[index] = value
    header = ["", *(f"machine {i + 1}" for i in range(len(machines)))]
    return header, [[key, *values] for key, values in rows.items()]


def envs_table(variants: tuple[VariantResult, ...]) -> Table | None:
    """Variants run in environments (--env): the outcome of each in each, and what its stages
    really imported; None when none ran in one."""
    envs = list(dict.fromkeys(v.env["name"] for v in variants if v.env))
    if not envs:
        return None
    outcomes: dict[str, dict[str, str]] = {}
    imported: dict[str, str] = {}
    for v in (v for v in variants if v.env):
        outcomes.setdefault(v.base_label, {})[v.env["name"]] = v.outcome.value
        found = next((s.versions for s in v.stages if (s.versions or {}).get("torch_xla")),
                     None)  # fmt: skip
        if found:
            imported[v.env["name"]] = f"torch {found['torch']}, torch_xla {found['torch_xla']}"
    rows = [[label, *(row.get(e, "") for e in envs)] for label, row in outcomes.items()]
    return ["variant", *envs], [*rows, ["imported", *(imported.get(e, "?") for e in envs)]]


def _markdown_table(title: str, table: Table) -> list[str]:
    header, rows = table
    lines = [f"### {title}", "", "| " + " | ".join(map(cell, header)) + " |"]
    lines.append("|" + " --- |" * len(header))
    return lines + ["| " + " | ".join(map(cell, row)) + " |" for row in rows]


def _too_large(run_dir: Path, shown: list[VariantResult]) -> list[str]:
    """Files a case brought beside its script (an exported program) too large to attach."""
    lines = []
    for variant in shown:
        folder = Path(run_dir) / variant.label
        brought = [p for p in folder.glob("*") if p.is_file() and p.name != "repro.py"]
        for path in (p for p in brought if p.stat().st_size > ATTACHMENT_LIMIT):
            lines.append(
                f"`{variant.label}/{path.name}` ({path.stat().st_size / 1e6:.0f} MB) is over "
                "GitHub's 25 MB attachment limit and not in the bundle: share it another way, "
                "or capture again with `--random-inputs` and a smaller model or batch."
            )
    return [*lines, ""] if lines else []


def _results_table(variants, rows: int) -> list[str]:
    shown = sorted(variants, key=lambda v: v.passed is not False)[:rows]
    marks = {"pass": "yes", "fail": "**no**", "skip": "skipped"}
    lines = ["### Results", "", "| variant | outcome | expected | as expected | seconds |"]
    lines.append("| --- | --- | --- | --- | ---: |")
    for v in shown:
        mark = marks[v.mark]
        reused = sum(bool(s.reused) for s in v.stages)
        seconds = f"{v.seconds:.1f}" + (f" ({reused} stages reused)" if reused else "")
        lines.append(
            f"| `{cell(v.label)}` | {v.outcome.value} | {v.expectation} | {mark} | {seconds} |"
        )
    if len(variants) > len(shown):
        lines.append(f"\n({len(variants) - len(shown)} more variants in summary.json)")
    if any(s.reused for v in shown for s in v.stages):
        note = "A reused stage did not run again: its script, environment and versions were"
        lines.append(f"\n{note} those of an earlier run (`reprokit run --no-cache` runs all).")
    return [*lines, ""]
