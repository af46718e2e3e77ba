"""--mesh's sharding specs, pure (the harness makes a task per spec, the worker lays a
sample's arguments out by it: worker/sharding.py).

A spec is named ``PLACEMENTS[/VIEW]``. PLACEMENTS is ``D@AXES`` joined by commas: tensor dim D
(-1: the last) split over the mesh axes AXES (``0@x``, ``-1@y``, ``0@xy``: both axes on one
dim, ``0@x,-1@y``); ``replicated`` is the control, which must always match. Every tensor
argument with the dims a spec names is sharded so; the others stay replicated. A dim that the
axes' size does not divide is padded by XLA: that is where partitioners go wrong.

VIEW is how the argument reaches the op, since that is how a model's tensors do: as itself,
``slice`` (a narrow of a larger tensor sharded so, one element more at each end of the split
dim: the slice starts and ends inside a shard), ``transpose`` (the transpose of a sharded
tensor; rank 2 and more).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from reprokit.errors import ReprokitError

AXES = "xyz"  # the mesh's axis names, in order: a mesh 2x2 has x and y
CONTROL = "replicated"


def specs(mesh: tuple[int, ...]) -> list[str]:
    """The specs a sweep tries on ``mesh`` (module docstring), the control first."""
    axes = AXES[: len(mesh)]
    each = [f"{d}@{a}" for d in (0, -1) for a in axes]
    both = [f"{d}@{axes}" for d in (0, -1)] if len(axes) > 1 else []
    across = [f"0@{axes[0]},-1@{axes[1]}", f"0@{axes[1]},-1@{axes[0]}"] if len(axes) > 1 else []
    views = [f"{each[0]}/slice", f"{across[0] if across else each[0]}/transpose"]
    return [CONTROL, *each, *both, *across, *views]


def placements(spec: str, rank: int) -> tuple[Any, ...] | None:
    """The partition spec of ``spec`` for a tensor of ``rank`` dims, as mark_sharding takes it
    (``("x", None)``, ``(("x", "y"), None)``), or None where the tensor lacks a named dim or
    two placements name one dim (a vector under ``0@x,-1@y``)."""
    placed: list[Any] = [None] * rank
    for part in spec.split("/")[0].split(","):
        if part == CONTROL:
            continue
        dim, axes = part.split("@")
        d = int(dim) % rank if rank else None
        if d is None or not -rank <= int(dim) < rank or placed[d] is not None:
            return None
        placed[d] = axes if len(axes) == 1 else tuple(axes)
    return tuple(placed)


def parse(text: str) -> tuple[int, ...]:
    """``2x2`` as (2, 2): one to three axes of two devices or more, 8 devices at most (what
    XLA:CPU's virtual devices give here; on TPU, the chips)."""
    try:
        mesh = tuple(int(n) for n in text.lower().split("x"))
    except ValueError:
        mesh = ()
    if not mesh or len(mesh) > len(AXES) or min(mesh) < 2 or math.prod(mesh) > 8:
        raise ReprokitError(
            f"--mesh {text!r} is not a mesh this sweep can lay out",
            hint="Give 1 to 3 axes of 2 devices or more, 8 in all: --mesh 4, 2x2 or 2x4.",
        )
    return mesh


def features(spec: str, mesh: Sequence[int], described: dict[str, Any]) -> dict[str, Any]:
    """--mesh: a sharded sample's features (what a sharding needs in order to differ): which
    dims are split, over which mesh axes, the view, and whether XLA pads a split dim (its size,
    the larger tensor's for a view, no multiple of its axes' devices)."""
    placed, _, view = spec.partition("/")
    parts = [part.split("@") for part in placed.split(",") if part != CONTROL]
    padded = False
    for shape in (_shape(t) for t in described.get("tensors", ())):
        laid = placements(spec, len(shape)) if len(shape) and math.prod(shape) > 1 else None
        whole = list(shape)
        if view == "transpose" and len(whole) >= 2:
            whole[0], whole[-1] = whole[-1], whole[0]
        for d, axes in enumerate(laid or ()):
            size = math.prod(mesh[AXES.index(a)] for a in axes or ())
            grown = 2 if view == "slice" and d == next(i for i, a in enumerate(laid) if a) else 0
            padded |= bool(axes) and (whole[d] + grown) % size != 0
    return {
        "sharded dims": ", ".join("first" if d == "0" else "last" for d, _ in parts) or "none",
        "over axes": ", ".join(a for _, a in parts) or "none",
        "view": view or "none",
        "a sharded dim padded": padded,
    }


def _shape(described: str) -> tuple[int, ...]:
    """``float32[5, 5]`` (samples.describe's words) as (5, 5)."""
    inside = described.partition("[")[2].rstrip("]")
    return tuple(int(n) for n in inside.split(",") if n.strip())
