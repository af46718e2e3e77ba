"""A captured model run sharded for real: ``--set mesh_shape=[2,2] --set shard=...`` adds the
xla_spmd stage on four XLA:CPU devices, the parameters and inputs laid out as the strategy says,
each output judged against float64 as every other stage's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reprokit.tools.capture import command

MODELS = Path(__file__).parents[1] / "data" / "capture" / "models.py"


@pytest.mark.parametrize(
    ("shard", "weights"), [pytest.param("model", 3, marks=pytest.mark.slow), ("fsdp", 10)]
)
def test_a_sharded_model_is_judged_on_the_mesh_its_strategy_lays_out(cli, tmp_path, shard, weights):
    """SmallCNN: model shards its 2 conv kernels and the linear weight (dims >= 2) on the model
    axis; fsdp every floating parameter and buffer: with the biases and BatchNorm's 4 vectors."""
    case = command(f"{MODELS}:cnn", out_dir=tmp_path / "captured")
    out = tmp_path / "run"
    result = cli("run", case, "-o", out, "--set", "mesh_shape=[2, 2]", "--set", f"shard={shard}")
    assert result.exit_code == 0, result.output
    (variant,) = json.loads((out / "summary.json").read_text())["variants"]
    judged = [c for c in variant["comparisons"] if c["target"] == "xla_spmd"]
    assert judged and all(c["allclose"] for c in judged)
    log = (out / variant["label"] / "stages" / "xla_spmd" / "stdout.log").read_text()
    assert f"SPMD: {shard} on a 2x2 mesh ('data', 'model'): {weights} weights sharded" in log


def test_a_spec_per_parameter_lays_out_the_ones_named(cli, tmp_path):
    """shard_specs: the head's weight split on its input dim over the model axis (a reduction
    across shards), a conv kernel on its output channels over data; batch for the rest. A name
    the program lacks stops the stage with the program's names, not a traceback."""
    case = command(f"{MODELS}:cnn", out_dir=tmp_path / "captured")
    specs = '["head.weight: None, model", "features.0.weight: data, None, None, None"]'
    out = tmp_path / "run"
    result = cli("run", case, "-o", out, "--set", "mesh_shape=[2, 2]",
                 "--set", f"shard_specs={specs}")  # fmt: skip
    assert result.exit_code == 0, result.output
    (variant,) = json.loads((out / "summary.json").read_text())["variants"]
    judged = [c for c in variant["comparisons"] if c["target"] == "xla_spmd"]
    assert judged and all(c["allclose"] for c in judged)
    log = (out / variant["label"] / "stages" / "xla_spmd" / "stdout.log").read_text()
    assert "0 weights sharded, the inputs on their first dim, 2 by shard_specs" in log
    wrong = tmp_path / "wrong"
    cli("run", case, "-o", wrong, "--set", "mesh_shape=[2, 2]",
        "--set", 'shard_specs=["head.weights: None, model"]')  # fmt: skip
    (variant,) = json.loads((wrong / "summary.json").read_text())["variants"]
    said = (wrong / variant["label"] / "stages" / "xla_spmd" / "stderr.log").read_text()
    assert "shard_specs: 'head.weights': no such parameter or buffer" in said
    assert "head.weight (10, 8)" in said and "Traceback" not in said
