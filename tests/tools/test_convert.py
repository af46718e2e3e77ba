"""`reprokit convert`: an xser checkpoint (torch_xla's own xser.save on XLA:CPU) leaves
torch_xla: converted by a Python that cannot import torch_xla, and loaded by one, bit-exact;
every target format reads back equal (`reprokit diff` exits 0); bad input is exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from reprokit.errors import ReprokitError
from reprokit.tools.convert import target_format

# Saves one model and its optimizer after a training step: xser.save from XLA:CPU tensors
# (so that xser writes its .tensors/ folder), and the same state from CPU with torch.save.
SAVE = """
import sys, torch, torch_xla, torch_xla.utils.serialization as xser
torch.manual_seed(0)
device = torch_xla.device()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
model(torch.randn(5, 8, device=device)).square().mean().backward()
optimizer.step()
torch_xla.sync()
state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1}
xser.save(state, sys.argv[1])
cpu = lambda x: x.cpu() if torch.is_tensor(x) else x
plain = torch.utils._pytree.tree_map(cpu, state)
torch.save(plain, sys.argv[2])
"""

# Python without torch_xla: importing it (or anything that does) raises ImportError.
NO_TORCH_XLA = "import sys; sys.modules['torch_xla'] = None\n"

# Loads the converted checkpoints with plain torch only, and compares each tensor bit for bit
# with the torch.save of the same state: prints {name: equal} as JSON.
LOAD = """
import json, sys, warnings, torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torch.utils._pytree import tree_flatten_with_path, keystr
reference = torch.load(sys.argv[1], weights_only=True)
flat = {keystr(p): t for p, t in tree_flatten_with_path(reference)[0] if torch.is_tensor(t)}
named = {k.replace("['", ".").replace("']", "").replace("[", ".").replace("]", "").lstrip("."): v
         for k, v in flat.items()}
found = load_file(sys.argv[2])
template = {"model": {k: torch.zeros_like(v) for k, v in reference["model"].items()}}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    dcp.load(template, checkpoint_id=sys.argv[3])
same = {f"safetensors:{k}": torch.equal(found[k], v) and found[k].dtype == v.dtype
        for k, v in named.items()}
same |= {f"dcp:model.{k}": torch.equal(v, reference["model"][k])
         for k, v in template["model"].items()}
