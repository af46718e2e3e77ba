"""``reprokit bisect REPRO``: repros from what the tools write, run alone on each release.

No environment is built here: the project's own venv stands for the releases (its torch_xla is
2.9's, which ``release_python`` finds installed; other releases are pointed at it), and the
repros are a few lines of plain Python that import no torch. Only the last test runs a real
second release, and only where its environment is already built (it skips elsewhere, and CI
builds none for it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import reprokit.tools.since as since_tool
from reprokit.environment.releases import release_env
from reprokit.environment.uv import digest
from reprokit.infra.caching import cache_root
from reprokit.records import Outcome, Root, RunSummary, VariantResult, read_summary, write_summary
from reprokit.records.issues import RootRepro, read_index, write_index
from reprokit.records.ops import Group, OpsSweep, read_ops, write_ops
from reprokit.records.since import CANNOT_TELL, DOES_NOT, SHOWS, Tried
from reprokit.runner.processes.alone import Ran
from reprokit.tools.root_repro import _digest
from reprokit.tools.since import search
from reprokit.tools.since.tried import _kept, judge

SHOWING = "print('CPU 4.0, XLA inf: XLA DIFFERS')\nraise SystemExit(1)\n"
AGREEING = "print('XLA agrees')\n"
MISSING_API = "from os import an_api_this_release_lacks\nraise SystemExit(0)\n"
# Where the user's environments are, read before the tests' own cache replaces the variable
USER_ENVS = cache_root() / "envs"


@pytest.fixture
def here(monkeypatch):
    """Every release's python is this one (the project's venv): nothing is built."""
    monkeypatch.setattr(since_tool, "release_python", lambda release, **_: Path(sys.executable))


def tried_as(table: dict[str, str]):
    """A verdict function from a table (release -> shows, does not, cannot tell), counting
    the releases it was asked for."""
    asked: list[str] = []

    def verdict(release: str) -> Tried:
        asked.append(release)
        return Tried(table[release], "why")

    return verdict, asked


RELEASES = ["2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9"]


def test_the_ends_first_then_bisection_where_they_differ():
    verdict, asked = tried_as({r: DOES_NOT if r < "2.6" else SHOWS for r in RELEASES})
    tried = search(RELEASES, verdict)
    assert asked[:2] == ["2.1", "2.9"] and len(asked) == 5  # 2 + ceil(log2(8))
    assert (tried["2.5"].verdict, tried["2.6"].verdict) == (DOES_NOT, SHOWS)
    same, asked = tried_as(dict.fromkeys(RELEASES, SHOWS))
    assert list(search(RELEASES, same)) == ["2.1", "2.9"]
    every, asked = tried_as(dict.fromkeys(RELEASES, SHOWS))
    assert list(search(RELEASES, every, all_releases=True)) == RELEASES


def test_a_release_that_cannot_tell_is_skipped_and_a_first_one_that_cannot_is_passed():
    table = {r: DOES_NOT if r < "2.6" else SHOWS for r in RELEASES} | {"2.5": CANNOT_TELL}
    verdict, _ = tried_as(table)
    tried = search(RELEASES, verdict)
    assert tried["2.5"].verdict == CANNOT_TELL and tried["2.6"].verdict == SHOWS
    assert tried["2.4"].verdict == DOES_NOT  # skipped past, as git bisect skip does
    newer_api = {r: CANNOT_TELL if r < "2.4" else DOES_NOT if r < "2.7" else SHOWS
                 for r in RELEASES}  # fmt: skip
    verdict, _ = tried_as(newer_api)
    tried = search(RELEASES, verdict)
    assert (tried["2.6"].verdict, tried["2.7"].verdict) == (DOES_NOT, SHOWS)
    verdict, _ = tried_as({"2.8": SHOWS, "2.9": CANNOT_TELL})
    assert list(search(["2.8", "2.9"], verdict)) == ["2.8", "2.9"]


def test_an_exit_code_and_an_uncaught_exception_judged():
    assert judge(Ran(1, "x: XLA DIFFERS\n", "")) == Tried(SHOWS, "exit 1: x: XLA DIFFERS", 1)
    assert judge(Ran(0, "XLA agrees\n", "")).verdict == DOES_NOT
    assert judge(Ran(2, "cannot run: no XLA device\n", "")) == Tried(
        CANNOT_TELL, "exit 2, cannot run: cannot run: no XLA device", 2
    )
    raised = "Traceback (most recent call last):\n  File ...\nAttributeError: module 'torch_xla' has no attribute 'sync'\n"  # noqa: E501
    assert judge(Ran(1, "", raised)) == Tried(
        CANNOT_TELL, "raised AttributeError: module 'torch_xla' has no attribute 'sync'", 1
    )
    asserted = "Traceback (most recent call last):\n  File ...\nAssertionError: differ\n"
    assert judge(Ran(1, "", asserted)).verdict == SHOWS  # an assert is a repro saying so
    aborted = (
        "F0000 00:00:1796521541.705912 debug_macros.h:21] Non-OK-status: status.status()\n"
        "Status: INVALID_ARGUMENT: Shapes must be equal rank, but are f32[3] and f32[3,1]\n"
        "*** Begin stack trace ***\n" + "  @ 0x7f4c53109a28  c10::Dispatcher::callBoxed()\n" * 200
    )  # a C++ abort: its reason before the stack trace, whose last line is an address
    assert judge(Ran(-6, "", aborted)) == Tried(
        CANNOT_TELL, "exit -6 (SIGABRT): Status: INVALID_ARGUMENT: Shapes must be equal rank, "
        "but are f32[3] and f32[3,1]", -6)  # fmt: skip
    assert "Shapes must be equal rank" in _kept(aborted) and len(_kept(aborted)) < len(aborted)
    assert judge(Ran(None, "", "")) == Tried(CANNOT_TELL, "timed out")
    assert judge(Ran(None, "", "", "SIGTERM")).why == "timed out (then killed by SIGTERM)"


def test_a_repro_file_that_imports_what_a_release_lacks_cannot_tell(here, cli, tmp_path):
    (tmp_path / "old.py").write_text(MISSING_API)
    result = cli("bisect", tmp_path / "old.py", "--releases", "2.8..2.9")
    assert result.exit_code == 1, result.output  # no change: neither end could tell
    found = json.loads((tmp_path / "bisect.json").read_text())["repros"]["old.py"]
    assert found["since"].startswith("cannot tell on any release tried (raised ImportError")
    assert [t["verdict"] for t in found["tried"].values()] == [CANNOT_TELL, CANNOT_TELL]
    assert "old.py: cannot tell on any release tried" in result.stdout


def test_a_repro_file_bisected_in_this_venv_and_cached(here, cli, tmp_path):
    (tmp_path / "repro.py").write_text(SHOWING)
    first = cli("bisect", tmp_path / "repro.py", "--releases", "2.8..2.9", "-o", tmp_path / "o")
    assert first.exit_code == 1, first.output
    found = json.loads((tmp_path / "o" / "bisect.json").read_text())["repros"]["repro.py"]
    assert found["since"] == "on every release tried (2.8-2.9)"
    assert found["tried"]["2.9"]["why"] == "exit 1: CPU 4.0, XLA inf: XLA DIFFERS"
    again = cli("bisect", tmp_path / "repro.py", "--releases", "2.8..2.9", "-o", tmp_path / "o")
    found = json.loads((tmp_path / "o" / "bisect.json").read_text())["repros"]["repro.py"]
    assert [t["cached"] for t in found["tried"].values()] == [True, True], again.output


def test_a_minimize_folders_repro_with_the_inputs_it_reads(here, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    (small / "repro.py").write_text(
        "import pathlib\nraise SystemExit(pathlib.Path('inputs.pt').is_file())\n"
    )
    (small / "inputs.pt").write_bytes(b"tensors")
    found = since_tool.bisect_repros([small], ["2.9"], options=_options())
    assert found.found[0].tried["2.9"].verdict == SHOWS  # inputs.pt was beside it
    assert json.loads((small / "bisect.json").read_text())["repros"]["repro.py"]["since"] == (
        "on every release tried (2.9)"
    )


def test_a_sweeps_groups_get_since(here, tmp_path):
    (tmp_path / "repro_mean_error.py").write_text(SHOWING)
    witness = {"dtype": "float16", "sample": 1}
    groups = (Group("mean_error", "mean", "", "xla", ("float16",), "error", False, witness, 2,
                    repro="repro_mean_error.py"),
              Group("sum_value", "sum", "", "xla", ("float16",), "value", False, witness, 1,
                    why_no_repro="no source"))  # fmt: skip
    write_ops(tmp_path, OpsSweep([], {}, ("xla",), ("float16",), False, False, 1.0, groups=groups))
    found = since_tool.bisect_repros([tmp_path], ["2.8", "2.9"], options=_options())
    assert [f.name for f in found.found] == ["mean_error"]
    said = {g.id: g.since for g in read_ops(tmp_path).groups}
    assert said == {"mean_error": "on every release tried (2.8-2.9)", "sum_value": ""}


def test_a_runs_roots_get_since_and_their_repros_stay_made_for_it(here, tmp_path):
    root = Root("node.0002.fwd.softplus", "xla", "aten.softplus.default", kind="nan-inf")
    variant = VariantResult("step", "step", {"program": "step.pt2"}, Outcome.MISMATCH,
                            Outcome.MATCH, 1.0, roots=(root,))  # fmt: skip
    write_summary(RunSummary(started="now", variants=(variant,)), tmp_path)
    repro = RootRepro("softplus_nan_inf", (root.tensor,), root.op, "constant", False, 6, 1)
    repro.script(tmp_path / "step").parent.mkdir(parents=True)
    repro.script(tmp_path / "step").write_text(AGREEING)
    write_index(tmp_path / "step", _digest(tmp_path), [repro])
    since_tool.bisect_repros([tmp_path], ["2.9"], options=_options())
    (marked,) = read_summary(tmp_path).variants[0].roots
    assert marked.since == "on no release tried (2.9)"
    assert read_index(tmp_path / "step", _digest(tmp_path)) is not None  # not made again


def test_a_folder_without_repros_says_what_to_run(cli, tmp_path):
    write_summary(RunSummary(started="now"), tmp_path)
    result = cli("bisect", tmp_path, "--releases", "2.9")
    assert result.exit_code == 2
    assert "holds no repro to run" in result.output and "reprokit report" in result.output


SOFTPLUS = """import sys, torch, torch.nn.functional as F, torch_xla
x = torch.full((4,), 4.0, dtype=torch.float16)
cpu = F.softplus(x, beta=3, threshold=15)
xla = F.softplus(x.to("xla"), beta=3, threshold=15).cpu()
print(f"CPU {cpu.tolist()}, XLA {xla.tolist()}")
sys.exit(0 if torch.equal(cpu, xla) else 1)
"""


def test_float16_softplus_on_two_real_releases(cli, tmp_path, monkeypatch):
    """Needs torch_xla 2.8's environment built already (reprokit bisect builds it, once)."""
    built = USER_ENVS / digest(release_env("2.8")) / "bin" / "python"
    if not built.exists():
        pytest.skip(f"torch_xla 2.8's environment is not built ({built.parent.parent})")
    pythons = {"2.8": built, "2.9": Path(sys.executable)}
    monkeypatch.setattr(since_tool, "release_python", lambda release, **_: pythons[release])
    (tmp_path / "softplus.py").write_text(SOFTPLUS)
    result = cli("bisect", tmp_path / "softplus.py", "--releases", "2.8..2.9")
    found = json.loads((tmp_path / "bisect.json").read_text())["repros"]["softplus.py"]
    assert {r: t["verdict"] for r, t in found["tried"].items()} == {"2.8": SHOWS, "2.9": SHOWS}
    assert "XLA [inf, inf, inf, inf]" in found["tried"]["2.8"]["why"], result.output


