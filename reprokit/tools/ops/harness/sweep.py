"""The op sweep's harness (``reprokit ops``): what it was asked, the tasks and their results
cache, the workers driven (pool.py here, cluster.py on Ray), the groups, their stale graphs,
triggers and repros run alone, ops.json and the report.

The harness stays torch-free: the OpInfos are listed, and every sample run and judged, in the
workers (pool.py, ../worker/); here are the results cache (one entry per task: an op in a dtype,
forward or backward, OpInfo's or the edge samples), the groups and the report.
"""

from __future__ import annotations

import functools
import importlib.metadata
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import reprokit.tools.ops.harness.confirm as confirm
import reprokit.tools.ops.harness.groups as grouping
import reprokit.tools.ops.harness.sharded as sharded
import reprokit.tools.ops.harness.stale as stale
from reprokit.errors import ReprokitError
from reprokit.infra.caching import Store, file_digest
from reprokit.records.ops import REPROS, WORKERS_SCRATCH, Group, OpsSweep, Sample, write_ops
from reprokit.reports.ops import write_report
from reprokit.runner.options import Options
from reprokit.tools.ops.harness.pool import Asking, Pool, Task, Workers
from reprokit.tools.ops.mesh import CONTROL
from reprokit.tools.ops.mesh import specs as sharding_specs

DTYPES = ("float32", "bfloat16", "float16")
ALL_DTYPES = ("float32", "bfloat16", "float16", "float64", "complex64", "int32", "int64", "bool")
BACKENDS = ("xla",)  # torchax: not in torch_xla's environment (docs/ops.md)
SPMD = "xla_spmd"  # --mesh's backend: torch_xla's SPMD mode on the mesh's devices
SAMPLE_TIMEOUT = 30.0  # seconds one sample may take before its worker is killed: a hang
OPS = Path(__file__).parents[1]
# What a task's verdicts depend on besides torch's and torch_xla's releases: the worker's side
# of the package (precision.py tells a half type's rounding from a bug; reference.py, forms.py
# and dtypes.py are recall, docs/ops.md), the trigger it chooses new samples by, and the
# comparison of tensors it judges with
SOURCES = [
    *sorted((OPS / "worker").glob("*.py")),
    OPS / "trigger.py",
    OPS / "mesh.py",
    OPS.parent.parent / "comparison" / "tensors.py",
]
WITNESS = "ops-witness"  # the cache's folder of the witnesses' large tensors


class OpsInterrupted(Exception):
    """The sweep was stopped; ``sweep`` holds what finished (also written to the folder)."""

    def __init__(self, sweep: OpsSweep) -> None:
        super().__init__("interrupted")
        self.sweep = sweep


@dataclass(frozen=True)
class Progress:
    tasks_done: int
    tasks: int
    samples: int
    seconds: float

    def eta(self) -> float | None:
        if not self.tasks_done or self.tasks_done >= self.tasks:
            return None
        return self.seconds / self.tasks_done * (self.tasks - self.tasks_done)


@dataclass(frozen=True)
class _Asked:
    """What one sweep was asked for, and where it writes."""

    out_dir: Path
    dtypes: tuple[str, ...]
    backends: tuple[str, ...]
    grad: bool
    edge: bool
    options: Options
    versions: dict[str, str]
    argv: list[str]
    begun: float
    announce: Callable[[str], None] | None = None
    inplace: bool = False
    mesh: tuple[int, ...] = ()  # --mesh: every sample sharded on it (worker/sharding.py)
    mesh_samples: int = 0  # --mesh-samples: a sharded task's first samples only (0: all)
    swept: list[float] = field(default_factory=list)  # when every sample was judged
    cache: bool = True  # the results cache read (it is always written)
    timed: dict[str, float] = field(default_factory=dict)  # seconds of the steps after
    stale_graph: dict[str, Any] = field(default_factory=dict)  # pairs checked, found (stale.py)
    # The digests of SOURCES, read once as the sweep begins: every cache key of one sweep
    # names the same worker code, even if a file changes while it runs
    code: list[str | None] = field(default_factory=lambda: [file_digest(p) for p in SOURCES])

    def asking(self, pool: Workers | None) -> Asking:
        """How stale.py and confirm.py ask ``pool``'s workers and cache their answers."""
        return Asking(pool, self.options.jobs, self.versions, self.code, self.cache)


