"""Three reports of docs/examples, their repro run alone the way bench/examples.py runs them all.

Each repro is the first ```python block of the report's issue part, saved as repro.py in an
empty folder and run with a bare environment (``env -i PATH=/usr/bin:/bin HOME=/tmp
PJRT_DEVICE=CPU``) and ``python -I``: real runs, no mocks. The three are fast ones (about 5 s
each on XLA:CPU) with different expected endings: a value mismatch (exit 1), a SIGFPE (-8) and
a SIGSEGV (-11), so the expect-exit convention is exercised too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    """bench/examples.py, loaded by path: bench/ is a folder of scripts, not a package."""
    spec = importlib.util.spec_from_file_location("bench_examples", ROOT / "bench" / "examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


examples = _bench()

needs_venv = pytest.mark.skipif(
    not examples.PYTHON.exists(), reason=f"no venv interpreter at {examples.PYTHON}"
)


@needs_venv
@pytest.mark.parametrize(
    ("report", "expected"),
    [("norm_inf_is_one", 1), ("roll_empty_sigfpe", -8), ("nll_loss_0d_target_segfault", -11)],
)
def test_repro_alone_exits_as_the_report_says(report: str, expected: int) -> None:
    path = examples.EXAMPLES / f"{report}.md"
    assert examples.expected_exit(path) == (expected, False)
    outcome = examples.run_alone(path, timeout=60)
    assert outcome.code == expected, f"{report}: exit {outcome.code}\n{outcome.tail}"
    assert outcome.ok, f"{report}: {outcome.note}\n{outcome.tail}"


def test_first_python_block_of_the_issue_part_is_taken(tmp_path: Path) -> None:
    report = tmp_path / "r.md"
    report.write_text(
        "# Example\n\n```python\nraise SystemExit(3)  # context, not the repro\n```\n\n"
        "<!-- expect-exit: -6 -->\n\n## The issue\n\n### To Reproduce\n\n"
        "```python\nprint('repro')\n```\n\n```python\nprint('second')\n```\n"
    )
    assert examples.repro_of(report) == "print('repro')\n"
    assert examples.expected_exit(report) == (-6, False)
