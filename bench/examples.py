"""Run every report's repro alone, the way a maintainer would: one table of exit codes.

For each ``docs/examples/*.md`` this takes the first fenced ```` ```python ```` block of the
report's issue part (everything after its ``## The issue`` heading), writes it as ``repro.py``
into an empty temporary folder and runs it there with a bare environment and an isolated
interpreter::

    env -i PATH=/usr/bin:/bin HOME=/tmp PJRT_DEVICE=CPU <venv>/bin/python -I repro.py

then prints one row per report: its exit code, the exit code it should have, the seconds it
took, and whether the two agree.

Expected exit codes. A repro exits 1 when XLA differs from CPU (0 when it agrees, 2 when it
cannot tell), so 1 is what a report expects unless it says otherwise. A report whose bug is a
crash says so with one HTML comment anywhere in its file (invisible once rendered)::

    <!-- expect-exit: -11 -->

The number is the exit status as Python's ``subprocess`` gives it: negative for a signal
(-6 SIGABRT, -8 SIGFPE, -11 SIGSEGV). A run past ``--timeout`` is TERMed then KILLed (its whole
process group) and shows ``timeout``.

An uncaught Python exception also exits 1, and that is usually the repro failing, not the bug
showing (a missing file beside it, a missing module): such a row is not ok, and its note names
the exception. A report whose bug is itself an uncaught exception says so::

    <!-- expect-exit: 1 raises -->

A repro that needs modules the venv may lack (torchax, jax) names them; where one is missing
the row is ``skip`` (neither ok nor failed) instead of a false 1::

    <!-- needs-modules: torchax jax -->

    python bench/examples.py [-k SUBSTRING ...] [--timeout 300] [-j 1]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
PYTHON = ROOT / ".venv" / "bin" / "python"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PJRT_DEVICE": "CPU"}

INDEX = "README.md"  # docs/examples' index (the since table), not a report

_ISSUE_HEADING = re.compile(r"^## The issue\b.*$", re.MULTILINE)
_PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_EXPECT = re.compile(r"<!--\s*expect-exit:\s*(-?\d+)(\s+raises)?\s*-->")
_NEEDS = re.compile(r"<!--\s*needs-modules:\s*([\w. ]+?)\s*-->")
_RAISED = re.compile(
    r"^Traceback \(most recent call last\):$.*?^(\w[\w.]*(?:Error|Exception|Interrupt)\b.*)$",
    re.MULTILINE | re.DOTALL,
)
_PROBE = (
    "import importlib.util as u, sys; print(*(n for n in sys.argv[1:] if u.find_spec(n) is None))"
)


@dataclass(frozen=True)
class Outcome:
    """One report's repro, run alone."""

    report: str
    code: int | None  # None: killed at the timeout; also None when skipped
    expected: int
    seconds: float
    tail: str  # the last lines of what it printed, for a row that is not ok
    raised: str = ""  # the uncaught exception's line, where it printed a traceback
    may_raise: bool = False  # the report says its bug is an uncaught exception
    skipped: str = ""  # why it was not run (a module it needs is missing)

    @property
    def ok(self) -> bool:
        return self.code == self.expected and (not self.raised or self.may_raise)

    @property
    def verdict(self) -> str:
        return "skip" if self.skipped else ("ok" if self.ok else "NO")

    @property
    def note(self) -> str:
        return self.skipped or (f"raised {self.raised[:60]}" if self.raised else "")


def reports() -> list[Path]:
    """Every report of docs/examples, by name (its index left out)."""
    return sorted(p for p in EXAMPLES.glob("*.md") if p.name != INDEX)


def repro_of(report: Path) -> str:
    """The first ```python block of the report's issue part; ValueError if there is none."""
    text = report.read_text()
    heading = _ISSUE_HEADING.search(text)
    if heading is None:
        raise ValueError(f"{report.name}: no '## The issue' heading")
    block = _PYTHON_BLOCK.search(text, heading.end())
    if block is None:
        raise ValueError(f"{report.name}: no ```python block after '## The issue'")
    return block.group(1)


