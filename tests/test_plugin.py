"""The pytest plugin: case files as test items, failures in a few lines, the same outcomes."""

from __future__ import annotations

import glob
import itertools
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reprokit.generate.variants import load_variants
from reprokit.records import Status, read_summary
from reprokit.runner.options import Options
from reprokit.runner.scheduler import run

DATA = Path(__file__).parent / "data"
CASES, TEMPLATES = DATA / "cases", DATA / "templates"
ROOT = Path(__file__).parent.parent


def pytest_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run pytest in ``folder`` (its own rootdir: none of this project's settings apply)."""
    (folder / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--rootdir={folder}"]
    command += [f"--reprokit-templates={TEMPLATES}", "--reprokit-timeout=10", *args]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)


def copy_cases(folder: Path, *names: str, expect: dict[str, str] | None = None) -> None:
    for name in names:
        text = (CASES / f"{name}.toml").read_text()
        if expect and name in expect:
            text = text.split("[expect]")[0] + f'[expect]\noutcome = "{expect[name]}"\n'
        (folder / f"{name}.toml").write_text(text)


def outcomes(junit: Path) -> dict[str, str]:
    """Each item's outcome, as the plugin records it in the JUnit XML."""
    return {
        case.get("name"): prop.get("value")
        for case in ET.parse(junit).iter("testcase")
        for prop in case.iter("property")
        if prop.get("name") == "outcome"
    }


def test_failures_read_like_pytest_approx(tmp_path):
    copy_cases(
        tmp_path, "ok", "mismatch", "raise", "cuda", expect={"mismatch": "match", "raise": "match"}
    )
    done = pytest_in(tmp_path, "-rA", "-q")
    output = done.stdout
    assert done.returncode == 1, output + done.stderr
    assert "2 failed, 1 passed, 1 skipped" in output
    assert "outcome mismatch, expected match: 1 of 1 tensors outside tolerance" in output
    assert "second vs first: x float32 [3]: 1 / 3 mismatched" in output
    assert "max abs diff 1, max rel diff 0.333" in output
    assert "outcome error, expected match: second exited with code 1" in output
    assert "RuntimeError: the second stage fails on purpose" in output  # the stage's last words
    assert "no NVIDIA GPU" in output  # the skip's reason
    assert "Traceback" not in output.split("RuntimeError")[0].split("FAILURES")[1]


def test_xdist_workers_agree_with_reprokit_run(tmp_path):
    names = ["ok", "mismatch", "raise", "abort", "cuda", "badlist"]
    copy_cases(tmp_path, *names)
    done = pytest_in(tmp_path, "-n", "2", "-q", "--junitxml=junit.xml")
    assert done.returncode == 0, done.stdout + done.stderr
    by_item = outcomes(tmp_path / "junit.xml")
    variants = load_variants(names, cases=[CASES], templates=[TEMPLATES])
    options = Options(jobs=2, timeout=10, templates=(TEMPLATES,))
    summary = run(variants, run_dir=tmp_path / "run", options=options)
    assert by_item == {v.label: v.outcome.value for v in summary.variants}


def test_items_run_through_ray_end_as_they_end_here(tmp_path):
    pytest.importorskip("ray")
    names = ["ok", "mismatch", "raise", "abort"]
    copy_cases(tmp_path, *names)
    done = pytest_in(tmp_path, "-q", "--junitxml=junit.xml", "--reprokit-executor=ray")
    assert done.returncode == 0, done.stdout + done.stderr
    by_item = outcomes(tmp_path / "junit.xml")
    assert by_item == {"ok": "match", "mismatch": "mismatch", "raise": "error", "abort": "crash"}


def test_only_case_files_are_collected(tmp_path):
    copy_cases(tmp_path, "ok")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "other.toml").write_text("[tool]\nx = 1\n")
    done = pytest_in(tmp_path, "--collect-only", "-q")
    assert done.stdout.splitlines()[0] == "ok.toml::ok", done.stdout


def test_a_broken_case_file_is_a_collection_error_without_traceback(tmp_path):
    (tmp_path / "broken.toml").write_text('[case]\ntitle = "x"\ntemplate = "faulty"\nbogus = 1\n')
    done = pytest_in(tmp_path, "-q")
    assert done.returncode == 2
    assert "broken.toml:4: unknown key 'bogus' in [case]" in done.stdout
    assert "Traceback" not in done.stdout


