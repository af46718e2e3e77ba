"""report.html: one self-contained page (no network, no script) with pictures.

Pictures where people would rather look than read: the loss curves of each backend for
variants that train, the size of each tensor's difference on a log scale, and stage timings.
matplotlib draws them as inline SVG, so the page is one file that opens anywhere.
"""

from __future__ import annotations

import io
import math
import re
from html import escape
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from reprokit.infra.redact import redact_text
from reprokit.records import RunSummary, VariantResult
from reprokit.reports.details import divergence_lines
from reprokit.reports.markdown import Table, envs_table, machines_table, problems, verdict

MAX_FIGURES = 12  # per kind: a page of 500 variants must still open quickly
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .6em}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#b00020;font-weight:600}.ok{color:#137333}figure{display:inline-block;margin:.5em}
code{background:#f4f4f4;padding:0 .2em}
"""


def html(summary: RunSummary, run_dir: Path) -> str:
    """The whole page as a string; every value escaped, every secret redacted."""
    body = [f"<h1>reprokit report</h1><p>{_text(verdict(summary))}</p>"]
    body += _results(summary.variants)
    for variant in problems(summary)[:MAX_FIGURES]:  # known bugs are evidence too
        body += _variant(variant)
    body += _figures("Loss curves per backend", _loss_figures(summary.variants))
    errors = _error_figures(summary.variants)
    body += _figures("Error against float64, operation by operation", errors)
    body += _figures("Size of each tensor's difference", _diff_figures(summary.variants))
    body += _figures("Stage timings", [_timing_figure(summary.variants)])
    if summary.machines:  # a merged run: each machine's
        body += _table("Machines", machines_table(summary))
    else:
        body += _table("Environment", (["", ""], [list(row) for row in summary.env.rows()]))
    if envs := envs_table(summary.variants):
        body += _table("Environments", envs)
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>reprokit report</title>"
        f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )
    return redact_text(page)


def _table(title: str, table: Table) -> list[str]:
    header, rows = table
    cells = ["".join(f"<th>{escape(h)}</th>" for h in header)] if any(header) else []
    for key, *values in rows:
        cells.append(f"<th>{escape(key)}</th>" + "".join(f"<td>{escape(v)}</td>" for v in values))
    body = "".join(f"<tr>{row}</tr>" for row in cells)
    return [f"<h2>{title}</h2><table>{body}</table>"]


def _results(variants) -> list[str]:
    rows = []
    for v in variants:
        mark = {"pass": ("ok", "yes"), "fail": ("bad", "no"), "skip": ("", "skipped")}[v.mark]
        rows.append(
            f"<tr><td><code>{escape(v.label)}</code></td><td>{v.outcome.value}</td>"
            f"<td>{escape(v.expectation)}</td><td class='{mark[0]}'>{mark[1]}</td>"
            f"<td class='num'>{v.seconds:.1f}</td></tr>"
        )
    head = "<tr><th>variant</th><th>outcome</th><th>expected</th><th>as expected</th><th>s</th>"
    return [f"<h2>Results</h2><table>{head}</tr>{''.join(rows)}</table>"]


def _variant(variant: VariantResult) -> list[str]:
    lines = [
        f"<h2><code>{escape(variant.label)}</code>: {variant.outcome.value} "
        f"(expected {escape(variant.expectation)})</h2>"
    ]
    lines += [f"<p>{_text(line)}</p>" for line in divergence_lines(variant) if line]
    cells = [{k: escape(v) for k, v in c.cells().items()} for c in variant.comparisons
             if not c.allclose]  # fmt: skip
    rows = "".join(
        f"<tr><td><code>{c['tensor']}</code></td><td>{c['stages']}</td>"
        f"<td class='num'>{c['max_abs']}</td><td class='num'>{c['max_rel']}</td>"
        f"<td class='num'>{c['mismatched']}</td><td>{c['note']}</td></tr>"
        for c in cells
    )
    if rows:
        head = "<tr><th>tensor</th><th>stages</th><th>max abs</th><th>max rel</th>"
        lines.append(f"<table>{head}<th>mismatched</th><th>note</th></tr>{rows}</table>")
    return lines


def _text(markdown_line: str) -> str:
    """A line written for report.md, in HTML: escaped, with its `code` spans kept."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", escape(markdown_line))


