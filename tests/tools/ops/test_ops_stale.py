"""Stale compiled graphs: a sample right alone but wrong right after a call of its op with the
same shapes and another non-tensor argument. The harness's part (stale.confirm: candidates
judged again alone and after, probes kept only as findings, the counts) with a pool that
answers as fresh workers would; older ops.json files without the counts; then real sweeps:
``avg_pool2d`` (``divisor_override``), ``pixel_shuffle`` (``upscale_factor``) and ``celu``
(``alpha``, which none of OpInfo's samples passes: the probe made from its signature's default)
each give a stale-graph group whose repro exits 1 alone in an empty folder; ``pixel_unshuffle``,
whose samples pair the same way (``downscale_factor`` 1 and 3), gives none: its hash holds it.
And the probes themselves, made in a worker from OpInfo's samples (pairs.probes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from reprokit.records.ops import OpsSweep, Sample, read_ops
from reprokit.tools.ops.harness import stale
from reprokit.tools.ops.harness.pool import Asking
from reprokit.tools.ops.harness.repro import title

TASK = {"variant": "", "dtype": "float32", "backend": "xla", "grad": False, "edge": False}


def candidate(sample: int, *, probe: bool = False, args=("divisor_override",), pair=None) -> Sample:
    found = TASK | {
        "op": "nn.functional.avg_pool2d",
        "sample": sample,
        "verdict": "differs",
        "kind": "value",
        "detail": "4/4 differ",
        "described": {"tensors": [f"float32[1, 1, {sample}, 4]"]},
        "stale": {"after": {"edge": False, "sample": 0}, "args": list(args)},
        "pair": pair or {"A0": "[T[0], 2]", "K0": "{}", "A": "[T[0], 3]", "K": "{}", "saved": None},
    }
    return Sample.from_json(found | ({"probe": True, "base": 0} if probe else {}))


class Pool:
    """Answers recheck jobs as fresh workers would: ``alone`` and ``after`` verdicts by sample."""

    def __init__(self, alone: dict[int, str], after: dict[int, str]) -> None:
        self.verdicts = {"alone": alone, "after": after}
        self.jobs: list[dict] = []

    def answer(self, job: dict) -> list[dict]:
        self.jobs.append(job)
        said = self.verdicts[job["mode"]]
        return [
            {"recheck": n, "record": {"verdict": said[int(item["pair"]["A"][-2])]}}
            for n, item in enumerate(job["recheck"])
        ]


def test_right_alone_and_wrong_after_is_a_stale_graph_the_rest_as_judged(tmp_path, monkeypatch):
    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path))
    shown, real, probe = candidate(1), candidate(2, args=("ceil_mode",)), candidate(3, probe=True)
    shown, real, probe = (
        replace(r, pair=dict(r.pair, A=f"[T[0], {a}]"))
        for r, a in ((shown, "1"), (real, "2"), (probe, "3"))
    )
    matched = Sample.from_json(TASK | {"op": "abs", "verdict": "match", "sample": 0})
    failed_probe = replace(matched, probe=True, sample=9)
    alone, after = {1: "match", 2: "differs", 3: "match"}, {1: "differs", 2: "differs", 3: "match"}
    pool = Pool(alone, after)
    kept, counts = stale.confirm([shown, real, probe, matched, failed_probe], Asking(pool, jobs=2))
    first, second, third = kept  # the probe that did not show it is gone
    assert first.kind == "stale-graph" and first.arg == "divisor_override"
    assert first.was == "value" and "alone: match" in first.detail
    assert second.kind == "value" and not second.stale  # wrong alone too: as judged
    assert third == matched
    assert counts == {"ops_checked": 2, "probes": 2, "candidates": 3, "rechecked": 3, "found": 1}
    assert {job["mode"] for job in pool.jobs} == {"alone", "after"}
    again, _ = stale.confirm([candidate(1, pair=shown.pair)], Asking(Pool({}, {})))
    assert again[0].kind == "stale-graph"  # from the cache: no worker asked


def test_without_a_pool_nothing_is_confirmed_and_probes_are_dropped():
    kept, counts = stale.confirm([candidate(1), candidate(2, probe=True)], Asking(None))
    assert [r.kind for r in kept] == ["value"] and kept[0].pair is None
    assert counts["found"] == 0 and counts["rechecked"] == 0


def test_an_older_ops_json_loads_without_the_counts(tmp_path):
    old = {
        "argv": [],
        "versions": {"torch": "2.9.0"},
        "backends": ["xla"],
        "dtypes": ["float32"],
        "grad": False,
        "edge": False,
        "seconds": 1.0,
        "groups": [
            {
                "id": "abs_value",
                "op": "abs",
                "variant": "",
                "backend": "xla",
                "dtypes": ["float32"],
                "kind": "value",
                "grad": False,
                "witness": {"dtype": "float32", "edge": False, "sample": 0, "detail": "x"},
                "samples": 1,
            }
        ],
    }
    (tmp_path / "ops.json").write_text(json.dumps(old))
    sweep = read_ops(tmp_path)
    assert sweep.stale_graph == {} and sweep.groups[0].witness.get("arg") is None
    assert "stale_graph" in OpsSweep.from_json(sweep.to_json()).to_json()


def reprokit(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, REPROKIT_CACHE=str(cache), REPROKIT_WARM_IDLE="0", PJRT_DEVICE="CPU")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("stale")
    ops = [
        "nn.functional.avg_pool2d",
        "nn.functional.pixel_shuffle",
        "nn.functional.pixel_unshuffle",
        "nn.functional.celu",
    ]
    done = reprokit("ops", *ops, "--dtypes", "float32", "-o", str(root / "out"), cache=root)
    return root / "out", done


@pytest.mark.parametrize(
    ("op", "arg"),
    [
        ("nn.functional.avg_pool2d", "divisor_override"),
        ("nn.functional.pixel_shuffle", "upscale_factor"),
        ("nn.functional.celu", "alpha"),
    ],
)
def test_a_reused_graph_is_a_stale_graph_group_whose_repro_shows_it_alone(swept, op, arg, tmp_path):
    folder, done = swept
    assert done.returncode == 1, done.stdout + done.stderr
    stale = [g for g in read_ops(folder).groups if g.op == op and g.kind == "stale-graph"]
    (group,) = [g for g in stale if g.witness["arg"] == arg]
    assert group.witness["arg"] == arg and group.reproduces_alone is True
    assert f"a second call with another {arg} returns the first call's result" in title(group)
    (tmp_path / "repro.py").write_text((folder / group.repro).read_text())
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PJRT_DEVICE": "CPU"}
    ran = subprocess.run(
        [sys.executable, "-I", "repro.py"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert ran.returncode == 1 and "XLA DIFFERS" in ran.stdout, ran.stdout + ran.stderr


def test_an_op_whose_hash_holds_its_arguments_gives_none_and_ops_json_counts(swept):
    folder, _ = swept
    sweep = read_ops(folder)
    assert not [g for g in sweep.groups if g.op == "nn.functional.pixel_unshuffle"]
    assert sweep.stale_graph["ops_checked"] == 4 and sweep.stale_graph["found"] >= 3
    assert not [r for r in sweep.records if r.probe and r.kind != "stale-graph"]


def test_probes_change_what_no_sample_changes_and_what_no_sample_passes():
    """OpInfo's celu samples never pass ``alpha``; softplus's all pass beta 3 and threshold
    0.2; var's are documented only (a builtin). Each gets a probe with another value."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    from reprokit.tools.ops.worker import pairs

    def probed(name: str) -> dict:
        (op,) = [o for o in op_db if o.name == name and not o.variant_test_name]
        made = list(op.sample_inputs("cpu", torch.float32))
        return {slot: (s.args, s.kwargs) for s, _, slot in pairs.probes(op, made)}

    celu = probed("nn.functional.celu")
    assert list(celu) == ["alpha"] and celu["alpha"][1]["alpha"] == 2.0  # not ``inplace``
    softplus = probed("nn.functional.softplus")
    assert softplus["beta"][1] == {"beta": 4, "threshold": 0.2}
    assert softplus["threshold"][1] == {"beta": 3, "threshold": 0.4}
    (op,) = [o for o in op_db if o.name == "var" and not o.variant_test_name]
    params = {p.name: p for p in pairs.parameters(op)}
    assert params["correction"].default == 1 and not params["correction"].positional
    assert pairs.param_names(op) == ["dim"]
    assert [pairs.another(v) for v in (True, 0, -1, 1.5, 0.0, (2, 2), "mean")] == [
        False, 1, -2, 3.0, 0.5, (3, 3), pairs._none,
    ]  # fmt: skip
