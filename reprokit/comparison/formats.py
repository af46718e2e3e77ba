"""Each format ``reprokit diff`` reads, as a loader per tensor (see checkpoints.py for how each
is read without running code): torch.save files memory-mapped, xser, distributed checkpoint
folders, safetensors. ``xser_tree`` and ``dcp_tree`` read the same files whole, nesting and
plain values kept, for ``reprokit convert``."""

from __future__ import annotations

import ctypes
import io
import mmap
import pickle
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import torch

from reprokit.comparison.reading import flatten, reading
from reprokit.errors import ReprokitError

Loader = Callable[[], torch.Tensor]


# -- torch.save ------------------------------------------------------------------------------


def torch_loaders(path: Path) -> dict[str, Loader]:
    if not zipfile.is_zipfile(path):  # the legacy format cannot be memory-mapped: read it whole
        data = flatten(torch.load(path, map_location="cpu", weights_only=True), source=path)
        return {name: _constant(tensor) for name, tensor in data.items()}
    data, mappings = _mapped_load(path), _mappings(path)
    return {name: _owned(tensor, mappings) for name, tensor in data.items()}


def _mapped_load(path: Path, extra_leaf: type | None = None) -> dict[str, Any]:
    """The file's tensors memory-mapped: nothing is read until a tensor is used."""
    data = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    return flatten(data, source=path, leaf=extra_leaf)


def _owned(mapped: torch.Tensor, mappings: list[tuple[int, int]]) -> Loader:
    """A copy of a memory-mapped tensor in ordinary memory; the file's pages that the copy
    read are then let go, else they would count in this process's memory until the end."""

    def load() -> torch.Tensor:
        span = _span(mapped)
        if span is None or not any(lo <= span[0] and span[1] <= hi for lo, hi in mappings):
            return mapped  # not in the file's mapping (rebuilt in memory): nothing to let go
        tensor = mapped.clone()
        _madvise_dontneed(*span)
        return tensor

    return load


def _span(tensor: torch.Tensor) -> tuple[int, int] | None:
    """The page-aligned address range of the tensor's storage."""
    if tensor.layout != torch.strided or not tensor.untyped_storage().nbytes():
        return None
    storage = tensor.untyped_storage()
    start = storage.data_ptr() & ~(mmap.PAGESIZE - 1)
    return start, storage.data_ptr() + storage.nbytes()


def _mappings(path: Path) -> list[tuple[int, int]]:
    """Where this process has ``path`` mapped (Linux: /proc/self/maps), so that only pages of
    the file, never ordinary memory, are let go."""
    if _libc() is None or _big_endian(path):  # byte-swapped pages were written: keep them
        return []
    target, found = str(path.resolve()), []
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].rstrip("\n") == target:
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                found.append((lo, hi))
    return found


def _big_endian(path: Path) -> bool:
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.endswith("/byteorder")]
        return bool(names) and archive.read(names[0]).strip() == b"big"


_MADV_DONTNEED = 4  # Linux's value


def _madvise_dontneed(start: int, end: int) -> None:
    """The pages of a private, unwritten file mapping leave this process's resident set; they
    are read again from the file (its page cache) if touched."""
    libc = _libc()
    if libc is not None:
        libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_DONTNEED)


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def _read_exact(path: Path, offset: int, nbytes: int) -> bytearray:
    """Bytes at an offset the checkpoint's metadata names: checked against the file's size
    before any memory is set aside for them."""
    if offset < 0 or nbytes < 0 or offset + nbytes > path.stat().st_size:
        raise EOFError(f"the {nbytes} bytes at offset {offset} lie beyond the end of the file")
    buffer = bytearray(nbytes)
    with path.open("rb") as f:
        f.seek(offset)
        if f.readinto(buffer) != nbytes:
            raise EOFError(f"the file ends before the {nbytes} bytes at offset {offset}")
    return buffer


def _constant(tensor: torch.Tensor) -> Loader:
    return lambda: tensor


# -- xser ------------------------------------------------------------------------------------


