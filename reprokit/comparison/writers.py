"""Write a checkpoint (nested containers of CPU tensors and plain values) in each format
``reprokit diff`` reads, so that plain torch loads it: torch.save, xser, safetensors, a
distributed checkpoint folder. None of them needs torch_xla.

Each writer writes into ``TARGET.partial`` (a file, or a folder) beside the target and renames
it into place at the end: a target that exists was written whole. xser is two paths (the file
and its ``.tensors/`` folder); its folder is renamed first, so that a file named TARGET always
has its tensors.
"""

from __future__ import annotations

import pickle
import shutil
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from reprokit.comparison.reading import flatten

PARTIAL = ".partial"


def write_torch(tree: Any, target: Path) -> None:
    """torch.save: ``torch.load(target, weights_only=True)`` gives the tree back."""
    with _partial(target) as staging:
        torch.save(tree, staging)


def write_safetensors(tree: Any, target: Path) -> list[str]:
    """The tensors under their dotted names (safetensors holds tensors only, one storage
    each: views are copied out); returns the names of the plain values left out."""
    from safetensors.torch import save_file  # imported only for a .safetensors target

    flat = flatten(tree)
    tensors = {name: t.detach().clone(memory_format=torch.contiguous_format)
               for name, t in flat.items()}  # fmt: skip
    with _partial(target) as staging:
        save_file(tensors, str(staging))
    return _plain_values(tree)


def write_dcp(tree: Any, target: Path) -> None:
    """A distributed checkpoint folder (``.metadata`` and ``*.distcp``) written by one
    process without a process group: ``torch.distributed.checkpoint.load`` reads it into a
    state dict of the same names, in any process count."""
    import torch.distributed.checkpoint as dcp

    with _partial(target, folder=True) as staging, warnings.catch_warnings():
        # without a process group dcp says it saves for one process: that is what is meant
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(tree, checkpoint_id=staging)


class _XserReference:
    """What xser.save puts where a tensor was: pickled under torch_xla's class name (by
    :class:`_XserPickler`), so that ``xser.load`` reads it, without importing torch_xla."""

    def __init__(self, tid: int) -> None:
        self.tid = tid


_XSER_GLOBAL = b"torch_xla.utils.serialization\nTensorReference\n"


class _XserPickler(pickle._Pickler):  # the Python pickler: its save_global can be overridden
    def save_global(self, obj: Any, name: str | None = None) -> None:
        if obj is _XserReference:
            self.write(pickle.GLOBAL + _XSER_GLOBAL)
            self.memoize(obj)
            return
        super().save_global(obj, name)


_XSER_PICKLE = ModuleType("xser_pickle")  # what torch.save takes as its pickle_module
_XSER_PICKLE.Pickler = _XserPickler  # type: ignore[attr-defined]


def write_xser(tree: Any, target: Path) -> None:
    """As torch_xla's ``xser.save`` writes it: TARGET holds the structure with a reference
    in place of each tensor, ``TARGET.tensors/tensor_N.pt`` each tensor (``xser.load`` puts
    them on the XLA device; ``reprokit diff`` and ``convert`` read them as data)."""
    tensors: list[torch.Tensor] = []

    def reference(tensor: torch.Tensor) -> _XserReference:
        tensors.append(tensor)
        return _XserReference(len(tensors) - 1)

    structure = _tensors_replaced(tree, reference)
    folder = Path(f"{target}.tensors")
    with _partial(folder, folder=True) as staging:
        for tid, tensor in enumerate(tensors):
            torch.save(tensor.detach().clone(), staging / f"tensor_{tid}.pt")  # no shared base
    try:
        with _partial(target) as staging:
            torch.save(structure, staging, pickle_module=_XSER_PICKLE)
    except BaseException:
        _remove(folder)  # tensors without their file: no checkpoint
        raise


def _tensors_replaced(data: Any, function: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(data, torch.Tensor):
        return function(data)
    if isinstance(data, dict):
        return type(data)((k, _tensors_replaced(v, function)) for k, v in data.items())
    if isinstance(data, list | tuple) and not hasattr(data, "_fields"):
        return type(data)(_tensors_replaced(v, function) for v in data)
    return data


def _plain_values(data: Any, prefix: str = "") -> list[str]:
    """Dotted names of the values that are neither tensors nor containers."""
    if isinstance(data, torch.Tensor):
        return []
    if isinstance(data, dict | list | tuple):
        items = data.items() if isinstance(data, dict) else enumerate(data)
        named = ((f"{prefix}.{k}" if prefix else str(k), v) for k, v in items)
        return [found for name, v in named for found in _plain_values(v, name)]
    return [prefix or "value"]


@contextmanager
def _partial(target: Path, *, folder: bool = False) -> Iterator[Path]:
    """``TARGET.partial`` to write into, renamed to TARGET once written; removed on failure."""
    staging = target.with_name(target.name + PARTIAL)
    _remove(staging)
    if folder:
        staging.mkdir()
    try:
        yield staging
        staging.rename(target)
    finally:
        _remove(staging)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


__all__ = ["write_dcp", "write_safetensors", "write_torch", "write_xser"]
