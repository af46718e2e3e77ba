"""report.html: the report model (reprokit.reports.model) as one self-contained page (no
network, no script) with pictures.

Pictures where people would rather look than read: the loss curves of each backend for
variants that train, the size of each tensor's difference on a log scale, and stage timings.
matplotlib draws them as inline SVG, so the page is one file that opens anywhere.
"""

from __future__ import annotations

import io
import math
import re
from html import escape

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from reprokit.infra.redact import redact_text
from reprokit.reports.model import (
    Cell,
    DifferenceSizes,
    ErrorCurves,
    Evidence,
    Issue,
    LossCurves,
    Names,
    Report,
    Table,
    Text,
    Value,
)

MAX_SECTIONS = 12  # variants shown in detail: a page of 500 variants must still open quickly
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .6em}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#b00020;font-weight:600}.ok{color:#137333}figure{display:inline-block;margin:.5em}
code{background:#f4f4f4;padding:0 .2em}
"""


def html(report: Report) -> str:
    """The whole page as a string; every value escaped, every secret redacted."""
    body = _issue(report.issue) if report.issue else [f"<h1>{_text(report.opening)}</h1>"]
    body += [f"<p>{_text(report.bug)}</p>"] if report.bug and not report.issue else []
    body += [f"<p>{_text(report.headline)}</p>"]
    if report.checks:
        items = "".join(f"<li>{_text(line)}</li>" for line in report.checks)
        body.append(f"<p>What each case checks:</p><ul>{items}</ul>")
    for found in report.sweep:  # reprokit sweep: its table first, each model's report linked
        body += _table(found)
    body += _table(report.results)
    for shown in (*report.evidence, *report.noted)[:MAX_SECTIONS]:  # known bugs are evidence too
        body += _evidence(shown)
    if report.xla is not None:
        body += _table(report.xla)
    drawn = report.figures
    body += _figures("Loss curves per backend", [_loss(f) for f in drawn.loss])
    body += _figures("Error against float64, operation by operation",
                     [_errors(f) for f in drawn.errors])  # fmt: skip
    body += _figures("Size of each tensor's difference", [_sizes(f) for f in drawn.differences])
    body += _figures("Stage timings", [_timings(drawn.timings)] if drawn.timings else [])
    environment = report.environment
    body += _table(environment.machines or environment.machine)  # a merged run: each machine's
    if environment.envs is not None:
        body += _table(environment.envs)
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>reprokit report</title>"
        f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )
    return redact_text(page)


def _issue(found: Issue) -> list[str]:
    """What report.md says first: the title, the bug with its values, the other divergences."""
    lines = [f"<h1>{_text(found.title)}</h1>"]
    lines += [f"<blockquote>{_text(found.known)}</blockquote>"] if found.known else []
    lines += [f"<p>{_text(found.bug[0])}</p>"]
    lines += _table(found.witnesses, title=False) if found.witnesses else []
    lines += [f"<p>{_text(line)}</p>" for line in found.bug[1:]]
    if found.others:
        items = "".join(f"<li>{_text(line)}</li>" for line in found.others)
        lines.append(f"<p>Other differences of the same program:</p><ul>{items}</ul>")
    return lines


def _evidence(shown: Evidence) -> list[str]:
    """A variant's heading, where it diverges, and its comparisons."""
    lines = [f"<h2>{_text(shown.heading)}</h2>"]
    lines += _output(shown)
    lines += [f"<p>{_text(line)}</p>" for line in (*shown.divergence, *shown.host_reads)]
    if shown.comparisons is not None and shown.comparisons.windows:
        lines += _table(shown.comparisons.windows[0], shown.comparisons.rows(), title=False)
        lines.append(f"<p>{_text(shown.comparisons.footnote)}</p>")
    return lines


def _output(shown: Evidence) -> list[str]:
    """``reprokit wrap``: the last lines the script printed, and why it compiled again."""
    if shown.wrapped is None:
        return []
    lines, found = shown.wrapped.output, shown.wrapped.recompiles
    text = escape("\n".join(lines))
    parts = [f"<p>The last {len(lines)} lines it printed (stdout):</p><pre>{text}</pre>"] \
        if lines else []  # fmt: skip
    if found is not None:
        parts += [f"<p>{_text(found.said)}</p>"]
        parts += _table(found.causes, title=False) if found.causes.rows else []
        parts += _figures("Graphs compiled per step", [_per_step(found.per_step)])
        parts += _table(found.compiles)
        parts += [f"<p>{_text(found.repro)}</p>"] if found.repro else []
        if found.repro_text:
            parts += [
                f"<pre>{escape(found.repro_text)}</pre><pre>{escape(found.repro_output)}</pre>"
            ]
    return parts


def _per_step(counts: tuple[int, ...]) -> Figure:
    """A bar per step: how many graphs it compiled (0 once the cache holds the step's)."""
    figure, axes = _figure(6, 2.4)
    axes.bar(range(1, len(counts) + 1), counts, color="#b00020")
    axes.set(xlabel="step", ylabel="graphs compiled")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    return figure


def _table(found: Table, rows: list | None = None, *, title: bool = True) -> list[str]:
    """A table: a header row when it has one; a key / value table's first column as headers."""
    numeric = found.numeric or (False,) * len(found.header)
    lines = ["".join(f"<th>{escape(h)}</th>" for h in found.header)] if any(found.header) else []
    for row in found.rows if rows is None else rows:
        cells = [
            f"<th>{_value(value)}</th>" if found.keyed and i == 0 else _td(value, numeric[i])
            for i, value in enumerate(row)
        ]
        lines.append("".join(cells))
    heading = f"<h2>{escape(found.title)}</h2>" if title and found.title else ""
    return [f"{heading}<table>{''.join(f'<tr>{row}</tr>' for row in lines)}</table>"]


def _td(value: Value, numeric: bool) -> str:
    tone = {"bad": "bad", "good": "ok"}.get(value.tone, "") if isinstance(value, Cell) else ""
    classes = " ".join(c for c in (tone, "num" if numeric else "") if c)
    return f"<td class='{classes}'>{_value(value)}</td>" if classes else f"<td>{_value(value)}</td>"


def _value(value: Value) -> str:
    if isinstance(value, Names):
        return ", ".join(f"<code>{escape(n)}</code>" for n in value.items) or escape(value.empty)
    text = f"<code>{escape(value.text)}</code>" if value.code else escape(value.text)
    return f"<a href='{escape(value.link)}.html'>{text}</a>" if value.link else text


def _text(text: Text) -> str:
    """A sentence of the model, in HTML: escaped, its `name` and **strong** spans kept."""
    text = re.sub(r"`([^`]*)`", r"<code>\1</code>", escape(text))
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", text)


def _figures(title: str, figures: list[Figure]) -> list[str]:
    if not figures:
        return []
    return [f"<h2>{escape(title)}</h2>", *(f"<figure>{_svg(f)}</figure>" for f in figures)]


def _svg(figure: Figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: inline SVG


def _figure(width: float, height: float):
    """A figure of its own, outside pyplot's registry: nothing stays open after the page (a
    sweep writes hundreds), and no backend is chosen for the whole process."""
    figure = Figure(figsize=(width, height))
    return figure, figure.subplots()


def _gaps(values) -> list[float]:
    """NaN and inf as gaps in a line: no axis limit can be set from them."""
    return [v if math.isfinite(v) else math.nan for v in values]


def _word(size: float) -> str:
    return "NaN" if math.isnan(size) else "inf"


_STYLES = ("-", "--", ":", "-.")  # backends that agree draw on top of each other: told apart
_MARKERS = ("o", "s", "^", "D", "v")


def _loss(curves: LossCurves) -> Figure:
    """Each loss series a line of its own style, then each one-off loss (an evaluation on each
    backend) a point after the last step, its value in the legend: two that agree stay two."""
    figure, axes = _figure(6, 3.2)
    for i, (label, values) in enumerate(curves.series):
        axes.plot(range(1, len(values) + 1), _gaps(values), linestyle=_STYLES[i % len(_STYLES)],
                  marker=_MARKERS[i % len(_MARKERS)], markersize=7 - 2 * (i % 3),
                  label=label)  # fmt: skip
    after = max((len(values) for _, values in curves.series), default=0) + 1
    for i, (label, value) in enumerate(curves.points):
        axes.plot([after], [value], linestyle="none", marker=_MARKERS[(i + 1) % len(_MARKERS)],
                  markersize=9 - 3 * (i % 2), fillstyle="none" if i % 2 else "full",
                  label=f"{label} = {value:.8g}")  # fmt: skip
    if curves.points:
        axes.annotate("recorded once", (after, curves.points[0][1]), textcoords="offset points",
                      xytext=(0, 10), ha="center", fontsize="small")  # fmt: skip
    axes.set(title=curves.label, xlabel="step", ylabel="loss")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))  # off the curves
    return figure


