"""Divergences as groups, not rows: one per (op, variant, backend, kind, forward or backward),
with the dtypes it shows in and its smallest witness; each group's repro written into the
sweep's folder and run alone (in a folder of its own, only PATH, HOME and XLA's device set,
forked warm as a stage is), its answer cached. Torch-free."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import reprokit.tools.ops.harness.repro as repro
from reprokit.infra import known
from reprokit.infra.caching import Store, file_digest
from reprokit.records.folder import SCRIPT
from reprokit.records.ops import ALONE_RUNS, Group, Sample, hlo_name, repro_name
from reprokit.runner.options import Options
from reprokit.runner.processes.alone import run_alone
from reprokit.runner.processes.warm import WarmExecutor
from reprokit.tools.ops.mesh import CONTROL
from reprokit.tools.ops.mesh import specs as sharding_specs

DTYPE_ORDER = (
    "float32",
    "bfloat16",
    "float16",
    "float64",
    "complex64",
    "complex128",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
)
ALONE_TIMEOUT = 180.0  # seconds a repro may take alone (a hang's is killed at that)


def build(records: list[Sample]) -> list[Group]:
    """The groups of the sweep's ``differs`` records, witnessed by the smallest sample that
    has source for its repro."""
    keyed: dict[tuple, list[Sample]] = {}
    for r in records:
        if r.differs:
            key = (r.op, r.variant, r.backend, r.kind, r.grad, r.inplace, r.arg, r.cause, r.form)
            keyed.setdefault(key, []).append(r)
    groups = []  # arg: a stale graph's arguments (one group each); cause: the op that makes it;
    # form: the call form (``x >> 2`` is its own group beside ``torch.bitwise_right_shift``);
    # --mesh: one group for every spec it differs under, the specs it does not named too
    agreeing = _agreeing(records)
    for key, found in sorted(keyed.items()):
        op, variant, backend, kind, grad, inplace, arg, cause, form = key
        witness = min(found, key=_smallest)
        dtypes = sorted({r.dtype for r in found}, key=_dtype_rank)
        ranked = partial(_spec_rank, witness)
        shards = tuple(sorted({r.shard for r in found if r.shard}, key=ranked))
        slug = _slug(op, variant, kind, grad, backend, arg, cause, form)
        group = Group(
            id=slug + ("_inplace" if inplace else ""),
            op=op,
            variant=variant,
            backend=backend,
            dtypes=tuple(dtypes),
            kind=kind,
            grad=grad,
            samples=len(found),
            owner=witness.owner,
            witness=_witness(witness),
            inplace=inplace,
            cause=cause,
            form=form,
            shard=witness.shard,
            shards=shards,
            spared=tuple(x for x in agreeing.get((op, variant), ()) if x not in shards),
        )
        groups.append(replace(group, known=_known(group, group.witness)))
    return groups


def _witness(r: Sample) -> dict[str, Any]:
    """A group's witness as ops.json keeps it; a stale graph's with its arguments, its first
    call and the sample it was probed from."""
    seen = {"dtype": r.dtype, "edge": r.edge, "sample": r.sample, "described": r.described}
    seen |= {"mesh": r.mesh} if r.mesh else {}
    seen["detail"] = r.detail or None
    stale = {"arg": r.arg, "stale": r.stale, "base": r.base}
    return seen | {k: v for k, v in stale.items() if v not in ("", {}, None)}


def _smallest(r: Sample) -> tuple:
    numel = r.described.get("numel", 0)
    simplest = _spec_rank(r, r.shard) if r.shard else 0  # 0@x before 0@x,-1@y/transpose
    return ("A" not in (r.code or {}), numel, _dtype_rank(r.dtype), r.edge, simplest, r.sample)


def _spec_rank(r: Sample, spec: str) -> int:
    order = sharding_specs(tuple(r.mesh))
    return order.index(spec) if spec in order else len(order)


def _agreeing(records: list[Sample]) -> dict[tuple[str, str], tuple[str, ...]]:
    """--mesh: per op and variant, the specs (in mesh.py's order) with a sample that matched
    unsharded: what a group's sharding is not enough for."""
    found: dict[tuple[str, str], set[str]] = {}
    mesh: tuple[int, ...] = ()  # one sweep, one mesh
    for r in records:
        if r.shard and r.shard != CONTROL and r.verdict == "match":
            found.setdefault((r.op, r.variant), set()).add(r.shard)
            mesh = tuple(r.mesh)
    order = sharding_specs(mesh) if mesh else []
    return {key: tuple(s for s in order if s in seen) for key, seen in found.items()}


def _dtype_rank(dtype: str) -> int:
    return DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)


