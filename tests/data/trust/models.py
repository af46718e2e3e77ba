"""Fixture programs for tests/comparison/test_trust.py: factories as `reprokit capture` calls
them."""

from __future__ import annotations

import torch
from torch import nn


class MomentLayerNorm(nn.Module):
    """A layer norm written as E[x²] - E[x]²: in float16, with inputs around 8, the variance is
    a difference of two close numbers, and how XLA computes the E[x²] reduction (fused into
    the one graph, or split when E[x²] is an output of its own) shows in the result."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        variance = x.pow(2).mean(-1, keepdim=True) - mean.pow(2)
        return (x - mean) * torch.rsqrt(variance + 1e-5)


def moment_layer_norm():
    """float16 inputs around 8, 64 rows of 128: 8,192 elements."""
    torch.manual_seed(0)
    return MomentLayerNorm(), ((torch.randn(64, 128) + 8).half(),)


def mlp():
    """A small float32 MLP: XLA:CPU agrees with CPU on it, recorded or not."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh()).eval()
    return model, (torch.randn(8, 16),)


class RowSum(nn.Module):
    """Row sums of a wide matrix: in bfloat16 XLA:CPU sums in bfloat16, CPU does not."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 0.5).sum(-1)


def row_sum():
    torch.manual_seed(0)
    return RowSum(), (torch.randn(16, 4096),)
