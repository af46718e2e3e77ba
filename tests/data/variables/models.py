"""A model that fails on XLA only under an exported variable, for
tests/runner/test_run_variables.py: `reprokit capture` calls the factory."""

from __future__ import annotations

import torch
from torch import nn


class Offsets(nn.Module):
    """Positions offset by 2**40, in int64: with XLA_USE_32BIT_LONG=1 torch_xla lowers int64
    as s32, and the offset cannot be converted ("value cannot be converted to type int without
    overflow"); without it, XLA computes what CPU does."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inp(x)) * 2
        far = positions.clamp(max=1099511627776)  # 2**40: no int32 holds it
        return h + far.remainder(7).to(h.dtype)


def offsets():
    torch.manual_seed(0)
    return Offsets().eval(), (torch.randn(2, 4), torch.arange(8).reshape(2, 4))
