"""Checkpoint readers: every format read lazily, by dotted name, and never running its code.

Formats that need torch_xla (xser, CheckpointManager under SPMD) are written by a subprocess in
tests/comparison/test_diff_cli.py; here everything is written in-process with plain torch.
"""

from __future__ import annotations

import pickle
import sys
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file

from reprokit.comparison.checkpoints import flatten, load_tensors, open_checkpoint
from reprokit.errors import ReprokitError


class Evil:
    """A pickle that, if ever unpickled by a trusting loader, creates the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def state() -> dict:
    torch.manual_seed(0)
    weight = torch.randn(6, 4)
    return {
        "model": {"fc.weight": weight, "fc.bias": torch.randn(6), "half": torch.ones(3).half()},
        "optimizer": {"state": {0: {"exp_avg": torch.randn(6, 4), "step": torch.tensor(3.0)}},
                      "param_groups": [{"lr": 0.1, "params": [0]}]},
        "views": {"column": weight[:, 1], "transposed": weight.t(), "scalar": torch.tensor(2)},
    }  # fmt: skip


def assert_same(checkpoint, expected: dict) -> None:
    flat = flatten(expected)
    assert list(checkpoint) == list(flat)
    for name, tensor in flat.items():
        got = checkpoint[name]
        assert got.dtype == tensor.dtype and got.shape == tensor.shape, name
        assert torch.equal(got, tensor), name


def test_torch_save_read_lazily_with_views_and_dotted_names(tmp_path):
    torch.save(state(), tmp_path / "a.pt")
    checkpoint = open_checkpoint(tmp_path / "a.pt")
    assert checkpoint.kind == "torch.save"
    assert "optimizer.state.0.exp_avg" in checkpoint and "optimizer.param_groups" not in checkpoint
    assert_same(checkpoint, state())
    assert_same(checkpoint, state())  # the pages let go after a read are read again, unchanged


def test_legacy_torch_save_format(tmp_path):
    torch.save(state(), tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    assert_same(open_checkpoint(tmp_path / "old.pt"), state())


def test_safetensors(tmp_path):
    flat = {k: v.contiguous() for k, v in flatten(state()).items() if k != "views.transposed"}
    save_file(flat, tmp_path / "a.safetensors")
    checkpoint = open_checkpoint(tmp_path / "a.safetensors")
    assert checkpoint.kind == "safetensors"
    assert {k: checkpoint[k] for k in checkpoint}.keys() == flat.keys()
    assert all(torch.equal(checkpoint[k], v) for k, v in flat.items())


def save_dcp(data: dict, folder) -> None:
    with warnings.catch_warnings():  # no process group: dcp says it saves for one process
        warnings.simplefilter("ignore")
        dcp.save(data, checkpoint_id=folder)


def test_distributed_checkpoint_step_and_manager_folder(tmp_path):
    data = {"model": state()["model"], "optimizer": state()["optimizer"]}
    save_dcp(data, tmp_path / "base" / "3")
    older = {"model": {k: v + 1 for k, v in data["model"].items()}}
    save_dcp(older, tmp_path / "base" / "1")
    step = open_checkpoint(tmp_path / "base" / "3")
    assert step.kind == "distributed checkpoint"
    assert_same(step, data)  # optimizer.param_groups (not tensors) is left out, as in torch.save
    latest = open_checkpoint(tmp_path / "base")
    assert latest.path == tmp_path / "base" / "3"


def test_folder_that_is_no_checkpoint(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReprokitError, match="not a distributed checkpoint"):
        open_checkpoint(tmp_path / "empty")


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(ReprokitError, match="no such file"):
        open_checkpoint(tmp_path / "nope.pt")


@pytest.mark.parametrize("where", ["torch.save", "xser main file", "tensors.pt"])
def test_code_running_pickle_is_refused_and_never_runs(tmp_path, where):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"weight": torch.ones(2), "payload": Evil(marker)}, path)
    if where == "xser main file":
        (tmp_path / "evil.pt.tensors").mkdir()
    with pytest.raises(ReprokitError, match="refused to load") as info:
        if where == "tensors.pt":
            load_tensors(path)
        else:
            open_checkpoint(path)
    assert info.value.path is not None and "evil.pt" in str(info.value.path)
    assert not marker.exists()


def test_code_running_dcp_metadata_is_refused_and_never_runs(tmp_path):
    save_dcp({"w": torch.ones(3)}, tmp_path / "step")
    marker = tmp_path / "pwned"
    (tmp_path / "step" / ".metadata").write_bytes(pickle.dumps(Evil(marker)))
    with pytest.raises(ReprokitError, match="refused to load"):
        open_checkpoint(tmp_path / "step")
    assert not marker.exists()


def test_code_running_dcp_chunk_is_refused_and_never_runs(tmp_path):
    save_dcp({"w": torch.ones(3)}, tmp_path / "step")
    marker = tmp_path / "pwned"
    (distcp,) = (tmp_path / "step").glob("*.distcp")
    torch.save(Evil(marker), distcp)  # the chunk's bytes now hold the pickle
    metadata_file = tmp_path / "step" / ".metadata"
    metadata = pickle.loads(metadata_file.read_bytes())  # the test's own file: trusted
    for info in metadata.storage_data.values():
        info.offset, info.length = 0, distcp.stat().st_size
    metadata_file.write_bytes(pickle.dumps(metadata))
    checkpoint = open_checkpoint(tmp_path / "step")
    with pytest.raises(ReprokitError, match="refused to load") as info:
        checkpoint["w"]
    assert info.value.path == distcp
    assert not marker.exists()


def test_dcp_chunks_that_do_not_cover_the_tensor(tmp_path):
    save_dcp({"w": torch.ones(3)}, tmp_path / "step")
    metadata_file = tmp_path / "step" / ".metadata"
    metadata = pickle.loads(metadata_file.read_bytes())  # the test's own file: trusted
    metadata.state_dict_metadata["w"].size = torch.Size([5])  # more than the one chunk holds
    metadata_file.write_bytes(pickle.dumps(metadata))
    with pytest.raises(ReprokitError, match="chunks hold 3 of the 5 elements"):
        open_checkpoint(tmp_path / "step")["w"]


@pytest.mark.parametrize("cut", [0.5, 0.99])
def test_truncated_torch_save_is_a_clear_error(tmp_path, cut):
    path = tmp_path / "a.pt"
    torch.save(state(), path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(ReprokitError, match="cannot read the checkpoint") as info:
        checkpoint = open_checkpoint(path)
        for name in checkpoint:
            checkpoint[name]
    assert info.value.path == path


def test_garbage_file_is_a_clear_error(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint at all" * 10)
    with pytest.raises(ReprokitError, match="cannot read"):
        open_checkpoint(tmp_path / "junk.pt")


def resident_kib(path) -> int:
    """How much of ``path`` this process holds mapped in memory (Linux's /proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps", encoding="utf-8"):
        if "-" in line.split(" ", 1)[0]:  # a mapping's first line: range, perms, ..., path
            inside = line.rstrip("\n").endswith(str(path.resolve()))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_pages_of_a_read_tensor_do_not_stay_in_memory(tmp_path):
    """Read one at a time, a big checkpoint must not pile up in this process's memory."""
    path = tmp_path / "big.pt"
    torch.save({f"t{i}": torch.full((2**18,), float(i)) for i in range(8)}, path)  # 8 MiB
    checkpoint = open_checkpoint(path)
    for i, name in enumerate(checkpoint):
        assert checkpoint[name][-1].item() == i
    assert resident_kib(path) < 1024  # less than one tensor's MiB, though all were read