@dataclass(frozen=True)
class _Judged:
    """What the samples gave: the OpInfos listed, every sample's record (filled as tasks end:
    an interrupt keeps those), how many tasks there were and how many came from the cache."""

    listing: dict[str, Any]
    records: list[Sample]
    tasks: int
    cached: int


def sweep_ops(
    names: list[str],
    *,
    out_dir: Path,
    dtypes: tuple[str, ...] = DTYPES,
    grad: bool = False,
    edge: bool = False,
    inplace: bool = False,
    mesh: tuple[int, ...] = (),
    mesh_samples: int = 0,
    backends: tuple[str, ...] = BACKENDS,
    options: Options | None = None,
    cache: bool = True,
    timeout: float = SAMPLE_TIMEOUT,
    argv: list[str] | None = None,
    progress: Callable[[Progress], None] | None = None,
    announce: Callable[[str], None] | None = None,
) -> OpsSweep:
    """Sweep the OpInfos ``names`` (all of them when empty) into ``out_dir``: ops.json,
    report.md and a repro per group (``inplace``: each op's in-place variant too, where it has
    one, on the same samples; ``mesh``: each forward sample under every sharding of mesh.py on
    that mesh of devices, against itself unsharded). Raises :class:`OpsInterrupted` (with
    what finished) on KeyboardInterrupt, ReprokitError on bad input."""
    _swept_backends(backends)
    options = options or Options()
    asked = _Asked(
        Path(out_dir), tuple(dtypes), tuple(backends), grad, edge, options,
        _versions(options.python), list(argv or []), time.monotonic(), announce,
        inplace=inplace, mesh=tuple(mesh), mesh_samples=mesh_samples, cache=cache,
    )  # fmt: skip
    asked.out_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    scratch = asked.out_dir / WORKERS_SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    pool = _pool(asked.options, scratch, Store(WITNESS).folder, timeout=timeout, stop=stop)
    try:
        listing = _listing(pool, names, asked, cache=cache)
        tasks = _tasks(listing, asked)
        records: list[Sample] = []
        pending = _from_cache(tasks, asked, records)
        judged = _Judged(listing, records, len(tasks), len(tasks) - len(pending))
        try:
            _judge(pool, pending, len(tasks), asked, records, progress)
            asked.swept.append(time.monotonic())
        except KeyboardInterrupt:
            stop.set()
            pool.close()
            raise OpsInterrupted(_finish(asked, judged, interrupted=True)) from None
        return _finish(asked, judged, interrupted=False, pool=pool)
    finally:
        pool.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _from_cache(tasks: list[Task], asked: _Asked, records: list[Sample]) -> list[Task]:
    """The tasks the results cache does not hold (all without ``asked.cache``); the records
    of those it holds added to ``records``."""
    store = Store("ops")
    pending = []
    for task in tasks:
        hit = store.get_json(_key(task, asked)) if asked.cache else None
        if hit is None:
            pending.append(task)
        else:
            records += _stamped(task, hit)
    return pending


def _judge(
    pool: Workers,
    pending: list[Task],
    total: int,
    asked: _Asked,
    records: list[Sample],
    progress: Callable[[Progress], None] | None,
) -> None:
    """``pending`` judged by ``pool``'s workers, each task's records stored in the results
    cache and added to ``records`` as it ends; progress said as tasks end and every few
    seconds."""
    store = Store("ops")
    counted = [total - len(pending)]

    def said(samples: int) -> None:
        if progress:
            seconds = time.monotonic() - asked.begun
            progress(Progress(counted[0], total, samples, seconds))

    def finished(task: Task, found: list[dict[str, Any]]) -> None:
        store.put_json(_key(task, asked), found)
        records.extend(_stamped(task, found))
        counted[0] += 1
        said(len(records))

    said(len(records))
    pool.run(pending, finished, lambda: said(len(records) + pool.in_flight()))


def _swept_backends(backends: tuple[str, ...]) -> None:
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise ReprokitError(f"backend {unknown[0]!r} is not swept", hint=_TORCHAX)


_TORCHAX = (
    "Only xla is swept: torchax needs JAX, which is not in torch_xla's environment (torch_xla "
    "2.9 bundles torchax 0.0.6 and no jax); see docs/ops.md."
)


