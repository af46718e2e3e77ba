"""A judged variant's recorded operations: kept around each first divergence, summarized
elsewhere (comparison/retention.py), with the same verdict as a run that keeps them all.

One captured case runs twice, into one results cache: reduced (the default) and with
--keep-tensors (its stages reused from the cache, which keeps them whole).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reprokit.comparison.checkpoints import load_tensors
from reprokit.comparison.retention import AROUND, read_summaries, reduce_variant, summary
from reprokit.records import (
    Comparison,
    Outcome,
    StageResult,
    Status,
    VariantResult,
    read_summary,
)

CASE = "captured_cnn_bf16"  # a mismatch: XLA's mean over the image
BLOCK_TORCH = "import sys; sys.modules['torch'] = None; from reprokit.cli import main; main()"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The case's run folder, reduced and kept whole."""
    folder = tmp_path_factory.mktemp("retention")
    env = {**os.environ, "REPROKIT_CACHE": str(folder / "cache")}
    found = {}
    no_torch = [
        "-c",
        "import sys; sys.modules['torch'] = None; from reprokit.cli import main; main()",
    ]
    for name, how, extra in (
        ("reduced", ["-m", "reprokit"], []),
        ("kept", ["-m", "reprokit"], ["--keep-tensors"]),
        ("again", no_torch, []),  # every stage, comparison and reduction from the caches
    ):
        found[name] = folder / name
        command = [sys.executable, *how, "run", CASE, "-o", str(found[name]), *extra]
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stdout + done.stderr  # the case expects its mismatch
    return found


def variant(run: Path) -> VariantResult:
    (found,) = read_summary(run).variants
    return found


def test_the_verdict_and_comparisons_are_those_of_a_run_keeping_every_tensor(runs):
    reduced, kept = variant(runs["reduced"]), variant(runs["kept"])
    assert all(s.reused for s in kept.stages)  # the cache kept the stages' files whole
    assert reduced.outcome == kept.outcome and reduced.outcome.value == "mismatch"
    assert reduced.first_divergence == kept.first_divergence
    assert reduced.comparisons == kept.comparisons


def test_tensors_pt_keeps_the_outputs_and_the_divergence_and_summarizes_the_rest(runs):
    result = variant(runs["reduced"])
    first = result.first_divergence["xla"]
    order = [c.tensor for c in result.comparisons if c.target == "xla"]
    at = order.index(first)
    around = set(order[max(0, at - AROUND) : at + AROUND + 1])
    for stage in ("ref_fp64", "cpu", "xla"):
        whole = load_tensors(runs["kept"] / CASE / "stages" / stage / "tensors.pt")
        folder = runs["reduced"] / CASE / "stages" / stage
        left = load_tensors(folder / "tensors.pt")
        dropped = read_summaries(folder)
        assert set(left) == around | {n for n in whole if not n.startswith("node.")}
        assert set(left) | set(dropped) == set(whole) and not set(left) & set(dropped)
        for name, tensor in left.items():  # what is kept is kept bit for bit
            assert torch.equal(tensor, whole[name])
        for name, said in dropped.items():
            assert said == summary(whole[name])
        assert (folder / "tensors.pt").stat().st_size < 0.5 * (
            runs["kept"] / CASE / "stages" / stage / "tensors.pt"
        ).stat().st_size
    assert read_summaries(runs["kept"] / CASE / "stages" / "xla") == {}  # --keep-tensors


def test_reprokit_report_reads_a_reduced_run(runs):
    """The report is made from summary.json: the same tables as for the whole run."""
    texts = []
    for name in ("reduced", "kept"):
        command = [sys.executable, "-m", "reprokit", "report", str(runs[name]), "--format", "md"]
        subprocess.run(command, check=True, capture_output=True)
        texts.append((runs[name] / "report.md").read_text())
    first = variant(runs["reduced"]).first_divergence["xla"]
    op = next(s for s in variant(runs["reduced"]).stages if s.name == "xla").described[first]
    assert f"`{op['op']}` on XLA" in texts[0]  # bf16 mean: a known page, in a title's words
    assert texts[0] == texts[1]  # the issue, its values and its other divergences alike


