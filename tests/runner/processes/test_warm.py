"""Warm start: a stage forked from a server ends as it ends cold, leaves nothing behind, and a
dead server costs no result; the whole library gives the same tensors both ways."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from reliability_common import FAULT_TEMPLATES, orphans

from reprokit.generate.variants import load_variants
from reprokit.records import Status, read_summary
from reprokit.runner.options import Options
from reprokit.runner.processes import warm
from reprokit.runner.processes.stage import Launch
from reprokit.runner.scheduler import run

CASES = Path(__file__).parents[3] / "cases"
MODES = ["ok", "exit3", "raise", "abort", "segfault", "hang", "grandchild"]


def faults(tmp_path: Path, name: str, params: str) -> list:
    case = tmp_path / f"{name}.toml"
    case.write_text(f'[case]\ntitle = "t"\ntemplate = "faults"\n{params}')
    return load_variants([str(case)], templates=[FAULT_TEMPLATES])


def endings(summary) -> dict[str, tuple]:
    """Each variant's second stage: how it ended, as the record says."""
    found = {}
    for variant in summary.variants:
        (second,) = [s for s in variant.stages if s.name == "second"]
        found[variant.label] = (second.status, second.returncode, second.signal, second.error)
    return found


def test_each_fault_ends_warm_as_it_ends_cold_and_leaves_no_process(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    params = f'[params]\npids = "{pids}"\n[matrix]\nmode = {MODES}\n'
    summaries = {}
    for way in ("cold", "warm"):
        options = Options(jobs=2, timeout=6, grace=1, warm=way == "warm", cache=False)
        variants = faults(tmp_path, way, params)
        summaries[way] = run(variants, run_dir=tmp_path / way, options=options)
        assert orphans(pids, tmp_path / way) == []
    warm_ends = endings(summaries["warm"])
    assert {k.replace("warm", "cold"): v for k, v in warm_ends.items()} == endings(
        summaries["cold"]
    )
    statuses = {label.split("[")[1][:-1]: end[:3] for label, end in warm_ends.items()}
    assert statuses["exit3"] == (Status.ERROR, 3, None)
    assert statuses["segfault"] == (Status.CRASH, -11, "SIGSEGV")
    assert statuses["hang"][0] is statuses["grandchild"][0] is Status.TIMEOUT
    for way, started in (("warm", {"warm"}), ("cold", {"cold: --cold"})):
        stages = [s for v in summaries[way].variants for s in v.stages]
        assert {s.started for s in stages} == started  # warm: every one was forked


def server_pids(preload: str | None = None) -> list[int]:
    """This process's warm servers (those importing ``preload``: "torch,torch_xla", "")."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        argv = cmdline.decode().split("\0")
        if ppid == os.getpid() and argv[1:2] and argv[1].endswith("warm_server.py"):
            if preload is None or argv[2] == preload:
                found.append(int(entry.name))
    return found


def test_a_server_killed_mid_run_loses_no_result(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    variants = faults(tmp_path, "nap", f'[params]\nnap = 2.0\npids = "{pids}"\n')
    options = Options(jobs=1, timeout=60, warm=True, cache=False)
    done: list = []
    runner = threading.Thread(
        target=lambda: done.append(run(variants, run_dir=tmp_path / "run", options=options))
    )
    runner.start()
    while not list(pids.glob("*.first.*")) and runner.is_alive():  # a stage is running
        time.sleep(0.05)
    killed = server_pids()
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    runner.join()
    (variant,) = done[0].variants
    assert killed and variant.outcome.value == "match"
    assert all(stage.status is Status.OK for stage in variant.stages)
    starts = sorted(stage.started or "" for stage in variant.stages)
    died = "cold: the warm server died during the stage: re-run cold"
    assert died in starts and set(starts) == {died, "warm"}, starts  # then a new server
    assert orphans(pids, tmp_path / "run") == []


def test_cold_starts_no_server(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a warm server was started")

    monkeypatch.setattr(warm, "_Server", refuse)
    variants = faults(tmp_path, "cold", "")
    summary = run(variants, run_dir=tmp_path / "run", options=Options(warm=False, cache=False))
    assert summary.variants[0].outcome.value == "match"
    assert {stage.started for stage in summary.variants[0].stages} == {"cold: --cold"}


def test_a_server_that_cannot_start_means_cold_starts_that_say_why(tmp_path):
    python = tmp_path / "python"
    script = f'case $1 in *warm_server.py) exit 7;; esac\nexec {sys.executable} "$@"\n'
    python.write_text("#!/bin/sh\n" + script)
    python.chmod(0o755)
    options = Options(python=str(python), cache=False)
    summary = run(faults(tmp_path, "broken", ""), run_dir=tmp_path / "run", options=options)
    (variant,) = summary.variants
    assert variant.outcome.value == "match"
    starts = [stage.started or "" for stage in variant.stages]
    assert all(s.startswith("cold: the warm server did not start (exit 7") for s in starts), starts


def test_only_multicore_and_unverified_devices_are_kept_from_the_fork():
    how = Launch(["python", "repro.py"], "s", "xla", {}, Path("."), [], 1.0)
    assert warm._cold_because(how, "CPU") is None
    assert warm._cold_because(replace(how, backend="cpu"), "TPU") is None
    assert "xmp.spawn" in warm._cold_because(replace(how, backend="xla_multicore"), "CPU")
    assert "TPU" in warm._cold_because(how, "TPU")
    assert "cuda" in warm._cold_because(replace(how, backend="cuda"), "CPU")


# Every built-in case twice (minutes): run by hand with REPROKIT_LIBRARY=1 (docs/development.md)
@pytest.mark.skipif(not os.environ.get("REPROKIT_LIBRARY"), reason="set REPROKIT_LIBRARY=1")
def test_the_library_gives_the_same_outcomes_and_tensors_warm_and_cold(tmp_path):
    variants = load_variants([str(p) for p in sorted(CASES.glob("*.toml"))])
    summaries = {}
    for way in ("cold", "warm"):
        options = Options(jobs=2, warm=way == "warm", cache=False)
        summaries[way] = run(variants, run_dir=tmp_path / way, options=options)
    outcomes = {w: {v.label: v.outcome for v in s.variants} for w, s in summaries.items()}
    assert outcomes["warm"] == outcomes["cold"]
    devices = {way: _devices(summary) for way, summary in summaries.items()}
    assert devices["warm"] == devices["cold"]  # CPU_NUM_DEVICES reached the forked runtime
    files = sorted((tmp_path / "cold").glob("*/stages/*/tensors.pt"))
    assert files
    # Elements, not files: a file also holds the bytes of a storage that no element uses
    # (uninitialized memory), and those differ from one cold run to the next as well.
    for path in files:
        twin = tmp_path / "warm" / path.relative_to(tmp_path / "cold")
        assert _tensors(twin) == _tensors(path), path
    ran = [st for v in summaries["warm"].variants for st in v.stages if st.started]
    cold = [st.backend for st in ran if st.started.startswith("cold: ")]
    assert set(cold) == {"xla_multicore"} and len(cold) < len(ran)
    assert all(st.started == "warm" for st in ran if st.backend != "xla_multicore")


def _devices(summary) -> dict[tuple[str, str], int | None]:
    """The XLA devices each stage saw."""
    stages = ((v.label, st) for v in summary.variants for st in v.stages)
    return {(label, st.name): st.xla.devices if st.xla else None for label, st in stages}


def _tensors(path: Path) -> dict[str, tuple]:
    """Each tensor's dtype, shape and element bits."""
    import torch

    found = {}
    for name, tensor in torch.load(path, weights_only=True).items():
        flat = tensor.detach().reshape(-1).contiguous()
        found[name] = (tensor.dtype, tuple(tensor.shape), bytes(flat.view(torch.uint8).numpy()))
    return found


def test_a_run_folder_given_relative_works_warm(cli, tmp_path, monkeypatch):
    # The quick start's `-o runs/seed`: a forked stage starts where the server is ("/").
    monkeypatch.chdir(tmp_path)
    result = cli("run", "module_forward", "-k", "mlp", "-o", "runs/relative")
    assert result.exit_code == 0, result.output
    (variant,) = read_summary(tmp_path / "runs" / "relative").variants  # through the JSON
    assert variant.stages and all(stage.started == "warm" for stage in variant.stages)


@pytest.fixture
def lingering(monkeypatch):
    """Warm servers that wait a minute for the next run, as a user's do; ended after the test."""
    monkeypatch.setenv("REPROKIT_WARM_IDLE", "60")
    yield
    for pid in server_pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    warm._reap_lingering()


def wait_gone(pids: list[int], limit: float = 10.0) -> list[int]:
    """Which of ``pids`` still run (a zombie does not) after at most ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while (left := [p for p in pids if p in server_pids()]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_a_server_outlives_its_run_and_serves_the_next_from_another_terminal(
    tmp_path, lingering, monkeypatch
):
    options = Options(cache=False)
    first = run(faults(tmp_path, "one", ""), run_dir=tmp_path / "one", options=options)
    servers = server_pids()
    assert servers, "no warm server left for the next run"
    monkeypatch.setenv("TMUX", "/tmp/tmux-1000/default,4242,0")  # a run from a tmux pane
    monkeypatch.setenv("TERM", "tmux-256color")
    second = run(faults(tmp_path, "two", ""), run_dir=tmp_path / "two", options=options)
    assert server_pids() == servers  # forked from the same one: none started
    for summary in (first, second):
        (variant,) = summary.variants
        assert variant.outcome.value == "match"
        assert {stage.started for stage in variant.stages} == {"warm"}


def test_a_server_whose_imported_files_changed_is_replaced(tmp_path, lingering, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("# imported by every Python of this test\n")
    monkeypatch.setenv("PYTHONPATH", str(site))  # so the server imported it
    options = Options(cache=False)
    run(faults(tmp_path, "one", ""), run_dir=tmp_path / "one", options=options)
    before = server_pids(preload="")  # the stages' (the script imports no torch)
    (site / "sitecustomize.py").write_text("# an upgrade: another size, another mtime\n")
    second = run(faults(tmp_path, "two", ""), run_dir=tmp_path / "two", options=options)
    (variant,) = second.variants
    assert {stage.started for stage in variant.stages} == {"warm"}
    assert len(before) == 1 and wait_gone(before) == [], "the stale server is still there"
    assert server_pids(preload="") not in ([], before)  # a new one serves


def test_idle_zero_ends_the_server_with_its_run(tmp_path):
    run(faults(tmp_path, "one", ""), run_dir=tmp_path / "one", options=Options(cache=False))
    assert server_pids() == []  # the conftest sets REPROKIT_WARM_IDLE=0 for every test


FINALIZERS = """{#- reprokit
title = "Each stage leaves a temporary folder for its exit to remove, and draws from numpy"
[params]
root = {type = "str", default = "", help = "where the folders go"}
-#}
import argparse
import json
import sys
import tempfile
from pathlib import Path

STAGES = [{"name": "one", "backend": "cpu", "needs": [], "reference": None},
          {"name": "two", "backend": "cpu", "needs": ["one"], "reference": None}]
parser = argparse.ArgumentParser()
parser.add_argument("--list-stages", action="store_true")
parser.add_argument("--stage")
parser.add_argument("--workdir", type=Path)
parser.add_argument("--xla-device")
args = parser.parse_args()
if args.list_stages:
    print(json.dumps(STAGES))
else:
    KEPT = tempfile.TemporaryDirectory(prefix=f"stage-{args.stage}-", dir={{ root }})
    (args.workdir / args.stage).mkdir(parents=True, exist_ok=True)
    (args.workdir / args.stage / "result.json").write_text(json.dumps({"stage": args.stage}))
    if "numpy.random" in sys.modules:  # imported by the server, before the fork
        draw = sys.modules["numpy.random"].rand()
        (args.workdir / args.stage / "draw.txt").write_text(repr(draw))
"""


def forked_twice(tmp_path: Path, monkeypatch, server_imports: str):
    """Two stages forked from a server whose start ran ``server_imports`` (a sitecustomize:
    before any fork); each leaves a temporary folder in tmp_path/tmp for its exit to remove and
    draws from numpy where the server imported it. The variant's result."""
    root, site, templates = tmp_path / "tmp", tmp_path / "site", tmp_path / "templates"
    for folder in (root, site, templates):
        folder.mkdir()
    (site / "sitecustomize.py").write_text(server_imports)
    monkeypatch.setenv("PYTHONPATH", str(site))
    (templates / "finalizers.py.j2").write_text(FINALIZERS)
    case = tmp_path / "forked.toml"
    case.write_text(f'[case]\ntitle = "t"\ntemplate = "finalizers"\n[params]\nroot = "{root}"\n')
    variants = load_variants([str(case)], templates=[templates])
    (variant,) = run(variants, run_dir=tmp_path / "run", options=Options(cache=False)).variants
    assert [(s.status, s.started) for s in variant.stages] == [(Status.OK, "warm")] * 2
    return variant


def test_a_stage_runs_its_own_exit_cleanups_not_the_servers(tmp_path, lingering, monkeypatch):
    """weakref.finalize's exit-time cleanups: a stage's own run as it ends (its temporary
    folder is removed), those its server's imports made do not (torch_xla's import makes a
    temporary folder: the first stage to end would remove it from under the server)."""
    root = tmp_path / "tmp"
    made = (
        f"KEPT = tempfile.TemporaryDirectory(prefix=f'server-{{os.getpid()}}-', dir={str(root)!r})"
    )
    forked_twice(tmp_path, monkeypatch, f"import os, tempfile\n{made}\n")
    left = sorted(path.name.rsplit("-", 1)[0] for path in root.iterdir())
    assert left == sorted(f"server-{pid}" for pid in server_pids())  # no stage's is left


def test_numpy_imported_by_the_server_draws_anew_in_each_stage(tmp_path, monkeypatch):
    """numpy's global generator, seeded at its import, is reseeded in each fork: two stages
    draw different numbers, as two cold processes do (not the server's next number twice)."""
    variant = forked_twice(tmp_path, monkeypatch, "import numpy.random\n")
    stages = tmp_path / "run" / variant.label / "stages"
    draws = [(stages / name / "draw.txt").read_text() for name in ("one", "two")]
    assert draws[0] != draws[1]


def test_an_idle_time_that_is_no_number_is_said_not_silently_replaced():
    from reprokit.errors import ReprokitWarning

    assert warm._linger([(warm.IDLE, "30")]) == 30.0 and warm._linger([]) == warm.LINGER
    with pytest.warns(ReprokitWarning, match=r"REPROKIT_WARM_IDLE='ten' is not a number"):
        assert warm._linger([(warm.IDLE, "ten")]) == warm.LINGER
