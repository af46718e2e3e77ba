"""reprokit wrap --recompiles: real scripts, each with one cause of a compile after the first,
run under torch_xla on XLA:CPU; every compile after the first explained with its line; a
script that never compiles again says so; the report's table and plot; the pure parts."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

import reprokit
from reprokit.records.recompiles import RECOMPILES, Cause, Compile, Recompiles
from reprokit.runner.options import Options
from reprokit.tools.recompiles.explain import explain
from reprokit.tools.recompiles.read import _NODE, Frame, Node, Sync, _node

HEAD = """\
import torch
import torch_xla

device = torch_xla.device()
w = torch.randn(16, 8, device=device)
torch_xla.sync()  # the setup in a graph of its own
"""
# Each script: HEAD, then a loop with one cause; the line that causes it ends in "# here".
SCRIPTS = {
    "shape": """\
for step in range(6):
    x = torch.randn(4 if step % 2 == 0 else 5, 16).to(device)  # here
    y = (x @ w).relu().sum()
    torch_xla.sync()
""",
    "dtype": """\
for step in range(4):
    x = torch.randn(8, 16).to(device, torch.float32 if step < 2 else torch.bfloat16)  # here
    y = (x * 3).sum()
    torch_xla.sync()
""",
    "branch": """\
x = torch.randn(8, 16, device=device)
torch_xla.sync()
for step in range(4):
    if step < 2:
        y = x[:, :8].sum()
    else:
        y = x[:, 8:].exp().sum()  # here
    torch_xla.sync()
""",
    "item": """\
for step in range(4):
    h = (torch.ones(4, 16, device=device) * 5 @ w).relu()
    if h.sum().item() > 1e9:  # here
        print("big")
    y = h.mean()
    torch_xla.sync()
""",
    "special_scalar": """\
for step in range(4):
    y = (w * step).sum()  # here
    torch_xla.sync()
""",
    "none": """\
for step in range(5):
    lr = 0.1 / (step + 1)  # a Python float: an input, not a constant
    w = w - lr * w
    torch_xla.sync()
""",
}
CAUSES = {
    "shape": (Cause.INPUT_SHAPE, "f32 [4, 16] → f32 [5, 16]"),
    "dtype": (Cause.DTYPE, "f32 [8, 16] → bf16 [8, 16]"),
    "branch": (Cause.OPERATIONS, "now also runs"),
    "item": (Cause.VALUE_READ, "reads a value back"),
}


def wrap(tmp_path: Path, name: str, body: str, head: str = HEAD) -> Recompiles:
    """``reprokit wrap --recompiles -- python NAME.py`` of head + body; its recompiles.json."""
    script = tmp_path / f"{name}.py"
    script.write_text(head + textwrap.dedent(body))
    run = tmp_path / "run"
    summary = reprokit.wrap([sys.executable, str(script)], run_dir=run, options=Options(),
                            recompiles=True)  # fmt: skip
    assert summary.variants[0].stages[0].returncode == 0
    found = run / name / "stages" / "script" / RECOMPILES
    return Recompiles.from_json(json.loads(found.read_text()))


def line_of(name: str, body: str) -> str:
    """``NAME.py:N`` of the line marked ``# here``."""
    lines = (HEAD + textwrap.dedent(body)).splitlines()
    return f"{name}.py:{next(i for i, text in enumerate(lines, 1) if '# here' in text)}"


def test_a_python_zero_then_one_is_told_from_the_compiled_programs(tmp_path):
    found = wrap(tmp_path, "scalar", SCRIPTS["special_scalar"])
    zero_to_one, one_to_two = found.recompiles  # step 0 and 1: constants; 2 on: an input
    # the IR text is the same for 0 and 1 (torch_xla prints no constant's value): the HLO says
    assert zero_to_one.cause is Cause.CONSTANT and "constant(0)` → `f32[] constant(1)" in \
        zero_to_one.what  # fmt: skip
    assert zero_to_one.line == one_to_two.line == line_of("scalar", SCRIPTS["special_scalar"])
    assert one_to_two.cause is Cause.CONSTANT and "XLA_NO_SPECIAL_SCALARS=1" in one_to_two.what


def test_an_argument_torch_xla_does_not_print_is_found_in_the_program(tmp_path):
    body = "x = torch.randn(8, 16, device=device)\ntorch_xla.sync()\nfor step in range(3):\n" \
           "    y = torch.roll(x, shifts=step + 1, dims=0).sum(dim=0)  # here\n" \
           "    torch_xla.sync()\n"  # fmt: skip
    found = wrap(tmp_path, "roll", body)
    assert [c.cause for c in found.recompiles] == [Cause.CONSTANT, Cause.CONSTANT]
    first = found.recompiles[0]
    assert first.line == line_of("roll", body) and "`aten::roll`" in first.what, first
    assert "constant(7)` → `s64[] constant(6)" in first.what  # shifts 1, then 2, of 8 rows


