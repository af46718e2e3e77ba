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

import ctypes
import io
import mmap
import pickle
import struct
import sys
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import torch

from reprokit.comparison.tensors import compare_tensors
from reprokit.errors import ReprokitError
from reprokit.records import Comparison

Loader = Callable[[], torch.Tensor]
_CODE_HINT = "Checkpoints are data: only tensors and plain containers are loaded (weights_only)."


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
        step = _dcp_folder(path)
        with reading(step / ".metadata"):
            return Checkpoint(step, "distributed checkpoint", _dcp_loaders(step))
    with reading(path):
        if path.suffix == ".safetensors":
            return Checkpoint(path, "safetensors", _safetensors_loaders(path))
        if Path(f"{path}.tensors").is_dir():
            return Checkpoint(path, "xser", _xser_loaders(path))
        return Checkpoint(path, "torch.save", _torch_loaders(path))


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


# -- torch.save ------------------------------------------------------------------------------


def _torch_loaders(path: Path) -> dict[str, Loader]:
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


def _xser_loaders(path: Path) -> dict[str, Loader]:
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


def _dcp_folder(path: Path) -> Path:
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


def _dcp_loaders(step: Path) -> dict[str, Loader]:
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


def _safetensors_loaders(path: Path) -> dict[str, Loader]:
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
