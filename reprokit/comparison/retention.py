"""What a run folder keeps of the recorded operations once their variant has its verdict.

A captured program records every operation's result (``nodes = "all"``): that is what lets a
verdict name the first one to differ, and it makes each stage's tensors.pt hundreds of MB
(the 6-layer encoder's XLA stage: 674 MB, against 2 MB for its outputs). Once the variant is
judged, the comparisons (max abs, max rel, mismatched, error against float64, the worst
elements) are in summary.json, which is all that ``reprokit report``, ``minimize`` (which runs
its own candidates) and the reports read. So each stage's tensors.pt is rewritten to hold:

- every tensor the stage did not describe as a recorded operation (the outputs, and every
  tensor of a template that records no operations: those are never touched);
- the recorded operations around each first divergence (:data:`AROUND` on each side), in
  every stage of the variant, so that ``reprokit diff`` can still show where it starts;

and ``tensors.json`` beside it names each tensor left out, with a summary: shape, dtype, a
content hash (sha256 of its bytes), its largest absolute value and NaN/inf counts.

Only variants whose stages were compared are reduced: a run of some stages alone (``--stages``,
to be merged with another machine's run) keeps all its tensors. The results cache keeps a
stage's files as the stage wrote them (whole), so a re-run with other tolerances compares the
full tensors again; the reduced files are kept too (``reduced/``, keyed by the bytes of the
tensors.pt and what to leave out), so that an unchanged re-run reduces without torch.
``reprokit run --keep-tensors`` keeps everything.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.errors import ReprokitError
from reprokit.infra.caching import Store, file_digest
from reprokit.infra.offload import Offload, here
from reprokit.infra.torch_import import import_module
from reprokit.records import Status, VariantResult, folder
from reprokit.records.folder import stage_path

if TYPE_CHECKING:
    import torch

AROUND = 2  # recorded operations kept on each side of a first divergence
TENSORS, SUMMARIES = folder.TENSORS, folder.REDUCED
UNCHANGED = "unchanged"  # a cache entry for a file that had nothing to leave out
REWRITE = "reprokit.comparison.retention:rewrite"  # the offloaded work (torch's part)


def reduce_variant(
    folder: Path, result: VariantResult, *, cached: bool = True, offload: Offload = here
) -> int:
    """Reduce the tensors.pt of each stage of the judged variant in ``folder`` (its
    ``RUN_DIR/<label>``) as the module says; how many tensors it left out. ``cached``: a
    stage reduced before from the same bytes gets the same two files from the cache, without
    torch (a re-run whose stages and comparisons all came from the caches stays at the
    interpreter's floor). ``offload``: where torch's part is done (infra/offload.py)."""
    if not result.comparisons:
        return 0
    kept = _around_divergences(result)
    store = Store("reduced") if cached else None
    dropped = 0
    for stage in result.stages:
        if stage.status is Status.OK and stage.described:
            droppable = set(stage.described) - kept
            with contextlib.suppress(ReprokitError, OSError):  # unreadable: left as it is
                dropped += _reduce(stage_path(folder, stage.name), droppable, store, offload)
    return dropped


def _around_divergences(result: VariantResult) -> set[str]:
    """The names within :data:`AROUND` of each target stage's first divergence and of each
    root (where a difference is born), in the order its comparisons were made (the order the
    stages saved their tensors)."""
    kept: set[str] = set()
    born = [(root.target, root.tensor) for root in result.roots]
    born += [(also, root.tensor) for root in result.roots for also in root.also]
    for target, first in [*result.first_divergence.items(), *born]:
        names = [c.tensor for c in result.comparisons if c.target == target]
        if first in names:
            index = names.index(first)
            kept.update(names[max(0, index - AROUND) : index + AROUND + 1])
    return kept


def _reduce(stage_dir: Path, droppable: set[str], store: Store | None, offload: Offload) -> int:
    """Rewrite ``stage_dir/tensors.pt`` without the ``droppable`` tensors, summarized in
    tensors.json; how many it left out (0: nothing to drop, no such file, or done before)."""
    path = stage_dir / TENSORS
    if not droppable or not path.is_file() or (stage_dir / SUMMARIES).exists():
        return 0
    key = Store.key(file_digest(path), sorted(droppable), _reducing_code()) if store else ""
    entry = store.get_folder(key) if store else None
    if entry is not None and (entry / UNCHANGED).exists():
        return 0  # none of the droppable names is in it (a faithful stage: outputs only)
    if entry is not None:
        for name in (TENSORS, SUMMARIES):
            _replace(stage_dir / name, lambda temp, n=name: shutil.copyfile(entry / n, temp))
        return len(read_summaries(stage_dir))
    dropped = offload(REWRITE, {"path": str(path), "droppable": sorted(droppable)})
    if store is not None:  # what was found either way, so that a re-run needs no torch

        def fill(entry: Path) -> None:
            if not dropped:
                (entry / UNCHANGED).touch()
            for name in (TENSORS, SUMMARIES) if dropped else ():
                shutil.copyfile(stage_dir / name, entry / name)

        store.put_folder(key, fill)  # None: another run kept it first, or the disk is full
    return dropped


@functools.cache
def _reducing_code() -> str | None:
    """This file, hashed once a process (another way of reducing: other files), not once a
    stage: as verdict.py's comparing code."""
    return file_digest(Path(__file__))


def rewrite(request: dict[str, Any]) -> int:
    """tensors.pt (``request["path"]``) without the ``droppable`` tensors, and tensors.json:
    how many it dropped (an offloaded work: torch's part)."""
    path, droppable = Path(request["path"]), set(request["droppable"])
    torch = import_module()  # here only: a reduction found in the cache needs none
    reading = import_module("reprokit.comparison.reading").reading
    with reading(path):
        try:  # memory-mapped: a tensor's pages are read when it is hashed or saved
            tensors = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # written in torch's legacy format, which cannot be mapped
            tensors = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(tensors, dict):
        return 0
    dropped = {name: summary(tensors.pop(name)) for name in list(tensors) if name in droppable}
    if not dropped:
        return 0
    _replace(path, lambda temp: torch.save(tensors, temp))
    document = {"format": 1, "kept": list(tensors), "dropped": dropped}
    text = json.dumps(document, indent=1)
    _replace(path.with_name(SUMMARIES), lambda temp: temp.write_text(text))
    return len(dropped)


def summary(tensor: torch.Tensor) -> dict[str, Any]:
    """What tensors.json says of a tensor left out: enough to tell two runs' apart or equal."""
    torch = import_module()
    flat = tensor.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8) if flat.element_size() else flat
    digest = hashlib.sha256(raw.numpy().tobytes() if raw.numel() else b"").hexdigest()
    found: dict[str, Any] = {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "sha256": digest,
    }
    if flat.numel() and (flat.is_floating_point() or flat.is_complex()):
        values = flat.abs()  # in its own dtype: exact, and no float64 copy (a run's hundreds
        finite = values.isfinite()  # of recorded results are summarized: seconds otherwise)
        found["max_abs"] = float(values.masked_fill(~finite, 0).max()) if finite.any() else None
        found["nan"], found["inf"] = int(values.isnan().sum()), int(values.isinf().sum())
    elif flat.numel() and flat.dtype != torch.bool:
        found["max_abs"] = float(flat.abs().max())
    if found.get("max_abs") is not None and not math.isfinite(found["max_abs"]):
        found["max_abs"] = str(found["max_abs"])
    return found


def read_summaries(stage_dir: Path) -> dict[str, dict[str, Any]]:
    """The tensors a reduced stage left out of its tensors.pt, each with its summary; {} for
    a stage that kept them all (or a run made before tensors were reduced)."""
    try:
        data = json.loads((Path(stage_dir) / SUMMARIES).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    dropped = data.get("dropped") if isinstance(data, dict) else None
    return dropped if isinstance(dropped, dict) else {}


def _replace(path: Path, write: Any) -> None:
    """``write(temp)`` a file beside ``path``, then rename it over ``path``: whole or not at all."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    temp = Path(name)
    try:
        write(temp)
        os.chmod(temp, 0o644)  # as the stage's own files (mkstemp's are the owner's alone)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