def _slug(
    op: str,
    variant: str,
    kind: str,
    grad: bool,
    backend: str,
    arg: str = "",
    cause: str = "",
    form: str = "",
) -> str:
    parts = [
        op,
        variant,
        kind.replace("-", ""),
        arg,
        form,
        f"by_{cause}" if cause else "",
        "grad" if grad else "",
        "" if backend == "xla" else backend,
    ]
    return re.sub(r"[^A-Za-z0-9]+", "_", "_".join(p for p in parts if p)).strip("_")


def _known(group: Group, witness: dict[str, Any]) -> str:
    """The report of docs/examples this group is, or the upstream issue that tracks it, or ""
    (reprokit/infra/known.toml and the user's REPROKIT_KNOWN files: by op and variant, dtypes,
    kind, pass, the witness's error message and arguments)."""
    described = witness.get("described") or {}
    operator = described.get("operator", "").rstrip("_")  # and_ is __and__
    for name in ([f"__{operator}__"] if operator else []) + [group.op]:  # x >> 2: __rshift__
        found = known.match(
            name,
            variant=group.variant,
            dtypes=group.dtypes,
            kind=group.kind,
            grad=group.grad,
            detail=witness.get("detail") or "",
            kwargs=described.get("kwargs", {}),
            sharded=bool(group.shard),
        )
        if found:
            return found.report or found.upstream
    return ""


def precision(records: list[Sample]) -> list[dict[str, Any]]:
    """The ``precision`` records (tools/ops/worker/precision.py) listed apart from the groups: one
    entry per op, variant, backend and pass, with its dtypes, samples, the largest size in ulps
    (XLA's and CPU's at the terms' magnitude, XLA's at the result), the dtype XLA and CPU keep
    their intermediates in, per dtype, and the witness of the largest; ``differs``: the op's
    samples in that pass beyond the bound (a group's), so that a reader does not take the op
    for right (bilinear upsampling: 4 samples of rounding, 31 of a bug)."""
    keyed: dict[tuple, list[Sample]] = {}
    beyond: dict[tuple, int] = {}
    for r in records:
        key = (r.op, r.variant, r.backend, r.grad, r.inplace)
        if r.verdict == "precision":
            keyed.setdefault(key, []).append(r)
        elif r.differs:
            beyond[key] = beyond.get(key, 0) + 1
    found = []
    for (op, variant, backend, grad, inplace), rows in sorted(keyed.items()):
        largest = max(rows, key=lambda r: (r.ulps, _smallest(r)))
        inside = _kept_in(rows, lambda r: r.intermediates)
        cpu_inside = _kept_in(rows, lambda r: r.cpu_intermediates)
        found.append(
            {
                "op": op,
                "variant": variant,
                "backend": backend,
                "grad": grad,
                "inplace": inplace,
                "dtypes": sorted({r.dtype for r in rows}, key=_dtype_rank),
                "samples": len(rows),
                "differs": beyond.get((op, variant, backend, grad, inplace), 0),
                "ulps": max(r.ulps for r in rows),
                "cpu_ulps": max(r.cpu_ulps for r in rows),
                "result_ulps": max(r.result_ulps for r in rows),
                "of_bound": max(r.of_bound for r in rows),
                "intermediates": inside,
                "cpu_intermediates": cpu_inside,
                "terms": sorted({r.terms for r in rows}),
                "witness": {
                    "dtype": largest.dtype,
                    "edge": largest.edge,
                    "sample": largest.sample,
                    "detail": largest.detail or None,
                    "tensors": largest.described.get("tensors", []),
                },
            }
        )
    return found


def _kept_in(rows: list[Sample], kept: Callable[[Sample], str]) -> dict[str, str]:
    """Per dtype, the dtypes the samples kept their intermediates in ("float16, float32" where
    samples differ: poisson_nll_loss's CPU, float32 for some sums, float16 for others)."""
    seen: dict[str, set[str]] = {}
    for r in rows:
        seen.setdefault(r.dtype, set()).add(kept(r))
    order = sorted(seen, key=_dtype_rank)
    return {d: ", ".join(sorted(seen[d], key=_dtype_rank)) for d in order}