def expected_exit(report: Path) -> tuple[int, bool]:
    """The report's ``<!-- expect-exit: N [raises] -->``, else 1 (XLA differs), no raise."""
    found = _EXPECT.search(report.read_text())
    return (int(found.group(1)), bool(found.group(2))) if found else (1, False)


def missing_modules(report: Path) -> list[str]:
    """The modules of the report's ``<!-- needs-modules: ... -->`` that the venv lacks."""
    found = _NEEDS.search(report.read_text())
    if found is None:
        return []
    names = found.group(1).split()
    probe = [str(PYTHON), "-I", "-c", _PROBE, *names]
    out = subprocess.run(
        probe, env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    return out.stdout.split()


def run_alone(report: Path, *, timeout: float = 300.0) -> Outcome:
    """Write the report's repro into an empty folder and run it there, in a bare environment.

    The child gets no stdin and its own process group, so that a timeout can TERM, then KILL,
    everything it started (an xmp.spawn repro starts processes of its own).
    """
    code_text = repro_of(report)
    expected, may_raise = expected_exit(report)
    missing = missing_modules(report)
    if missing:
        return Outcome(report.stem, None, expected, 0.0, "", skipped=f"no {', '.join(missing)}")
    with tempfile.TemporaryDirectory(prefix="repro-") as folder:
        script = Path(folder, "repro.py")
        script.write_text(code_text)
        log = Path(folder, "output.txt")
        start = time.perf_counter()
        with log.open("wb") as out:
            child = subprocess.Popen(
                [str(PYTHON), "-I", "repro.py"],
                cwd=folder,
                env=ENV,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code: int | None = child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _stop_group(child)
                code = None
        seconds = time.perf_counter() - start
        output = log.read_text(errors="replace")
    raised = _RAISED.search(output)
    tail = "\n".join(output.splitlines()[-5:])
    return Outcome(
        report.stem,
        code,
        expected,
        seconds,
        tail,
        raised=raised.group(1).strip() if raised else "",
        may_raise=may_raise,
    )


def _stop_group(child: subprocess.Popen[bytes]) -> None:
    """TERM the child's process group, give it 5 s, then KILL it."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def table(outcomes: list[Outcome]) -> str:
    """A Markdown table, one row per report."""
    width = max(len(o.report) for o in outcomes)
    rows = [f"| {'report':<{width}} | exit | expected | seconds | ok | note |"]
    rows.append(f"| {'-' * width} | ---: | -------: | ------: | -- | ---- |")
    for o in outcomes:
        code = "-" if o.skipped else ("timeout" if o.code is None else str(o.code))
        rows.append(
            f"| {o.report:<{width}} | {code:>4} | {o.expected:>8} | {o.seconds:7.1f} "
            f"| {o.verdict} | {o.note} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", action="append", default=[], help="only names holding this")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per repro")
    parser.add_argument("-j", type=int, default=1, help="repros run at once")
    args = parser.parse_args(argv)
    chosen = [r for r in reports() if not args.k or any(k in r.stem for k in args.k)]
    if not chosen:
        print("no report matched", file=sys.stderr)
        return 2
    with ThreadPoolExecutor(max_workers=args.j) as pool:
        outcomes = list(pool.map(lambda r: run_alone(r, timeout=args.timeout), chosen))
    print(table(outcomes))
    bad = [o for o in outcomes if not o.ok and not o.skipped]
    for o in bad:
        print(f"\n{o.report}: exit {o.code}, expected {o.expected}; its last lines:\n{o.tail}")
    skipped = sum(bool(o.skipped) for o in outcomes)
    print(f"\n{len(outcomes) - len(bad) - skipped} of {len(outcomes)} ok, {skipped} skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
