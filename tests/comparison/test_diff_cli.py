"""`reprokit diff`: the same model saved four ways reads as identical, a changed element is
named, bad input is exit 2 with one message and no traceback."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from test_checkpoints import Evil

from reprokit.comparison.checkpoints import flatten

SAVER = Path(__file__).parents[1] / "data" / "save_checkpoint.py"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """One small model saved with torch.save, xser (XLA:CPU tensors) and CheckpointManager
    (SPMD, weights sharded over 4 virtual devices), each by its own subprocess, plus
    safetensors."""
    folder = tmp_path_factory.mktemp("saved")
    paths = {"torch": folder / "m.pt", "xser": folder / "m.xser", "dcp": folder / "dcp"}
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    children = [
        subprocess.Popen(
            [sys.executable, str(SAVER), kind, str(path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for kind, path in paths.items()
    ]
    for child in children:
        output, _ = child.communicate(timeout=300)
        assert child.returncode == 0, output[-3000:]
    assert (folder / "m.xser.tensors" / "tensor_0.pt").is_file()  # xser really used .tensors/
    assert (folder / "dcp" / "0" / ".metadata").is_file()
    state = flatten(torch.load(paths["torch"], weights_only=True))
    paths["safetensors"] = folder / "m.safetensors"
    save_file(state, paths["safetensors"])
    return paths


def diff_json(cli, a, b, *options):
    result = cli("diff", a, b, "--json", *options)
    assert "Traceback" not in result.output
    return result.exit_code, json.loads(result.stdout)


FORMATS = ["torch", "xser", "dcp", "safetensors"]


@pytest.mark.parametrize(("a", "b"), list(itertools.combinations(FORMATS, 2)))
def test_same_model_in_every_pair_of_formats_is_identical(cli, saved, a, b):
    code, report = diff_json(cli, saved[a], saved[b])
    assert code == 0
    summary = report["summary"]
    assert summary["tensors"] == summary["equal"] == 4
    assert summary["only_in_reference"] == summary["only_in_target"] == []
    names = [c["tensor"] for c in report["comparisons"]]  # in the target's order
    expected = ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"]
    assert names == expected if b != "safetensors" else sorted(names) == sorted(expected)


def test_the_human_table_shows_what_differs_and_counts_the_rest(cli, saved, tmp_path):
    result = cli("diff", saved["dcp"], saved["xser"])
    assert result.exit_code == 0
    assert "model.0.weight" not in result.stdout  # equal: counted, not shown
    assert "4 equal tensors not shown (--all shows every row)" in result.stdout
    assert "4 tensors: 4 equal" in result.stdout
    every = cli("diff", saved["dcp"], saved["xser"], "--all")
    assert "model.0.weight" in every.stdout and "16x8" in every.stdout
    assert "not shown" not in every.stdout
    state = torch.load(saved["torch"], weights_only=True)
    state["model"]["2.weight"] += 1
    torch.save(state, tmp_path / "changed.pt")
    changed = cli("diff", saved["dcp"], tmp_path / "changed.pt").stdout
    assert "│ model.2.weight" in changed and "3 equal tensors not shown" in changed


def test_one_element_changed_is_named(cli, saved, tmp_path):
    state = torch.load(saved["torch"], weights_only=True)
    state["model"]["2.weight"][1, 3] += 0.5
    torch.save(state, tmp_path / "changed.pt")
    code, report = diff_json(cli, saved["xser"], tmp_path / "changed.pt")
    assert code == 1
    assert report["summary"]["first_divergence"] == "model.2.weight"
    (bad,) = [c for c in report["comparisons"] if not c["allclose"]]
    assert (bad["tensor"], bad["mismatched"], bad["total"]) == ("model.2.weight", 1, 64)
    assert bad["worst"][0]["index"] == [1, 3]
    assert bad["max_abs"] == pytest.approx(0.5)
    result = cli("diff", saved["dcp"], tmp_path / "changed.pt")  # and in words
    assert result.exit_code == 1
    assert "model.2.weight float32 [4, 16]: 1 / 64 mismatched" in result.stdout
    assert "changed.pt[1, 3] = " in result.stdout  # the worst element, named on each side


def test_tolerances_from_the_command_line(cli, saved, tmp_path):
    state = torch.load(saved["torch"], weights_only=True)
    state["model"]["0.bias"][0] += 1e-3
    torch.save(state, tmp_path / "near.pt")
    assert cli("diff", saved["torch"], tmp_path / "near.pt").exit_code == 1
    assert cli("diff", saved["torch"], tmp_path / "near.pt", "--atol", "1e-2").exit_code == 0


def test_shape_dtype_and_names_on_one_side_are_reported(cli, tmp_path):
    torch.save({"a": torch.ones(2, 3), "b": torch.ones(4), "gone": torch.ones(1)}, tmp_path / "x")
    torch.save({"a": torch.ones(3, 2), "b": torch.ones(4).double(), "new": torch.ones(1)},
               tmp_path / "y")  # fmt: skip
    code, report = diff_json(cli, tmp_path / "x", tmp_path / "y")
    assert code == 1
    by_name = {c["tensor"]: c for c in report["comparisons"]}
    assert "shape [3, 2] vs [2, 3]" in by_name["a"]["note"]
    assert by_name["b"]["note"].startswith("values equal; dtype float64 on ")
    assert by_name["b"]["mismatched"] == 0 and not by_name["b"]["allclose"]
    assert report["summary"]["only_in_reference"] == ["gone"]
    assert report["summary"]["only_in_target"] == ["new"]
    result = cli("diff", tmp_path / "x", tmp_path / "y")
    assert result.exit_code == 1
    assert f"only in {tmp_path / 'x'}: gone" in result.stdout.replace("\n", "")


def test_nan_in_the_same_place_is_equal(cli, tmp_path):
    t = torch.tensor([1.0, float("nan"), float("inf")])
    torch.save({"t": t}, tmp_path / "x.pt")
    torch.save({"t": t.clone()}, tmp_path / "y.pt")
    code, report = diff_json(cli, tmp_path / "x.pt", tmp_path / "y.pt")
    assert code == 0
    (c,) = report["comparisons"]
    assert c["allclose"] and c["equal"] and c["nan"] == [1, 1] and c["inf"] == [1, 1]
    torch.save({"t": torch.tensor([1.0, 2.0, float("inf")])}, tmp_path / "z.pt")
    code, report = diff_json(cli, tmp_path / "x.pt", tmp_path / "z.pt")
    assert code == 1 and report["comparisons"][0]["mismatched"] == 1


def evil_xser_tensor(saved, tmp_path, marker) -> Path:
    """A real xser checkpoint whose tensor_0.pt was swapped for a code-running pickle."""
    shutil.copy(saved["xser"], tmp_path / "m.xser")
    shutil.copytree(f"{saved['xser']}.tensors", tmp_path / "m.xser.tensors")
    torch.save(Evil(marker), tmp_path / "m.xser.tensors" / "tensor_0.pt")
    return tmp_path / "m.xser"


@pytest.mark.parametrize("where", ["torch.save", "xser main file", "xser tensor", "tensors.pt"])
def test_code_running_pickle_is_exit_2_and_never_runs(cli, saved, tmp_path, where):
    marker = tmp_path / "pwned"
    path = tmp_path / ("evil.pt" if where != "tensors.pt" else "tensors.pt")
    torch.save({"weight": torch.ones(2), "payload": Evil(marker)}, path)
    if where == "xser main file":
        (tmp_path / "evil.pt.tensors").mkdir()
    if where == "xser tensor":
        path = evil_xser_tensor(saved, tmp_path, marker)
    result = cli("diff", saved["torch"], path)
    assert result.exit_code == 2, result.output
    assert "refused to load" in result.stderr
    assert path.name in result.stderr or "tensor_0.pt" in result.stderr
    assert "Traceback" not in result.output
    assert not marker.exists()


@pytest.mark.parametrize(
    "damage", ["truncated", "garbage", "missing", "dcp chunk gone", "truncated safetensors"]
)
def test_damaged_input_is_exit_2_with_one_clear_message(cli, saved, tmp_path, damage):
    path = tmp_path / "bad.pt"
    if damage == "truncated":
        data = saved["torch"].read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(4096))
    elif damage == "truncated safetensors":
        path = tmp_path / "bad.safetensors"
        path.write_bytes(saved["safetensors"].read_bytes()[:-10])
    elif damage == "dcp chunk gone":
        path = tmp_path / "dcp"
        shutil.copytree(saved["dcp"], path)
        for chunk in path.glob("*/*.distcp"):
            chunk.unlink()
    result = cli("diff", path, saved["torch"])
    assert result.exit_code == 2, result.output
    assert str(path) in result.stderr or path.name in result.stderr
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) <= 4  # message, blank line, hint


class System:
    """What a hostile pickle most often calls: os.system (posix.system when pickled)."""

    def __reduce__(self):
        return (os.system, ("true",))


def test_a_refused_pickle_says_why_whole_and_is_not_called_damaged(cli, saved, tmp_path):
    path = tmp_path / "system.pt"
    torch.save({"weight": torch.ones(2), "payload": System()}, path)
    result = cli("diff", saved["torch"], path)
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "refused to load: the file holds a pickle that could run code" in message
    assert message.endswith("unsupported GLOBAL posix.system whose module posix is blocked.")
    assert "Is the file complete" not in message and "Weights only load failed" not in message