def _figures(title: str, figures: list) -> list[str]:
    figures = [f for f in figures if f is not None]
    if not figures:
        return []
    return [f"<h2>{escape(title)}</h2>", *(f"<figure>{_svg(f)}</figure>" for f in figures)]


def _svg(figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: inline SVG


def _loss_figures(variants) -> list:
    figures = []
    for variant in variants:
        curves = _loss_curves(variant)
        if curves and len(figures) < MAX_FIGURES:
            figure, axes = plt.subplots(figsize=(5, 3))
            for label, values in curves.items():
                axes.plot(range(1, len(values) + 1), values, marker="o", label=label)
            axes.set(title=variant.label, xlabel="step", ylabel="loss")
            axes.xaxis.set_major_locator(MaxNLocator(integer=True))
            axes.legend(fontsize="small")
            figures.append(figure)
    return figures


def _loss_curves(variant: VariantResult) -> dict[str, list[float]]:
    """Every loss series (two or more steps) among the stages' metrics."""
    return {
        f"{stage.name} ({stage.backend}): {key}": values
        for stage in variant.stages
        for key, values in stage.metrics.items()
        if "loss" in key and isinstance(values, list) and len(values) > 1
    }


def _diff_figures(variants) -> list:
    figures = []
    for variant in [v for v in variants if v.comparisons][:MAX_FIGURES]:
        shown = [c for c in variant.comparisons if not c.note][:40]
        if not shown:
            continue
        figure, axes = plt.subplots(figsize=(6, 0.5 + 0.22 * len(shown)))
        values = [max(c.max_abs, 1e-30) for c in shown]  # log scale: 0 drawn at 1e-30
        colours = ["#137333" if c.allclose else "#b00020" for c in shown]
        axes.barh([c.tensor for c in shown], values, color=colours)
        axes.set_xscale("log")
        axes.invert_yaxis()  # in the order the stage saved them, first at the top
        axes.set(title=f"{variant.label}: max abs difference", xlabel="max |target - reference|")
        figures.append(figure)
    return figures


def _error_figures(variants) -> list:
    """For the fp64 method: each stage's RMSE against float64 along the program, the
    reference's and the target's, on a log scale; where the target's starts to grow shows."""
    figures = []
    for variant in variants[:MAX_FIGURES]:
        for target in {c.target for c in variant.comparisons if c.errors is not None}:
            judged = [c for c in variant.comparisons if c.target == target and c.errors]
            figure, axes = plt.subplots(figsize=(7, 3))
            steps = range(len(judged))
            positive = [e for c in judged for e in c.errors if e > 0] or [1.0]
            floor = min(positive) / 10  # an exact result drawn just below the smallest error
            for side, label in ((0, judged[0].reference), (1, target)):
                errors = [max(c.errors[side], floor) for c in judged]
                axes.plot(steps, errors, marker=".", label=label)
            if first := variant.first_divergence.get(target):
                index = next((i for i, c in enumerate(judged) if c.tensor == first), None)
                if index is not None:
                    axes.axvline(index, color="#b00020", linestyle="--", label=f"first: {first}")
            axes.set_yscale("log")
            axes.set(title=f"{variant.label}: {target}", xlabel="operation (execution order)",
                     ylabel="RMSE against float64")  # fmt: skip
            axes.legend(fontsize="small")
            figures.append(figure)
    return figures


def _timing_figure(variants):
    rows = [(f"{v.label} {s.name}", s.seconds) for v in variants[:MAX_FIGURES] for s in v.stages]
    if not rows:
        return None
    figure, axes = plt.subplots(figsize=(6, 0.5 + 0.22 * len(rows)))
    axes.barh([r[0] for r in rows], [r[1] if math.isfinite(r[1]) else 0 for r in rows])
    axes.invert_yaxis()
    axes.set(xlabel="seconds", title="Stage wall time")
    return figure
