"""A sample that hangs its worker, end to end: the worker (real XLA:CPU, forked warm as in any
sweep) is killed by the sample's timeout, the sample is named as a ``hang``, and the sweep goes
on from the next sample in a new worker. The hang is real: the worker's test-only hook
(``REPROKIT_OPS_HANG=OP:SAMPLE``, worker.HANG) blocks that sample until the alarm ends the
process, the way an op that never returns would."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from reprokit.records.ops import read_ops
from reprokit.tools.ops.worker.main import EXHAUST, HANG

TIMEOUT = 3  # seconds a sample may take here


def reprokit(*args: str, cache: Path, hang: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, REPROKIT_CACHE=str(cache), REPROKIT_WARM_IDLE="0", PJRT_DEVICE="CPU")
    env[HANG] = hang
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def test_a_hanging_sample_is_killed_named_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "out"
    args = ["ops", "add", "neg", "--dtypes", "float32", "--sample-timeout", str(TIMEOUT), "-n", "1"]
    begun = time.monotonic()
    done = reprokit(*args, "-o", str(out), cache=tmp_path / "cache", hang="add:1")
    seconds = time.monotonic() - begun
    assert done.returncode == 1, done.stdout + done.stderr
    sweep = read_ops(out)
    added = [r for r in sweep.records if r.op == "add"]
    hung = [r for r in added if r.verdict == "differs"]
    assert [(r.sample, r.kind) for r in hung] == [(1, "hang")]
    assert "past the sample's timeout" in hung[0].detail
    assert hung[0].described["tensors"]  # named: which sample it was
    judged = {r.sample for r in added if r.verdict == "match"}
    assert 0 in judged and 2 in judged  # before the hang, and after it in a new worker
    assert all(r.verdict == "match" for r in sweep.records if r.op == "neg")
    (group,) = sweep.groups
    assert (group.op, group.kind, group.witness["sample"]) == ("add", "hang", 1)
    assert group.repro and (out / group.repro).is_file()  # its source was written
    assert group.reproduces_alone is False  # add does not hang alone: only the hook did
    assert "add float32 forward hang" in done.stdout
    assert seconds < 240, seconds  # the hang cost its timeout, not the worker's overall limit


def test_a_worker_out_of_memory_mappings_runs_its_sample_again_in_a_new_one(tmp_path):
    """The whole --mesh sweep's workers ran out of memory mappings after hours of compiled
    programs ("LLVM compilation error: Cannot allocate memory", then SIGSEGV): the worker's
    end, not the sample's. The hook (worker.EXHAUST) dies so once on add's sample 1: the sample
    runs again in a new worker and matches; no crash group, none refused."""
    env = dict(os.environ, REPROKIT_CACHE=str(tmp_path / "cache"), REPROKIT_WARM_IDLE="0",
               PJRT_DEVICE="CPU")  # fmt: skip
    env[EXHAUST] = f"add:1:{tmp_path / 'exhausted'}"
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", "ops", "add",
               "--dtypes", "float32", "-n", "1", "-o", str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "exhausted").is_file()  # the hook did kill the first worker
    added = [r for r in read_ops(tmp_path / "out").records if r.op == "add"]
    assert [r.verdict for r in added if r.sample == 1] == ["match"]
    assert not [r for r in added if r.verdict == "differs"]
