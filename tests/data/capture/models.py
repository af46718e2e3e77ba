"""Fixture models for tests/tools/test_capture.py: factories as `reprokit capture` calls them."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass
class Output:
    """A transformers ModelOutput in miniature: a dataclass registered as a pytree node, so
    that a program returning it loads only where this module was imported."""

    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...]


torch.utils._pytree.register_dataclass(Output)


def structured():
    """Two linear layers returning an Output: its logits and every hidden state."""

    class Layers(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> Output:
            h = torch.relu(self.first(x))
            return Output(logits=self.second(h), hidden_states=(x, h))

    torch.manual_seed(0)
    return Layers().eval(), (torch.randn(3, 4),)


def llama():
    """A Hugging Face LlamaForCausalLM in its default form (a ModelOutput), 2 layers of 32,
    without its KV cache (torch.export cannot return one)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                         use_cache=False)  # fmt: skip
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (1, 8))
    return LlamaForCausalLM(config).eval(), (ids,), {"attention_mask": torch.ones_like(ids)}


def gpt2_with_cache():
    """GPT-2 as its config makes it, use_cache on: its output holds a DynamicCache."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=16)
    return GPT2LMHeadModel(config).eval(), (torch.zeros(1, 4, dtype=torch.long),)


def custom_op():
    """A model calling an operator its file registers: it loads only where the file ran."""
    if not hasattr(torch.ops.reprokit_test, "twice"):

        @torch.library.custom_op("reprokit_test::twice", mutates_args=())
        def twice(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        twice.register_fake(lambda x: torch.empty_like(x))

    class Twice(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.reprokit_test.twice(x) + 1

    return Twice(), (torch.randn(3),)


def bf16_upcast():
    """A bf16 model that computes its norm in float32 on purpose, as RMSNorm layers do."""

    class Norm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.proj(x)
            variance = h.float().pow(2).mean(-1, keepdim=True)  # the deliberate upcast
            return (h.float() * torch.rsqrt(variance + 1e-6)).to(h.dtype)

    torch.manual_seed(0)
    return Norm().to(torch.bfloat16).eval(), (torch.randn(2, 8, dtype=torch.bfloat16),)


def default_dtype_mask():
    """A mask made in torch's default dtype and cast to its input's, a no-op torch.export keeps
    as a dtype assertion (DeBERTa-v2's embeddings do this)."""

    class Masked(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mask = torch.ones(x.shape[0], x.shape[1]).to(x.dtype)
            return x * mask

    return Masked(), (torch.randn(2, 3),)


def nms_of_kept_boxes():
    """Boxes kept by score, then torchvision's batched_nms: its branch on the number of boxes
    depends on the scores' values."""
    import torchvision

    class Detect(nn.Module):
        def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            keep = scores > 0.5
            kept, kept_scores = boxes[keep], scores[keep]
            classes = torch.zeros_like(kept_scores, dtype=torch.long)
            return torchvision.ops.batched_nms(kept, kept_scores, classes, 0.5)

    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 2.0, 2.0]])
    return Detect(), (boxes, torch.tensor([0.9, 0.2]))


def cumsum_in_a_library():
    """A bool mask's cumulative sum in a library the model calls (masklib, which the test puts
    in a folder named site-packages): XLA's is bool, CPU's int64; the sums stay 0 or 1."""
    import masklib

    class Positions(nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            positions = masklib.positions(mask)
            return x * positions.unsqueeze(-1)

    mask = torch.tensor([[False, False, True, False], [True, False, False, False]])
    return Positions(), (torch.ones(2, 4, 3), mask)