def write_repros(
    groups: list[Group],
    by_group: dict[str, dict[str, Any]],
    calls: dict[tuple, str | None],
    out_dir: Path,
    witness_dir: Path,
) -> list[Group]:
    """Each group's ``repro_<id>.py`` (and its .pt) in ``out_dir``; the groups with ``repro``
    set, or ``why_no_repro``."""
    written = []
    for group in groups:
        code = by_group.get(group.id) or {}
        if "A" not in code:
            why = code.get("unwritable", "no source of the witness sample")
            written.append(replace(group, why_no_repro=why))
            continue
        saved = None
        if code.get("saved"):
            saved = repro_name(group.id, ".pt")
            shutil.copyfile(witness_dir / code["saved"], out_dir / saved)
        key = (group.op, group.variant) + (("inplace",) if group.inplace else ())
        key += ("operator",) if "operator" in group.form else ()
        text = repro.repro_text(group, code, calls.get(key), saved)
        name = repro_name(group.id)
        (out_dir / name).write_text(text, "utf-8")
        written.append(replace(group, repro=name))
    return written


def check_alone(
    groups: list[Group], out_dir: Path, options: Options, versions: dict[str, str]
) -> list[Group]:
    """Each repro run alone (``jobs`` at a time), the answer cached by the script's bytes:
    ``reproduces_alone`` and what it printed."""
    store = Store("ops-alone")
    scratch = out_dir / ALONE_RUNS
    options = replace(options, timeout=ALONE_TIMEOUT)
    executor = WarmExecutor(options) if options.warm else None

    def check(group: Group) -> Group:
        if group.repro is None:
            return group
        files = [out_dir / group.repro] + ([p] if (p := _pt(out_dir, group)).is_file() else [])
        dump = (scratch / f"hlo-{group.id}").absolute() if group.shard else None
        digests = [file_digest(f) for f in files] + ([PARTITIONING] if dump else [])  # its HLO
        key = store.key(digests, versions)
        hit = store.get_json(key)
        if hit is None:
            extra = {"XLA_FLAGS": f"{PARTITIONING} --xla_dump_to={dump}"} if dump else None
            ran = run_alone(partial(_copy, files), options, scratch, executor=executor, extra=extra)
            shows = (
                ran.returncode is None
                if group.kind == "hang"
                else (
                    ran.returncode is not None and ran.returncode < 0
                    if group.kind == "crash"
                    else ran.shows()
                )
            )
            hit = {"shows": shows, "output": _transcript(ran, group.repro, options.xla_device)}
            hit |= {"hlo": partitioned(dump)} if dump else {}
            store.put_json(key, hit)
        hlo = _written(hit.get("hlo") or {}, out_dir, group.id)
        return replace(group, reproduces_alone=hit["shows"], alone_output=hit["output"], hlo=hlo)

    try:
        with ThreadPoolExecutor(max(1, options.jobs)) as pool:
            checked = list(pool.map(check, groups))
    finally:
        if executor:
            executor.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return checked


# XLA's dump of the modules before and after its SPMD partitioner, the sharded groups' whose
PARTITIONING = "--xla_dump_hlo_pass_re=spmd-partitioning"
SHARDED = "sharding={devices="  # an instruction sharded over devices (not replicated)
GATHER = "ReplicateShardedData"  # torch_xla's module that brings a sharded result to the host


def partitioned(dump: Path) -> dict[str, str]:
    """The HLO before and after SPMD partitioning of the last module a repro compiled with
    an instruction sharded over devices (its sharded run: the unsharded one has none; not
    torch_xla's own gathering of a sharded result to the host), from XLA's dump in ``dump``;
    {} where there is none (a crash before it is compiled)."""
    befores = sorted(dump.glob("module_*.before_spmd-partitioning.txt"))
    for before in reversed([b for b in befores if GATHER not in b.name]):
        text = before.read_text("utf-8", "replace")
        if SHARDED in text:
            prefix = before.name.split(".spmd-partitioner.")[0].rsplit(".", 1)[0]
            after = next(dump.glob(f"{prefix}.*.after_spmd-partitioning.*.txt"), None)
            found = {"before": text}
            return found | ({"after": after.read_text("utf-8", "replace")} if after else {})
    return {}


def _written(hlo: dict[str, str], out_dir: Path, group_id: str) -> tuple[str, ...]:
    """The partitioner's HLO beside the repro (``hlo_<id>.before_partitioning.txt``, after)."""
    names = []
    for when, text in hlo.items():
        name = hlo_name(group_id, when)
        (out_dir / name).write_text(text, "utf-8")
        names.append(name)
    return tuple(names)


def _pt(out_dir: Path, group: Group) -> Path:
    return out_dir / repro_name(group.id, ".pt")


def _copy(files: list[Path], where: Path) -> None:
    """The repro as repro.py (alone runs that name), its .pt under its own name beside it."""
    shutil.copyfile(files[0], where / SCRIPT)
    for extra in files[1:]:
        shutil.copyfile(extra, where / extra.name)


def _transcript(ran: Any, name: str, device: str) -> str:
    return ran.transcript(device).replace("python repro.py", f"python {name}", 1)