def test_another_sharding_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    spmd = HEAD.replace("device = ", "xr.use_spmd()\ndevice = ")
    head = "import numpy as np\nimport torch_xla.distributed.spmd as xs\n" \
           "import torch_xla.runtime as xr\n" + spmd  # fmt: skip
    body = """\
    mesh = xs.Mesh(np.arange(4), (2, 2), ("x", "y"))
    for step in range(4):
        x = torch.randn(8, 16).to(device)
        xs.mark_sharding(x, mesh, ("x", None) if step < 2 else (None, "y"))
        y = (x * 2).sum()
        torch_xla.sync()
    """
    found = wrap(tmp_path, "shard", body, head=head)
    (again,) = found.recompiles
    assert again.cause is Cause.SHARDING and "sharding={devices=[1,2,2]" in again.what, again


@pytest.mark.parametrize("name", sorted(CAUSES))
def test_each_cause_is_named_with_its_line(tmp_path, name):
    found = wrap(tmp_path, name, SCRIPTS[name])
    cause, words = CAUSES[name]
    again = [c for c in found.recompiles if c.cause is cause]
    assert again, found.recompiles
    assert again[0].line == line_of(name, SCRIPTS[name]), again
    assert words in again[0].what, again[0].what
    assert again[0].nearest is not None or cause is Cause.VALUE_READ


def test_a_script_that_never_compiles_again_says_so(cli, tmp_path, monkeypatch):
    (tmp_path / "none.py").write_text(HEAD + SCRIPTS["none"])
    monkeypatch.chdir(tmp_path)
    result = cli("wrap", "--recompiles", "-o", "run", "--", sys.executable, "none.py")
    assert result.exit_code == 0, result.output
    assert "2 graphs compiled in 6 steps, 0 recompiles" in result.stdout, result.stdout
    assert cli("report", "run").exit_code == 0
    body = (tmp_path / "run" / "report.md").read_text()
    assert "**No step compiled again**" in body and "Why it compiled again" not in body


def test_the_report_has_the_table_and_the_plot(cli, tmp_path, monkeypatch):
    (tmp_path / "shape.py").write_text(HEAD + SCRIPTS["shape"])
    monkeypatch.chdir(tmp_path)
    result = cli("wrap", "--recompiles", "-o", "run", "--", sys.executable, "shape.py")
    assert result.exit_code == 0, result.output
    line = line_of("shape", SCRIPTS["shape"])
    assert f"input shape at {line} (steps 3)" in result.stdout  # step 1: HEAD's sync
    assert cli("report", "run").exit_code == 0
    body = (tmp_path / "run" / "report.md").read_text()
    assert "| cause | line | what differs | which compiles | in steps |" in body
    assert f"| input shape | `{line}` | an input at line {line}: f32 [4, 16] → f32 [5, 16]" in body
    html = (tmp_path / "run" / "report.html").read_text()
    assert "Graphs compiled per step" in html and "<svg" in html.split("per step", 1)[1]


def test_setup_left_in_the_first_step_is_named(tmp_path):
    body = "for step in range(3):\n    v = torch.ones(8, device=device) * 2  # here\n" \
           "    y = (v.sum() + 1)\n    torch_xla.sync()\n"  # fmt: skip
    found = wrap(tmp_path, "setup", body, head=HEAD.replace("torch_xla.sync()  #", "#"))
    (again,) = found.recompiles
    assert again.cause is Cause.SETUP and again.line == "setup.py:5", again
    assert "a `torch_xla.sync()` before the loop" in again.what


def test_a_device_loader_ends_steps(tmp_path):
    body = """\
    import torch_xla.distributed.parallel_loader as pl
    data = torch.utils.data.TensorDataset(torch.randn(10, 16))
    loader = pl.MpDeviceLoader(torch.utils.data.DataLoader(data, batch_size=4), device)
    for (x,) in loader:  # here
        y = (x @ w).sum()
    """
    found = wrap(tmp_path, "loader", body)
    assert found.steps >= 3  # the loader's step ends
    (again,) = found.recompiles  # 4, 4, then 2 rows
    assert again.cause is Cause.INPUT_SHAPE and "f32 [4, 16] → f32 [2, 16]" in again.what


def test_a_step_of_torch_xla_compile_is_a_step(tmp_path):
    body = """\
    step_fn = torch_xla.compile(lambda x: (x @ w).relu().sum())  # here: x's first use
    for step in range(4):
        x = torch.randn(4 if step < 2 else 6, 16).to(device)
        y = step_fn(x)
    """
    found = wrap(tmp_path, "compiled", body)
    assert found.steps >= 5  # HEAD's sync, then torch_xla.compile's at each call
    (again,) = found.recompiles
    assert again.cause is Cause.INPUT_SHAPE and "f32 [4, 16] → f32 [6, 16]" in again.what
    assert again.line == line_of("compiled", body) and again.step >= 4


def test_recompiles_and_dump_hlo_together_are_bad_input(cli, tmp_path):
    result = cli("wrap", "--recompiles", "--dump-hlo", "-o", tmp_path / "run", "--", "true")
    assert result.exit_code == 2 and "cannot be given together" in result.output


