"""``reprokit ops`` end to end, as a user sees it: one sweep of six OpInfos in float16 with the
edge values and the in-place variants (a known divergence, fp16 softplus; a match, abs, and
its in-place ``abs_``; a skip, nonzero's CPU fallback; a crash, roll of an empty tensor; an
in-place divergence, fp16 silu's; an op not run, to_sparse), its exit code, ops.json,
report.md and the repros run alone; then the same sweep again from the results cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest

from reprokit.records.ops import Group, Sample, read_ops
from reprokit.tools.ops.harness import repro

OPS = ["nn.functional.softplus", "abs", "nonzero", "roll", "nn.functional.silu", "to_sparse"]


def reprokit(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, REPROKIT_CACHE=str(cache), REPROKIT_WARM_IDLE="0", PJRT_DEVICE="CPU")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The sweep, run once for the module: its folder, its cache, the CLI's answer."""
    root = tmp_path_factory.mktemp("ops")
    args = ["ops", *OPS, "--dtypes", "float16", "--edge", "--inplace", "-n", "2"]
    args += ["-o", str(root / "out")]
    done = reprokit(*args, cache=root / "cache")
    return root / "out", root / "cache", done, args


def group(folder: Path, op: str) -> Group:
    (found,) = [g for g in read_ops(folder).groups if g.op == op]
    return found


def test_a_divergence_is_a_group_with_a_repro_that_reproduces_alone(swept):
    folder, _, done, _ = swept
    assert done.returncode == 1, done.stdout + done.stderr
    softplus = group(folder, "nn.functional.softplus")
    assert (softplus.kind, softplus.dtypes, softplus.grad) == ("nan-inf", ("float16",), False)
    assert softplus.witness["edge"] and "inf" in softplus.witness["detail"]
    assert softplus.known == "fp16_softplus_overflow.md"
    assert softplus.reproduces_alone is True and "XLA DIFFERS" in softplus.alone_output
    script = folder / softplus.repro
    assert repro.lines(script.read_text()) <= repro.MOST_LINES
    assert "reprokit" not in script.read_text().split("\n", 1)[1]  # torch and torch_xla only
    ran = subprocess.run(
        [sys.executable, "-I", script.name], cwd=folder, capture_output=True, text=True,
        env={"PATH": os.environ["PATH"], "PJRT_DEVICE": "CPU"}, timeout=300, check=False,
    )  # fmt: skip
    assert ran.returncode == 1 and "XLA DIFFERS" in ran.stdout, ran.stdout + ran.stderr
    assert "float64" in ran.stdout


def test_a_crash_is_isolated_named_and_the_sweep_goes_on(swept):
    folder, _, _, _ = swept
    roll = group(folder, "roll")
    assert roll.kind == "crash" and "SIGFPE" in roll.witness["detail"]
    assert roll.reproduces_alone is True
    records = read_ops(folder).records
    assert any(r.op == "roll" and r.verdict == "match" for r in records)  # after the crash


def test_a_match_and_a_skip_are_counted_not_grouped(swept):
    folder, _, _, _ = swept
    sweep = read_ops(folder)
    assert not [g for g in sweep.groups if g.op in ("abs", "nonzero")]
    verdicts = {r.verdict for r in sweep.records if r.op == "abs"}
    assert "match" in verdicts and "differs" not in verdicts
    fell = [r for r in sweep.records if r.op == "nonzero" and r.verdict == "skip"]
    assert fell and all("CPU fallback (aten::nonzero)" in r.reason for r in fell)
    assert sweep.skips["CPU fallback"] >= len(fell)
    assert sweep.skips["op not run: sparse layout"] == 1  # to_sparse: torch_xla has none
    assert not [r for r in sweep.records if r.op == "to_sparse"]


def test_in_place_variants_are_swept_where_an_op_has_one(swept):
    folder, _, _, _ = swept
    sweep = read_ops(folder)
    assert sweep.inplace
    passes = {(r.op, r.inplace) for r in sweep.records}
    assert ("abs", True) in passes  # abs_ on XLA, its own lowering
    assert {op for op, inplace in passes if inplace} == {"abs", "nn.functional.silu"}
    edge = [r for r in sweep.records if r.op == "abs" and r.inplace and r.edge]
    assert edge and {r.verdict for r in edge} == {"match"}
    (silu_,) = [g for g in sweep.groups if g.op == "nn.functional.silu" and g.inplace]
    assert (silu_.passed, silu_.kind, silu_.dtypes) == ("in-place", "value", ("float16",))
    assert silu_.id.endswith("_inplace") and silu_.known == "fp16_sigmoid_silu_exp_overflow.md"
    script = (folder / silu_.repro).read_text()
    assert "o.inplace_variant" in script and "in-place variant" in script.splitlines()[0]
    assert silu_.reproduces_alone is True and "XLA DIFFERS" in silu_.alone_output


def test_report_md_lists_the_groups_and_reprokit_report_renders_it(swept):
    folder, cache, _, _ = swept
    text = (folder / "report.md").read_text()
    assert text.startswith("# reprokit ops: ")
    assert "| `nn.functional.softplus` | float16 | forward | nan-inf |" in text
    assert "## Not compared, by reason" in text and "CPU fallback" in text
    (folder / "report.md").unlink()
    done = reprokit("report", str(folder), cache=cache)
    assert done.returncode == 0, done.stderr
    assert (folder / "report.md").read_text() == text
    data = json.loads((folder / "ops.json").read_text())
    assert {"op", "variant", "backend", "dtypes", "kind", "grad", "witness", "repro"} <= set(
        data["groups"][0]
    )


def test_an_unchanged_sweep_comes_from_the_cache(swept):
    folder, cache, first, args = swept
    begun = time.monotonic()
    again = reprokit(*args, cache=cache)
    seconds = time.monotonic() - begun
    assert again.returncode == 1
    sweep = read_ops(folder)
    assert sweep.cached == sweep.tasks == 14  # 5 ops x float16 x (OpInfo's, edge); abs_, silu_
    assert seconds < 60, seconds  # no sample run, no repro run alone (their answers cached)
    assert again.stdout.splitlines()[0] == first.stdout.splitlines()[0]


def test_bad_input_exits_2(tmp_path):
    done = reprokit("ops", "abs", "--backends", "torchax", "-o", str(tmp_path), cache=tmp_path)
    assert done.returncode == 2 and "torchax" in done.stderr
    done = reprokit("ops", "abs", "--dtypes", "float8", "-o", str(tmp_path), cache=tmp_path)
    assert done.returncode == 2 and "float8" in done.stderr
    assert reprokit("ops", "-o", str(tmp_path), cache=tmp_path).returncode == 2


def test_every_field_a_worker_answers_is_one_the_harness_reads(swept):
    """The worker's answers, as the results cache keeps them, hold only fields of
    records/ops.py's Sample, the record the two sides share: a field the worker added that the
    record lacks would be dropped where the harness reads it."""
    _, cache, _, _ = swept
    entries = sorted((cache / "ops").glob("*.json"))
    answers = [r for path in entries for r in json.loads(path.read_text("utf-8"))]
    answered = {key for r in answers for key in r}
    assert {"verdict", "sample", "described", "kind", "detail", "code", "leaf"} <= answered
    assert answered - {f.name for f in fields(Sample)} == set()
