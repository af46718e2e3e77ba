"""Training capture: a model's loss and gradients as one joint program, run for real on XLA:CPU.

The models are tests/data/train/models.py. Capturing costs seconds (torch.export, the joint
trace), running a case tens of seconds (a process per stage), so each model is captured once
per module, and each run serves every assertion made on it.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import torch
from standalone import run_alone

import reprokit
from reprokit.errors import ReprokitError
from reprokit.generate.cases import load_case
from reprokit.generate.variants import variants
from reprokit.tools.capture.train import command

MODELS = Path(__file__).parents[1] / "data" / "train" / "models.py"


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> dict[str, Path]:
    """The ELU regression and the transformer block captured once: name -> case file."""
    out = tmp_path_factory.mktemp("captured")
    return {name: command(f"{MODELS}:{name}", out_dir=out) for name in ("elu", "block")}


def run_case(case: Path, run_dir: Path, **params):
    """The case run by reprokit, as `reprokit run` runs it; its one variant's result."""
    (variant,) = variants(load_case(case), params)
    summary = reprokit.run([variant], run_dir=run_dir, options=reprokit.Options(jobs=2))
    return summary.variants[0]


@pytest.fixture(scope="module")
def elu_run(captured, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("elu") / "run"
    return run_case(captured["elu"], run_dir, spmd=False), run_dir


def test_the_joint_program_keeps_the_backward_operations_autograd_runs(captured):
    """elu_backward, not the core-aten rewrite into where/exp/mul that hides XLA's bug; each
    op marked with its pass, a backward op with the forward op it differentiates."""
    program = torch.export.load(captured["elu"].with_suffix(".pt2"))
    ops = {n.name: n for n in program.graph.nodes if n.op == "call_function"}
    backward, forward = ops["elu_backward"], ops["elu"]
    assert backward.target == torch.ops.aten.elu_backward.default
    marks = {name: node.meta["custom"]["reprokit"] for name, node in ops.items()}
    assert marks["elu"]["pass"] == "fwd" and marks["elu_backward"]["pass"] == "bwd"
    assert marks["elu_backward"]["forward"] == marks["elu"]["op"]
    assert re.search(r"models\.py\", line \d+, in forward", backward.meta["stack_trace"])
    assert backward.meta["stack_trace"] == forward.meta["stack_trace"]  # the forward's line
    kinds = [(s.kind.name, s.target) for s in program.graph_signature.output_specs]
    assert kinds == [("LOSS_OUTPUT", None)] + [
        ("GRADIENT_TO_PARAMETER", p) for p in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")
    ]  # the logits the model also returns are not outputs
    spec = tomllib.loads(captured["elu"].read_text())
    assert spec["case"]["template"] == "training_program"
    assert spec["params"] == {"program": "elu.pt2"} and spec["compare"] == {"method": "fp64"}


def test_elu_gradient_first_differs_at_its_backward_op(elu_run):
    """XLA's ELU backward (torch_xla 2.9): forward and loss agree, fc1's gradient does not,
    and the first to differ is the backward op, named as such, with the forward's line."""
    result, run_dir = elu_run
    assert result.outcome.value == "mismatch"
    (first,) = result.first_divergence.values()
    assert re.fullmatch(r"node\.\d{4}\.bwd\.elu_backward", first), first
    judged = {c.tensor: c for c in result.comparisons if c.target == "xla"}
    assert all(c.allclose for name, c in judged.items() if ".fwd." in name)
    assert judged["loss"].allclose and judged["grad.fc2.weight"].allclose
    assert not judged["grad.fc1.weight"].allclose and not judged["grad.fc1.bias"].allclose
    reprokit.report(run_dir)
    body = (run_dir / "report.md").read_text()
    # the gradient as training meets it: the forward op by autograd, its repro inline
    assert body.startswith("# float32 gradient of `elu` on XLA is ")
    assert re.search(r"`torch\.ops\.aten\.elu` of float32 16x32: its gradient, by autograd, is "
                     r".* In the model this is `\S*models\.py:\d+: out = "
                     r"self\.fc2\(self\.act\(self\.fc1\(x\)\)\)`", body)  # fmt: skip
    assert "torch.autograd.grad(" in body.split("```python")[1]
    assert "`grad.fc1.weight`" in body.split("## To Reproduce")[0]  # the gradients it reaches


@pytest.mark.slow
def test_minimize_shrinks_the_elu_step_to_its_backward_op(cli, captured, tmp_path, monkeypatch):
    """`reprokit minimize` on a training capture: the joint graph truncated at the first
    diverging op and shrunk to the ELU backward alone, whose short repro still diverges."""
    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "minimized"
    result = cli("minimize", captured["elu"], "--set", "spmd=false", "-n", "2", "--budget", "12",
                 "-o", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    record = json.loads((out / "summary.json").read_text())["run"]["minimized"]
    assert record["target"] == "mismatch (node.#.bwd.elu_backward)"
    assert record["graph"]["nodes"][1] <= 5, record["graph"]
    assert record["graph"]["by_autograd"] and "the gradient by torch.autograd" in result.output
    repro = (out / "repro.py").read_text()  # as training meets it: autograd picks the kernel
    assert "torch.ops.aten.elu.default(" in repro and "torch.autograd.grad(" in repro
    assert "elu_backward.default" not in repro and "elu_backward.default" in (
        out / "repro_stages.py").read_text()  # fmt: skip
    alone = run_alone(out)
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert re.search(r"^grad\.\w+: XLA DIFFERS, error against float64", alone.stdout, re.M)


def test_a_layer_norm_backward_is_written_with_its_forward_and_weights(captured, tmp_path):
    """The autograd form of a backward op whose forward returns several results (layer
    norm's output, mean, rstd) and reads weights: the gradient flows into the output only,
    every floating input gets its gradient, and the block's float32 step agrees on XLA."""
    from reprokit.tools.minimize.graph import gradient, program, short
    from reprokit.tools.minimize.graph.program import State

    original = program.load(captured["block"].with_suffix(".pt2"))
    ops = original.ops()
    at = ops.index("native_layer_norm_backward_default")
    state = State(ops[at : at + 4], ops[at + 1 : at + 4])  # the op and its three results
    found = gradient.of(original, state)
    assert found is not None and found.backward == ("native_layer_norm_backward_default",)
    ((result, source),) = found.grads  # into the normalized output alone
    assert original.nodes[result].args[1] == 0 and original.nodes[ops[at]].args[0].name == source
    (variant,) = variants(load_case(captured["block"]), {})
    inputs = short.plan(gradient.values(original, found), random=True)
    script = short.short_repro(original, state, variant, inputs, None, gradient=found)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "repro.py").write_text(script)
    alone = run_alone(tmp_path / "m")
    assert alone.returncode == 0, alone.stdout + alone.stderr
    names = re.findall(r"^(grad\.\w+): agrees", alone.stdout, re.M)
    assert len(names) == 3 and any("weight" in n for n in names), alone.stdout


def test_a_subgraph_with_a_forward_op_keeps_its_aten_calls(captured):
    from reprokit.tools.minimize.graph import gradient, program
    from reprokit.tools.minimize.graph.program import State

    original = program.load(captured["elu"].with_suffix(".pt2"))
    assert gradient.of(original, State(("elu_backward",), ("elu_backward",))) is not None
    assert gradient.of(original, State(("elu", "elu_backward"), ("elu_backward",))) is None


def test_transformer_block_matches_over_three_adam_steps(captured, tmp_path):
    """Loss, every gradient, every step's loss and the parameters after the last step agree
    in float32, on XLA and under SPMD with the batch sharded over 4 devices."""
    result = run_case(captured["block"], tmp_path / "run", steps=3, optimizer="adam", lr=1e-3)
    assert result.outcome.value == "match", result.first_divergence
    assert result.outputs_only  # the step as captured agrees: no operation recorded on XLA
    for target in ("xla_faithful", "xla_spmd"):
        names = [c.tensor for c in result.comparisons if c.target == target]
        grads = [n for n in names if n.startswith("grad.")]
        assert "grad.block.self_attn.in_proj_weight" in grads and len(grads) == 14
        assert {"loss", "loss.step2", "loss.step3"} <= set(names)
        assert sorted(n for n in names if n.startswith("param.")) == sorted(
            "param." + g[len("grad.") :] for g in grads
        )
    saved = torch.load(next((tmp_path / "run").rglob("cpu/tensors.pt")), weights_only=True)
    assert saved["loss.step3"] < saved["loss"]  # Adam did train


def test_small_mlp_matches_over_three_adam_steps(tmp_path):
    """GELU and LayerNorm between two linear layers: the loss, every gradient, each step's
    loss and the parameters after the last step agree in float32."""
    case = command(f"{MODELS}:mlp", out_dir=tmp_path)
    result = run_case(case, tmp_path / "run", steps=3, optimizer="adam", lr=1e-3, spmd=False)
    assert result.outcome.value == "match", result.first_divergence
    names = {c.tensor for c in result.comparisons if c.target == "xla_faithful"}
    grads = {n for n in names if n.startswith("grad.")}
    layers = ("fc1", "act.1", "fc2")  # act.1: the LayerNorm
    assert grads == {f"grad.{layer}.{p}" for layer in layers for p in ("weight", "bias")}
    assert {"loss", "loss.step2", "loss.step3"} <= names
    assert {"param." + g[len("grad.") :] for g in grads} <= names


def test_fault_in_a_backward_op_is_the_first_divergence(captured, tmp_path):
    """A test-owned fault (perturb_node) in the backward of the block's second LayerNorm:
    the first to differ, named as backward, every forward op agreeing."""
    case = captured["block"]
    names = _script(case, tmp_path).prepare(torch.device("cpu"), None, every=True)[2]
    fault = next(n for n in names if n.endswith(".bwd.native_layer_norm_backward"))
    result = run_case(case, tmp_path / "run", spmd=False, perturb_node=fault)
    assert result.outcome.value == "mismatch" and result.first_divergence == {"xla": fault}
    judged = [c for c in result.comparisons if c.target == "xla"]
    assert all(c.allclose for c in judged if ".fwd." in c.tensor)


def _script(case: Path, tmp_path: Path, **params):
    """The case's rendered training script, imported (to call its functions here)."""
    import importlib.util

    from reprokit.generate.render import render

    (variant,) = variants(load_case(case), params)
    folder = tmp_path / "names"
    folder.mkdir()
    variant.copy_files(folder)
    (folder / "repro.py").write_text(render(variant), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"training_{id(folder)}", folder / "repro.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_the_scripts_optimizer_is_torch_optims_update(captured, tmp_path, optimizer):
    """The update written as tensor math agrees with torch.optim's own, step by step (to
    float32 rounding: torch.optim keeps its bias corrections in float64)."""
    script = _script(captured["elu"], tmp_path, optimizer=optimizer, lr=0.05)
    torch.manual_seed(0)
    mine = {"w": torch.randn(4, 3), "b": torch.randn(3)}
    theirs = {k: torch.nn.Parameter(v.clone()) for k, v in mine.items()}
    kind = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[optimizer]
    reference, state = kind(theirs.values(), lr=0.05, foreach=False), {}
    for _ in range(3):
        grads = {k: torch.randn_like(v) for k, v in mine.items()}
        for k, p in theirs.items():
            p.grad = grads[k].clone()
        reference.step()
        mine = script.update(mine, grads, state)
        for k, p in theirs.items():
            torch.testing.assert_close(mine[k], p.detach(), rtol=1e-5, atol=1e-6)


def test_the_scripts_adam_squares_a_float16_gradient_as_torch_optim_does(captured, tmp_path):
    """torch.optim.Adam's addcmul scales grad * grad before rounding it to float16; the script's
    plain g * g overflowed from |g| = 256 (its state inf, the parameter frozen)."""
    script = _script(captured["elu"], tmp_path, optimizer="adam", lr=0.05)
    grads = {"w": torch.tensor([1.0, 255.0, 300.0], dtype=torch.float16)}
    theirs = torch.nn.Parameter(torch.zeros(3, dtype=torch.float16))
    theirs.grad = grads["w"].clone()
    torch.optim.Adam([theirs], lr=0.05, foreach=False).step()
    mine = script.update({"w": torch.zeros(3, dtype=torch.float16)}, grads, {})
    torch.testing.assert_close(mine["w"], theirs.detach())


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("unused", "loss does not use the parameters spare.weight, spare.bias"),
        ("tied", "embed.weight and head.weight are one tensor (tied weights)"),
        ("dropout", "draws random numbers (aten.dropout.default)"),
        ("in_place", "updates its input x in place (aten.mul_.Tensor)"),
        ("logits", "must return the loss (a floating scalar) first, not a tensor of shape"),
    ],
)
def test_what_a_training_step_cannot_hold_is_refused_in_one_line(tmp_path, model, expected):
    with pytest.raises(ReprokitError) as error:
        command(f"{MODELS}:{model}", out_dir=tmp_path)
    assert expected in error.value.message and error.value.hint
    assert "\n" not in error.value.message and not list(tmp_path.iterdir())