# The pure parts: torch_xla's IR line read back, and a hash compiled twice.


def test_an_ir_line_is_read_with_its_arguments_and_line():
    text = ("  %3 = f32[4,8]{1,0} aten::roll(%2), shifts=(1, 2), dims=(0), "
            "location=forward@model.py:12, xla_shape=f32[4,8]{1,0}, ROOT=0")  # fmt: skip
    node = _node(_NODE.match(text))
    assert (node.shape, node.op, node.operands) == ("f32[4,8]", "aten::roll", (2,))
    assert node.tags == (("shifts", "(1, 2)"), ("dims", "(0)"))
    assert node.location == Frame("forward", "model.py", 12)


def sync(index: int, digest: str, *nodes: Node) -> Sync:
    frames = (Frame("sync", "/x/site-packages/torch_xla/torch_xla.py", 87), Frame("<m>", "t.py", 9))
    return Sync(index, digest, frames, nodes, compiled=True)


def test_a_hash_compiled_twice_is_torch_xlas():
    mm = Node("f32[4,8]", "aten::mm", (0, 1), location=Frame("f", "t.py", 3))
    found = explain([sync(0, "aa", mm), sync(1, "bb", mm), sync(2, "aa", mm)])
    assert [c.cause for c in found] == [Cause.FIRST, Cause.NOT_IN_IR, Cause.SAME_HASH]
    assert found[2].cause.torch_xla and "was compiled before" in found[2].what


def test_recompiles_round_trip_through_json():
    found = Recompiles(4, 3, (Compile(1, 0, 1, "aa", Cause.FIRST),
                              Compile(2, 2, 3, "bb", Cause.DTYPE, "x", "t.py:3", 1)))  # fmt: skip
    assert Recompiles.from_json(json.loads(json.dumps(found.to_json()))) == found
    assert found.per_step() == [1, 0, 1] and [c.number for c in found.recompiles] == [2]


MODULE = (
    "HloModule SyncTensorsGraph.{n}, entry_computation_layout={{(f32[4]{{0}})->(f32[4]{{0}})}}\n"
    "\nENTRY %SyncTensorsGraph.{n} (p0.1: f32[4]) -> (f32[4]) {{\n"
    '  %p0.1 = f32[4]{{0}} parameter(0), metadata={{op_type="xla__device_data" '
    'source_file="/a/t.py" source_line=3}}\n'
    "  %constant.{n} = f32[] constant({value}), "
    'metadata={{op_type="aten__mul" source_file="/a/t.py" source_line=4}}\n'
    "  ROOT %tuple.9 = (f32[4]{{0}}) tuple(%p0.1)\n}}\n"
)


def test_equal_programs_under_two_hashes_are_torch_xlas():
    mm = Node("f32[4,8]", "aten::mm", (0, 1), location=Frame("f", "t.py", 3))
    programs = [MODULE.format(n=n, value=v) for n, v in ((5, 2), (7, 2), (8, 3))]
    found = explain([sync(0, "aa", mm), sync(1, "bb", mm), sync(2, "cc", mm)], programs)
    assert [c.cause for c in found] == [Cause.FIRST, Cause.SAME_PROGRAM, Cause.CONSTANT]
    assert found[1].cause.torch_xla and "compiled an equal graph again" in found[1].what
    assert found[2].line == "t.py:4" and "constant(2)` → `f32[] constant(3)" in found[2].what


@pytest.mark.slow
def test_a_repro_is_the_fewest_lines_that_still_compile_again(cli, tmp_path, monkeypatch):
    noise = "print('loading')\nunused = torch.ones(3) * 2\n"
    loop = "for step in range(4):\n    x = torch.randn(4 if step % 2 else 5, 16).to(device)\n" \
           "    y = (x * 2).sum()\n    torch_xla.sync()\n"  # fmt: skip
    script = "import torch\nimport torch_xla\n" + noise + "device = torch_xla.device()\n" + loop
    (tmp_path / "noisy.py").write_text(script)
    monkeypatch.chdir(tmp_path)
    result = cli("wrap", "--recompiles", "--repro", "-o", "run", "--", sys.executable, "noisy.py")
    assert result.exit_code == 0, result.output
    assert "repro of compile 2:" in result.stdout and "exit 1 alone" in result.stdout
    repro = (tmp_path / "run" / "noisy" / "stages" / "script" / "recompile_repro.py").read_text()
    assert "unused" not in repro and "print('loading')" not in repro
    assert "torch.randn(4 if step % 2 else 5, 16)" in repro
    assert cli("report", "run").exit_code == 0
    body = (tmp_path / "run" / "report.md").read_text()
    assert "A repro of compile 2: 7 of the script's 9 lines" in body
    assert "torch_xla compiled 2 graphs where 1 should do" in body and "exit 1" in body


def test_repro_without_recompiles_is_bad_input(cli, tmp_path):
    result = cli("wrap", "--repro", "-o", tmp_path / "run", "--", "true")
    assert result.exit_code == 2 and "--repro needs --recompiles" in result.output
