"""Hostile case files and --set values through `reprokit render` (in process) and `reprokit run`.

The generators are tests/generate/test_fuzz.py's (random TOML documents, byte mutations, random
bytes, path tricks, Jinja that reaches for Python internals), plus targeted documents that pass
the TOML parser and put one hostile value where the template will use it: huge and negative
numbers, NUL bytes, long strings, path tricks in ``template`` and in matrix values (which name
the run's folders). Every input must end in exit 0 or 2 (1 too for run: a variant failed) with
no traceback and no file written but the output.
"""

from __future__ import annotations

import os
import string
import sys
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_common import ECHO_TEMPLATES, FAULT_TEMPLATES, Figure, files_under, info, zero
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test_fuzz's conftest
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "generate"))
from test_fuzz import JINJA, TRICKS, as_bytes, documents, mutations

from reprokit.cli import app

MARKER_NAME = "pwned-by-jinja"
HUGE = [2**63 - 1, -(2**63), -1, 0, 10**18, 1e308, -1e308, float("inf"), 5e-324]
JUNK = [b"\x00", b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x00\x00\x00\x00", b"\r", b"\\u0000"]


def hostile_values(marker: Path) -> st.SearchStrategy:
    """Values that would hurt if they reached code: Jinja escapes, paths, NULs, huge numbers."""
    escape = f"{{{{ cycler.__init__.__globals__.os.system('touch {marker}') }}}}"
    words = TRICKS + JINJA + [escape, "a\x00b", "x" * 300, "../" * 40 + "x", "/tmp", "~"]
    return st.one_of(
        st.sampled_from(words),
        st.sampled_from(HUGE),
        st.text(max_size=30),
        st.lists(st.sampled_from(words + HUGE[:4]), max_size=3),
    )


def targeted(template: str, keys: list[str], marker: Path) -> st.SearchStrategy:
    """Documents that parse, with hostile values in [case], [params] or [matrix]."""
    value = hostile_values(marker)
    # Weighted towards [params] and [matrix]: there a value passes validation and is rendered.
    section = st.sampled_from(["case", "params", "params", "matrix", "matrix", "compare", "expect"])

    def document(draw_section: str, key: str, hostile: object) -> dict:
        doc: dict = {"case": {"title": "t", "template": template}, "params": {}}
        if template == "echo":
            doc["params"]["message"] = "m"
        if draw_section == "case":
            key = key if key in ("title", "description") else "template"
        key = {"compare": "rtol", "expect": "outcome"}.get(draw_section, key)
        where = doc.setdefault(draw_section, {})
        is_list = isinstance(hostile, list)
        where[key] = hostile if draw_section != "matrix" or is_list else [hostile]
        if draw_section == "matrix":
            doc["params"].pop(key, None)
        return doc

    return st.builds(document, section, st.sampled_from(keys), value)


def encoded(document: dict, junk: tuple[int, bytes]) -> bytes | None:
    """TOML bytes of ``document`` with ``junk`` spliced in; None when TOML cannot hold it."""
    try:
        return as_bytes(document, junk)
    except (TypeError, ValueError):
        return None  # tomli_w refuses NaN-free but odd values: no input to try


def accepted(marker: Path, items: int | None) -> st.SearchStrategy:
    """Faults cases that pass validation: hostile text in a list parameter that the script
    prints and that names the variants' folders (path tricks, Jinja, NUL, long strings).
    ``items`` bounds the list: long lists make folder names too long (a known bug)."""
    words = st.one_of(st.text(max_size=40), hostile_values(marker).filter(_text))
    words = st.lists(words, max_size=items)
    return st.builds(
        lambda w, i: (
            {"case": {"title": "t", "template": "faults"}, "matrix": {"secrets": [w]}}
            | {"params": {"i": i}}
        ),
        words,
        st.sampled_from(HUGE[:3]),
    )


def _text(value: object) -> bool:
    return isinstance(value, str) and len(value) < 100


def inputs(template: str, keys: list[str], marker: Path) -> st.SearchStrategy:
    junk = st.tuples(st.integers(0, 400), st.sampled_from([b"", *JUNK]))
    aimed = targeted(template, keys, marker)
    clean = st.just((0, b""))
    return st.one_of(
        st.builds(encoded, aimed, clean),
        st.builds(encoded, aimed, junk),
        st.builds(encoded, documents, mutations),
        st.binary(max_size=300),
    )


SETS = st.lists(
    st.builds(
        lambda k, v: f"{k}={v}",
        st.sampled_from(["message", "count", "scale", "shape", "mode", "i", "nope", "", "a b"]),
        st.one_of(st.text(alphabet=string.printable, max_size=40), st.sampled_from(TRICKS + JINJA)),
    ),
    max_size=2,
)
FUZZ = settings(
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _trial(result, case: Path, created: set[Path], allowed: set[Path], codes) -> Counter:
    """Judge one invocation: exit code, traceback, message naming the file, stray files."""
    seen: Counter = Counter(tried=1)
    seen["exit 0" if result.exit_code == 0 else f"exit {result.exit_code}"] += 1
    traceback = "Traceback" in result.output or not (
        result.exception is None or isinstance(result.exception, SystemExit)
    )
    seen["traceback"] += traceback or result.exit_code not in codes
    if result.exit_code == 2:
        named = str(case) in result.stderr or "--set" in result.stderr
        seen["message without the file"] += not named
    seen["written outside"] += len({p for p in created if not _inside(p, allowed)})
    return seen


def _inside(path: Path, allowed: set[Path]) -> bool:
    return any(path == a or a in path.parents for a in allowed)


def hostile_render(folder: Path, examples: int) -> list[Figure]:
    """``examples`` hostile inputs through `reprokit render` in process (CliRunner)."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / MARKER_NAME
    stats: Counter = Counter()
    runner = CliRunner()
    keys = ["message", "message", "shape", "title", "description", "count", "scale", "mode"]

    @settings(FUZZ, max_examples=examples)
    @given(data=inputs("echo", keys, marker), sets=SETS)
    def trial(data: bytes | None, sets: list[str]) -> None:
        if data is None:
            return
        case, output = folder / "case.toml", folder / "out.py"
        case.write_bytes(data)
        output.unlink(missing_ok=True)
        before = files_under(folder)
        args = ["render", str(case), "--templates", str(ECHO_TEMPLATES), "-o", str(output)]
        result = runner.invoke(app, args + [a for s in sets for a in ("--set", s)])
        created = files_under(folder) - before
        stats.update(_trial(result, case, created, {output}, (0, 2)))

    cwd = os.getcwd()
    os.chdir(folder)  # a relative path that escaped would land here, where it is seen
    try:
        trial()
    finally:
        os.chdir(cwd)
    stats["executed"] += marker.exists()
    return _figures("render", stats)


def hostile_run(folder: Path, examples: int, *, items: int | None = None) -> list[Figure]:
    """A sample of hostile inputs through `reprokit run` (slow: stages start processes).

    Half are cases that pass validation (so that the run really starts, with hostile values
    in the variants' names and the script), half come from the generators above.
    """
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / MARKER_NAME
    stats: Counter = Counter()
    runner = CliRunner()
    keys = ["i", "i", "secrets", "title", "mode", "compared", "megabytes"]
    counter = iter(range(10**9))

    def trial(data: bytes | None) -> None:
        if data is None:
            return
        n = next(counter)
        case, run_dir = folder / f"case{n}.toml", folder / f"run{n}"
        case.write_bytes(data.replace(b'"echo"', b'"faults"'))
        before = files_under(folder)
        args = ["run", str(case), "--templates", str(FAULT_TEMPLATES), "-o", str(run_dir)]
        result = runner.invoke(app, [*args, "--timeout", "30", "-n", "2"])
        created = files_under(folder) - before
        stats.update(_trial(result, case, created, {run_dir}, (0, 1, 2)))

    valid = st.builds(encoded, accepted(marker, items), st.just((0, b"")))
    half = examples // 2
    for strategy, count in ((valid, half), (inputs("faults", keys, marker), examples - half)):
        if count:
            settings(FUZZ, max_examples=count)(given(data=strategy)(trial))()
    stats["executed"] += marker.exists()
    return _figures("run", stats)


def _figures(command: str, stats: Counter) -> list[Figure]:
    return [
        info(f"hostile inputs tried: {command}", stats["tried"]),
        info(f"  of which accepted (exit 0/1): {command}", stats["exit 0"] + stats["exit 1"]),
        zero(f"tracebacks: {command}", stats["traceback"]),
        zero(f"exit 2 without the file named: {command}", stats["message without the file"]),
        zero(f"files written outside: {command}", stats["written outside"]),
        zero(f"Jinja escapes executed: {command}", stats["executed"]),
    ]
