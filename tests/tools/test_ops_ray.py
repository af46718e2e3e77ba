"""``reprokit ops --executor ray`` end to end, on a real Ray (a private local instance, as the
command starts it without --ray-address; 2 CPUs) and real XLA:CPU workers: the same sweep run
locally and on Ray, into two results caches so that both really judge every sample.

The sweep: fp16 ``mean`` (an error group), fp16 ``softplus`` (agrees without edge values), and
``roll``, one of whose OpInfo samples (an empty tensor) kills its worker with SIGFPE on XLA:CPU,
on the Ray node as on this machine. Then a Ray actor killed by SIGKILL in the middle of a sample
(held there by the worker's test-only hang hook): its tasks run again in a new actor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from reprokit.records import EnvSpec
from reprokit.records.folder import WORKER_ANSWERS, WORKER_JOB
from reprokit.records.ops import Group, OpsSweep, read_ops
from reprokit.records.ops_releases import HTML, MARKDOWN, NOT_SWEPT, read_ops_releases
from reprokit.reports.ops_releases import shown, since, write_reports
from reprokit.tools.ops.harness.cluster import SCRATCH
from reprokit.tools.ops.harness.releases import merge
from reprokit.tools.ops.worker.main import HANG

OPS = ["nn.functional.softplus", "mean", "roll"]
ACTOR = b"ray::_Held"  # the process title Ray gives an actor of runner/processes/ray_actors.py


def reprokit(*args: str, cache: Path, **env: str) -> subprocess.Popen[str]:
    environ = dict(os.environ, REPROKIT_CACHE=str(cache), REPROKIT_WARM_IDLE="0", **env)
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", *args]
    return subprocess.Popen(
        command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finished(process: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = process.communicate(timeout=900)
    return process.returncode, out + err


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    pytest.importorskip("ray")
    """The sweep here and on Ray, one after the other (two cores): (local, ray) folders and
    what each printed."""
    root = tmp_path_factory.mktemp("ops-ray")
    args = ["ops", *OPS, "--dtypes", "float16", "-n", "2"]
    found = {}
    for name, more in (("local", []), ("ray", ["--executor", "ray"])):
        code, said = finished(
            reprokit(*args, *more, "-o", str(root / name), cache=root / f"cache-{name}")
        )
        assert code == 1, said  # divergences found
        found[name] = (read_ops(root / name), said)
    return found


def verdicts(sweep: OpsSweep) -> set[tuple]:
    return {(r.op, r.dtype, r.sample, r.verdict, r.kind, r.reason) for r in sweep.records}


@pytest.mark.slow
def test_the_ray_sweep_gives_the_local_groups(both):
    (local, _), (ray, said) = both["local"], both["ray"]
    assert [g.id for g in ray.groups] == [g.id for g in local.groups]
    assert {g.id for g in ray.groups} >= {"mean_error", "roll_crash"}
    assert [(g.kind, g.dtypes, g.witness["sample"]) for g in ray.groups] == [
        (g.kind, g.dtypes, g.witness["sample"]) for g in local.groups
    ]
    assert verdicts(ray) == verdicts(local)  # sample by sample
    assert all(g.reproduces_alone for g in ray.groups), said
    assert (ray.tasks, ray.cached) == (local.tasks, 0)  # every task judged on Ray


@pytest.mark.slow
def test_a_sample_that_kills_its_ray_worker_is_a_crash_and_the_sweep_goes_on(both):
    ray, said = both["ray"]
    (crash,) = [g for g in ray.groups if g.op == "roll"]
    assert crash.kind == "crash" and "SIGFPE" in crash.witness["detail"], said
    assert crash.witness["described"]["tensors"]  # named: which sample it was
    rolled = [r for r in ray.records if r.op == "roll"]
    after = [r for r in rolled if r.sample > crash.witness["sample"]]
    assert any(r.verdict == "match" for r in after)  # judged in a new worker
    crashes = [r for r in rolled if r.kind == "crash"]  # each empty tensor, its worker
    assert all("SIGFPE" in r.detail for r in crashes)
    assert len({r.sample for r in crashes}) == len(crashes)  # each sample judged once
    assert "roll float16 forward crash" in said


def actors() -> list[int]:
    """The pids of this machine's processes that are actors of ray_actors.py."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(ACTOR):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_ray_actor_killed_mid_sample_loses_only_its_tasks(tmp_path):
    """The actor dies (SIGKILL) while its worker is held in add's sample 1: add and neg run
    again in a new actor from their start, and the sweep ends as it would have: add's sample
    1 a hang (the hook holds it there again, until the sample's timeout), the rest judged."""
    pytest.importorskip("ray")
    args = ["ops", "add", "neg", "--dtypes", "float32", "--sample-timeout", "15", "-n", "1"]
    args += ["--executor", "ray", "-o", str(tmp_path / "out")]
    before = set(actors())
    running = reprokit(*args, cache=tmp_path / "cache", **{HANG: "add:1"})
    killed: list[int] = []

    def kill_the_actor() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and running.poll() is None:
            # the worker announced add's sample 1 and hangs there (its log is on the node)
            new = [pid for pid in actors() if pid not in before]
            if new and hanging(tmp_path / "cache"):
                os.kill(new[0], signal.SIGKILL)
                killed.append(new[0])
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_the_actor)
    killer.start()
    code, said = finished(running)
    killer.join()
    assert killed, said
    assert code == 1, said
    sweep = read_ops(tmp_path / "out")
    added = [r for r in sweep.records if r.op == "add"]
    assert [(r.sample, r.kind) for r in added if r.verdict == "differs"] == [(1, "hang")]
    assert {0, 2} <= {r.sample for r in added if r.verdict == "match"}
    assert all(r.verdict == "match" for r in sweep.records if r.op == "neg")
    assert not [r for r in sweep.records if "lost" in r.reason]  # once: run again


