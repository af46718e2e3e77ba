"""A new user's models, each with real XLA:CPU differences (torch_xla 2.9): the report of their
runs must read as an issue."""

import torch
import torch.nn.functional as F
from torch import nn


class Nonfinite(nn.Module):
    """float16: a row mean over 70,000 columns (NaN on XLA: its count is inf in float16) and
    softplus past ln(65504) (inf on XLA), and with beta -1 (-inf on XLA)."""

    def forward(self, x, y):
        return x.mean(dim=-1), F.softplus(y), F.softplus(-y, beta=-1.0)


def nonfinite():
    torch.manual_seed(0)
    x = torch.rand(2, 70_000, dtype=torch.float16) + 0.5
    y = torch.tensor([1.0, 12.0, 15.0, 30.0], dtype=torch.float16)
    return Nonfinite(), (x, y)


class Bookkeeper(nn.Module):
    """Two independent differences: a cumulative count of a bool mask (bool on XLA, int64 on
    CPU) and a bilinear resize of a 5x6 image to 8x10 (one source column off on XLA)."""

    def forward(self, mask, x, img):
        positions = mask.cumsum(-1)
        wrapped = torch.remainder(x, 3.0)
        resized = F.interpolate(img, size=(8, 10), mode="bilinear", align_corners=False)
        return positions, wrapped, resized


def bookkeeper():
    torch.manual_seed(0)
    mask = torch.rand(2, 16) > 0.5
    return Bookkeeper(), (mask, torch.randn(6, 8) * 5, torch.arange(30.0).view(1, 1, 5, 6))


class SoftplusStep(nn.Module):
    """A training step whose float16 softplus is inf on XLA: its gradients follow."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 1)

    def forward(self, x, y):
        return F.mse_loss(self.fc2(F.softplus(self.fc1(x) * 20)), y)


def softplus_step():
    torch.manual_seed(0)
    return SoftplusStep(), (torch.rand(16, 4), torch.randn(16, 1))
