"""Read checkpoints of every format ``reprokit diff`` takes, lazily and without running code.

A :class:`Checkpoint` is a read-only mapping from dotted tensor names to tensors that reads a
tensor from disk only when it is asked for, so that comparing two large checkpoints one tensor
at a time keeps memory near the size of the largest tensor, not of the checkpoint.

Formats, told apart by what is on disk:

- ``torch.save`` file (zip format): loaded with ``weights_only`` and ``mmap``, so that no
  data is read until asked for; each tensor is then copied out and the file's pages it
  touched are let go (``madvise``), so that they do not pile up in the resident set.
- xser checkpoint (``PATH`` plus the ``PATH.tensors/`` folder that torch_xla's
  ``xser.save`` writes): ``xser.load`` unpickles with ``weights_only=False`` and would run any
  code a stranger's file holds, so the main file is read with ``weights_only`` allowing only a
  stand-in for ``TensorReference``, and each ``tensor_N.pt`` with ``weights_only``.
- distributed checkpoint folder (``.metadata`` plus ``*.distcp``, as CheckpointManager or
  ``torch.distributed.checkpoint.save`` write it), or a CheckpointManager folder (its latest
  step): torch's own reader unpickles ``.metadata`` with plain ``pickle``, so a restricted
  unpickler reads it here, and each chunk is read with ``weights_only`` and put in place. No
  process group is needed.
- safetensors file (``*.safetensors``): read with ``safe_open``, one tensor per opening.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from reprokit.comparison.formats import (
    Loader,
    dcp_folder,
    dcp_loaders,
    safetensors_loaders,
    torch_loaders,
    xser_loaders,
)
from reprokit.comparison.reading import flatten, reading
from reprokit.comparison.tensors import compare_tensors
from reprokit.errors import ReprokitError
from reprokit.records import Comparison

__all__ = ["Checkpoint", "diff_checkpoints", "flatten", "load_tensors", "open_checkpoint"]


class Checkpoint(Mapping[str, torch.Tensor]):
    """Named tensors of one checkpoint, in the order it holds them, each read when asked for."""

    def __init__(self, path: Path, kind: str, loaders: dict[str, Loader]) -> None:
        self.path, self.kind, self._loaders = path, kind, loaders

    def __getitem__(self, name: str) -> torch.Tensor:
        with reading(self.path):
            return self._loaders[name]()

    def __contains__(self, name: object) -> bool:  # without reading the tensor
        return name in self._loaders

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaders)

    def __len__(self) -> int:
        return len(self._loaders)

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.path)!r}, {self.kind}, {len(self)} tensors)"


def open_checkpoint(path: Path | str) -> Checkpoint:
    """The checkpoint at ``path``, its format told from what is on disk."""
    path = Path(path)
    if not path.exists():
        raise ReprokitError("no such file or folder", path)
    if path.is_dir():
        step = dcp_folder(path)
        with reading(step / ".metadata"):
            return Checkpoint(step, "distributed checkpoint", dcp_loaders(step))
    with reading(path):
        if path.suffix == ".safetensors":
            return Checkpoint(path, "safetensors", safetensors_loaders(path))
        if Path(f"{path}.tensors").is_dir():
            return Checkpoint(path, "xser", xser_loaders(path))
        return Checkpoint(path, "torch.save", torch_loaders(path))


def diff_checkpoints(
    reference: Path | str,
    target: Path | str,
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> list[Comparison]:
    """``reprokit diff``: every tensor of two checkpoints, of any format, one at a time."""
    expected, actual = open_checkpoint(reference), open_checkpoint(target)
    return compare_tensors(
        expected, actual, rtol=rtol, atol=atol, reference=str(reference), target=str(target)
    )


def load_tensors(path: Path | str) -> dict[str, torch.Tensor]:
    """A tensors.pt file as a flat dict of CPU tensors; never runs code from the file."""
    path = Path(path)
    with reading(path):
        data = torch.load(path, map_location="cpu", weights_only=True)
    return flatten(data, source=path)
