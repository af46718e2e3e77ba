"""``reprokit convert SRC DST``: a checkpoint from one format into another, for people whose
checkpoints leave torch_xla (xser needs torch_xla to be read by torch_xla's own code).

Formats: ``torch`` (torch.save), ``xser`` (torch_xla's xser.save: a file plus FILE.tensors/),
``safetensors`` and ``dcp`` (a torch.distributed.checkpoint folder, or a CheckpointManager
folder: its latest step). The source's format is told from what is on disk, as ``reprokit
diff`` tells it; the target's from ``--to`` or its name. Everything is read as data, as
``reprokit diff`` reads it (no pickle that could run code, no torch_xla), the nesting and the
plain values (a step count, an optimizer's param_groups) kept where the target can hold them;
safetensors holds tensors only, under their dotted names (``model.fc.weight``), and the
values it cannot hold are named in the result. The target is then read back and compared
with the source, tensor by tensor, bit for bit: what ``reprokit diff SRC DST`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reprokit.comparison import writers
from reprokit.comparison.checkpoints import Checkpoint, diff_checkpoints, open_checkpoint
from reprokit.comparison.formats import dcp_tree, xser_tree
from reprokit.comparison.reading import reading
from reprokit.errors import ReprokitError

FORMATS = ("torch", "xser", "safetensors", "dcp")
_KINDS = {  # open_checkpoint's names for what it found
    "torch.save": "torch",
    "xser": "xser",
    "safetensors": "safetensors",
    "distributed checkpoint": "dcp",
}
_SUFFIXES = {".pt": "torch", ".pth": "torch", ".bin": "torch", ".ckpt": "torch",
             ".xser": "xser", ".safetensors": "safetensors", ".dcp": "dcp"}  # fmt: skip
_FORMAT_HINT = (
    "Name the target's format with --to torch, xser, safetensors or dcp, or give it a name "
    "that says it: .pt/.pth/.bin (torch.save), .xser, .safetensors, a folder ending in / or "
    ".dcp (distributed checkpoint)."
)


@dataclass(frozen=True)
class Conversion:
    """What ``convert`` wrote, and how its check against the source ended."""

    source: str  # the file or step folder read (a CheckpointManager folder: its latest step)
    target: str
    source_format: str
    target_format: str
    tensors: int
    left_out: tuple[str, ...] = ()  # plain values the target's format cannot hold
    differ: tuple[str, ...] = ()  # tensors that did not read back equal: empty, or a bug

    @property
    def exact(self) -> bool:
        return not self.differ


def target_format(target: Path | str, to: str | None = None) -> str:
    """``to`` if given, else what the target's name says; an error when it says nothing."""
    if to is not None:
        if to not in FORMATS:
            raise ReprokitError(f"--to {to!r} is not a checkpoint format", hint=_FORMAT_HINT)
        return to
    text = str(target)
    if text.endswith(("/", "\\")):
        return "dcp"
    found = _SUFFIXES.get(Path(text).suffix.lower())
    if found is None:
        raise ReprokitError("cannot tell the format to write from the name", text,
                            hint=_FORMAT_HINT)  # fmt: skip
    return found


def convert(source: Path | str, target: Path | str, *, to: str | None = None) -> Conversion:
    """Read ``source`` (any format ``reprokit diff`` reads), write it to ``target`` in the
    format ``to`` or its name says, and check every tensor reads back equal."""
    kind = target_format(target, to)
    target = Path(str(target).rstrip("/\\") or str(target))
    checkpoint = open_checkpoint(source)
    _check_target(target, kind)
    with reading(checkpoint.path):
        tree = read_tree(checkpoint)
    left_out = _WRITERS[kind](tree, target) or []
    comparisons = diff_checkpoints(source, target, rtol=0.0, atol=0.0)
    differ = tuple(c.tensor for c in comparisons if not c.allclose)
    return Conversion(
        str(checkpoint.path), str(target), _KINDS[checkpoint.kind], kind,
        tensors=len(checkpoint), left_out=tuple(left_out), differ=differ,
    )  # fmt: skip


def read_tree(checkpoint: Checkpoint) -> Any:
    """The checkpoint whole, nested as saved, plain values included (safetensors: flat)."""
    path, kind = checkpoint.path, _KINDS[checkpoint.kind]
    if kind == "torch":
        return torch.load(path, map_location="cpu", weights_only=True)
    if kind == "xser":
        return xser_tree(path)
    if kind == "dcp":
        return dcp_tree(path)
    return {name: checkpoint[name] for name in checkpoint}


def _check_target(target: Path, kind: str) -> None:
    """Never over a file of the user's, nor into a folder that is not there."""
    taken = [p for p in (target, Path(f"{target}.tensors") if kind == "xser" else None)
             if p is not None and (p.exists() or p.is_symlink())]  # fmt: skip
    if taken:
        raise ReprokitError("already exists: convert never writes over a file", taken[0],
                            hint="Remove it, or give another target.")  # fmt: skip
    if not target.parent.is_dir():
        raise ReprokitError("no such folder to write into", target.parent)


_WRITERS: dict[str, Callable[[Any, Path], list[str] | None]] = {
    "torch": writers.write_torch,
    "xser": writers.write_xser,
    "safetensors": writers.write_safetensors,
    "dcp": writers.write_dcp,
}
