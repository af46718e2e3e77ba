"""Named models: ``torchvision:resnet18``, ``timm:convnext_atto``, ``hf:LlamaForCausalLM`` or
``hf:gpt2`` built with random weights and inputs made for their family, handed to capture.

Each zoo is an optional package (``pip install 'reprokit[zoo]'``): a missing one is refused in
one line. Nothing is downloaded: Hugging Face models are built from their configuration class
(there is no hub here), with tiny sizes that ``--config key=value`` overrides; torchvision and
timm models with ``weights=None`` / ``pretrained=False``. The inputs are what the family takes:
images (``1x3x64x64``) for vision models, token ids and an attention mask (``1x16``) for
language models, an encoder-decoder's decoder ids too; ``--shape`` changes them.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError

ZOOS = {"torchvision": "torchvision", "timm": "timm", "hf": "transformers"}  # prefix: package
IMAGE_SHAPE = (1, 3, 64, 64)  # small enough for two cores, large enough for five stride-2 stages
TOKEN_SHAPE = (1, 16)  # batch, sequence
SEED = 0
INSTALL = "pip install 'reprokit[zoo]' (torchvision, timm and transformers)"

# Hugging Face: tiny sizes by the names most configurations use (a configuration's own names,
# n_embd and d_model, are reached through its attribute_map); set only where the default
# configuration has the attribute. use_cache=False: a KV cache is an output torch.export
# cannot return as tensors.
HF_TINY: dict[str, Any] = {
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "intermediate_size": 64, "vocab_size": 256,
    "max_position_embeddings": 64, "head_dim": 16, "d_model": 32, "d_ff": 64, "d_kv": 16,
    "num_layers": 2, "num_decoder_layers": 2, "num_heads": 2, "encoder_layers": 2,
    "decoder_layers": 2, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
    "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "embedding_size": 32, "image_size": 32,
    "patch_size": 8, "use_cache": False,
}  # fmt: skip
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
              "sep_token_id", "cls_token_id")  # fmt: skip


@dataclass(frozen=True)
class Named:
    """A named model: its zoo, its name there, and what the user changed."""

    zoo: str
    model: str
    config: dict[str, Any] = field(default_factory=dict)
    shape: tuple[int, ...] | None = None

    @property
    def spec(self) -> str:
        return f"{self.zoo}:{self.model}"

    @property
    def case_name(self) -> str:
        """The case's name: the model's, in the characters a case name may hold."""
        return re.sub(r"[^\w.-]", "_", self.model)[:80]


def is_named(spec: str) -> bool:
    """``ZOO:NAME`` (a named model) rather than ``FILE.py:FUNCTION``."""
    zoo, sep, _ = spec.partition(":")
    return bool(sep) and zoo in ZOOS


def parse(spec: str, config: Mapping[str, Any] | None = None,
          shape: Sequence[int] | None = None) -> Named:  # fmt: skip
    """``ZOO:NAME`` read, its zoo known."""
    zoo, _, model = spec.partition(":")
    if zoo not in ZOOS or not model:
        raise ReprokitError(
            f"{spec!r} names no model", hint=f"ZOO:NAME, ZOO one of {', '.join(ZOOS)}: "
            "torchvision:resnet18, timm:convnext_atto, hf:LlamaForCausalLM, hf:gpt2"
        )  # fmt: skip
    return Named(zoo, model, dict(config or {}), tuple(shape) if shape else None)


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    """``--shape 1,3,32,32`` (or ``1x3x32x32``)."""
    if not text:
        return None
    parts = re.split(r"[,x]", text.strip())
    if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ReprokitError(f"--shape {text!r} is not sizes", hint="Example: --shape 1,3,32,32")
    return tuple(int(p) for p in parts)


def package(zoo: str) -> Any:
    """The zoo's package, or a clear refusal when it is not installed."""
    name = ZOOS[zoo]
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ReprokitError(
            f"{zoo} models need the package {name}, which is not installed ({exc})",
            hint=f"Install the zoo packages: {INSTALL}.",
        ) from None


def build(named: Named) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The model (random weights, eval mode) and its inputs: ``(module, args, kwargs)``."""
    import torch

    torch.manual_seed(SEED)  # the same random weights at every capture
    builders = {"torchvision": _torchvision, "timm": _timm, "hf": _hf}
    module, args, kwargs = builders[named.zoo](named, package(named.zoo))
    return module.eval(), args, kwargs


def capture_named(
    named: Named, *, name: str | None = None, out_dir: Path | str = ".",
    state_dict: Path | str | None = None,
) -> Path:  # fmt: skip
    """``reprokit capture ZOO:NAME``: built, then captured as any model is; the case's path."""
    from reprokit.tools.capture.forward import capture

    module, args, kwargs = build(named)
    return capture(module, args, kwargs, name=name or named.case_name, out_dir=out_dir,
                   state_dict=state_dict)  # fmt: skip


def _images(shape: tuple[int, ...] | None, default: tuple[int, ...] = IMAGE_SHAPE) -> Any:
    import torch

    shape = shape or default
    if len(shape) != 4:
        raise ReprokitError(f"--shape {shape} is not an image batch",
                            hint="Images are N,C,H,W: --shape 1,3,64,64")  # fmt: skip
    return torch.randn(shape, generator=torch.Generator().manual_seed(SEED))


def _made(what: str, spec: str, call: Any, **config: Any) -> Any:
    """A zoo's constructor called, its refusal of a configuration said in one line."""
    try:
        return call(**config)
    except Exception as exc:  # each zoo raises its own kinds for a bad name or configuration
        raise ReprokitError(
            f"cannot build {spec}: {type(exc).__name__}: {exc}",
            hint=f"Check the {what} and its --config keys.",
        ) from None