def hanging(cache: Path) -> bool:
    """Whether a worker of this test's sweep (its job names this test's cache) is in add's
    sample 1: its answer so far, in the node's scratch folder, ends with that sample's
    announcement."""
    for out in Path(tempfile.gettempdir()).glob(f"{SCRATCH}*/worker-*/{WORKER_ANSWERS}"):
        try:
            ours = str(cache) in (out.parent / WORKER_JOB).read_text("utf-8")
            lines = out.read_text("utf-8").strip().splitlines()
        except OSError:
            continue
        if ours and lines and '"begin": "add|' in lines[-1] and '"sample": 1,' in lines[-1]:
            return True
    return False


def swept(versions: str, groups: list[Group], judged: list[str]) -> OpsSweep:
    """An ops.json's content, as a release's sweep writes it (ops and their counts)."""
    ops = [{"op": o, "variant": "", "dtypes": ["float16"], "skip": None, "counts": {"match": 3}}
           for o in judged]  # fmt: skip
    return OpsSweep([], {"torch_xla": versions}, ("xla",), ("float16",), False, False, 1.0,
                    ops=ops, groups=tuple(groups))  # fmt: skip


def test_the_op_by_release_table_names_where_a_divergence_began(tmp_path):
    """A regression (silu: agrees on 2.8, differs on 2.9), one alike on both (mean), one op
    only 2.9 has: the table, its rows' order, report.md and the report.html matrix."""

    def group(op: str, kind: str) -> Group:
        return Group(f"{op}_{kind}", op, "", "xla", ("float16",), kind, False, {}, 1,
                     repro=f"repro_{op}_{kind}.py")  # fmt: skip

    old = swept("2.8.0", [group("mean", "error")], ["mean", "silu", "abs"])
    new = swept("2.9.0", [group("mean", "error"), group("silu", "value")],
                ["mean", "silu", "abs", "new_op"])  # fmt: skip
    table = merge([(EnvSpec("2.8", ()), old), (EnvSpec("2.9", ()), new)], ["ops"])
    rows = {r.name: r for r in table.rows}
    assert rows["silu"].changed and not rows["mean"].changed and not rows["abs"].changed
    assert rows["new_op"].cells["2.8"].state == NOT_SWEPT and not rows["new_op"].changed
    assert since(rows["silu"], ["2.8", "2.9"]) == "since 2.9 (2.8: agrees)"
    assert [r.name for r in shown(table)] == ["silu", "mean"]  # changed first
    write_reports(tmp_path, table)
    text = (tmp_path / MARKDOWN).read_text()
    assert (
        "| `silu` | agrees | [value](2.9/repro_silu_value.py) forward float16 | since 2.9" in text
    )
    assert "2 more OpInfos agree" in text
    page = (tmp_path / HTML).read_text()
    assert page.count("<tr>") == 3 and "href='2.9/repro_silu_value.py'" in page


@pytest.mark.slow
def test_the_sweep_on_2_8_and_2_9_is_one_op_by_release_table(shared_cache, tmp_path):
    """Real releases (2.8 a uv environment with expecttest added, 2.9 this one): each
    release's sweep in its folder with its own versions, merged into ops_releases.json, whose
    rows name both releases' groups."""
    out = tmp_path / "out"
    args = ["ops", "mean", "roll", "--dtypes", "float16", "--releases", "2.8..2.9", "-n", "2"]
    code, said = finished(reprokit(*args, "-o", str(out), cache=shared_cache))
    assert code == 1, said
    for release in ("2.8", "2.9"):
        sweep = read_ops(out / release)
        assert sweep.versions["torch_xla"] == f"{release}.0", said
        assert {g.id for g in sweep.groups} == {"mean_error", "roll_crash"}
    table = read_ops_releases(out)
    assert [r.name for r in table.releases] == ["2.8", "2.9"]
    rows = {r.name: r for r in table.rows}
    assert rows["roll"].cells["2.8"].said() == "crash forward float16" and not rows["roll"].changed
    assert "[crash](2.8/repro_roll_crash.py)" in (out / MARKDOWN).read_text()
    assert "href='2.9/repro_mean_error.py'" in (out / HTML).read_text()