def test_cli_capture_train_writes_the_case_or_refuses_with_exit_2(cli, tmp_path):
    result = cli("capture", f"{MODELS}:tied", "--train", "-o", tmp_path)
    assert result.exit_code == 2 and "tied weights" in result.output
    assert "Traceback" not in result.output
    result = cli("capture", f"{MODELS}:mlp", "--train", "--name", "mine", "-o", tmp_path)
    assert result.exit_code == 0, result.output
    spec = tomllib.loads((tmp_path / "mine.toml").read_text())
    assert spec["case"]["template"] == "training_program"
    assert torch.export.load(tmp_path / "mine.pt2").graph_signature.output_specs[0].kind.name == (
        "LOSS_OUTPUT"
    )


def test_empty_dim_reductions_are_written_out_as_every_dim(captured, tmp_path):
    """torch_xla 2.9 returns sum(x, dim=[]) unreduced (torch: every dim); the script rewrites
    such reductions before any backend runs them, and notes it."""
    script = _script(captured["elu"], tmp_path)
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(16, 4)
    total = graph.call_function(torch.ops.aten.sum.dim_IntList, (x, []))
    kept = graph.call_function(torch.ops.aten.sum.dim_IntList, (x, [0]))
    graph.output((total, kept))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    script.portable(module, torch.device("cpu"))
    assert total.args == (x, [0, 1]) and total.meta["empty_dims"]
    assert kept.args == (x, [0]) and "empty_dims" not in kept.meta


