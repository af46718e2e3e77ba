"""Shared fixtures: tiny case files written into tmp_path, and the CLI driven in-process."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reprokit.cli import app
from reprokit.environment.variables import carried

DATA = Path(__file__).parent / "data"
TEST_TEMPLATES = DATA / "templates"


SLOW = "REPROKIT_SLOW"  # set: the tests marked slow run too (docs/development.md)


def pytest_collection_modifyitems(config, items):
    """The tests marked slow (minutes each: whole minimizations, release environments, Ray
    sweeps, hundreds of variants) skip unless REPROKIT_SLOW is set: CI runs the rest in its 40
    minutes, and docs/development.md says after which changes to run them."""
    if os.environ.get(SLOW):
        return
    skip = pytest.mark.skip(reason=f"slow: set {SLOW}=1 to run it (docs/development.md)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def results_cache(tmp_path_factory, monkeypatch):
    """Each test its own results cache: a stage a test expects to run is never one another
    test ran (tests of the cache itself share one within the test)."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("REPROKIT_CACHE", str(folder))
    return folder


@pytest.fixture(autouse=True, scope="session")
def warm_servers_end_with_their_run():
    """Each test's runs start their own warm servers (its own REPROKIT_CACHE keys them apart),
    and those end with the run rather than linger ten minutes each, hundreds of them: the
    tests of lingering set their own REPROKIT_WARM_IDLE. For the session: module-scoped
    fixtures run reprokit too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REPROKIT_WARM_IDLE", "0")
        yield


@pytest.fixture(autouse=True)
def no_exported_variables(monkeypatch):
    """Without the machine's exported variables that steer torch and XLA (OMP_NUM_THREADS on a
    CI runner): every script reprokit writes sets them at its top, and the tests' scripts must
    be the same everywhere. A test that wants one sets it."""
    for name in carried(os.environ):
        monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def shared_root(tmp_path_factory):
    """One environments cache for the session: the torch environments (--env) are built once.

    Under xdist each worker has a basetemp of its own inside the run's: the workers share the
    run's, and its lock makes one of them build each environment while the others wait.
    """
    base = tmp_path_factory.getbasetemp()
    xdist = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    root = (base.parent if xdist else base) / "shared-envs"
    yield root
    if not xdist:  # under xdist another worker may still use it: pytest's retention removes it
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def shared_cache(shared_root, monkeypatch):
    """REPROKIT_CACHE for tests of environments: the session's (results and environments)."""
    monkeypatch.setenv("REPROKIT_CACHE", str(shared_root))
    return shared_root


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
