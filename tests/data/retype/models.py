"""BERT-like masks captured in float32 for the retyping tests
(tests/tools/test_capture_retype.py): fill values that stand for "float32's extreme", as Hugging
Face's extended attention masks write them, which a program retyped to bfloat16 must carry as
bfloat16's extreme."""

from __future__ import annotations

import torch
from torch import nn


class MaskedAttention(nn.Module):
    """One head of attention whose padding is masked twice over: masked_fill of the scores
    with finfo(float32).min (DeBERTa-v2's XSoftmax) and an additive mask (1 - mask) * min
    (BERT's get_extended_attention_mask); the probabilities of padding are then zeroed."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / 4.0
        keep = mask[:, None, :].bool()
        additive = (1.0 - mask[:, None, :].to(x.dtype)) * torch.finfo(torch.float32).min
        scores = scores.masked_fill(~keep, torch.finfo(torch.float32).min) + additive
        probs = torch.softmax(scores, dim=-1).masked_fill(~keep, 0.0)
        return self.out(probs @ v)


def bert_like():
    """The module with two of its eight positions padded."""
    torch.manual_seed(0)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[:, -2:] = 0
    return MaskedAttention().eval(), (torch.randn(2, 8, 16), mask)
