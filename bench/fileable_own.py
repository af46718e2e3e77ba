"""Five models of the kind a new user brings, written for bench/fileable.py's ``--own`` part
(not tuned against: they stand for the models of issue 64's trial, rebuilt from its words):

- ``rope``: a Llama-style attention whose rotary embedding is complex (``torch.polar``,
  ``view_as_complex``, ``view_as_real``), run in bfloat16;
- ``convnet``: a bfloat16 conv net (GroupNorm, SiLU, a depthwise conv, a global average pool);
- ``train_text``: a float16 text classifier's training step (embedding, masked mean, LayerNorm,
  cross-entropy with label smoothing, an in-place ``clamp_``);
- ``pool_head``: a float16 pooling head whose vector norms are 259 to 378 over 208 elements;
- ``causal``: a bfloat16 causal attention with sharpened logits (a temperature of 1/8).

Each returns ``(module, args)`` in float32; ``NAME_bfloat16`` and ``NAME_float16`` the same
model and inputs in that dtype, as a user captures a model that runs in it (its own casts, a
``.float()`` before ``view_as_complex``, kept in the program)."""

from __future__ import annotations

import functools
import math

import torch
from torch import nn
from torch.nn import functional as F


class RopeAttention(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, seq: int = 16) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        self.register_buffer("angles", torch.outer(torch.arange(seq).float(), inv))

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        angles = self.angles[: x.shape[1]].float()
        freqs = torch.polar(torch.ones_like(angles), angles)  # complex64, as Llama's freqs_cis
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        turned = pairs * freqs.view(1, x.shape[1], 1, -1)
        return torch.view_as_real(turned).flatten(3).type_as(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, self.heads, self.head_dim) for w in (self.wq, self.wk, self.wv))
        q, k = self.rotate(q), self.rotate(k)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.head_dim)
        mask = torch.full((t, t), float("-inf"), device=x.device, dtype=scores.dtype).triu(1)
        attn = torch.softmax(scores + mask, dim=-1)
        return self.wo(torch.einsum("bhqk,bkhd->bqhd", attn, v).reshape(b, t, -1))


def rope():
    torch.manual_seed(0)
    return RopeAttention(), (torch.randn(2, 16, 64),)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, padding=1)
        self.norm1 = nn.GroupNorm(8, 32)
        self.depthwise = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.norm2 = nn.GroupNorm(8, 32)
        self.point = nn.Conv2d(32, 64, 1)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.silu(self.norm1(self.stem(x)))
        x = F.silu(self.norm2(self.depthwise(x)))
        x = F.adaptive_avg_pool2d(self.point(x), 1).flatten(1)
        return self.head(x)


def convnet():
    torch.manual_seed(0)
    return ConvNet(), (torch.randn(2, 3, 32, 32),)


class TextClassifier(nn.Module):
    def __init__(self, vocab: int = 500, dim: int = 64, classes: int = 5) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor):
        h = self.embed(ids) * mask.unsqueeze(-1)
        pooled = h.sum(1) / mask.sum(1, keepdim=True).clamp_(min=1.0)
        logits = self.out(self.norm(pooled))
        return F.cross_entropy(logits, labels, label_smoothing=0.1), logits


def train_text():
    torch.manual_seed(0)
    ids = torch.randint(0, 500, (8, 24))
    mask = (torch.arange(24) < torch.randint(4, 24, (8, 1))).float()
    return TextClassifier(), (ids, mask, torch.randint(0, 5, (8,)))


class PoolHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(208, 32)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        norms = torch.linalg.vector_norm(features, dim=-1, keepdim=True)
        return self.proj(features / norms) * norms.log()


def pool_head():
    torch.manual_seed(0)
    # rows of 208 positive features whose norms run from 259 to 378
    scale = torch.linspace(259, 378, 6).unsqueeze(1) / math.sqrt(208)
    features = scale * (1 + 0.05 * torch.randn(6, 208))
    return PoolHead(), (features,)


class CausalAttention(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        logits = torch.einsum("bqhd,bkhd->bhqk", q, k) * 8.0  # sharpened: temperature 1/8
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        logits = logits.masked_fill(~causal, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(logits, dim=-1))
        return self.out(torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, t, d))


def causal():
    torch.manual_seed(0)
    return CausalAttention(), (torch.randn(2, 16, 64),)


def _in(dtype: torch.dtype, made):
    model, args = made()
    return model.to(dtype), tuple(a.to(dtype) if a.is_floating_point() else a for a in args)


for _name in ("rope", "convnet", "train_text", "pool_head", "causal"):
    for _dtype in ("bfloat16", "float16"):
        globals()[f"{_name}_{_dtype}"] = functools.partial(_in, getattr(torch, _dtype),
                                                           globals()[_name])  # fmt: skip