class _TensorReference:
    """Stand-in for ``torch_xla.utils.serialization.TensorReference``: just the tensor's id,
    so that reading an xser checkpoint needs neither torch_xla nor a trusting unpickler."""

    tid: Any = None


def xser_loaders(path: Path) -> dict[str, Loader]:
    name = "torch_xla.utils.serialization.TensorReference"
    with torch.serialization.safe_globals([(_TensorReference, name)]):
        found = _mapped_load(path, extra_leaf=_TensorReference)
    folder, mappings = Path(f"{path}.tensors"), _mappings(path)
    return {
        key: _xser_tensor(folder, ref)
        if isinstance(ref, _TensorReference)
        else _owned(ref, mappings)
        for key, ref in found.items()
    }


def xser_tree(path: Path) -> Any:
    """The whole xser checkpoint as ``xser.load`` returns it, with CPU tensors (torch_xla's
    own would be on its device) and without running code: nesting and plain values kept."""
    name = "torch_xla.utils.serialization.TensorReference"
    with torch.serialization.safe_globals([(_TensorReference, name)]):
        data = torch.load(path, map_location="cpu", weights_only=True)
    folder = Path(f"{path}.tensors")
    return _tree_map(data, _TensorReference, lambda ref: _xser_tensor(folder, ref)())


def _tree_map(data: Any, leaf: type, function: Callable[[Any], Any]) -> Any:
    """``data`` with every ``leaf`` replaced by ``function(leaf)``, containers rebuilt."""
    if isinstance(data, leaf):
        return function(data)
    if isinstance(data, dict):
        return type(data)((k, _tree_map(v, leaf, function)) for k, v in data.items())
    if isinstance(data, list | tuple) and not hasattr(data, "_fields"):
        return type(data)(_tree_map(v, leaf, function) for v in data)
    return data


def _xser_tensor(folder: Path, ref: _TensorReference) -> Loader:
    if type(ref.tid) is not int or ref.tid < 0:  # never a path of the file's choosing
        raise ReprokitError(f"malformed tensor reference {ref.tid!r}", folder)
    file = folder / f"tensor_{ref.tid}.pt"

    def load() -> torch.Tensor:
        with reading(file):
            tensor = torch.load(file, map_location="cpu", weights_only=True)
        if not isinstance(tensor, torch.Tensor):
            raise ReprokitError("an xser tensor file that holds no tensor", file)
        return tensor

    return load


# -- distributed checkpoint ------------------------------------------------------------------


def dcp_folder(path: Path) -> Path:
    """A step folder as is; a CheckpointManager folder: its latest step."""
    if (path / ".metadata").is_file():
        return path
    steps = [p for p in path.iterdir() if p.name.isdigit() and (p / ".metadata").is_file()]
    if not steps:
        raise ReprokitError(
            "not a distributed checkpoint: no .metadata here, nor in a step folder",
            path,
            hint="Give a folder written by torch.distributed.checkpoint or CheckpointManager.",
        )
    return max(steps, key=lambda p: int(p.name))


_DCP_ALLOWED = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
        "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "collections": {"OrderedDict"},
    "pathlib": {"PosixPath", "PurePosixPath", "PureWindowsPath"},  # StorageMeta.checkpoint_id
}  # fmt: skip


class _MetadataUnpickler(pickle.Unpickler):
    """Plain pickle, but only the few record classes a ``.metadata`` file is made of."""

    def find_class(self, module: str, name: str) -> Any:
        if name in _DCP_ALLOWED.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a .metadata")


def dcp_loaders(step: Path) -> dict[str, Loader]:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    with (step / ".metadata").open("rb") as f:
        metadata = _MetadataUnpickler(f).load()
    tensors = {
        key: meta
        for key, meta in metadata.state_dict_metadata.items()
        if isinstance(meta, TensorStorageMetadata)  # the rest are pickled Python values
    }
    chunks: dict[str, list[Any]] = {key: [] for key in tensors}
    for index, info in metadata.storage_data.items():
        if index.fqn in chunks:
            chunks[index.fqn].append((tuple(index.offset), info))
    return {key: _dcp_tensor(step, meta, chunks[key]) for key, meta in tensors.items()}