def _pool(options: Options, scratch: Path, witness: Path, **how: Any) -> Workers:
    """The sweep's workers: here, or on a Ray cluster (``--executor ray``: cluster.py)."""
    if options.executor == "ray":  # imported only then: Ray is an optional extra
        from reprokit.tools.ops.harness.cluster import RayPool

        return RayPool(options, scratch, witness, **how)
    return Pool(options, scratch, witness, **how)


def _versions(python: str) -> dict[str, str]:
    """torch's, torch_xla's and expecttest's versions in the environment of ``python`` (the
    workers'), read from its installed metadata: a release's environment keys its own
    results in the cache."""
    found = {}
    here = python == sys.executable
    path = (
        None
        if here
        else [str(p) for p in Path(python).parent.parent.glob("lib/python*/*-packages")]
    )
    for name in ("torch", "torch_xla", "expecttest"):
        try:
            if here:
                found[name] = importlib.metadata.version(name)
            else:
                found[name] = next(importlib.metadata.distributions(name=name, path=path)).version
        except (importlib.metadata.PackageNotFoundError, StopIteration):
            found[name] = "missing"
    if found["expecttest"] == "missing":
        raise ReprokitError(
            "expecttest is not installed: torch's OpInfo database needs it",
            hint="pip install expecttest (reprokit's `test` extra has it)",
        )
    return found


def _key(task: Task, asked: _Asked) -> str:
    return Store.key(task.to_json(), asked.versions, asked.code)


def _listing(pool: Workers, names: list[str], asked: _Asked, *, cache: bool) -> dict[str, Any]:
    """The OpInfos asked for, listed by a worker (cached: the list of an unchanged torch)."""
    request = {"names": list(names), "dtypes": list(asked.dtypes), "grad": asked.grad}
    store = Store("ops-listing")
    key = store.key(request, asked.versions, asked.code)
    found = store.get_json(key) if cache else None
    if found is None:
        found = pool.listing(request)
        store.put_json(key, found)
    if found["unknown"]:
        raise ReprokitError(
            f"no OpInfo named {', '.join(map(repr, found['unknown']))}",
            hint="Give OpInfo names (nn.functional.softplus, linalg.vector_norm), aten's "
            "(aten.linalg_vector_norm.default) or an operator's (__rshift__); "
            "`reprokit ops --all` sweeps every one.",
        )
    for name, read in found.get("read", {}).items():  # a torch, aten or dunder name, said back
        how = "its operator form swept beside it" if read["as"] == "operator" else "aten's name"
        if asked.announce:
            asked.announce(f"ops: {name} is OpInfo {', '.join(read['ops'])} ({how})")
    return found


def _tasks(listing: dict[str, Any], asked: _Asked) -> list[Task]:
    """Each op that is run x backend x pass x dtype x sample set (OpInfo's, the edge values')."""
    tasks = []
    for entry in listing["ops"]:
        if entry["skip"]:
            continue
        passes = [(False, False, entry["dtypes"])]
        passes += [(True, False, entry["grad_dtypes"])] if asked.grad else []
        if asked.inplace and entry.get("inplace") is not None:  # "": one torch gives no name
            passes.append((False, True, entry["dtypes"]))
        for backend in asked.backends:
            for backward, inplace, dtypes in passes:
                for dtype in dtypes:
                    for edge in (False, True) if asked.edge else (False,):
                        task = Task(entry["op"], entry["variant"], dtype, backend, backward, edge)
                        tasks.append(replace(task, inplace=inplace))
    return _sharded(tasks, asked.mesh, asked.mesh_samples) if asked.mesh else tasks


def _sharded(tasks: list[Task], mesh: tuple[int, ...], limit: int) -> list[Task]:
    """--mesh: each task (forward, and gradient with --grad, in-place with --inplace) once per
    sharding spec, on SPMD, its first ``limit`` samples (0: all)."""
    return [replace(t, backend=SPMD, shard=spec, mesh=mesh, limit=limit)
            for t in tasks for spec in sharding_specs(mesh)]  # fmt: skip


def _stamped(task: Task, found: list[dict[str, Any]]) -> list[Sample]:
    """A task's answers (a worker's, or the cache's) as its samples."""
    stamp = task.to_json()
    return [Sample.stamped(stamp, r) for r in found]