same["torch_xla imported"] = "torch_xla" in sys.modules and sys.modules["torch_xla"] is not None
print(json.dumps(same))
"""


def python(code: str, *args: object, blocked: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    source = (NO_TORCH_XLA if blocked else "") + textwrap.dedent(code)
    command = [sys.executable, "-c", source, *map(str, args)]
    return subprocess.run(command, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)  # fmt: skip


def reprokit_without_torch_xla(*args: object) -> subprocess.CompletedProcess:
    """The CLI in a Python that cannot import torch_xla."""
    return python("from reprokit.cli import main\nsys.argv[0] = 'reprokit'\nmain()", *args,
                  blocked=True)  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("xser")
    paths = {"xser": folder / "trained.xser", "torch": folder / "trained.pt"}
    done = python(SAVE, paths["xser"], paths["torch"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "trained.xser.tensors" / "tensor_0.pt").is_file()  # xser wrote .tensors/
    assert "ModuleNotFoundError" in python(  # the problem convert solves: torch.load fails
        "import sys, torch; torch.load(sys.argv[1], weights_only=False)", paths["xser"],
        blocked=True).stderr  # fmt: skip
    return paths


@pytest.fixture(scope="module")
def converted(saved, tmp_path_factory) -> dict[str, Path]:
    """The xser checkpoint converted to safetensors and to a DCP folder without torch_xla."""
    folder = tmp_path_factory.mktemp("converted")
    paths = {"safetensors": folder / "trained.safetensors", "dcp": folder / "trained_dcp"}
    for kind, path in paths.items():
        done = reprokit_without_torch_xla(
            "convert", saved["xser"], f"{path}/" if kind == "dcp" else path
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "bit for bit" in done.stdout
    return paths


def test_xser_converted_and_loaded_without_torch_xla_is_bit_exact(saved, converted):
    done = python(LOAD, saved["torch"], converted["safetensors"], converted["dcp"], blocked=True)
    assert done.returncode == 0, done.stderr[-3000:]
    same = json.loads(done.stdout.strip().splitlines()[-1])
    assert same.pop("torch_xla imported") is False
    assert len([k for k in same if k.startswith("safetensors:")]) == 24  # 6 params; AdamW: 3 each
    assert len([k for k in same if k.startswith("dcp:")]) == 6
    assert all(same.values()), [k for k, v in same.items() if not v]


def test_safetensors_names_the_plain_values_it_cannot_hold(cli, saved, tmp_path):
    result = cli("convert", saved["xser"], tmp_path / "x.safetensors")
    assert result.exit_code == 0, result.output
    assert "left out 19 values that are not tensors" in result.stdout  # param_groups, step
    assert "optimizer.param_groups.0.lr" in result.stdout


@pytest.mark.parametrize("target", ["a.pt", "a.xser", "a.safetensors", "a_dcp/"])
def test_each_target_diffs_equal_and_keeps_what_it_can(cli, saved, tmp_path, target):
    path = f"{tmp_path}/{target}"
    result = cli("convert", saved["xser"], path)
    assert result.exit_code == 0, result.output
    assert cli("diff", saved["xser"], path).exit_code == 0
    assert cli("diff", saved["torch"], path).exit_code == 0
    if target == "a.pt":  # nesting and plain values as saved, read with weights_only
        data = torch.load(path, weights_only=True)
        assert data["step"] == 1 and data["optimizer"]["param_groups"][0]["lr"] == 1e-2
    assert not list(tmp_path.glob("*.partial"))


def test_torch_xla_reads_the_xser_that_convert_writes(cli, saved, tmp_path):
    """From a DCP folder (no torch_xla in the writing) back to xser: xser.load reads it."""
    assert cli("convert", saved["torch"], f"{tmp_path}/d/").exit_code == 0
    assert cli("convert", tmp_path / "d", tmp_path / "back.xser").exit_code == 0
    done = python("""
        import sys, torch, torch_xla.utils.serialization as xser
        a, b = xser.load(sys.argv[1]), torch.load(sys.argv[2], weights_only=True)
        assert all(torch.equal(a["model"][k].cpu(), v) for k, v in b["model"].items())
        assert a["step"] == 1
        """, tmp_path / "back.xser", saved["torch"])  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


class Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("bad", ["truncated", "evil", "unknown target", "target exists"])
def test_bad_input_is_exit_2_with_one_message(cli, saved, tmp_path, bad):
    source, target = saved["torch"], tmp_path / "out.safetensors"
    if bad == "truncated":
        source = tmp_path / "cut.pt"
        source.write_bytes(saved["torch"].read_bytes()[:1000])
    elif bad == "evil":
        source = tmp_path / "evil.pt"
        torch.save({"w": torch.ones(2), "payload": Evil(tmp_path / "pwned")}, source)
    elif bad == "unknown target":
        target = tmp_path / "out.weights"
    else:
        target.write_bytes(b"mine")
    result = cli("convert", source, target)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) <= 4
    assert {"truncated": "cannot read", "evil": "could run code", "unknown target": "--to",
            "target exists": "already exists"}[bad] in " ".join(result.stderr.split())  # fmt: skip
    assert not (tmp_path / "pwned").exists()
    assert target.read_bytes() == b"mine" if bad == "target exists" else not target.exists()


@pytest.mark.parametrize(
    ("name", "to", "kind"),
    [("m.pt", None, "torch"), ("m.PTH", None, "torch"), ("m.safetensors", None, "safetensors"),
     ("m.xser", None, "xser"), ("ckpt/", None, "dcp"), ("ckpt.dcp", None, "dcp"),
     ("m.weights", "torch", "torch"), ("m.pt", "dcp", "dcp")],
)  # fmt: skip
def test_target_format_from_flag_or_name(name, to, kind):
    assert target_format(name, to) == kind


@pytest.mark.parametrize(("name", "to"), [("ckpt", None), ("m.npz", None), ("m.pt", "onnx")])
def test_target_format_unknown_is_an_error_that_says_what_to_do(name, to):
    with pytest.raises(ReprokitError, match="format") as caught:
        target_format(name, to)
    assert "--to" in str(caught.value)
