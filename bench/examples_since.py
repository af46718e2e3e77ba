"""Since when each report of docs/examples shows: its repro run on every torch_xla release.

    .venv/bin/python bench/examples_since.py [--releases 2.5..2.9] [-k SUBSTRING ...] [-n 1]
                                             [--keep DIR] [--write]

Each report's repro is taken as bench/examples.py takes it (the first ```python block of its
issue part), written as ``<report>.py`` into one folder, and ``reprokit bisect --all-releases``
runs them all, each alone on each release (the results cache keeps what ran, so a second run
is quick). A report whose bug is a crash (``<!-- expect-exit: -11 -->``) or an uncaught
exception (``<!-- expect-exit: 1 raises -->``) gets a wrapper that runs its repro as a child
and exits as a repro does: 1 when the child ends as the report says (a signal, or an exception
that is not a missing API), 0 when it succeeds, 2 otherwise. Prints one row per report (each
release's verdict, and the line an issue says); ``--write`` puts that line into each report's
issue part, in its "Additional context" (replacing the line a previous run wrote, unless the
report says ``<!-- since: checked by hand -->`` above its own), and the table into
docs/examples/README.md.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from examples import EXAMPLES, INDEX, ROOT, expected_exit, missing_modules, reports, repro_of

sys.path.insert(0, str(ROOT))
from reprokit.records.since import ReproSince
from reprokit.reports.since import SINCE_LINE, context_line

SHORT = {"shows": "yes", "does not": "no", "cannot tell": "?"}
# A child that raises one of these met an API its release lacks: it cannot tell, never shows
MISSING_API = ("ImportError", "ModuleNotFoundError", "AttributeError")
BY_HAND = "<!-- since: checked by hand -->"
TABLE_START, TABLE_END = re.compile(r"<!-- since-table -->"), re.compile(r"<!-- /since-table -->")
WRAPPER = (  # (its text unchanged since the first runs: the results cache keys on it)
    '"""Runs the repro below as a child: exit 1 when it ends as the bug does ({expected})."""\n'
    """import pathlib, re, subprocess, sys

pathlib.Path("bug.py").write_text({code!r})
done = subprocess.run([sys.executable, "bug.py"], capture_output=True, text=True)
print(done.stdout[-2000:], done.stderr[-2000:], sep="\\n")
raised = re.findall(r"^(\\w[\\w.]*(?:Error|Exception|Interrupt)\\b)", done.stderr, re.M)
if done.returncode == 0:
    sys.exit(0)
if done.returncode == {returncode} and not (raised and raised[-1] in {missing!r}):
    print("ends as the report says: exit {returncode}")
    sys.exit(1)
print(f"cannot run: exit {{done.returncode}} {{raised[-1:] or ''}}")
sys.exit(2)
"""
)


def script_of(report: Path) -> str:
    """The report's repro; wrapped where its bug is a crash or an exception (exit 1 = shows)."""
    code = repro_of(report)
    returncode, raises = expected_exit(report)
    if returncode == 1 and not raises:
        return code
    expected = f"exit {returncode}" + (", raising" if raises else "")
    return WRAPPER.format(expected=expected, code=code, returncode=returncode, missing=MISSING_API)


def bisect(reports: list[Path], args: argparse.Namespace, folder: Path) -> dict:
    """``reprokit bisect --all-releases`` over the reports' repros; bisect.json's repros."""
    scripts = []
    for report in reports:
        try:
            text = script_of(report)
        except ValueError as exc:
            print(f"skip {exc}", file=sys.stderr)
            continue
        scripts.append(folder / f"{report.stem}.py")
        scripts[-1].write_text(text, encoding="utf-8")
    out = folder / "out"
    command = [str(ROOT / ".venv" / "bin" / "reprokit"), "bisect", *map(str, scripts),
               "--releases", args.releases, "--all-releases", "-n", args.n,
               "--timeout", args.timeout, "-o", str(out)]  # fmt: skip
    with (folder / "bisect.log").open("w") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return json.loads((out / "bisect.json").read_text())


