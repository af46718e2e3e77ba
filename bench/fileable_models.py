"""Factories for bench/fileable.py's corpus that a zoo name alone cannot give: a training step
of a public architecture (the model and a cross-entropy loss, as ``reprokit capture --train``
wants: the forward returns the loss first) and a diffusion UNet (diffusers' ``UNet2DModel``,
not one of reprokit's zoos). Each function returns ``(module, args)`` or ``(module, args,
kwargs)``, as ``reprokit capture FILE.py:FUNCTION`` calls it. Weights are random (seed 0)."""

from __future__ import annotations

import torch
from torch import nn

from reprokit.tools.capture.zoo import build, parse


class _Loss(nn.Module):
    """A public model's forward and cross-entropy against fixed labels (class ``i % C`` for the
    i-th row): the loss first, as a training step's capture wants it."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        out = self.model(*args, **kwargs)
        logits = out if isinstance(out, torch.Tensor) else out["logits"]
        rows = logits.reshape(-1, logits.shape[-1])
        labels = torch.arange(rows.shape[0], device=rows.device) % rows.shape[-1]
        return (nn.functional.cross_entropy(rows, labels),)


def _train(spec: str, **config):
    if spec.startswith("hf:"):  # a training capture needs each parameter under one name
        config.setdefault("tie_word_embeddings", False)
    model, args, kwargs = build(parse(spec, config))
    model.eval()  # dropout off (a training step's capture refuses random operations)
    return _Loss(model), args, kwargs


def train_resnet18():
    return _train("torchvision:resnet18")


def train_mobilenet_v3_small():
    return _train("torchvision:mobilenet_v3_small")


def train_convnext_atto():
    return _train("timm:convnext_atto")


def train_test_vit():
    return _train("timm:test_vit")


def train_test_byobnet():
    return _train("timm:test_byobnet")


def train_efficientnet_b0():
    return _train("torchvision:efficientnet_b0")


def train_gpt2():
    return _train("hf:gpt2")


def train_llama():
    return _train("hf:LlamaForCausalLM")


def train_bert():
    return _train("hf:bert")


def train_qwen2():
    return _train("hf:Qwen2ForCausalLM")


def train_swin_t():
    return _train("torchvision:swin_t")


def unet():
    """A small diffusers UNet2DModel (two down and two up blocks, one with attention): a
    denoiser's forward on a 1x3x32x32 noisy image at timestep 10."""
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    model = UNet2DModel(
        sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
        block_out_channels=(32, 64), norm_num_groups=8,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    ).eval()  # fmt: skip

    class Denoiser(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.unet = model

        def forward(self, sample, timestep):
            return self.unet(sample, timestep).sample

    return Denoiser(), (torch.randn(1, 3, 32, 32), torch.tensor([10]))
