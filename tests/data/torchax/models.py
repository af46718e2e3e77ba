"""A model for tests/runner/test_torchax.py, as `reprokit capture` calls it: a Linear
(aten.linear, a bias added to a matmul) then a LayerNorm, the two operations torchax computes
differently from CPU PyTorch in bfloat16."""

from __future__ import annotations

import torch
from torch import nn


def mlp_norm():
    """Linear(64, 64), LayerNorm(64), Linear(64, 8) on 16 rows; inputs and weights seeded."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 8)).eval()
    with torch.no_grad():  # a bias as large as the product: its rounding then shows
        for layer in (model[0], model[2]):
            layer.bias.add_(4.0)
    return model, (torch.randn(16, 64),)