def answers(found: dict) -> list[ReproSince]:
    """bisect.json's repros as records, in its order."""
    releases = tuple(found["releases"])
    return [ReproSince.from_json(n, releases, d) for n, d in found["repros"].items()]


def table(found: list[ReproSince]) -> list[str]:
    """One row per report: each release's verdict, and what its issue says."""
    releases = found[0].releases if found else ()
    rows = ["| report | " + " | ".join(releases) + " | what the issue says |",
            "| --- |" + " --- |" * len(releases) + " --- |"]  # fmt: skip
    for answer in found:
        cells = [SHORT[answer.tried[r].verdict] if r in answer.tried else "" for r in releases]
        said = context_line(answer)
        report = EXAMPLES / f"{Path(answer.name).stem}.md"
        if report.is_file() and BY_HAND in report.read_text(encoding="utf-8"):
            said = f"checked by hand, in the report (the repros alone: {said})"
        rows.append(f"| {report.stem} | {' | '.join(cells)} | {said} |")
    return rows


def write(report: Path, line: str) -> bool:
    """Put ``line`` into the report's issue part: in place of a line a previous run wrote,
    else before its "Found with reprokit" line, else at the end of its Additional context."""
    text = report.read_text(encoding="utf-8")
    head, mark, issue = text.partition("\n## The issue")
    if not mark:
        return False
    if BY_HAND in issue:  # a line checked by hand stays (a change that is torch's, not XLA's)
        return True
    if SINCE_LINE.search(issue):
        issue = SINCE_LINE.sub(lambda found: (found.group(1) or "") + line, issue, count=1)
    elif (found := re.search(r"^Found with reprokit", issue, re.M)) is not None:
        issue = f"{issue[: found.start()]}{line}\n\n{issue[found.start() :]}"
    elif (context := re.search(r"^### Additional context\n", issue, re.M)) is not None:
        after = re.search(r"^(#{1,3} |---$)", issue[context.end() :], re.M)
        at = context.end() + after.start() if after else len(issue)
        issue = f"{issue[:at].rstrip()}\n\n{line}\n" + (f"\n{issue[at:]}" if after else "")
    else:
        return False
    report.write_text(head + mark + issue, encoding="utf-8")
    return True


def write_index(rows: list[str]) -> None:
    """The table into docs/examples' index, between its two ``since-table`` markers."""
    index = EXAMPLES / INDEX
    text = index.read_text(encoding="utf-8")
    start, end = TABLE_START.search(text), TABLE_END.search(text)
    if not (start and end):
        raise SystemExit(f"{index}: no {TABLE_START.pattern} ... {TABLE_END.pattern} to fill")
    index.write_text(f"{text[: start.end()]}\n{chr(10).join(rows)}\n{text[end.start() :]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", default="2.5..2.9")
    parser.add_argument("-k", action="append", default=[], help="only names holding this")
    parser.add_argument("-n", default="1", help="repros at once")
    parser.add_argument("--timeout", default="300", help="seconds per repro and release")
    parser.add_argument("--keep", type=Path, help="keep the scripts and bisect.json here")
    parser.add_argument("--write", action="store_true", help="put each answer in its report")
    args = parser.parse_args(argv)
    chosen = [r for r in reports() if not args.k or any(k in r.stem for k in args.k)]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="since-") as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        found = bisect(chosen, args, folder)
    found = answers(found)
    print("\n".join(table(found)))
    print(f"\n{len(found)} repros in {time.perf_counter() - start:.0f} s")
    if args.write and not args.k:  # the index holds every report: only a whole run fills it
        write_index(table(found))
    for answer in found if args.write else ():
        report = EXAMPLES / f"{Path(answer.name).stem}.md"
        if missing_modules(report):  # not torch_xla's: the releases' environments lack them
            print(f"{report.stem}: needs {' '.join(missing_modules(report))}; not written")
        elif not write(report, context_line(answer)):
            print(f"{report.stem}: no issue part with a context to write into")
    return 0


if __name__ == "__main__":
    sys.exit(main())
