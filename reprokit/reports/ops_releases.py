"""report.md and report.html of a ``reprokit ops --releases`` folder, rendered from its
ops_releases.json: the op x release table. Rows where the releases disagree come first (a
regression or a fix: the first release with the last one's answer is named), then the ops
that diverge alike on every release; the ops that agree everywhere are counted, not listed.
Each cell links the group's repro in that release's folder; each release's own report.md
holds the rest (triggers, skips, families)."""

from __future__ import annotations

from html import escape
from pathlib import Path

from reprokit.records import Reports, RunSummary
from reprokit.records.ops_releases import (
    AGREES,
    DIFFERS,
    HTML,
    MARKDOWN,
    NOT_SWEPT,
    OpRow,
    OpsReleases,
    ReleaseCell,
    read_ops_releases,
)

COLOURS = {DIFFERS: "#f8d7da", AGREES: "#d4edda", NOT_SWEPT: "#eeeeee"}
ROWS = 800  # rows of the table at most (a whole sweep's ops fit)


def write_reports(folder: Path, table: OpsReleases | None = None) -> list[Path]:
    """DIR/report.md and DIR/report.html from ``table`` (read from DIR when not given)."""
    table = table or read_ops_releases(folder)
    md, page = Path(folder) / MARKDOWN, Path(folder) / HTML
    md.write_text(markdown(table), "utf-8")
    page.write_text(html(table), "utf-8")
    return [md, page]


def reports(folder: Path, out_dir: Path | None = None) -> Reports:
    """What ``reprokit report DIR`` gives for a releases folder: report.md and report.html
    (in ``out_dir``)."""
    table = read_ops_releases(folder)
    target = Path(out_dir or folder)
    target.mkdir(parents=True, exist_ok=True)
    written = write_reports(target, table)
    summary = RunSummary(started="", argv=tuple(table.argv), interrupted=table.interrupted)
    return Reports(summary, tuple(written), title=headline(table))


def headline(table: OpsReleases) -> str:
    names = [r.name for r in table.releases]
    changed = sum(1 for r in table.rows if r.changed)
    differ = sum(1 for r in table.rows if any(c.state == DIFFERS for c in r.cells.values()))
    stopped = " (interrupted: what finished)" if table.interrupted else ""
    return (
        f"{len(table.rows)} OpInfos on {', '.join(names)}: {differ} diverge on some release, "
        f"{changed} differently across releases{stopped}"
    )


def shown(table: OpsReleases) -> list[OpRow]:
    """The rows a report lists: those that change across releases, then those that diverge
    alike everywhere."""
    changed = [r for r in table.rows if r.changed]
    alike = [
        r for r in table.rows if not r.changed and any(c.state == DIFFERS for c in r.cells.values())
    ]
    return (changed + alike)[:ROWS]


def since(row: OpRow, names: list[str]) -> str:
    """Where the answer changed: ``since 2.9 (2.8: agrees)``, for a row that changed."""
    cells = [(n, row.cells[n]) for n in names if n in row.cells]
    swept = [(n, c) for n, c in cells if c.state != NOT_SWEPT]
    if not row.changed or not swept:
        return ""
    last = swept[-1][1].said()
    first = next(n for n, c in reversed(swept) if c.said() != last)
    after = swept[[n for n, _ in swept].index(first) + 1][0]
    return f"since {after} ({first}: {row.cells[first].said()})"


def markdown(table: OpsReleases) -> str:
    names = [r.name for r in table.releases]
    lines = [f"# reprokit ops across releases: {headline(table)}", ""]
    for r in table.releases:
        versions = ", ".join(f"{k} {v}" for k, v in r.versions.items())
        cut = ", interrupted" if r.interrupted else ""
        lines.append(
            f"- **{r.name}** ({versions}): {r.groups} groups in {r.samples:,} samples, "
            f"{r.seconds:,.0f} s{cut}: [{r.name}/{MARKDOWN}]({r.name}/{MARKDOWN})"
        )
    lines += ["", "## Op x release", ""]
    rows = shown(table)
    if not rows:
        lines += ["No divergence on any release.", ""]
    else:
        lines += ["| op | " + " | ".join(names) + " | changed |"]
        lines += ["| --- " * (len(names) + 2) + "|"]
        for row in rows:
            cells = [_md_cell(row.cells.get(n, ReleaseCell(NOT_SWEPT)), n) for n in names]
            lines.append(f"| `{row.name}` | " + " | ".join(cells) + f" | {since(row, names)} |")
        lines.append("")
    agree = sum(1 for r in table.rows if all(c.state != DIFFERS for c in r.cells.values()))
    lines += [f"{agree} more OpInfos agree with CPU and float64 on every release swept.", ""]
    return "\n".join(lines)


def _md_cell(cell: ReleaseCell, name: str) -> str:
    if cell.state != DIFFERS:
        return cell.state
    return "<br>".join(
        f"[{g['kind']}]({name}/{g['repro']}) {g['passed']} {'/'.join(g['dtypes'])}"
        if g.get("repro")
        else f"{g['kind']} {g['passed']} {'/'.join(g['dtypes'])}"
        for g in cell.groups
    )


def html(table: OpsReleases) -> str:
    """The table as a matrix: one row per op shown, one coloured cell per release."""
    names = [r.name for r in table.releases]
    head = "".join(f"<th><a href='{escape(n)}/{MARKDOWN}'>{escape(n)}</a></th>" for n in names)
    body = []
    for row in shown(table):
        cells = "".join(_html_cell(row.cells.get(n, ReleaseCell(NOT_SWEPT)), n) for n in names)
        body.append(
            f"<tr><th><code>{escape(row.name)}</code></th>{cells}"
            f"<td>{escape(since(row, names))}</td></tr>"
        )
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>reprokit ops across "
        f"releases</title><style>{style}</style></head><body>"
        f"<h1>{escape(headline(table))}</h1><table><tr><th>op</th>{head}<th>changed</th></tr>"
        f"{''.join(body)}</table></body></html>\n"
    )


def _html_cell(cell: ReleaseCell, name: str) -> str:
    colour = COLOURS[cell.state]
    if cell.state != DIFFERS:
        return f"<td style='background:{colour}'>{escape(cell.state)}</td>"
    parts = []
    for g in cell.groups:
        said = escape(f"{g['kind']} {g['passed']} {'/'.join(g['dtypes'])}")
        link = g.get("repro")
        parts.append(f"<a href='{escape(name)}/{escape(link)}'>{said}</a>" if link else said)
    return f"<td style='background:{colour}'>{'<br>'.join(parts)}</td>"
