"""A stage's files on their way to another node and back (the Ray executor's transport).

What a stage reads: the variant folder (``repro.py``, the files beside it) and, under
``stages/``, the folders of the stages it needs (however indirectly) and whatever is no
stage's folder (``stages/dcp``, a checkpoint a stage wrote beside its own). What it made:
its folder ``stages/<name>/`` and every other file it created or changed. They travel two ways:

- through the object store (the default): the driver packs what the stage reads as a tar; the
  task unpacks it into a temporary folder of its node, runs the stage, packs what it made; the
  driver unpacks that into the run folder. Nothing to set up; the files are held in memory on
  the way, so it suits outputs of megabytes, not of gigabytes.
- through a shared folder (``Options.shared_dir``: a path every node mounts at the same
  place, NFS or a bucket's FUSE mount): nothing big travels through objects. A run folder that
  lies inside it is worked on in place; any other is mirrored into
  ``shared_dir/.reprokit-ray-<id>/<variant>/`` (what a stage reads, when it starts) and what
  each stage made copied back into the run folder when it ends.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile
import threading
import uuid
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from reprokit.records import Stage
from reprokit.records.folder import STAGES, VariantFolder, stage_path
from reprokit.runner.dag import needed
from reprokit.runner.processes.stage import StageJob


def inputs(job: StageJob, dag: list[Stage]) -> list[Path]:
    """What a stage may read of its variant folder (see the module's docstring). Without the
    variant's stages (``dag`` empty), every stage folder but its own."""
    folder, stages = job.folder, VariantFolder(job.folder).stages
    named = {s.name for s in dag} | {job.stage.name}
    wanted = needed(dag, job.stage.needs)
    found = [path for path in sorted(folder.iterdir()) if path.name != STAGES]
    for path in sorted(stages.iterdir()) if stages.is_dir() else ():
        if path.name in wanted or path.name not in named:
            found.append(path)
    return found


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` (relative path): its size and modification time."""
    found = {}
    for top, _, names in os.walk(root):
        for name in names:
            path = os.path.join(top, name)
            with contextlib.suppress(OSError):  # gone meanwhile
                stat = os.lstat(path)
                found[os.path.relpath(path, root)] = (stat.st_size, stat.st_mtime_ns)
    return found


def made_files(
    root: Path, before: dict[str, tuple[int, int]], name: str, others: Iterable[str] = ()
) -> list[str]:
    """What a stage made under ``root``: its folder, and every other file new or changed
    since ``before``, but in the folders of the ``others`` (stages running beside it)."""
    own = os.path.join(STAGES, name)
    made = [own] if (root / own).exists() else []
    skip = tuple(os.path.join(STAGES, n) + os.sep for n in (name, *others))
    changed = (p for p, sig in snapshot(root).items() if before.get(p) != sig)
    return made + sorted(p for p in changed if not p.startswith(skip))


def pack(root: Path, paths: Iterable[Path], follow: bool = False) -> bytes:
    """``paths`` (folders with their contents) as an uncompressed tar: tensors do not shrink."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", dereference=follow) as tar:
        for path in paths:
            if path.exists() or path.is_symlink():
                tar.add(path, arcname=str(path.relative_to(root)))
    return buffer.getvalue()


def unpack(data: bytes, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter=_inside)


def _inside(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter, but a member it refuses (a link out of the folder) is left
    out rather than the whole stage lost."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


class Shared:
    """The shared folder: where a run folder outside it is mirrored, variant by variant."""

    def __init__(self, shared_dir: Path) -> None:
        self.root = Path(shared_dir).resolve()
        self.mirror = self.root / f".reprokit-ray-{uuid.uuid4().hex[:12]}"
        self.lock = threading.Lock()
        self.gates: dict[Path, threading.Lock] = {}  # one per variant folder
        self.before: dict[tuple[Path, str], dict[str, tuple[int, int]]] = {}  # the mirror's

    def send(self, job: StageJob, reads: list[Path]) -> StageJob:
        """The job as the worker sees it: its folder in the shared folder, holding what the
        stage reads (copied unless there already: a mirror lives as long as the run)."""
        if job.folder.resolve().is_relative_to(self.root):
            return job  # in place: nothing to copy
        there = self.mirror / job.folder.name
        with self._gate(job.folder):
            for path in reads:
                target = there / path.relative_to(job.folder)
                if not target.exists():
                    _copy(path, target, links=False)
            shutil.rmtree(stage_path(there, job.stage.name), ignore_errors=True)
            self.before[there, job.stage.name] = snapshot(there)
        return replace(job, folder=there)

    def bring_back(self, job: StageJob, there: Path, stages: set[str]) -> None:
        """What the stage made in the mirror into the run folder; not what other stages of
        the variant made there meanwhile (each brings back its own)."""
        if there == job.folder:
            return
        with self._gate(job.folder):  # no send copies into the mirror meanwhile
            before = self.before.pop((there, job.stage.name))
            shutil.rmtree(stage_path(job.folder, job.stage.name), ignore_errors=True)
            for made in made_files(there, before, job.stage.name, stages - {job.stage.name}):
                _copy(there / made, job.folder / made, links=True)

    def _gate(self, folder: Path) -> threading.Lock:
        with self.lock:
            return self.gates.setdefault(folder, threading.Lock())

    def close(self) -> None:
        shutil.rmtree(self.mirror, ignore_errors=True)


def _copy(source: Path, target: Path, links: bool) -> None:
    """A file or a folder; symlinks kept as links (``links``: a stage's own), else followed."""
    if source.is_dir() and not (links and source.is_symlink()):
        shutil.copytree(source, target, symlinks=links, dirs_exist_ok=True)
    elif source.exists() or source.is_symlink():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        shutil.copy2(source, target, follow_symlinks=not links)
