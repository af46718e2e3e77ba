"""Fixture models for tests/tools/test_sweep.py: tiny factories, as `reprokit capture` takes
them, two of which share one divergence (a cumsum of a bool mask: XLA returns it as bool,
saturated, where PyTorch gives int64)."""

from __future__ import annotations

import torch
from torch import nn


def mlp():
    """Two linear layers: matches on XLA in float32 and bfloat16."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval(), (torch.randn(2, 8),)


class MaskedPositions(nn.Module):
    """Positions counted along a mask, as Hugging Face's masking code counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        positions = mask.cumsum(-1)  # XLA: bool, where PyTorch promotes to int64
        return self.proj(x) * positions  # promoted, without a cast (export checks a cast's input)


class MaskedEmbedding(nn.Module):
    """Another model with the same cumsum: position embeddings looked up from the mask."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(8, 4)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        positions = mask.cumsum(-1) * mask
        return torch.tanh(self.embed(ids) + positions.unsqueeze(-1))


def masked_positions():
    torch.manual_seed(0)
    mask = torch.tensor([[True, True, True, False, True, True]])
    return MaskedPositions().eval(), (torch.randn(1, 6), mask)


def masked_embedding():
    torch.manual_seed(0)
    mask = torch.tensor([[True, True, False, True, True]])
    return MaskedEmbedding().eval(), (torch.tensor([[1, 2, 3, 4, 5]]), mask)


def dies():
    """A factory whose process dies, as a crash inside torch.export would end it."""
    import os

    os._exit(3)