def dcp_tree(step: Path) -> dict[str, Any]:
    """The whole checkpoint, nested as it was saved (the metadata keeps each name's path),
    plain values too (each a torch.save of it, read with ``weights_only``)."""
    with (step / ".metadata").open("rb") as f:
        metadata = _MetadataUnpickler(f).load()
    tensors = dcp_loaders(step)
    paths = metadata.planner_data if isinstance(metadata.planner_data, dict) else {}
    tree: dict[Any, Any] = {}
    for index, info in metadata.storage_data.items():
        if index.fqn not in tensors:  # a plain value: one chunk of the torch.save'd bytes
            file = (step / info.relative_path).resolve()
            if file.parent != step.resolve():
                raise ValueError(f"chunk file {info.relative_path!r} is outside the checkpoint")
            raw = io.BytesIO(_read_exact(file, info.offset, info.length))
            _put(tree, paths.get(index.fqn, (index.fqn,)), torch.load(raw, weights_only=True))
    for fqn, load in tensors.items():
        _put(tree, paths.get(fqn, (fqn,)), load())
    return _listed(tree)


def _put(tree: dict[Any, Any], path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _listed(tree: Any) -> Any:
    """Dicts keyed 0..n-1 by ints (DCP's path into a list) made lists again."""
    if not isinstance(tree, dict):
        return tree
    items = {k: _listed(v) for k, v in tree.items()}
    if items and all(type(k) is int for k in items) and sorted(items) == list(range(len(items))):
        return [items[i] for i in range(len(items))]
    return items


def _dcp_tensor(step: Path, meta: Any, chunks: list[Any]) -> Loader:
    def load() -> torch.Tensor:
        tensor, covered = torch.empty(tuple(meta.size), dtype=meta.properties.dtype), 0
        for offsets, info in chunks:
            file = (step / info.relative_path).resolve()
            with reading(file):
                chunk = _dcp_chunk(step, file, info)
                view = tensor
                for dim, (start, length) in enumerate(zip(offsets, chunk.shape, strict=True)):
                    view = view.narrow(dim, start, length)
                view.copy_(chunk)
                covered += chunk.numel()
        if covered != tensor.numel():  # else some of it would be uninitialised memory
            raise ValueError(f"its chunks hold {covered} of the {tensor.numel()} elements")
        return tensor

    return load


def _dcp_chunk(step: Path, file: Path, info: Any) -> torch.Tensor:
    """One saved chunk: a torch.save of a tensor at a byte range of a .distcp file."""
    if info.transform_descriptors:
        raise ValueError(f"chunks stored with {info.transform_descriptors} are unsupported")
    if file.parent != step.resolve():  # a name of the metadata's choosing stays in the folder
        raise ValueError(f"chunk file {info.relative_path!r} is outside the checkpoint")
    raw = io.BytesIO(_read_exact(file, info.offset, info.length))
    chunk = torch.load(raw, map_location="cpu", weights_only=True)
    if not isinstance(chunk, torch.Tensor):
        raise ValueError("a chunk that holds no tensor")
    return chunk


# -- safetensors -----------------------------------------------------------------------------


def safetensors_loaders(path: Path) -> dict[str, Loader]:
    with _safe_open(path) as f:
        names = list(f.keys())

    def loader(name: str) -> Loader:
        def load() -> torch.Tensor:
            with _safe_open(path) as f:  # one opening (one mmap) per tensor: pages let go
                return f.get_tensor(name)

        return load

    return {name: loader(name) for name in names}


@contextmanager
def _safe_open(path: Path) -> Iterator[Any]:
    """safetensors' reader, imported only for a .safetensors file; its errors as ValueError."""
    try:
        import safetensors
    except ImportError:
        raise ReprokitError(
            "reading safetensors needs the safetensors package",
            path,
            hint="pip install safetensors",
        ) from None
    try:
        with safetensors.safe_open(str(path), framework="pt") as f:
            yield f
    except safetensors.SafetensorError as exc:
        raise ValueError(str(exc)) from None
