"""Each root of a captured program that differs, as the repro its issue carries inline.

``reprokit report`` calls :func:`write_root_repros` before it writes anything: for each
variant of a captured program that mismatches, each root family's repro is made and run alone
(:mod:`reprokit.tools.root_repro.make`, which imports torch), and kept in the variant's
``issues/`` folder with what it printed (reprokit.records.issues). A run of nothing captured, or
one already done for this summary.json, costs no torch import.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from reprokit.comparison.roots import roots
from reprokit.records import Outcome, VariantResult, read_summary
from reprokit.records.folder import RunFolder
from reprokit.records.issues import read_index, write_index
from reprokit.runner.options import Options

__all__ = ["write_root_repros"]


def write_root_repros(run_dir: Path, options: Options | None = None) -> None:
    """For each captured program of the run that differs, each root family's repro, run alone;
    kept in ``<label>/issues/`` (made again only for another summary.json). A folder with no
    readable summary.json (an op sweep's, a broken one) is the report's to judge."""
    made_for = _digest(Path(run_dir))
    try:
        summary = read_summary(Path(run_dir))
    except (OSError, ValueError, KeyError, TypeError):
        return
    if summary.minimized is not None:  # a minimize folder: its short repro is the issue's
        return
    for variant in summary.variants:
        folder = RunFolder(Path(run_dir)).variant(variant.label).path
        if not _wanted(variant) or read_index(folder, made_for) is not None:
            continue
        from reprokit.tools.root_repro.make import variant_repros  # torch

        repros = variant_repros(variant, folder, options or Options())
        write_index(folder, made_for, repros)


def _wanted(variant: VariantResult) -> bool:
    """A captured program (its ``program`` parameter) whose outputs or operations differ, not
    by a test-only fault (``perturb_node``: XLA's result changed by the harness, no bug)."""
    program = variant.captured and variant.outcome is Outcome.MISMATCH
    return program and not variant.variant.get("perturb_node") and bool(roots(variant))


def _digest(run_dir: Path) -> str:
    summary = RunFolder(run_dir).summary
    return hashlib.sha256(summary.read_bytes()).hexdigest()[:16] if summary.is_file() else ""
