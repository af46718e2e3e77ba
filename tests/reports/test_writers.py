"""The two writers render one report model: report.md within GitHub's limit (its Budget
dropping the least important parts first), report.html from the same tables."""

from __future__ import annotations

import ast
import importlib
from dataclasses import replace
from pathlib import Path

import pytest

from reprokit.reports.html import html
from reprokit.reports.markdown import Budget, markdown
from reprokit.reports.model import (
    Cell,
    Comparisons,
    EnvironmentSection,
    Evidence,
    Names,
    Report,
    Script,
    Table,
)


def test_the_budget_drops_parts_least_important_first_and_keeps_the_script_longest():
    budget = Budget(variants=5)
    steps = []
    while budget.shrink(failing=5):
        steps.append((budget.result_rows, budget.scripts, budget.rows, budget.variants))
    assert steps == [
        (50, 10**6, 12, 5),  # the results table, shortened
        (50, 1, 12, 5),  # one script only
        (50, 1, 3, 5),  # short diff tables
        (50, 1, 3, 2),  # half the variants, then half again
        (50, 1, 3, 1),
        (0, 1, 3, 1),  # no results table
        (0, 0, 3, 1),  # no script: the last to go
    ]
    assert budget.cut["variants"] == "the details of 4 variants"  # said once, as it is now
    assert list(budget.cut) == ["result_rows", "scripts", "rows", "variants"]
    assert not budget.shrink(failing=5)  # nothing left to drop


def test_a_budget_with_little_to_show_skips_the_cuts_it_cannot_make():
    budget = Budget(variants=1, rows=3, scripts=1, result_rows=10)
    assert budget.shrink(failing=1) and budget.result_rows == 0
    assert budget.shrink(failing=1) and budget.scripts == 0
    assert not budget.shrink(failing=1)
    assert budget.cut == {
        "result_rows": "the results table (summary.json)",
        "scripts": "the repro script (*/repro.py)",
    }


def model(rows: int = 3, script_lines: int = 5) -> Report:
    """A report model made by hand: the writers need nothing else."""
    header = ("tensor", "stage vs reference", "shape", "max abs", "max rel ¹", "mismatched")
    window = tuple(
        (Cell(f"t.{i}", code=True, tone="bad" if i == 0 else ""), *map(Cell, "abcd"), Cell("e|f"))
        for i in range(rows)
    )
    numeric = (False, False, False, True, True, True)
    script = Script("v", "\n".join(f"x = {i}" for i in range(script_lines)) + "\n", script_lines)
    evidence = Evidence(
        label="v",
        heading="`v`: mismatch (expected match)",
        divergence=("First divergence in `xla`: t.0 is the first to differ.",),
        comparisons=Comparisons((Table(header, window, numeric),), compared=rows + 1),
        script=script,
    )
    xla = Table(("XLA stage", "CPU fallbacks"), ((Cell("xla", code=True), Names(())),),
                title="What torch_xla saw")  # fmt: skip
    machine = Table(("", ""), ((Cell("Python"), Cell("3.11")),), keyed=True, title="Environment")
    results = Table(("variant", "as expected"), ((Cell("v", code=True), Cell("no", tone="bad")),),
                    title="Results")  # fmt: skip
    return Report(
        headline="0 of 1 variants behaved as expected; 1 did not: `v` (mismatch).",
        bug="demo: `v` ends in **mismatch**.",
        command="reprokit run demo",
        evidence=(evidence,),
        expected=("`v`: every stage ends well.",),
        environment=EnvironmentSection(("Reproducible on XLA backend [CPU]",), machine),
        results=results,
        checks=("`demo`: **a title**. What it does.",),
        xla=xla,
    )


def test_markdown_lays_out_the_model_in_the_bug_template():
    text = markdown(model())
    assert text.startswith("## 🐛 Bug\n\ndemo: `v` ends in **mismatch**.\n\nreprokit: 0 of 1")
    assert "| **`t.0`** | a | b | c | d | e\\|f |" in text  # the first to differ; | escaped
    assert "| --- | --- | --- | ---: | ---: | ---: |" in text
    assert "\n(1 more comparisons in summary.json)\n" in text
    assert "### What torch_xla saw\n\n| XLA stage | CPU fallbacks |" in text
    assert "| `xla` | none |" in text  # no fallback
    assert "What each case checks:\n\n- `demo`: **a title**. What it does.\n" in text
    assert "| `v` | **no** |" in text and "- `v`: every stage ends well." in text
    assert "<details><summary>repro.py (5 lines)</summary>" in text


def test_markdown_fits_its_limit_and_says_what_it_left_out():
    full = markdown(model(rows=12, script_lines=400))
    short = markdown(model(rows=12, script_lines=400), limit=len(full) - 1)
    assert len(short) < len(full)
    assert "Left out of this body to fit GitHub's limit, all in `bundle.zip`: " in short
    assert "x = 399" in short  # the script outlived the cuts that were enough


@pytest.mark.parametrize("limit", [300, 1000])
def test_markdown_never_outgrows_its_limit(limit):
    assert len(markdown(model(rows=40, script_lines=2000), limit=limit)) <= limit


def test_html_renders_the_same_tables_with_names_and_marks():
    page = html(model())
    assert (
        "<p>0 of 1 variants behaved as expected; 1 did not: <code>v</code> (mismatch).</p>" in page
    )
    assert "<td class='bad'><code>t.0</code></td>" in page  # the first to differ
    assert "<td class='num'>c</td>" in page and "<td class='num'>e|f</td>" in page
    assert "<h2>Results</h2>" in page and "<td class='bad'>no</td>" in page
    assert "<tr><th>Python</th><td>3.11</td></tr>" in page  # a key / value table
    assert "<li><code>demo</code>: <strong>a title</strong>. What it does.</li>" in page
    assert "<h2>What torch_xla saw</h2>" in page and "<h1>🐛 Bug</h1>" in page


def test_a_run_with_nothing_to_file_opens_with_what_ran_not_the_bug_heading():
    passing = replace(model(), opening="reprokit: 1 variant ran and behaved as expected",
                      bug=None, evidence=())  # fmt: skip
    text = markdown(passing)
    assert text.startswith("## reprokit: 1 variant ran and behaved as expected\n")
    assert "🐛" not in text
    assert "<h1>reprokit: 1 variant ran and behaved as expected</h1>" in html(passing)


@pytest.mark.parametrize("writer", ["markdown", "html"])
def test_the_writers_read_only_the_model(writer):
    """Neither writer reads the run's records or borrows from the other: each lays out the
    model, which is built once."""
    module = importlib.import_module(f"reprokit.reports.{writer}")  # reports.markdown: a function
    tree = ast.parse(Path(module.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    ours = {name for name in imported if name and name.startswith("reprokit")}
    names = {"reprokit.records.report"}  # the file names of a report folder (bundle.zip), no record
    assert ours - names == {"reprokit.reports.model", "reprokit.infra.redact"}
