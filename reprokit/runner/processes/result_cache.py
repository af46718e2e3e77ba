"""The results cache: a stage whose inputs did not change is not run again.

A stage's result (its record and the files it wrote) is reused when all of these are the
same: the variant's files (the rendered script and the files the case brings), the stage
(name, backend, devices, needs), the variables that steer torch, XLA and Python in its
environment, the Python and the installed versions of torch, torch_xla and friends, the XLA
device kind, and the bytes every stage it needs left behind (so a need that was reused, or
re-run with the same result, lets it be reused too; one that changed makes it run).

A stage writes under its own folder, ``stages/<name>/``: that folder is what is kept and
brought back. A variant whose stages write beside their folders (``stages/dcp``) has none of
its stages kept, with a warning saying what to change: reused without them, a stage that needs
those files would fail, or read a stale copy.

Only endings that the inputs decide are kept: ok, error, and a crash by the stage's own
signal. A timeout, an interrupt, or a SIGKILL from outside (the OOM killer) say more about
the machine than about the repro: those stages run again.

An executor like any other (it wraps one), so that the scheduler knows nothing of it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from reprokit.environment.machine import versions
from reprokit.environment.variables import steering
from reprokit.errors import ReprokitWarning
from reprokit.infra.caching import Store, content_digest, read_json
from reprokit.records import Stage, StageResult, Status, write_json
from reprokit.records.folder import (
    CACHED_RECORD,
    CACHED_STAGE,
    CASE_FILE,
    HLO,
    RESULT,
    STAGES,
    VariantFolder,
    stage_path,
)
from reprokit.runner.options import Options
from reprokit.runner.processes.stage import Executor, StageJob, capabilities_of

UNSTABLE = {RESULT, HLO}  # timings, addresses: not part of what a stage made
LARGEST = 1 << 30  # bytes: a stage folder larger than this is not kept


class CachingExecutor:
    """Reuses a stage's result from an earlier run when nothing it depends on changed."""

    def __init__(self, inner: Executor, options: Options, run_dir: Path) -> None:
        self.inner, self.options, self.run_dir = inner, options, run_dir
        self.capabilities = capabilities_of(inner)  # it runs nothing itself: the inner's
        self.store = Store("results")  # an entry: KEY/record.json and KEY/stage/
        self.warned: set[Path] = set()
        self.versions = versions()  # read once a run (package metadata: ms a stage otherwise)

    def list_stages(self, folder: Path, stop: threading.Event) -> tuple[StageResult, list[Stage]]:
        return self.inner.list_stages(folder, stop)

    def close(self) -> None:
        self.inner.close()

    def waits(self, job: StageJob) -> bool:
        """As the inner executor says (a stage that will be reused waits for nothing, but
        knowing that takes its key: hashing files; deferred, it is only taken a little later)."""
        waits = getattr(self.inner, "waits", None)
        return bool(waits and waits(job))

    @property
    def offload(self) -> Callable[[str, Any, threading.Event], Any] | None:
        """The inner executor's way to do torch's work out of this process, if it has one."""
        return getattr(self.inner, "offload", None)

    def run_stage(self, job: StageJob, stop: threading.Event) -> StageResult:
        key = self.key(job)
        if (reused := self._get(key, job)) is not None:
            return reused
        result = self.inner.run_stage(job, stop)
        if _keeps(result) and not self._writes_elsewhere(job):
            self._put(key, job, result)
        return result

    def key(self, job: StageJob) -> str:
        """What the stage's result depends on, hashed."""
        stage, options = job.stage, self.options
        env = job.env(options.xla_device)
        parts = {
            "files": _digest(job.folder, skip=(STAGES, CASE_FILE)),  # the script says it all
            "stage": [stage.name, stage.backend, stage.devices, list(stage.needs)],
            **({"localise": True} if job.localise else {}),  # (older keys unchanged)
            "env": steering(env),
            "python": [job.python or options.python, sys.version],
            "versions": self.versions,
            "device": options.xla_device,
            "needs": {n: _digest(stage_path(job.folder, n)) for n in sorted(stage.needs)},
        }
        if options.dump_hlo and stage.backend.startswith("xla"):  # a stage run without it
            parts["dump_hlo"] = True  # left no graphs.hlo to bring back (other keys unchanged)
        return Store.key(parts)

    def _writes_elsewhere(self, job: StageJob) -> bool:
        """Whether the variant's stages wrote in ``stages/`` beside their own folders (warned
        once per variant)."""
        folder, names = job.folder, {stage.name for stage in job.dag}
        stages = VariantFolder(folder).stages
        if not names or not stages.is_dir():  # its DAG not given: nothing to tell them by
            return False
        stray = sorted(p.name for p in stages.iterdir() if p.name not in names)
        if stray and folder not in self.warned:
            self.warned.add(folder)
            warnings.warn(
                f"{folder}: its stages wrote {', '.join(f'stages/{s}' for s in stray)}, outside "
                "their own folders: the results cache keeps none of its stages, as it could not "
                "bring those files back. In the template, write under workdir / <stage name>.",
                ReprokitWarning,
                stacklevel=2,
            )
        return bool(stray)

    def _get(self, key: str, job: StageJob) -> StageResult | None:
        entry = self.store.get_folder(key)
        if entry is None:
            return None
        data = read_json(entry / CACHED_RECORD)
        try:
            result = StageResult.from_json(data["result"])
        except (ValueError, KeyError, TypeError, AttributeError):  # none, or another version's
            return None
        target = stage_path(job.folder, job.stage.name)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(entry / CACHED_STAGE, target, symlinks=True)
        return replace(result, reused=data.get("run"))

    def _put(self, key: str, job: StageJob, result: StageResult) -> None:
        """Kept atomically: a whole entry or none, whichever run writes it first."""
        source = stage_path(job.folder, job.stage.name)
        if _size(source) > LARGEST:
            return
        run = str(self.run_dir.resolve())

        def fill(entry: Path) -> None:
            shutil.copytree(source, entry / CACHED_STAGE, symlinks=True)
            write_json(entry / CACHED_RECORD, {"result": result.to_json(), "run": run})

        self.store.put_folder(key, fill)  # None: another run kept it first, or the disk is full


def _keeps(result: StageResult) -> bool:
    if result.status is Status.CRASH:
        return result.signal != "SIGKILL"  # SIGKILL comes from outside: the OOM killer, a user
    if result.status is Status.ERROR and result.returncode is None:
        return False  # it never exited by itself: what ran it failed (a Ray task)
    return result.status in (Status.OK, Status.ERROR)


def _digest(folder: Path, skip: tuple[str, ...] = ()) -> str:
    """The files under ``folder`` (names and bytes; logs and UNSTABLE files left out), its
    top-level entries named in ``skip`` never entered: another stage of the variant may be
    making or removing its folder in stages/ meanwhile (a walk into it raced that)."""
    digest = hashlib.sha256()
    found = []
    for root, dirs, files in os.walk(folder):  # a folder gone mid-walk is passed over
        here = Path(root)
        if here == folder:
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        found += [here / name for name in files]
    for path in sorted(found):
        if path.suffix == ".log" or path.name in UNSTABLE or path.is_symlink():
            continue
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + content_digest(path))
    return digest.hexdigest()


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
