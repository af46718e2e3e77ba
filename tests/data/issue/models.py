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


class BinaryStep(nn.Module):
    """A BinaryNet-style training step: hardtanh as a straight-through estimator, weights
    clamped to [-1, 1], cross-entropy. Binary weights and inputs put pre-activations on the
    clip boundaries, where XLA's hardtanh_backward passes the gradient (CPU gives 0); and
    nll_loss_forward's total_weight is 1 on XLA, 64 on CPU, which changes no gradient."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 10)

    def forward(self, x, y):
        h = F.hardtanh(F.linear(x, self.fc1.weight.clamp(-1, 1), self.fc1.bias))
        out = F.linear(F.hardtanh(h), self.fc2.weight.clamp(-1, 1), self.fc2.bias)
        return F.cross_entropy(out, y)


def binary_step():
    torch.manual_seed(0)
    step = BinaryStep()
    with torch.no_grad():
        step.fc1.weight.copy_(step.fc1.weight.sign())
        step.fc2.weight.copy_(step.fc2.weight.sign())
        step.fc1.bias.zero_()
    x = torch.randint(-1, 2, (64, 16)).float()
    return step, (x, torch.randint(0, 10, (64,)))


class ShiftedMask(nn.Module):
    """A mask built as swin_t builds its shifted-window mask: new_zeros, then slices filled in
    place, each fill value a constant (lift_fresh_copy)."""

    def forward(self, x):
        mask = x.new_zeros(4, 4)
        for count, rows in enumerate((slice(0, 2), slice(2, 4))):
            mask[rows, :] = torch.tensor(float(count))
        return x + mask


def shifted_mask():
    torch.manual_seed(0)
    return ShiftedMask(), (torch.randn(4, 4),)


class ComplexRope(nn.Module):
    """A rotary embedding done in complex numbers, as Llama's: polar, view_as_complex, a
    complex product, view_as_real (a complex result and its real view share one storage)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        frequencies = torch.tensor([1.0, 0.5, 0.1, 0.01])
        self.register_buffer("angles", torch.outer(torch.arange(4.0), frequencies))

    def forward(self, x):
        freqs = torch.polar(torch.ones_like(self.angles), self.angles)
        pairs = torch.view_as_complex(self.proj(x).float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * freqs).flatten(-2)


def complex_rope():
    torch.manual_seed(0)
    return ComplexRope(), (torch.randn(2, 4, 8),)
