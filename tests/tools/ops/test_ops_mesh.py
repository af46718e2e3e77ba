"""``reprokit ops --mesh``: each sample on XLA under SPMD with its tensor arguments sharded on a
mesh of XLA:CPU's virtual devices, against the same sample unsharded. The specs are pure
(reprokit.tools.ops.mesh); the sweep is real: workers forked warm, SPMD on 4 devices."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reprokit.errors import ReprokitError
from reprokit.records.ops import Group, read_ops
from reprokit.tools.ops.harness.repro import repro_text
from reprokit.tools.ops.harness.sweep import UNSHARDED_DEATH
from reprokit.tools.ops.mesh import CONTROL, parse, placements, specs
from reprokit.tools.ops.mesh import features as sharding


def test_specs_split_each_dim_on_each_axis_both_axes_and_views():
    found = specs((2, 2))
    assert found[0] == CONTROL
    for spec in ("0@x", "0@y", "-1@x", "-1@y", "0@xy", "-1@xy", "0@x,-1@y", "0@y,-1@x"):
        assert spec in found
    assert {s.partition("/")[2] for s in found} == {"", "slice", "transpose"}
    assert specs((4,)) == [CONTROL, "0@x", "-1@x", "0@x/slice", "0@x/transpose"]


def test_placements_as_mark_sharding_takes_them():
    assert placements("0@x", 3) == ("x", None, None)
    assert placements("-1@xy", 2) == (None, ("x", "y"))
    assert placements("0@x,-1@y/slice", 2) == ("x", "y")
    assert placements(CONTROL, 2) == (None, None)
    assert placements("0@x,-1@y", 1) is None  # one dim cannot be split twice
    assert placements("0@x", 0) is None  # a scalar has no dim to split


@pytest.mark.parametrize("text", ["1x4", "3x3", "2x2x2x2", "two", ""])
def test_a_mesh_that_cannot_be_laid_out_is_refused(text):
    with pytest.raises(ReprokitError, match="--mesh"):
        parse(text)
    assert parse("2x4") == (2, 4) and parse("4") == (4,)


def reprokit(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, REPROKIT_CACHE=str(cache), REPROKIT_WARM_IDLE="0", PJRT_DEVICE="CPU")
    command = [sys.executable, "-c", "from reprokit.cli import main; main()", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


def test_a_bad_mesh_is_one_clear_message_and_exit_2(tmp_path):
    done = reprokit("ops", "cumsum", "--mesh", "3x3", cache=tmp_path)
    assert done.returncode == 2
    assert "--mesh '3x3' is not a mesh" in done.stderr and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """scatter_add, roll and as_strided under every spec of a 2x2 mesh: (ops.json, what the CLI
    printed). Three bugs make it a test of the sweep's hard parts: scatter_add with both axes
    on one dim aborts XLA's SPMD partitioner (spmd_scatter_int64_index_uneven_abort.md), roll
    of an empty tensor dies of SIGFPE with or without a mesh (the unsharded control), and
    as_strided of a slice reads the wrong storage on XLA, sharded or not (the view's control)."""
    root = tmp_path_factory.mktemp("mesh")
    ops = ("scatter_add", "roll", "as_strided")
    done = reprokit("ops", *ops, "--mesh", "2x2", "--dtypes", "float32", "-n", "2",
                    "-o", str(root / "out"), cache=root / "cache")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # groups found
    return read_ops(root / "out"), done.stdout, root / "out"


def test_each_spec_is_judged_against_the_unsharded_sample(swept):
    sweep, said, _ = swept
    assert sweep.mesh == (2, 2) and "on xla sharded on a 2x2 mesh (against unsharded)" in said
    assert all(r.backend == "xla_spmd" for r in sweep.records)
    judged = {r.shard for r in sweep.records if r.verdict == "match"}
    assert judged == set(specs((2, 2)))  # each spec ran: the views and the padded splits too


def test_the_time_of_each_spec_is_kept_and_reported(swept):
    sweep, _, out = swept
    spent = {k: v for k, v in sweep.timings.items() if k.startswith("sharded ")}
    assert set(spent) == {f"sharded {spec}" for spec in specs((2, 2))}
    assert all(seconds > 0 for seconds in spent.values())
    said = (out / "report.md").read_text()
    assert f"0@xy {spent['sharded 0@xy']:,.0f} s" in said, said[:2000]


def test_a_partitioner_abort_is_a_crash_group_and_the_sweep_goes_on(swept):
    sweep, said, out = swept
    (abort,) = [g for g in sweep.groups if g.op == "scatter_add" and g.kind == "crash"]
    assert "0@xy" in abort.shards and abort.reproduces_alone
    assert abort.known == "spmd_scatter_int64_index_uneven_abort.md"  # a sharded entry's
    assert "spmd_partitioner_util.h" in abort.alone_output and "Check failed" in abort.alone_output
    repro = (out / abort.repro).read_text()
    assert (
        "xs.mark_sharding(w, mesh, p)" in repro and f"{{1: {placements(abort.shard, 1)}," in repro
    )
    assert len(repro.splitlines()) <= 30  # what an issue shows unfolded
    assert "scatter_add float32 forward, sharded " in said and "0@xy" in said
    later = [r for r in sweep.records if r.op == "scatter_add" and r.shard == "0@xy"]
    assert any(r.verdict == "skip" for r in later)  # the rest after 3 deaths: not run, said so


def test_a_death_of_the_unsharded_run_is_not_shardings(swept):
    """roll's empty samples die before any sharding (the control dies on them too): skips."""
    sweep, _, _ = swept
    assert not [g for g in sweep.groups if g.op == "roll"]
    died = [r for r in sweep.records if r.op == "roll" and r.reason == UNSHARDED_DEATH]
    assert died and all(r.shard == CONTROL for r in died)


def test_one_group_per_op_and_kind_names_the_shardings_it_needs(swept):
    """A bug shows under several specs: one group, every spec it differs under, and the specs
    under which the op's samples all match (what the sharding is not enough for)."""
    sweep, _, _ = swept
    keys = [(g.op, g.variant, g.kind) for g in sweep.groups]
    assert len(keys) == len(set(keys))
    (abort,) = [g for g in sweep.groups if g.op == "scatter_add" and g.kind == "crash"]
    assert abort.shard in abort.shards and "0@x" in abort.spared and CONTROL not in abort.spared
    assert not set(abort.shards) & set(abort.spared)
    assert abort.id == "scatter_add_crash_xla_spmd"  # no spec in it: one group for all


def test_a_view_is_judged_against_the_same_view_unsharded(swept):
    """as_strided of a slice reads the slice's base storage on XLA whether sharded or not: the
    0@x/slice control takes the same slice, so the view's own doing is no sharding group."""
    sweep, _, _ = swept
    assert not [g for g in sweep.groups if g.op == "as_strided"]
    sliced = [r for r in sweep.records if r.op == "as_strided" and r.shard == "0@x/slice"]
    assert sliced and any(r.verdict == "match" for r in sliced)


@pytest.mark.parametrize(
    ("spec", "tensor", "padded"),
    [
        ("0@x", "float32[5, 5]", True),  # 5 rows over 2 devices
        ("0@x", "float32[4, 5]", False),
        ("0@x/slice", "float32[4, 5]", False),  # the larger tensor's 6 rows
        ("0@x/slice", "float32[5, 5]", True),
        ("-1@xy", "float32[8, 5]", True),  # 5 over all 4
        ("0@xy", "float32[8, 5]", False),
        ("0@x,-1@y/transpose", "float32[4, 5]", True),  # the transposed tensor's first dim: 5
        (CONTROL, "float32[5, 5]", False),
    ],
)
def test_a_sharded_samples_features_name_the_split_and_its_padding(spec, tensor, padded):
    found = sharding(spec, (2, 2), {"tensors": [tensor, "int64[]"]})
    assert found["a sharded dim padded"] is padded
    if spec == "0@x,-1@y/transpose":
        assert found | {"a sharded dim padded": 0} == {
            "sharded dims": "first, last",
            "over axes": "x, y",
            "view": "transpose",
            "a sharded dim padded": 0,
        }


def test_a_sharded_groups_trigger_says_what_the_sharding_needs(swept):
    """Learnt from the op's samples under every spec, then checked on new ones: its bases and
    their mutants, each under every spec (the abort's new samples die as its witness does)."""
    sweep, _, _ = swept
    (abort,) = [g for g in sweep.groups if g.op == "scatter_add" and g.kind == "crash"]
    condition = abort.trigger.get("condition") or ""
    assert any(name in condition for name in ("over axes", "sharded dims", "padded"))
    tested = abort.trigger["tested"]
    assert abort.trigger["confirmed"] >= 1, abort.trigger  # a refuted one is said, not hidden
    assert any(t["differs"] for t in tested) and all(", sharded " in t["what"] for t in tested)


def test_gradients_are_judged_under_every_sharding(tmp_path):
    """--grad: each sample's gradients sharded against unsharded, under each spec of a mesh
    of 4 (cumsum's backward is a reversed cumsum: sharded, it crosses the shards)."""
    done = reprokit("ops", "cumsum", "--mesh", "4", "--grad", "--dtypes", "float32", "-n", "2",
                    "-o", str(tmp_path / "out"), cache=tmp_path / "cache")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr  # no group
    sweep = read_ops(tmp_path / "out")
    backward = [r for r in sweep.records if r.grad]
    assert {r.shard for r in backward if r.verdict == "match"} == set(specs((4,)))
    assert len(backward) == len([r for r in sweep.records if not r.grad])
    assert "forward, backward" in (tmp_path / "out" / "report.md").read_text()


def test_a_sharded_group_keeps_the_hlo_around_the_partitioner(swept):
    """Whose: the repro run alone dumps XLA's module before and after SPMD partitioning; the
    sharded one is kept beside the repro (scatter_add's padded indices are in it)."""
    sweep, _, out = swept
    (wrong,) = [g for g in sweep.groups if g.op == "scatter_add" and g.kind == "value"]
    before, after = (out / name for name in wrong.hlo)
    assert before.name.endswith(".before_partitioning.txt")
    assert "sharding={devices=" in before.read_text() and "num_partitions=4" in before.read_text()
    assert "scatter(" in after.read_text()
    assert f"`{after.name}`" in (out / "report.md").read_text()


def _group(op: str) -> Group:
    witness = {"dtype": "float32", "edge": False, "sample": 0, "mesh": [2, 2]}
    return Group(id="g", op=op, variant="", backend="xla_spmd", dtypes=("float32",),
                 kind="value", grad=False, witness=witness, samples=1, shard="0@x")  # fmt: skip


def test_a_sharded_repro_that_fails_in_itself_exits_2_not_1(tmp_path):
    """An exception before the sharded call (the repro's own, not the bug's) is exit 2; a
    helper OpInfo defines is imported (max_pool2d_backward's repro once exited 1 on an
    AttributeError)."""
    code = {"A": "[torch.ones(4, 4)]", "K": "{}"}
    helper = repro_text(
        _group("x"), code, "torch.testing._internal.common_methods_invocations.foo", None
    )
    assert "import torch.testing._internal.common_methods_invocations\n" in helper
    broken = tmp_path / "repro.py"
    broken.write_text(repro_text(_group("x"), code, "torch.no_such_op", None))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PJRT_DEVICE": "CPU"}
    done = subprocess.run([sys.executable, "-I", str(broken)], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "AttributeError" in done.stderr and "DIFFERS" not in done.stdout


def test_mesh_samples_judges_each_sharded_tasks_first_samples(tmp_path):
    """--mesh-samples N: a sharded sample is a compile per spec, so each task judges its first
    N samples and says how it stopped (a skip record after them)."""
    done = reprokit("ops", "cumsum", "--mesh", "4", "--mesh-samples", "2", "--dtypes", "float32",
                    "-o", str(tmp_path / "out"), cache=tmp_path / "cache")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    sweep = read_ops(tmp_path / "out")
    stopped = [r for r in sweep.records if "first 2 samples" in r.reason]
    assert max(r.sample for r in sweep.records if r not in stopped) < 2
    assert {r.shard for r in stopped} == set(specs((4,)))  # one per task, after its 2 samples


def test_an_elementwise_result_that_loses_its_inputs_sharding_is_said(tmp_path):
    """add's result, alone in its graph, comes back replicated where its sharded dim is padded
    (5 over 2 devices: XLA's rule, by design) and laid out as its input where the split is
    even; its in-place variant the same. Memory, not values: a summary and no group."""
    done = reprokit("ops", "add", "--inplace", "--mesh", "2x2", "--dtypes", "float32", "-n", "1",
                    "-o", str(tmp_path / "out"), cache=tmp_path / "cache")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr  # no group: values all match
    sweep = read_ops(tmp_path / "out")
    (found,) = sweep.lost_shardings
    padded, even = found["padded"], found["even"]
    assert found["op"] == "add" and padded["lost"] == padded["checked"] > 0
    assert even["checked"] > 0 and even["lost"] == 0
    assert found["witness"]["lost"].endswith("-> {replicated}")
    inplace = [r.layout for r in sweep.records if r.inplace and r.layout]
    assert "kept" in inplace and any(lost.endswith("{replicated}") for lost in inplace)
    said = (tmp_path / "out" / "report.md").read_text()
    assert f"Padded splits: {padded['lost']} of {padded['checked']} elementwise results" in said
    assert "No evenly split result lost its sharding." in said


def test_an_evenly_split_result_that_loses_its_sharding_is_listed():
    """A padded split lost is XLA's rule, counted once; an even one is a finding, in a table."""
    from reprokit.records.ops import OpsSweep
    from reprokit.reports.ops import markdown

    lost = "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate} -> {replicated}"
    witness = {"sample": 3, "shard": "0@x", "tensors": ["float32[4, 4]"], "numel": 16,
               "lost": lost}  # fmt: skip
    entry = {"op": "sin", "variant": "", "padded": {"checked": 5, "lost": 5},
             "even": {"checked": 4, "lost": 1}, "witness": witness}  # fmt: skip
    sweep = OpsSweep(argv=[], versions={}, backends=("xla_spmd",), dtypes=("float32",),
                     grad=False, edge=False, seconds=1.0, mesh=(2, 2),
                     lost_shardings=[entry])  # fmt: skip
    said = markdown(sweep)
    assert "Padded splits: 5 of 5 elementwise results of 1 op came back replicated" in said
    assert "| `sin` | 1 of 4 | 5 of 5 | sample 3: float32[4, 4], 0@x: {devices=" in said


def test_random_ops_and_the_plain_sweeps_findings_make_no_sharded_group(tmp_path):
    """multi_head_attention_forward with dropout draws its mask from XLA's generator: seeded
    alike for the unsharded and the sharded call, they agree (unseeded, the second call drew
    another mask: a false group). matrix_rank of a batch has the wrong shape on XLA sharded or
    not (svdvals_batch_dims.md): the plain sweep's finding, and its float32 ties are no
    sharding's doing."""
    done = reprokit("ops", "nn.functional.multi_head_attention_forward", "linalg.matrix_rank",
                    "--mesh", "2x2", "--mesh-samples", "13", "--dtypes", "float32", "-n", "2",
                    "-o", str(tmp_path / "out"), cache=tmp_path / "cache")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    sweep = read_ops(tmp_path / "out")
    attention = [r for r in sweep.records if r.op == "nn.functional.multi_head_attention_forward"]
    assert sum(r.verdict == "match" for r in attention) > 100
    reasons = {r.reason for r in sweep.records if r.op == "linalg.matrix_rank"}
    assert "unsharded XLA's shape is not CPU's: the plain sweep's finding" in reasons
