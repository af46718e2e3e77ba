"""Where the repros lie in what the other tools write, and where their answers go back.

A standalone repro file; a minimize folder (its ``repro.py``); a run folder after ``reprokit
report`` (each root's repro, ``<label>/issues/<slug>/repro.py``, as ``issues/index.json``
lists them); an op sweep's folder (each group's repro, as ``ops.json`` names it). Each found
:class:`Repro` knows the record its answer belongs to: ops.json's group, summary.json's roots.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from reprokit.errors import ReprokitError
from reprokit.infra.caching import file_digest
from reprokit.records import SUMMARY, VariantResult, read_summary, write_summary
from reprokit.records.folder import ISSUES, SCRIPT, RunFolder
from reprokit.records.issues import read_index, write_index
from reprokit.records.minimize import SHORT_INPUTS
from reprokit.records.ops import OPS, read_ops, write_ops
from reprokit.tools.root_repro import _digest as summary_digest  # what root repros are made for

# The short repro's inputs, beside it only when neither literals nor random draws showed it
INPUTS_FILE = SHORT_INPUTS
HINT = (
    "Give a repro file (exit 1: shows, 0: does not), a minimize folder, a run folder that "
    "`reprokit report` has written root repros into, or a `reprokit ops` folder."
)


@dataclass(frozen=True)
class Repro:
    """One standalone script to run on each release, and the record its answer goes to."""

    name: str  # in bisect.json: repro.py, an op group's id, <label>/issues/<slug>
    script: Path
    group: str | None = None  # the op sweep's group
    label: str | None = None  # the run's variant, with ``roots`` its recorded results
    roots: tuple[str, ...] = ()

    @property
    def inputs(self) -> Path | None:
        """The inputs.pt beside it that a short repro reads when nothing else showed it."""
        found = self.script.parent / INPUTS_FILE
        return found if found.is_file() and INPUTS_FILE in self.text() else None

    def text(self) -> str:
        return self.script.read_text("utf-8", "replace")

    def digest(self) -> str:
        """Of its text and the inputs it reads: what decides what it prints."""
        inputs = file_digest(self.inputs) if self.inputs else None
        return hashlib.sha256(f"{self.text()}\0{inputs}".encode()).hexdigest()

    def write(self, folder: Path) -> None:
        """Into an empty folder, as a maintainer saves it: repro.py (and inputs.pt)."""
        (folder / SCRIPT).write_text(self.text(), encoding="utf-8")
        if self.inputs:
            shutil.copyfile(self.inputs, folder / INPUTS_FILE)


def find_repros(path: Path) -> list[Repro]:
    """The repros in ``path``; a ReprokitError when it holds none."""
    path = Path(path)
    if path.is_file():
        if path.suffix != ".py":
            raise ReprokitError("not a repro: a Python file is wanted", path, hint=HINT)
        return [Repro(path.name, path)]
    if not path.is_dir():
        raise ReprokitError("no such file or folder", path, hint=HINT)
    if (path / OPS).is_file():
        found = _op_groups(path)
    elif (path / SCRIPT).is_file():  # a minimize folder (a run folder's scripts are deeper)
        found = [Repro(SCRIPT, path / SCRIPT)]
    elif (path / SUMMARY).is_file():
        found = _run_roots(path)
    else:
        raise ReprokitError(f"no {SCRIPT}, {OPS} or {SUMMARY} here", path, hint=HINT)
    if not found:
        raise ReprokitError("holds no repro to run", path, hint=_why_none(path))
    return found


def _op_groups(folder: Path) -> list[Repro]:
    return [Repro(g.id, folder / g.repro, group=g.id) for g in read_ops(folder).groups if g.repro]


def _run_roots(folder: Path) -> list[Repro]:
    found = []
    for variant in read_summary(folder).variants:
        where = RunFolder(folder).variant(variant.label).path
        for root in read_index(where) or ():
            script = root.script(where)
            if script.is_file():
                name = f"{variant.label}/{ISSUES}/{root.slug}"
                found.append(Repro(name, script, label=variant.label, roots=root.roots))
    return found


def _why_none(folder: Path) -> str:
    if (folder / OPS).is_file():
        return "The sweep's groups have no repro file (ops.json: why_no_repro says why)."
    return (
        f"A run's root repros are written by `reprokit report {folder}` (a captured "
        "program's run whose outputs differ); run it first."
    )


def record(repros: list[Repro], since: Mapping[str, str], folder: Path) -> None:
    """Write each answer into its record in ``folder``: ops.json's groups, summary.json's
    roots (``since``); a repro file or a minimize folder has only bisect.json."""
    groups = {r.group: since[r.name] for r in repros if r.group and r.name in since}
    if groups:
        sweep = read_ops(folder)
        marked = tuple(replace(g, since=groups.get(g.id, g.since)) for g in sweep.groups)
        write_ops(folder, replace(sweep, groups=marked))
    roots = {(r.label, t): since[r.name] for r in repros if r.label and r.name in since
             for t in r.roots}  # fmt: skip
    if roots:
        summary, made_for = read_summary(folder), summary_digest(folder)
        variants = [_with_since(v, roots) for v in summary.variants]
        write_summary(summary.with_variants(variants), folder)
        for variant in summary.variants:  # the root repros still hold for this summary.json
            where = RunFolder(folder).variant(variant.label).path
            if (kept := read_index(where, made_for)) is not None:
                write_index(where, summary_digest(folder), kept)


def _with_since(variant: VariantResult, since: Mapping[tuple[str, str], str]) -> VariantResult:
    """The variant with ``since`` on each of its roots that a bisected repro covers."""
    mine = {tensor: said for (label, tensor), said in since.items() if label == variant.label}
    marked = (replace(r, since=mine.get(r.tensor, r.since)) for r in variant.roots)
    return replace(variant, roots=tuple(marked))