def _finish(
    asked: _Asked, judged: _Judged, *, interrupted: bool, pool: Workers | None = None
) -> OpsSweep:
    """Groups with their triggers (checked on new samples by ``pool``'s workers unless
    interrupted), their repros (run alone unless interrupted), ops.json and report.md."""
    out_dir, witness, listing = asked.out_dir, Store(WITNESS).folder, judged.listing
    records = _stale_graphs(asked, _unsharded_deaths(judged.records), None if interrupted else pool)
    judged = replace(judged, records=records)
    found = grouping.build(records)
    found = _triggers(asked, found, records, pool)
    codes = _codes(records, found)
    calls = {(e["op"], e["variant"]): e["call"] for e in listing["ops"]}
    calls |= {(e["op"], e["variant"], "inplace"): e.get("inplace") or None for e in listing["ops"]}
    for e in listing["ops"]:  # the operator forms' (forms.py): operator.rshift, operator.irshift
        for key, name in (((), e.get("operator")), (("inplace",), e.get("inplace_operator"))):
            calls[(e["op"], e["variant"], *key, "operator")] = name and f"operator.{name}"
    for old in out_dir.glob(REPROS):
        old.unlink()
    found = grouping.write_repros(found, codes, calls, out_dir, witness)
    summed = functools.partial(_sweep, asked, judged)
    sweep = summed(found, interrupted=interrupted)
    write_ops(out_dir, sweep)  # kept should the runs alone below be interrupted
    write_report(out_dir, sweep)
    if interrupted:
        return sweep
    if asked.announce:
        written = sum(g.repro is not None for g in found)
        asked.announce(f"ops: each of {written} repros run alone ({asked.options.jobs} at once)")
    begun = time.monotonic()
    found = grouping.check_alone(found, out_dir, asked.options, asked.versions)
    alone = round(time.monotonic() - begun, 1)
    sweep = summed(found, interrupted=False)
    sweep = replace(sweep, timings=sweep.timings | {"alone": alone})
    write_ops(out_dir, sweep)
    write_report(out_dir, sweep)
    return sweep


DEATHS = ("crash", "hang")
UNSHARDED_DEATH = "unsharded XLA dies here too: the plain sweep's finding (reprokit ops, no --mesh)"


def _unsharded_deaths(records: list[Sample]) -> list[Sample]:
    """A sharded sample that killed its worker where its control (replicated, which runs the
    same unsharded sample first) did too: the unsharded run died, not the sharded one (roll of
    an empty tensor: SIGFPE with or without a mesh). Those are skips, never sharding's."""
    died = {_sample_key(r) for r in records if r.shard == CONTROL and r.kind in DEATHS}
    return [replace(r, verdict="skip", kind="", detail="", reason=UNSHARDED_DEATH)
            if r.shard and r.kind in DEATHS and _sample_key(r) in died else r
            for r in records]  # fmt: skip


def _sample_key(r: Sample) -> tuple:
    return (r.op, r.variant, r.dtype, r.edge, r.sample)


def _stale_graphs(asked: _Asked, records: list[Sample], pool: Workers | None) -> list[Sample]:
    """The records with each stale-graph candidate judged alone and after its first call in
    fresh workers (stale.py), the probes counted in ``asked.stale_graph``."""
    begun = time.monotonic()
    records, counts = stale.confirm(records, asked.asking(pool))
    asked.stale_graph.clear()
    asked.stale_graph.update(counts)
    asked.timed["stale_graph"] = round(time.monotonic() - begun, 1)
    return records


def _triggers(
    asked: _Asked, found: list[Group], records: list[Sample], pool: Workers | None
) -> list[Group]:
    """Each group's trigger (confirm.py), its new samples' time in the timings. A stale
    graph's is its kind: a call with another argument before it."""
    begun = time.monotonic()
    order = {g.id: i for i, g in enumerate(found)}
    kept = [g for g in found if g.kind == stale.KIND]  # a stale graph's trigger is its kind
    found = [g for g in found if g.kind != stale.KIND]
    if asked.announce and pool is not None and found:
        asked.announce(f"ops: the triggers of {len(found)} groups, checked on new samples")
    found = kept + confirm.triggers(found, records, asked.asking(pool))
    asked.timed["triggers"] = round(time.monotonic() - begun, 1)
    return sorted(found, key=lambda g: order[g.id])


