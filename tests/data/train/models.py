"""Fixture models for tests/tools/test_train.py: training steps as `reprokit capture --train`
takes them (each forward returns its loss first)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Regression(nn.Module):
    """Two linear layers and an activation, the mean squared error as the loss."""

    def __init__(self, activation: nn.Module) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.act = activation
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.fc2(self.act(self.fc1(x)))
        return F.mse_loss(out, y), out


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(16, 8), torch.randn(16, 4)


def elu():
    """XLA's ELU backward uses the formula meant for the output on the input: fc1's
    gradient is off (torch_xla 2.9)."""
    torch.manual_seed(0)
    return Regression(nn.ELU()), _batch()


def mlp():
    """A small MLP with GELU and LayerNorm: agrees in float32."""
    torch.manual_seed(0)
    model = Regression(nn.Sequential(nn.GELU(), nn.LayerNorm(32)))
    return model, _batch()


class Unused(Regression):
    def __init__(self) -> None:
        super().__init__(nn.Tanh())
        self.spare = nn.Linear(4, 4)


def unused():
    torch.manual_seed(0)
    return Unused(), _batch()


class Tied(nn.Module):
    """A language model's input embedding and output layer, one weight."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.embed(tokens))
        return F.cross_entropy(logits.flatten(0, 1), tokens.flatten())


def tied():
    return Tied(), (torch.randint(0, 10, (2, 5)),)


class Dropping(Regression):
    def __init__(self) -> None:
        super().__init__(nn.Sequential(nn.ReLU(), nn.Dropout(0.1)))


def dropout():
    torch.manual_seed(0)
    return Dropping().train(), _batch()


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return self.fc(x).sum()


def in_place():
    return InPlace(), (torch.randn(3, 4),)


def logits():
    """Returns logits, not a loss."""
    return nn.Linear(4, 4), (torch.randn(3, 4),)


class Block(nn.Module):
    """A transformer encoder block (attention, LayerNorm, a GELU MLP) and a regression head:
    agrees in float32."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.TransformerEncoderLayer(
            16, 2, 32, dropout=0.0, activation="gelu", batch_first=True
        )
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        prediction = self.head(self.block(x)).squeeze(-1)
        return {"loss": F.mse_loss(prediction, y), "prediction": prediction}


def block():
    torch.manual_seed(0)
    return Block(), (torch.randn(8, 6, 16), torch.randn(8, 6))


def frozen():
    """The unused model with fc2 and the spare layer frozen: fc1 alone gets gradients."""
    model, batch = unused()
    for parameter in [*model.fc2.parameters(), *model.spare.parameters()]:
        parameter.requires_grad_(False)
    return model, batch


class Normalized(nn.Module):
    """BatchNorm in training mode: its statistics are buffers the step updates in place."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.bn, self.out = nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.out(self.bn(self.fc(x))).squeeze(-1), y)


def batch_norm():
    torch.manual_seed(0)
    return Normalized().train(), (torch.randn(16, 8), torch.randn(16))