def _options():
    from reprokit.runner.options import Options

    return Options(timeout=120)


# A real torch_xla import that torch_xla 2.8 lacks: xla_backend imports ReduceOptions from
# 2.9 on (torch's class, used by its reduce); on 2.8 the import raises ImportError.
NEW_API = """import sys
import torch_xla
from torch_xla.distributed.xla_backend import ReduceOptions
print(f"XLA DIFFERS (stands for a bug; {ReduceOptions.__name__} found)")
sys.exit(1)
"""


def test_a_repro_that_fails_to_import_on_a_real_older_release_cannot_tell(
    cli, tmp_path, monkeypatch
):
    """Needs torch_xla 2.8's environment built already: there the import fails, and that is
    "cannot tell" on 2.8 (never "right"), the answer resting on 2.9 alone."""
    built = USER_ENVS / digest(release_env("2.8")) / "bin" / "python"
    if not built.exists():
        pytest.skip(f"torch_xla 2.8's environment is not built ({built.parent.parent})")
    pythons = {"2.8": built, "2.9": Path(sys.executable)}
    monkeypatch.setattr(since_tool, "release_python", lambda release, **_: pythons[release])
    (tmp_path / "new_api.py").write_text(NEW_API)
    result = cli("bisect", tmp_path / "new_api.py", "--releases", "2.8..2.9")
    found = json.loads((tmp_path / "bisect.json").read_text())["repros"]["new_api.py"]
    assert {r: t["verdict"] for r, t in found["tried"].items()} == {
        "2.8": CANNOT_TELL, "2.9": SHOWS}, result.output  # fmt: skip
    assert found["tried"]["2.8"]["why"].startswith("raised ImportError: cannot import name")
    assert found["since"].startswith("on every release tried (2.9; cannot tell on 2.8)")


def test_a_repro_past_the_timeout_cannot_tell_and_is_not_cached(here, tmp_path):
    (tmp_path / "slow.py").write_text("import time\ntime.sleep(600)\n")
    options = _options().__class__(timeout=2)
    for _ in range(2):  # the second run is not answered from the cache: it runs again
        found = since_tool.bisect_repros([tmp_path / "slow.py"], ["2.9"], options=options)
        (tried,) = found.found[0].tried.values()
        assert (tried.verdict, tried.cached) == (CANNOT_TELL, False)
        assert tried.why.startswith("timed out"), tried.why
