"""Fixture models for tests/test_capture.py: factories as `reprokit capture` calls them."""

from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Conv, BatchNorm, pooling and a linear head, as image models start."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.head(x.mean(dim=(2, 3)))


def cnn():
    """The CNN in eval mode (BatchNorm from its statistics) on a batch of 4 16x16 images."""
    torch.manual_seed(0)
    model = SmallCNN().eval()
    return model, (torch.randn(4, 3, 16, 16),)


def transformer():
    """Two tiny encoder layers (d_model 16) without dropout, in training mode; a key mask."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x = torch.randn(2, 6, 16)
    return model, (x,), {"src_key_padding_mask": torch.zeros(2, 6, dtype=torch.bool)}


def not_a_model():
    return "model", (1,)


def no_args():
    return nn.Linear(2, 2), torch.randn(1, 2)


def data_dependent():
    """A model torch.export cannot capture: Python control flow on a tensor's value."""

    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:
                return x * 2
            return x

    return Branchy(), (torch.randn(3),)


def value_dependent_shape():
    """A model whose output's shape depends on its input's values (boolean indexing)."""

    class Positives(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[x > 0] * 2

    return Positives(), (torch.randn(8),)


def broken():
    raise ValueError("the factory itself fails")
