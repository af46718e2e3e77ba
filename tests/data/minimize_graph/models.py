"""Fixture models for tests/tools/minimize/test_minimize_graph.py and bench/minimize_graph.py:
factories as `reprokit capture` calls them."""

from __future__ import annotations

import torch
from torch import nn


def encoder(layers: int = 2):
    """A stack of tiny encoder layers (d_model 16) without dropout, in eval mode."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    return model, (torch.randn(2, 6, 16),)


def encoder6():
    """bench/minimize_graph.py's six layers."""
    return encoder(6)


class FakeQuant(nn.Module):
    """A linear layer whose activations go through float8_e5m2fnuz and back (fake
    quantization): torch_xla 2.9 has no such type and raises, CPU computes it."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.out = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(torch.relu(self.inp(x)))
        h = h.to(torch.float8_e5m2fnuz).to(torch.float32)  # the test-only failing operation
        return torch.tanh(self.out(h)) * 2


def fake_quant():
    torch.manual_seed(0)
    return FakeQuant().eval(), (torch.randn(2, 8),)


def fp16_layer_norm():
    """pytorch/xla#3658: a float16 LayerNorm, its inputs far from zero (mean 8): XLA's error
    against float64 is hundreds of times CPU's (measured on XLA:CPU, torch_xla 2.9)."""
    torch.manual_seed(0)
    return nn.LayerNorm(16).half().eval(), (torch.randn(2, 6, 16).half() + 8,)


def fp32_layer_norm():
    """The same LayerNorm in float32: XLA and CPU agree."""
    torch.manual_seed(0)
    return nn.LayerNorm(16).eval(), (torch.randn(2, 6, 16) + 8,)
