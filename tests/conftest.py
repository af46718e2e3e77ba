"""Shared fixtures: tiny case files written into tmp_path, and the CLI driven in-process."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reprokit.cli import app

DATA = Path(__file__).parent / "data"
TEST_TEMPLATES = DATA / "templates"


@pytest.fixture(autouse=True)
def results_cache(tmp_path_factory, monkeypatch):
    """Each test its own results cache: a stage a test expects to run is never one another
    test ran (tests of the cache itself share one within the test)."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("REPROKIT_CACHE", str(folder))
    return folder


@pytest.fixture
def cli():
    """Invoke ``reprokit ARGS``; returns typer's Result (exit_code, stdout, stderr)."""
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [str(a) for a in args])

    return invoke


@pytest.fixture
def write_case(tmp_path):
    """Write a case file into tmp_path from TOML text; returns its path."""

    def write(text: str, name: str = "case") -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return path

    return write