def _sizes(sizes: DifferenceSizes) -> Figure:
    """A bar per differing tensor on a log scale; tensors exactly equal get no bar (zero has
    no place on a log scale, and a bar would read as a small difference) but the word."""
    figure, axes = _figure(6, 0.5 + 0.22 * len(sizes.bars))
    drawn = [(i, size, close) for i, (_, size, close) in enumerate(sizes.bars)
             if size and math.isfinite(size)]  # fmt: skip
    colours = ["#137333" if close else "#b00020" for *_, close in drawn]
    axes.barh([i for i, *_ in drawn], [size for _, size, _ in drawn], color=colours)
    axes.set_yticks(range(len(sizes.bars)), [tensor for tensor, *_ in sizes.bars])
    axes.set_ylim(len(sizes.bars) - 0.5, -0.5)  # in the order the stage saved them, first on top
    if drawn:  # from a decade below the smallest: its bar has a length to see
        axes.set_xscale("log")
        axes.set_xlim(left=min(size for _, size, _ in drawn) / 10)
    else:
        axes.set_xticks([])
    for i, (_, size, _) in enumerate(sizes.bars):  # no bar: the word
        if size is None or not math.isfinite(size):
            word, colour = ("= equal", "#137333") if size is None else (_word(size), "#b00020")
            axes.text(0.01, i, word, transform=axes.get_yaxis_transform(), va="center",
                      color=colour, fontsize="small")  # fmt: skip
    axes.set(title=f"{sizes.label}: max abs difference", xlabel="max |target - reference|")
    return figure


