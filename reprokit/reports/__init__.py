"""Reports of a run folder, rendered from its summary.json records: an issue-ready report.md,
a self-contained report.html, report.json and bundle.zip."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.infra.redact import redact_text
from reprokit.records import SUMMARY, Reports, RunSummary, read_summary
from reprokit.records.folder import ISSUES, VariantFolder, issue_file
from reprokit.records.report import BUNDLE, REPORT_HTML, REPORT_JSON, REPORT_MD
from reprokit.reports import ops
from reprokit.reports.build import build_report, headline, problems
from reprokit.reports.bundle import environments, write_bundle
from reprokit.reports.hint import minimize_hint
from reprokit.reports.markdown import markdown
from reprokit.reports.model import Issue
from reprokit.reports.paths import public_paths, user_home

FORMATS = ("md", "html", "json", "all")
__all__ = ["FORMATS", "build_report", "headline", "load", "write_reports"]


def load(run_dir: Path) -> RunSummary:
    """The run's summary, or a clear error when the folder holds none (or a broken one)."""
    path = Path(run_dir) / SUMMARY
    if not path.is_file():
        raise ReprokitError(
            "no summary.json here", run_dir, hint="Give the folder `reprokit run -o` wrote."
        )
    try:
        return read_summary(Path(run_dir))
    except (ValueError, KeyError, TypeError) as exc:
        raise ReprokitError(f"summary.json is not readable: {exc}", path) from None


def write_reports(run_dir: Path, *, formats: str = "all", out_dir: Path | None = None) -> Reports:
    """Write the asked-for reports (and always bundle.zip); return the summary and their paths."""
    if formats not in FORMATS:
        raise ReprokitError(f"unknown format {formats!r}", hint=f"Use one of {', '.join(FORMATS)}.")
    if ops.is_ops_folder(run_dir) and not (Path(run_dir) / SUMMARY).is_file():
        return ops.reports(run_dir, out_dir)  # a `reprokit ops` folder: its report.md
    summary = load(run_dir)
    out_dir = Path(out_dir or run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = build_report(summary, run_dir)
    public = _public(summary, Path(run_dir))
    written = []
    if formats in ("md", "all"):
        written.append(_write(out_dir / REPORT_MD, public_paths(markdown(report), **public)))
    if formats in ("html", "all"):
        from reprokit.reports.html import html  # matplotlib: only when asked for

        written.append(_write(out_dir / REPORT_HTML, public_paths(html(report), **public)))
    if formats in ("json", "all"):
        data = {"verdict": report.headline, **summary.to_json()}
        text = public_paths(redact_text(json.dumps(data, indent=2)), **public)
        written.append(_write(out_dir / REPORT_JSON, text))

    if formats in ("md", "all") and len(report.issues) > 1:  # one issue file per root
        (out_dir / ISSUES).mkdir(exist_ok=True)
        for one in report.issues:
            text = public_paths(markdown(replace(report, issue=one)), **public)
            written.append(_write(out_dir / ISSUES / issue_file(one.name), text))
    written += _model_reports(summary, Path(run_dir), out_dir, formats, public)  # reprokit sweep
    written.append(write_bundle(run_dir, out_dir / BUNDLE))
    found = report.issue
    title = redact_text(found.title).replace("`", "") if found else None
    known = _known(found)
    step = _next_step(summary, Path(run_dir), found)
    return Reports(summary, tuple(written), title, step, known, found.kind if found else "bug")


def _known(found: Issue | None) -> str | None:
    """Where report.md's bug is known, for the command to say: upstream (leading the issue), or
    written up by reprokit (a line of its context)."""
    if found is None:
        return None
    return found.known or next((c for c in found.context if c.startswith("Known: ")), None)


def _next_step(summary: RunSummary, run_dir: Path, found: Issue | None) -> str | None:
    """`reprokit minimize` of the variant the issue is about, when its repro is the captured
    program's harness: the short repro is what a maintainer reads."""
    if found is None or (found.elsewhere is None and found.kind != "no repro"):
        return None
    (variant,) = problems(summary)  # an issue is the report of a run's one problem
    case = VariantFolder(run_dir / variant.label).case
    if not variant.captured or not case.is_file():
        return None
    return minimize_hint(run_dir, variant.label)  # quoted: pasted into a shell as it is


def _model_reports(
    summary: RunSummary, run_dir: Path, out_dir: Path, formats: str, public: dict[str, Any]
) -> list[Path]:
    """A sweep's model by model reports (reprokit.reports.sweep), in OUT_DIR/models/NAME/."""
    from reprokit.reports.sweep import model_summaries

    written = []
    for folder, part in model_summaries(summary, run_dir):
        report = build_report(part, run_dir, model=True)
        (out_dir / folder).mkdir(parents=True, exist_ok=True)
        if formats in ("md", "all"):
            text = public_paths(markdown(report), **public)
            written.append(_write(out_dir / folder / REPORT_MD, text))
        if formats in ("html", "all"):
            from reprokit.reports.html import html

            text = public_paths(html(report), **public)
            written.append(_write(out_dir / folder / REPORT_HTML, text))
    return written


def _public(summary: RunSummary, run_dir: Path) -> dict[str, Any]:
    """How the reports write paths: inside the run folder relative to it, the rest under ``~``
    or relative to where the command ran (a rerun command that works as pasted), and the Python
    environments as ``<venv>``, as the bundle says them."""
    home = user_home()
    prefixes = environments(list(summary.argv), home)
    return {"run_dir": run_dir, "home": home, "cwd": Path.cwd(), "prefixes": prefixes}


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
