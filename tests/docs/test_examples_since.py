"""bench/examples_since.py --write: each report's since line put into its issue part once,
replaced on the next run, and left alone where the report's own line was checked by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    """bench/examples_since.py, loaded by path: bench/ is a folder of scripts, not a package."""
    spec = importlib.util.spec_from_file_location(
        "bench_since", ROOT / "bench" / "examples_since.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


since = _bench()
REPORT = """# Example: x

Above the line: a context of its own.

Also on torch_xla 2.0 (an old note above the issue part: not the issue's line).

---

## The issue

### Additional context

Cause.

Found with reprokit 0.1.0
"""


def test_the_line_goes_before_found_with_then_is_replaced(tmp_path):
    report = tmp_path / "r.md"
    report.write_text(REPORT)
    assert since.write(report, "Also on torch_xla 2.5-2.8 (tried: 2.5-2.9).")
    assert (
        "Cause.\n\nAlso on torch_xla 2.5-2.8 (tried: 2.5-2.9).\n\nFound with" in report.read_text()
    )
    assert since.write(
        report, "A regression: right on torch_xla 2.5, wrong since 2.6 (tried: 2.5-2.9)."
    )
    text = report.read_text()
    assert text.count("torch_xla 2.5") == 1 and "A regression" in text
    assert "Also on torch_xla 2.0 (an old note" in text  # above the issue part: untouched


def test_a_list_item_stays_one_and_a_line_by_hand_stays(tmp_path):
    report = tmp_path / "r.md"
    report.write_text(REPORT.replace("Cause.", "- Also on torch_xla 2.8 (tried: 2.8-2.9)."))
    since.write(report, "Also on torch_xla 2.5-2.8 (tried: 2.5-2.9).")
    assert "- Also on torch_xla 2.5-2.8 (tried: 2.5-2.9).\n" in report.read_text()
    by_hand = REPORT.replace("Cause.", f"{since.BY_HAND}\nOn 2.5 CPU gave the same.")
    report.write_text(by_hand)
    assert since.write(report, "A regression: right on torch_xla 2.5, wrong since 2.6.")
    assert report.read_text() == by_hand


def test_index_skipped_and_crash_reports_wrapped(tmp_path):
    import examples

    assert all(p.name != examples.INDEX for p in examples.reports())
    wrapped = since.script_of(examples.EXAMPLES / "roll_empty_sigfpe.md")
    assert "done.returncode == -8" in wrapped and compile(wrapped, "w", "exec")
    plain = since.script_of(examples.EXAMPLES / "norm_inf_is_one.md")
    assert plain == examples.repro_of(examples.EXAMPLES / "norm_inf_is_one.md")