def test_minimize_finds_its_target_in_a_reduced_run(runs):
    """minimize judges a candidate by its verdict (the outcome and the kind of its first
    divergence): a reduced run gives it the same one."""
    from reprokit.tools.minimize.target import Target

    reduced, kept = variant(runs["reduced"]), variant(runs["kept"])
    target = Target.of(kept)
    assert target.clue is not None and target.kept_by(reduced)


def _result(described: dict, comparisons: list[Comparison], first: str | None) -> VariantResult:
    stage = StageResult("xla", "xla", Status.OK, 0, described=described)
    return VariantResult(
        case="c",
        label="c",
        variant={},
        outcome=Outcome.MISMATCH,
        expected=Outcome.MISMATCH,
        seconds=0.0,
        stages=(StageResult("cpu", "cpu", Status.OK, 0, described=described), stage),
        comparisons=tuple(comparisons),
        first_divergence={"xla": first},
    )


def test_an_old_style_file_is_reduced_and_a_reduced_one_left_as_it_is(tmp_path):
    """torch's legacy format (not memory-mappable) is read whole; a second pass changes
    nothing (tensors.json is there)."""
    names = [f"node.{i:04d}.add" for i in range(8)] + ["output.0"]
    tensors = {name: torch.full((4,), float(i)) for i, name in enumerate(names)}
    for stage in ("cpu", "xla"):
        (tmp_path / "stages" / stage).mkdir(parents=True)
        path = tmp_path / "stages" / stage / "tensors.pt"
        torch.save(tensors, path, _use_new_zipfile_serialization=stage == "xla")
    rows = [
        Comparison(n, "cpu", "xla", (4,), "float32", 0.0, 0.0, 0, 4, n != names[5]) for n in names
    ]
    result = _result({n: {"op": "add"} for n in names[:-1]}, rows, names[5])
    assert reduce_variant(tmp_path, result) == 2 * 3  # node.0000-0002 of each stage
    for stage in ("cpu", "xla"):
        left = load_tensors(tmp_path / "stages" / stage / "tensors.pt")
        assert list(left) == [*names[3:8], "output.0"]
        dropped = read_summaries(tmp_path / "stages" / stage)
        assert list(dropped) == names[:3] and dropped[names[2]]["max_abs"] == 2.0
    assert reduce_variant(tmp_path, result) == 0


def test_a_summary_tells_equal_tensors_from_others_and_counts_nan_and_inf():
    a = torch.tensor([1.0, -3.0, float("nan"), float("inf")])
    said = summary(a)
    assert said["max_abs"] == 3.0 and (said["nan"], said["inf"]) == (1, 1)
    assert said["shape"] == [4] and said["dtype"] == "float32"
    assert summary(a.clone())["sha256"] == said["sha256"]
    assert summary(a.to(torch.bfloat16))["sha256"] != said["sha256"]
    assert summary(torch.tensor(True))["dtype"] == "bool" and "max_abs" not in summary(
        torch.tensor([True])
    )
    assert read_summaries(Path("/nonexistent")) == {}


def test_an_unchanged_rerun_reduces_from_the_cache_without_torch(runs):
    """The third run could not import torch: its stages, their comparisons and the reduced
    files all came from the caches, the same bytes as the first run's."""
    again, first = variant(runs["again"]), variant(runs["reduced"])
    assert all(s.reused for s in again.stages) and again.comparisons == first.comparisons
    for stage in ("ref_fp64", "cpu", "xla"):
        for name in ("tensors.pt", "tensors.json"):
            first, again = (runs[r] / CASE / "stages" / stage / name for r in ("reduced", "again"))
            assert first.read_bytes() == again.read_bytes()


def test_merge_warns_that_a_reduced_stage_merges_the_tensors_it_kept(runs, tmp_path):
    command = [sys.executable, "-m", "reprokit", "merge", str(runs["reduced"]), str(runs["kept"])]
    done = subprocess.run([*command, "-o", str(tmp_path / "m")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "kept only some of their recorded operations" in said and "--keep-tensors" in said