def _torchvision(named: Named, torchvision: Any) -> tuple[Any, tuple[Any, ...], dict]:
    known = torchvision.models.list_models()
    if named.model not in known:
        close = [m for m in known if m.startswith(named.model[:4])][:8]
        raise ReprokitError(f"torchvision has no model {named.model!r}",
                            hint=f"Some it has: {', '.join(close or known[:8])}.")  # fmt: skip
    config = {"weights": None, **named.config}
    builder = inspect.signature(torchvision.models.get_model_builder(named.model))
    if "weights_backbone" in builder.parameters:  # detection, segmentation: no download either
        config.setdefault("weights_backbone", None)
    module = _made("name", named.spec, torchvision.models.get_model, name=named.model, **config)
    return module, (_images(named.shape),), {}


def _timm(named: Named, timm: Any) -> tuple[Any, tuple[Any, ...], dict]:
    if not timm.is_model(named.model):
        close = timm.list_models(f"{named.model[:4]}*")[:8]
        raise ReprokitError(
            f"timm has no model {named.model!r}",
            hint=f"Some it has: {', '.join(close) or 'timm.list_models()'}.",
        )
    config = {"pretrained": False, **named.config}
    module = _made("name", named.spec, timm.create_model, model_name=named.model, **config)
    channels = getattr(module, "in_chans", None) or config.get("in_chans", 3)
    return module, (_images(named.shape, (1, channels, *IMAGE_SHAPE[2:])),), {}


def _hf(named: Named, transformers: Any) -> tuple[Any, tuple[Any, ...], dict]:
    """A class name (LlamaForCausalLM) or a configuration's model type (gpt2, t5)."""
    model_class = getattr(transformers, named.model, None)
    if isinstance(model_class, type) and hasattr(model_class, "config_class"):
        config_class = model_class.config_class
    else:
        config_class, model_class = _by_model_type(named.model, transformers)
    config = _made("configuration", named.spec, _tiny_config, config_class=config_class,
                   given=named.config)  # fmt: skip
    module = _made("class", named.spec, model_class, config=config)
    return module, (), _hf_inputs(module, config, named.shape)


def _by_model_type(model_type: str, transformers: Any) -> tuple[type, type]:
    """``gpt2`` -> GPT2Config and its masked LM (bert), else its causal LM (gpt2), else its
    base model (t5)."""
    from transformers.models.auto import configuration_auto, modeling_auto

    configs = configuration_auto.CONFIG_MAPPING_NAMES
    if model_type not in configs:
        close = [k for k in configs if k.startswith(model_type[:3])][:8]
        raise ReprokitError(
            f"transformers has no model class or model type {model_type!r}",
            hint="Give a class (hf:LlamaForCausalLM) or a model type "
            f"(hf:gpt2){'; close: ' + ', '.join(close) if close else ''}.",
        )
    for mapping in ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
                    "MODEL_MAPPING_NAMES"):  # fmt: skip
        names = getattr(modeling_auto, mapping)
        if model_type in names and isinstance(names[model_type], str):
            return getattr(transformers, configs[model_type]), getattr(
                transformers, names[model_type]
            )
    raise ReprokitError(f"transformers has no model for the type {model_type!r}",
                        hint="Give the model class: hf:ClassName.")  # fmt: skip


def _tiny_config(config_class: type, given: dict[str, Any]) -> Any:
    """The configuration at HF_TINY's sizes (those it has), ``given`` on top; token ids that
    would fall outside the tiny vocabulary moved inside it."""
    default = config_class()
    own = getattr(config_class, "attribute_map", {})  # hidden_size -> n_embd, for GPT-2
    sizes = {own.get(k, k): _per_stage(getattr(default, k), v) for k, v in HF_TINY.items()
             if hasattr(default, k)}  # fmt: skip
    sizes |= {own.get(k, k): v for k, v in given.items()}
    vocab = sizes.get(own.get("vocab_size", "vocab_size"), getattr(default, "vocab_size", None))
    for index, key in enumerate(_TOKEN_IDS):
        value = getattr(default, key, None)
        if isinstance(vocab, int) and isinstance(value, int) and value >= vocab:
            sizes.setdefault(key, vocab - 1 - index)
    return config_class(**sizes)


def _per_stage(default: Any, tiny: Any) -> Any:
    """A tiny size where the configuration holds one per stage (Swin's ``num_heads``, a list):
    the tiny value for each stage."""
    if isinstance(default, list | tuple) and not isinstance(tiny, list | tuple):
        return type(default)([tiny] * len(default))
    return tiny


def _hf_inputs(module: Any, config: Any, shape: tuple[int, ...] | None) -> dict[str, Any]:
    """What the model's forward takes, made: token ids and a mask, decoder ids, pixels."""
    import torch

    takes = inspect.signature(module.forward).parameters
    inputs: dict[str, Any] = {}
    if "pixel_values" in takes and "input_ids" not in takes:
        size = getattr(config, "image_size", 32)
        channels = getattr(config, "num_channels", 3)
        return {"pixel_values": _images(shape, (1, channels, size, size))}
    shape = shape or TOKEN_SHAPE
    if len(shape) != 2:
        raise ReprokitError(f"--shape {shape} is not batch,sequence",
                            hint="Token ids are N,L: --shape 1,16")  # fmt: skip
    generator = torch.Generator().manual_seed(SEED)
    vocab = int(getattr(config, "vocab_size", 256))
    ids = torch.randint(3, max(vocab - 8, 4), shape, generator=generator)  # no special tokens
    inputs["input_ids"] = ids
    if "attention_mask" in takes:
        inputs["attention_mask"] = torch.ones(shape, dtype=torch.long)
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in takes:
        inputs["decoder_input_ids"] = ids[:, : max(shape[1] // 2, 1)].clone()
    return inputs