def test_frozen_parameters_are_captured_without_gradients(tmp_path):
    """requires_grad_(False) is the way out of the unused-parameter refusal: what is frozen
    gets no gradient (and the script leaves it as it is)."""
    case = command(f"{MODELS}:frozen", out_dir=tmp_path)
    program = torch.export.load(case.with_suffix(".pt2"))
    grads = [s.target for s in program.graph_signature.output_specs if s.kind.name != "LOSS_OUTPUT"]
    assert grads == ["fc1.weight", "fc1.bias"]


def test_state_dict_is_loaded_before_the_training_step_is_captured(tmp_path):
    """The seed's flow: a checkpoint (trained elsewhere), trained on from there."""
    from reprokit.tools.capture import load_factory

    model = load_factory(f"{MODELS}:elu")[0]
    trained = {k: v + 1 for k, v in model.state_dict().items()}
    torch.save(trained, tmp_path / "trained.pt")
    case = command(f"{MODELS}:elu", out_dir=tmp_path / "case", state_dict=tmp_path / "trained.pt")
    program = torch.export.load(case.with_suffix(".pt2"))
    assert program.state_dict.keys() == trained.keys()
    assert all(torch.equal(program.state_dict[k], v) for k, v in trained.items())


def test_batch_norm_statistics_are_outputs_carried_from_step_to_step(tmp_path):
    """BatchNorm's running statistics (updated in place in training mode) are outputs of the
    joint program, saved as buffer.<name>, and the next step starts from them."""
    case = command(f"{MODELS}:batch_norm", out_dir=tmp_path)
    script = _script(case, tmp_path, steps=2, spmd=False)
    graph, inputs, names = script.prepare(torch.device("cpu"), None, every=True)
    assert names[-10:-7] == [f"buffer.bn.{b}" for b in ("running_mean", "running_var",
                                                        "num_batches_tracked")]  # fmt: skip
    tensors = script.train(graph, inputs, names)
    assert tensors["buffer.bn.num_batches_tracked"] == 1  # after the first step
    assert inputs["bn.num_batches_tracked"] == 2 and "loss.step2" in tensors  # after the second
