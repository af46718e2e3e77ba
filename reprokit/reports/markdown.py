"""Reports of a run folder: an issue-ready report.md, a self-contained report.html, bundle.zip.

Everything is rendered from summary.json's records (and each failing variant's repro.py,
which is inlined), never by re-reading logs or result files. report.md must fit one GitHub
issue body (65,536 characters) whatever the run's size: when it does not, the least important
parts go first and the report says what bundle.zip holds instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reprokit.records import Comparison, RunSummary, VariantResult
from reprokit.redact import redact_text

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

    variants: int  # failing variants shown in detail
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
            return self._set("scripts", 1, "the scripts of all but the first failing variant")
        if self.rows > 3:
            return self._set("rows", 3, "the full diff tables (summary.json: comparisons)")
        if self.variants > 1:
            keep = self.variants // 2
            return self._set("variants", keep, f"the details of {failing - keep} failing variants")
        if self.result_rows:
            return self._set("result_rows", 0, "the results table (summary.json)")
        if self.scripts:
            return self._set("scripts", 0, "the repro script (*/repro.py)")
        return False

    def _set(self, part: str, value: int, note: str) -> bool:
        setattr(self, part, value)
        self.cut[part] = note
        return True


def markdown(summary: RunSummary, run_dir: Path, limit: int = GITHUB_BODY_LIMIT) -> str:
    """report.md: at most ``limit`` characters, whatever the size of the run."""
    failing = [v for v in summary.variants if v.passed is False]
    budget = Budget(variants=len(failing))
    while True:
        body = redact_text(_markdown(summary, run_dir, failing, budget))
        if len(body) <= limit or not budget.shrink(len(failing)):
            return body if len(body) <= limit else body[: limit - 20] + "\n\n(cut)\n"


def _markdown(summary, run_dir, failing, budget: Budget) -> str:
    parts = [f"**reprokit**: {verdict(summary)}", ""]
    if summary.minimized is not None:
        parts += [summary.minimized.describe(), ""]
    for index, variant in enumerate(failing[: budget.variants]):
        parts += _variant_section(variant, run_dir, budget.rows, inline=index < budget.scripts)
    if budget.result_rows:
        parts += _results_table(summary.variants, budget.result_rows)
    parts += ["### Environment", "", "| | |", "| --- | --- |"]
    parts += [f"| {_cell(k)} | {_cell(v)} |" for k, v in summary.env.rows()]
    parts += ["", f"Everything else is in `{BUNDLE}` (scripts, logs, results, environment)."]
    if budget.cut:
        cut = "; ".join(budget.cut.values())
        parts.append(f"Left out of this body to fit GitHub's limit, all in `{BUNDLE}`: {cut}.")
    return "\n".join(parts) + "\n"


def _variant_section(variant: VariantResult, run_dir: Path, rows: int, inline: bool):
    lines = [
        f"### `{variant.label}`: {variant.outcome.value} (expected {variant.expected.value})",
        "",
    ]
    if variant.reason:
        lines += [_cell(variant.reason), ""]
    failed = [s for s in variant.stages if s.failed]
    for stage in failed:
        code = f"signal {stage.signal}" if stage.signal else f"exit code {stage.returncode}"
        lines.append(f"- stage `{stage.name}` ({stage.backend}): {stage.status.value}, {code}")
    lines += [""] if failed else []
    lines += divergence_lines(variant)
    worst = sorted((c for c in variant.comparisons if not c.allclose), key=lambda c: -c.max_abs)
    if worst:
        lines += [
            "| tensor | stage vs reference | shape | max abs | max rel | mismatched |",
            "| --- | --- | --- | ---: | ---: | ---: |",
        ]
        lines += [_diff_row(c) for c in worst[:rows]]
        if len(worst) > rows:
            lines.append(f"\n({len(worst) - rows} more differing tensors in summary.json)")
        lines.append("")
    script = Path(run_dir) / variant.label / "repro.py"
    if inline and script.is_file():
        text = script.read_text(encoding="utf-8", errors="replace")
        fence = "~~~~" if "```" in text else "```"
        lines += [
            f"<details><summary>repro.py ({text.count(chr(10))} lines): "
            "<code>python repro.py</code></summary>",
            "",
            f"{fence}python",
            text.rstrip("\n"),
            fence,
            "",
            "</details>",
            "",
        ]
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
        parts.append(f"from `{_cell(info['source'])}`")
    return " ".join(parts) + "."


def _diff_row(c: Comparison) -> str:
    cells = {k: _cell(v) for k, v in c.cells().items()}
    shape = cells["note"] if c.shape is None else cells["shape"]
    mismatched = cells["note"] or cells["mismatched"]
    return (
        f"| `{cells['tensor']}` | {cells['stages']} | {shape} | {cells['max_abs']} | "
        f"{cells['max_rel']} | {mismatched} |"
    )


def _results_table(variants, rows: int) -> list[str]:
    shown = sorted(variants, key=lambda v: v.passed is not False)[:rows]
    marks = {"pass": "yes", "fail": "**no**", "skip": "skipped"}
    lines = ["### Results", "", "| variant | outcome | expected | as expected | seconds |"]
    lines.append("| --- | --- | --- | --- | ---: |")
    for v in shown:
        mark = marks[v.mark]
        lines.append(
            f"| `{_cell(v.label)}` | {v.outcome.value} | {v.expected.value} | {mark} | "
            f"{v.seconds:.1f} |"
        )
    if len(variants) > len(shown):
        lines.append(f"\n({len(variants) - len(shown)} more variants in summary.json)")
    return [*lines, ""]


def _cell(value: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(value).replace("|", "\\|").replace("\n", " ")
