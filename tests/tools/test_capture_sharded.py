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