def _sweep(asked: _Asked, judged: _Judged, found: list[Group], *, interrupted: bool) -> OpsSweep:
    listing, records = judged.listing, judged.records
    return OpsSweep(
        argv=asked.argv,
        versions=asked.versions,
        backends=asked.backends,
        dtypes=asked.dtypes,
        grad=asked.grad,
        edge=asked.edge,
        inplace=asked.inplace,
        mesh=asked.mesh,
        seconds=round(time.monotonic() - asked.begun, 1),
        timings=({"samples": round(asked.swept[0] - asked.begun, 1)} if asked.swept else {})
        | sharded.per_spec(records)
        | asked.timed,
        interrupted=interrupted,
        ops=_per_op(listing, records),
        skips=_skips(listing, records),
        platform=_platform(records),
        cpu_wrong=_cpu_wrong(records),
        lost_shardings=sharded.lost(records, asked.mesh) if asked.mesh else [],
        stale_graph=dict(asked.stale_graph),
        precision=grouping.precision(records),
        groups=tuple(found),
        records=[_compact(r) for r in records],
        tasks=judged.tasks,
        cached=judged.cached,
    )


def _codes(records: list[Sample], found: list[Group]) -> dict[str, dict[str, Any]]:
    """Each group's witness's source (with the result it judged: ``leaf``)."""
    by_key = {}
    for group in found:
        w = group.witness
        wanted = (group.op, group.variant, group.backend, group.kind, group.grad, group.inplace)
        wanted += (w["dtype"], w["edge"], w["sample"], w.get("arg") or "", group.shard)
        for r in records:
            seen = (r.op, r.variant, r.backend, r.kind, r.grad, r.inplace)
            if r.differs and (*seen, r.dtype, r.edge, r.sample, r.arg, r.shard) == wanted:
                code = r.pair if group.kind == stale.KIND else r.code
                by_key[group.id] = dict(code or {}) | {"leaf": r.leaf}
                break
    return by_key


def _per_op(listing: dict[str, Any], records: list[Sample]) -> list[dict[str, Any]]:
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for r in records:
        entry = counts.setdefault((r.op, r.variant), {})
        entry[r.verdict] = entry.get(r.verdict, 0) + 1
    return [
        {
            "op": e["op"],
            "variant": e["variant"],
            "dtypes": e["dtypes"],
            "dtypes_added": e.get("added", []),  # swept though OpInfo does not declare them
            "skip": e["skip"],
            "counts": counts.get((e["op"], e["variant"]), {}),
        }
        for e in listing["ops"]
    ]


def reason_class(reason: str) -> str:
    """A skip's reason without its particulars: ``CPU fallback (aten::nonzero)`` counts as
    ``CPU fallback``."""
    return reason.split(" (")[0].split(":")[0].strip()


def _skips(listing: dict[str, Any], records: list[Sample]) -> dict[str, int]:
    found: dict[str, int] = {}
    for e in listing["ops"]:
        if e["skip"]:
            label = f"op not run: {e['skip']}"
            found[label] = found.get(label, 0) + 1
        elif not e["dtypes"]:
            found["op not run: none of the dtypes asked for"] = (
                found.get("op not run: none of the dtypes asked for", 0) + 1
            )
    for r in records:
        if r.verdict == "skip":
            label = reason_class(r.reason)
            found[label] = found.get(label, 0) + 1
        elif r.ties:
            found["index ties: values compared"] = found.get("index ties: values compared", 0) + 1
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def _platform(records: list[Sample]) -> dict[str, Any]:
    flushed = [r for r in records if r.verdict == "platform"]
    ops = sorted({r.op for r in flushed})
    return {"subnormal flushing": {"samples": len(flushed), "ops": ops}} if flushed else {}


def _cpu_wrong(records: list[Sample]) -> list[dict[str, Any]]:
    found: dict[tuple, dict[str, Any]] = {}
    for r in records:
        if r.verdict == "cpu_wrong":
            key = (r.op, r.variant, r.dtype, r.grad, r.inplace)
            entry = found.setdefault(
                key,
                {
                    "op": r.op,
                    "variant": r.variant,
                    "dtype": r.dtype,
                    "grad": r.grad,
                    "samples": 0,
                    "detail": r.detail,
                },
            )
            entry["samples"] += 1
    return list(found.values())


def _compact(record: Sample) -> Sample:
    """A sample's verdict as ops.json keeps it: the source of a sample only in its group."""
    described = {} if record.verdict == "match" else record.described
    return replace(record, code=None, pair=None, seconds=0.0, described=described)
