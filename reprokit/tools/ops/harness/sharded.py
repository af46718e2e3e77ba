"""--mesh: what a sharded sweep sums over its records besides its groups: what each spec cost
the workers, and the elementwise results that lost their input's sharding (memory, not values:
never a group). Torch-free."""

from __future__ import annotations

import collections
from typing import Any

from reprokit.records.ops import Sample
from reprokit.tools.ops.mesh import features


def per_spec(records: list[Sample]) -> dict[str, float]:
    """The workers' seconds under each spec ("sharded 0@x"), summed over its samples (each
    sample's unsharded control and sharded call, compiles included)."""
    spent: dict[str, float] = collections.Counter()
    for r in records:
        if r.shard:
            spent[f"sharded {r.shard}"] += r.seconds
    return {spec: round(seconds, 1) for spec, seconds in spent.items()}


def lost(records: list[Sample], mesh: tuple[int, ...]) -> list[dict[str, Any]]:
    """Per elementwise op whose result lost its input's sharding: of its samples checked (the
    worker's ``layout``: the forward, sharded without a view), how many lost it, split by
    whether a sharded dim is padded (its size no multiple of its axes' devices), and its
    smallest witness."""
    losing = {(r.op, r.variant) for r in records if _lost(r)}
    found: dict[tuple[str, str], dict[str, Any]] = {}
    ranks: dict[tuple[str, str], tuple[bool, int]] = {}  # the witness's: an even split's first
    for r in records:
        if (r.op, r.variant) not in losing or not r.layout:  # "": not checked
            continue
        padded = (
            "padded" if features(r.shard, mesh, r.described)["a sharded dim padded"] else "even"
        )
        entry = found.setdefault((r.op, r.variant), _entry(r))
        entry[padded]["checked"] += 1
        if _lost(r):
            entry[padded]["lost"] += 1
            rank = (padded == "padded", r.described.get("numel", 0))
            if rank < ranks.get((r.op, r.variant), (True, 2**62)):
                ranks[(r.op, r.variant)], entry["witness"] = rank, _witness(r)
    return list(found.values())


def _entry(r: Sample) -> dict[str, Any]:
    counts = {"checked": 0, "lost": 0}
    return {"op": r.op, "variant": r.variant, "padded": dict(counts), "even": dict(counts),
            "witness": None}  # fmt: skip


def _witness(r: Sample) -> dict[str, Any]:
    tensors = r.described.get("tensors", [])
    return {"sample": r.sample, "shard": r.shard, "tensors": tensors, "lost": r.layout,
            "numel": r.described.get("numel", 0)}  # fmt: skip


def _lost(r: Sample) -> bool:
    return bool(r.layout) and r.layout != "kept"
