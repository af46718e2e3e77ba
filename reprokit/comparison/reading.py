"""A checkpoint's file read as data: torch.load's refusals in plain words (a pickle that would
run code, a file that is no checkpoint), and nested containers flattened to dotted names."""

from __future__ import annotations

import pickle
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from reprokit.errors import ReprokitError

_CODE_HINT = "Checkpoints are data: only tensors and plain containers are loaded (weights_only)."


def flatten(
    data: Any, prefix: str = "", *, source: Path | str = "", leaf: type | None = None
) -> dict[str, torch.Tensor]:
    """Nested dicts and lists of tensors as one dict with dotted names (``model.fc.weight``).

    ``leaf`` names one more type kept as a value (a checkpoint's reference to a tensor file).
    """
    if isinstance(data, torch.Tensor) or (leaf is not None and isinstance(data, leaf)):
        return {prefix or "tensor": data}
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list | tuple)
        else None
    )
    if items is None:
        return {}  # numbers, strings and None carry no tensor to compare
    flat: dict[str, torch.Tensor] = {}
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        flat.update(flatten(value, name, source=source, leaf=leaf))
    return flat


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Whatever goes wrong while reading becomes one message naming the file."""
    try:
        yield
    except ReprokitError:
        raise
    except pickle.UnpicklingError as exc:
        raise _unpickling_error(path, exc) from None
    except (
        RuntimeError,
        EOFError,
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        OverflowError,
        struct.error,
        zipfile.BadZipFile,
    ) as exc:  # fmt: skip  (what damaged bytes raise from the unpickler and the zip reader)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReprokitError(
            f"cannot read the checkpoint: {first[:300]}",
            path,
            hint="Is the file complete, and is it a torch.save, xser, distributed checkpoint "
            "or safetensors file?",
        ) from None


def _unpickling_error(path: Path, exc: Exception) -> ReprokitError:
    """A pickle naming code to run (a global that is not allowed) is refused as such; any
    other unpickling failure is a damaged file."""
    detail = _why(str(exc))
    if "global" in detail.lower() or "reduce" in detail.lower():
        return ReprokitError(
            "refused to load: the file holds a pickle that could run code",
            path,
            hint=f"{_CODE_HINT} {detail}",
        )
    return ReprokitError(
        f"cannot read the checkpoint: not a valid pickle ({detail})",
        path,
        hint="Is the file complete, and is it a checkpoint?",
    )


_TORCH_BOILERPLATE = ("Weights only load failed", "Check the documentation", "Please use ")


def _why(message: str) -> str:
    """What torch's weights_only refusal says about this file, whole: its paragraphs, less the
    generic ones (how the default changed in 2.6, where the documentation is)."""
    text = message.partition("WeightsUnpickler error:")[2] or message
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    kept = [p for p in paragraphs if p and not p.startswith(_TORCH_BOILERPLATE)]
    detail = " ".join(kept).partition(" Please use ")[0] or " ".join(text.split())
    return detail if len(detail) <= 400 else detail[:400].rsplit(" ", 1)[0] + " ..."