def test_the_project_tests_do_not_collect_the_fixture_cases():
    """`pytest` (testpaths = tests) must not turn tests/data/**/*.toml into items."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "tests/test_plugin.py::" in done.stdout, done.stdout + done.stderr
    assert ".toml" not in done.stdout


def test_the_builtin_cases_are_items(tmp_path):
    shutil.copytree(ROOT / "cases", tmp_path / "cases")
    done = pytest_in(tmp_path, "--collect-only", "-q", "cases")
    assert "cases/xser_to_spmd.toml::xser_to_spmd" in done.stdout, done.stdout + done.stderr


RECORD_ITEMS = """
import os
import time

import pytest

import reprokit

def pytest_configure(config):
    run = reprokit.run

    def timed(variants, **kwargs):  # the item's run: what holds the device
        start = time.time()
        try:
            return run(variants, **kwargs)
        finally:
            (variant,) = variants
            folder = os.path.dirname(__file__)
            with open(os.path.join(folder, "ran.txt"), "a") as ran:
                ran.write(f"{variant.label} {start!r} {time.time()!r}\\n")

    reprokit.run = timed

def pytest_runtest_setup(item):
    marker = item.get_closest_marker("xdist_group")
    with open(os.path.join(os.path.dirname(__file__), "groups.txt"), "a") as groups:
        groups.write(f"{item.name} {marker.args[0] if marker else None}\\n")
"""


def ran(folder: Path) -> dict[str, tuple[float, float]]:
    """Each item's run: when it began and ended."""
    rows = [line.split() for line in (folder / "ran.txt").read_text().splitlines()]
    return {name: (float(start), float(end)) for name, start, end in rows}


def groups(folder: Path) -> dict[str, str]:
    """Each item's xdist group ("None": none)."""
    return dict(line.split() for line in (folder / "groups.txt").read_text().splitlines())


def test_items_on_an_exclusive_accelerator_never_run_at_once(tmp_path):
    """The module's promise: two items never hold an exclusive device at once, even with
    xdist workers free to run them side by side; they share an xdist group besides."""
    names = ["ok", "mismatch", "raise", "abort"]
    copy_cases(tmp_path, *names)
    (tmp_path / "conftest.py").write_text(RECORD_ITEMS)
    done = pytest_in(tmp_path, "-n", "2", "--dist", "loadgroup", "--reprokit-xla-device=tpu")
    assert "4 passed" in done.stdout, done.stdout + done.stderr  # skipped stages: no TPU here
    assert groups(tmp_path) == dict.fromkeys(names, "reprokit-TPU")
    spans = sorted(ran(tmp_path).values())
    assert len(spans) == len(names)
    overlapping = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert overlapping == []  # one after another, in whichever worker


def test_items_on_the_cpu_are_in_no_group(tmp_path):
    if glob.glob("/dev/nvidia[0-9]*"):
        pytest.skip("a GPU here puts every item in the reprokit-CUDA group")
    copy_cases(tmp_path, "ok", "mismatch")
    (tmp_path / "conftest.py").write_text(RECORD_ITEMS)
    done = pytest_in(tmp_path, "-n", "2", "--dist", "loadgroup")
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(groups(tmp_path).values()) == {"None"}


def test_items_take_the_run_options_of_reprokit_run(tmp_path):
    """The options the plugin lacked before they were declared once (--stages, --no-cache,
    --env): each reaches the items."""
    copy_cases(tmp_path, "ok")
    collected = pytest_in(tmp_path, "--collect-only", "-q", "--reprokit-env=mine=six==1.17.0")
    assert collected.stdout.splitlines()[0] == "ok.toml::ok@mine", collected.stdout
    common = ["-q", f"--reprokit-run-dir={tmp_path / 'runs'}", "--reprokit-stages=first"]
    assert pytest_in(tmp_path, *common).returncode == 0
    again = pytest_in(tmp_path, *common, "--reprokit-no-cache")
    assert again.returncode == 0, again.stdout + again.stderr
    (variant,) = read_summary(tmp_path / "runs" / "ok").variants
    ran_here = [(s.name, s.reused) for s in variant.stages if s.status is not Status.SKIPPED]
    assert ran_here == [("first", None)]  # only what --stages names, none of it reused
