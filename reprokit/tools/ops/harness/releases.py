"""The op sweep in several environments (``reprokit ops --releases 2.8..2.9``, or ``--env``
more than once), merged into one op x release table: is a divergence a regression, and since
which release; was it fixed?

Each environment's sweep is the ordinary one (here, or on a Ray cluster: the same workers,
started with that environment's python, reprokit imported from its source), written to its own
folder ``DIR/<name>``; its tasks are cached under its own torch's and torch_xla's versions.
The sweeps run one after another, each with all the slots (on a cluster, one connection for
all of them); ``DIR/ops_releases.json`` and its report.md and report.html are written after
each, so an interrupt keeps the table of what finished.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from reprokit.environment.releases import installed_here
from reprokit.records import EnvSpec
from reprokit.records.ops import OpsSweep
from reprokit.records.ops_releases import (
    AGREES,
    DIFFERS,
    NOT_SWEPT,
    OpRow,
    OpsReleases,
    ReleaseCell,
    ReleaseSweep,
    release_folder,
    write_ops_releases,
)
from reprokit.reports.ops_releases import write_reports
from reprokit.runner.options import Options
from reprokit.tools.ops.harness.sweep import OpsInterrupted, sweep_ops

NEEDED = "expecttest"  # torch's OpInfo database imports it; no release's torch requires it


class InterruptedReleases(Exception):
    """Stopped; ``table`` holds the releases that finished (also written to the folder)."""

    def __init__(self, table: OpsReleases) -> None:
        super().__init__("interrupted")
        self.table = table


def with_needs(spec: EnvSpec) -> EnvSpec:
    """``spec`` with what the sweep's workers import besides torch and torch_xla (expecttest,
    at this environment's version where it has one)."""
    from packaging.requirements import Requirement

    if any(Requirement(text).name == NEEDED for text in spec.requirements):
        return spec
    try:
        pinned = f"{NEEDED}=={importlib.metadata.version(NEEDED)}"
    except importlib.metadata.PackageNotFoundError:
        pinned = NEEDED
    return replace(spec, requirements=(*spec.requirements, pinned))


def python_of(spec: EnvSpec, announce: Callable[[str], None] | None = None) -> str:
    """The interpreter for ``spec``: this one where it has every requirement at the version
    asked (the project's own release: no second copy of torch), else its uv environment."""
    if installed_here(spec):
        return sys.executable
    from reprokit.environment.uv import env_python

    return str(env_python(spec, announce=announce))


def sweep_releases(
    names: list[str],
    envs: list[EnvSpec],
    *,
    out_dir: Path,
    options: Options,
    argv: list[str] | None = None,
    announce: Callable[[str], None] | None = None,
    **sweep: Any,
) -> OpsReleases:
    """``sweep_ops(names, **sweep)`` in each of ``envs`` (``DIR/<name>``), merged into
    ``DIR/ops_releases.json``, report.md and report.html. Raises
    :class:`InterruptedReleases` with what finished."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done: list[tuple[EnvSpec, OpsSweep]] = []
    with _joined(options):
        for spec in map(with_needs, envs):
            python = python_of(spec, announce)
            if announce:
                announce(f"ops: release {spec.name} ({python})")
            try:
                swept = sweep_ops(
                    names,
                    out_dir=release_folder(out_dir, spec.name),
                    options=replace(options, python=python),
                    argv=argv,
                    announce=announce,
                    **sweep,
                )
            except OpsInterrupted as stopped:
                done.append((spec, stopped.sweep))
                table = _written(out_dir, merge(done, argv or [], interrupted=True))
                raise InterruptedReleases(table) from None
            done.append((spec, swept))
            table = _written(out_dir, merge(done, argv or []))
    return table


@contextlib.contextmanager
def _joined(options: Options) -> Any:
    """On a cluster, one connection for every release's sweep (each pool finds it made)."""
    if options.executor != "ray":
        yield
        return
    from reprokit.runner.processes.ray_actors import connected

    with connected(options):
        yield


def _written(out_dir: Path, table: OpsReleases) -> OpsReleases:
    write_ops_releases(out_dir, table)
    write_reports(out_dir, table)
    return table


def merge(
    done: list[tuple[EnvSpec, OpsSweep]], argv: list[str], *, interrupted: bool = False
) -> OpsReleases:
    """The op x release table of the sweeps ``done``: per OpInfo and release, its groups
    there, or that every sample agreed, or that it was not swept (not in that torch's
    database, none of the dtypes, not run: random)."""
    releases = tuple(_release(spec, swept) for spec, swept in done)
    order: dict[tuple[str, str], None] = {}
    for _, swept in done:
        order |= {(o["op"], o["variant"]): None for o in swept.ops}
    rows = []
    for op, variant in order:
        cells = {spec.name: _cell(swept, op, variant) for spec, swept in done}
        rows.append(OpRow(op, variant, cells))
    return OpsReleases(argv, releases, tuple(rows), interrupted)


def _release(spec: EnvSpec, swept: OpsSweep) -> ReleaseSweep:
    return ReleaseSweep(
        spec.name,
        tuple(spec.requirements),
        dict(swept.versions),
        len(swept.groups),
        len(swept.records),
        swept.seconds,
        swept.interrupted,
    )


def _cell(swept: OpsSweep, op: str, variant: str) -> ReleaseCell:
    groups = tuple(
        {
            "id": g.id,
            "kind": g.kind,
            "passed": g.passed,
            "dtypes": list(g.dtypes),
            "repro": g.repro,
            "known": g.known,
        }
        for g in swept.groups
        if (g.op, g.variant) == (op, variant)
    )
    if groups:
        return ReleaseCell(DIFFERS, groups)
    judged = [o for o in swept.ops if (o["op"], o["variant"]) == (op, variant) and o["counts"]]
    return ReleaseCell(AGREES if judged else NOT_SWEPT)