def _errors(curves: ErrorCurves) -> Figure:
    """Both stages' RMSE against float64 on a log scale; the first to differ marked."""
    figure, axes = _figure(7, 3)
    steps = range(len(curves.tensors))
    both = (*curves.reference_errors, *curves.target_errors)
    floor = min([e for e in both if 0 < e < math.inf] or [1.0]) / 10  # exact: below the least
    for errors, label in ((curves.reference_errors, curves.reference),
                          (curves.target_errors, curves.target)):  # fmt: skip
        nonfinite = sum(not math.isfinite(e) for e in errors)
        label += f" ({nonfinite} NaN or inf: not drawn)" if nonfinite else ""
        axes.plot(steps, _gaps([max(e, floor) for e in errors]), marker=".", label=label)
    if curves.first_index is not None:
        axes.axvline(curves.first_index, color="#b00020", linestyle="--",
                     label=f"first: {curves.first}")  # fmt: skip
    if any(math.isfinite(e) for e in both):  # a log scale needs one value to stand on
        axes.set_yscale("log")
    axes.set(title=f"{curves.label}: {curves.target}", xlabel="operation (execution order)",
             ylabel="RMSE against float64")  # fmt: skip
    axes.legend(fontsize="small")
    return figure


def _timings(rows: tuple[tuple[str, float], ...]) -> Figure:
    figure, axes = _figure(6, 0.5 + 0.22 * len(rows))
    axes.barh([label for label, _ in rows], [seconds for _, seconds in rows])
    axes.invert_yaxis()
    axes.set(xlabel="seconds", title="Stage wall time")
    return figure
