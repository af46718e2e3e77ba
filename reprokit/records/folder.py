"""The run folder's layout, spelled here and nowhere else (torch-free).

A run folder is the interface between generate, the runner, comparison, the reports and the
tools, and docs/contract.md describes it::

    RUN_DIR/summary.json                    the run's records
    RUN_DIR/<label>/repro.py                a variant's rendered script
    RUN_DIR/<label>/case.toml               its case, carried (merge judges it again from here)
    RUN_DIR/<label>/list-stages.<stream>.log  what ``repro.py --list-stages`` printed
    RUN_DIR/<label>/stages/<name>/          what a stage wrote: result.json, tensors.pt,
                                            graphs.hlo, stdout.log, stderr.log
    RUN_DIR/<label>/issues/index.json       a captured program's roots, each with its repro:
    RUN_DIR/<label>/issues/<slug>/repro.py  the script an issue carries inline (report)
    RUN_DIR/issues/<slug>.md                one issue per independent difference (report)

Every module that reads or writes one goes through :class:`RunFolder`,
:class:`VariantFolder` and :class:`StageFolder` (as pytest's ``Cache`` owns
``.pytest_cache``), and reads a stage's logs and result with the functions below.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reprokit.records.run import SUMMARY, StageResult

SCRIPT = "repro.py"  # a variant's rendered script, and a short repro's
CASE_FILE = "case.toml"  # the variant's case, beside its script: a run carries its verdict's inputs
STAGES = "stages"  # the stages' folders, one per stage; the script's ``--workdir``
RESULT = "result.json"  # a stage's last act: its metrics, tensors' descriptions, what XLA saw
TENSORS = "tensors.pt"  # what a stage saved to compare
HLO = "graphs.hlo"  # every graph torch_xla synced (``--dump-hlo``)
ISSUES = "issues"  # a variant's root repros; the run's issue files, one per root
ISSUES_INDEX = "index.json"  # the variant's root repros and what each printed run alone
REPRO_OUT = "repro.out"  # beside a repro.py run alone: the command, its output, its exit code
REDUCED = "tensors.json"  # beside tensors.pt: the recorded operations a run left out
WRAP_METRICS = "metrics.txt"  # `reprokit wrap`'s stage: torch_xla's metrics, at exit
WRAP_DEVICES = "devices.json"  # and the XLA devices the script saw
CACHED_RECORD = "record.json"  # a results cache entry's stage record, beside its files
CHILD_INPUT = "in.json"  # an offloaded work's input, in its working folder
CHILD_OUTPUT = "out.json"  # and its answer
WORKER_JOB = "job.json"  # an op worker's batch of tasks, in its working folder
WORKER_ANSWERS = "out.jsonl"  # and its answers, a JSON line per sample
WORKER_FEED_END = "end"  # in a fed worker's feed folder: no batch follows
WORKER_FEED = "feed"  # a fed worker's folder of batches, in its working folder
CACHED_STAGE = "stage"  # a results cache entry's stage folder, beside its record
RENDERED = "templates"  # the cache's folder of compiled templates, by render.py's digest
ALONE_FOLDER = "repro"  # a repro run alone: its own folder, holding nothing but what it reads
XLA_DUMP = "dump"  # XLA's --xla_dump_to folder, in a tool's scratch
RUN_LOCK = ".reprokit.lock"  # a run folder's lock: one run writes it at a time


def worker_batch(number: int) -> str:
    """The ``number``-th batch of tasks in a fed worker's feed folder."""
    return f"{number:06d}.json"


def issue_file(name: str) -> str:
    """One root's issue file in a report's issues/ folder."""
    return f"{name}.md"


LIST_STAGES = "--list-stages"  # the listing's name where a stage's would stand (its logs)
TAIL = 12  # lines of a failed stage's stderr kept in its record


@dataclass(frozen=True)
class StageFolder:
    """``<variant>/stages/<name>/``: what one stage wrote."""

    path: Path
    name: str

    @property
    def result(self) -> Path:
        return self.path / RESULT

    @property
    def tensors(self) -> Path:
        return self.path / TENSORS

    @property
    def hlo(self) -> Path:
        return self.path / HLO

    def log(self, stream: str = "stderr") -> Path:
        """Its log of ``stream`` (stdout or stderr), capped and redacted."""
        return self.path / f"{stream}.log"

    def read_result(self) -> dict[str, Any] | None:
        """Its result.json, or None when it has none (or half of one)."""
        try:
            data = json.loads(self.result.read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class VariantFolder:
    """``RUN_DIR/<label>/``: a variant's script, its case and its stages' folders."""

    path: Path

    @property
    def script(self) -> Path:
        return self.path / SCRIPT

    @property
    def case(self) -> Path:
        return self.path / CASE_FILE

    @property
    def stages(self) -> Path:
        return self.path / STAGES

    def stage(self, name: str) -> StageFolder:
        return StageFolder(self.stages / name, name)

    def stage_names(self) -> list[str]:
        """The stages that have a folder here, sorted."""
        found = self.stages.iterdir() if self.stages.is_dir() else ()
        return sorted(p.name for p in found if p.is_dir())

    def log(self, stage: str, stream: str = "stderr") -> Path:
        """A stage's (or the listing's, :data:`LIST_STAGES`) log of ``stream``."""
        if stage == LIST_STAGES:
            return self.path / f"list-stages.{stream}.log"
        return self.stage(stage).log(stream)

    def read_script(self) -> str:
        return self.script.read_text("utf-8", "replace")


@dataclass(frozen=True)
class RunFolder:
    """``RUN_DIR``: summary.json and one folder per variant."""

    path: Path

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    def variant(self, label: str) -> VariantFolder:
        return VariantFolder(self.path / label)


def stage_path(folder: Path, name: str) -> Path:
    """``folder/stages/<name>``: the folder of stage ``name`` of the variant in ``folder``."""
    return VariantFolder(Path(folder)).stage(name).path


def child_logs(folder: Path) -> list[Path]:
    """The stdout and stderr logs of a child whose working folder is ``folder`` (an offloaded
    work's, an op worker's), named as a stage's."""
    return [StageFolder(folder, folder.name).log(stream) for stream in ("stdout", "stderr")]


def log_path(folder: Path, stage: str, stream: str = "stderr") -> Path:
    """Where a stage's (or the listing's) log of ``stream`` lies in its variant folder."""
    return VariantFolder(Path(folder)).log(stage, stream)


def last_words(result: StageResult, folder: Path) -> StageResult:
    """A failed stage's record with its exception and the tail of its stderr."""
    if not result.failed:
        return result
    tail = log_tail(log_path(folder, result.name))
    return replace(result, error=_exception(tail), stderr_tail=tuple(tail[-TAIL:]))


def log_tail(log: Path, size: int = 16384) -> list[str]:
    """The last lines of a (capped, redacted) log."""
    try:
        with log.open("rb") as file:
            start = max(0, log.stat().st_size - size)
            file.seek(start)
            lines = file.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    return lines[1:] if start else lines  # the first line read may be cut


def _exception(lines: list[str]) -> str | None:
    """The exception a Python traceback ends with (``AssertionError: ...``), else None; lines
    that torch.distributed prefixes with ``[rank0]:`` are read without it."""
    lines = [re.sub(r"^\[rank\d+\]:\s?", "", line) for line in lines]
    found = None
    for index, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            after = (ln for ln in lines[index + 1 :] if ln and not ln[0].isspace())
            found = next(after, found)
    return found[:300] if found else None
