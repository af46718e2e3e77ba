"""Where each difference is born: the roots of a variant's divergences, and what each reaches.

A root is a recorded result that differs from its reference while every recorded result it
reads agrees (the stage records each result's inputs among the recorded ones: exported
programs do). One program can hold several: an upsampling bug beside a cumsum bug is a second
issue, not noise after the first. Read from the records only (no torch): reports use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from reprokit.records import Comparison, Root, VariantResult


def roots(variant: VariantResult) -> tuple[Root, ...]:
    """The variant's roots as its summary recorded them, else (a run from before they were
    recorded) found from its records now."""
    return variant.roots or found(variant)


def found(variant: VariantResult) -> tuple[Root, ...]:
    """Every root of every target that recorded its results' inputs, those that reach an
    output first; else the first divergence of each target, as the only one known. A result
    that is a root in several targets (XLA and XLA SPMD) is one root, the others in ``also``."""
    born: list[Root] = []
    for target in dict.fromkeys(c.target for c in variant.comparisons):
        mine = [c for c in variant.comparisons if c.target == target and c.shape is not None]
        info = described(variant, target)
        if any("inputs" in one for one in info.values()):
            born += _roots(mine, info)
        elif first := next((c for c in mine if not c.allclose), None):
            if born and first.tensor not in info:  # an output of the same program, run whole
                continue
            born.append(_root(first, info.get(first.tensor, {}), reaches=None))
    return tuple(sorted(_merged(born), key=lambda root: root.reaches == ()))


def described(variant: VariantResult, target: str) -> Mapping[str, Mapping[str, Any]]:
    """What ``target``'s stage said of each recorded result: op, shape, module, source..."""
    stage = next((s for s in variant.stages if s.name == target), None)
    return stage.described if stage is not None else {}


def compared(variant: VariantResult, root: Root) -> Comparison:
    """The comparison of the root's result in its target."""
    return next(c for c in variant.comparisons
                if c.tensor == root.tensor and c.target == root.target)  # fmt: skip


# A value difference within this many times the fp64 rule's bound is rounding rather than a wrong
# kernel (float16 addmm near cancellation, 1 ulp of a float16 loss): no issue of its own
ROUNDING = 4.0


def rounding(root: Root) -> bool:
    """A value difference whose error against float64 stays within ROUNDING times the bound."""
    if root.kind != "value" or root.errors is None or not root.bound:
        return False
    error = root.errors[1]
    return math.isfinite(error) and error <= ROUNDING * root.bound


def kind(c: Comparison) -> str:
    """How a result differs: its shape, its dtype, NaN or inf where the reference has none,
    else its values."""
    if c.shape is None or c.note.startswith("shape"):
        return "shape"
    if c.note:
        return "dtype"
    return "nan-inf" if c.nan[1] + c.inf[1] > c.nan[0] + c.inf[0] else "value"


def _root(c: Comparison, info: Mapping[str, Any], reaches: tuple[str, ...] | None) -> Root:
    return Root(c.tensor, c.target, str(info.get("op") or c.tensor), str(info.get("source", "")),
                kind(c), c.errors, c.bound, reaches)  # fmt: skip


def _merged(born: list[Root]) -> list[Root]:
    merged: dict[str, Root] = {}
    for root in born:
        name = root.tensor
        if name in merged:
            merged[name] = replace(merged[name], also=(*merged[name].also, root.target))
        else:
            merged[name] = root
    return list(merged.values())


def _roots(compared: list[Comparison], told: Mapping[str, Mapping[str, Any]]) -> list[Root]:
    differing = {c.tensor: c for c in compared if not c.allclose}
    readers: dict[str, list[str]] = {}
    for name, info in told.items():
        for source in info.get("inputs", ()):
            readers.setdefault(source, []).append(name)
    born = []
    for name, c in differing.items():
        info = told.get(name)
        if info is None or any(source in differing for source in info.get("inputs", ())):
            continue
        reached = [
            o for n in _carried(name, readers, differing) for o in told[n].get("outputs", ())
        ]
        born.append(_root(c, info, tuple(o for o in dict.fromkeys(reached) if o in differing)))
    return born


def _carried(name: str, readers: Mapping[str, list[str]], differing: Mapping) -> list[str]:
    """``name`` and every differing result that reads it, directly or through differing
    results, in order met: a result that agrees stops the difference (nll_loss's
    total_weight differs, but nll_loss_backward, which reads it, agrees: no gradient is
    reached through it)."""
    seen, todo = [name], [name]
    while todo:
        for reader in readers.get(todo.pop(), ()):
            if reader in differing and reader not in seen:
                seen.append(reader)
                todo.append(reader)
    return seen


def said(variant: VariantResult, root: Root) -> str:
    """A root in a line: its op, shape and source line, and the outputs it reaches."""
    shape = "x".join(map(str, compared(variant, root).shape or ())) or "a scalar"
    text = f"`{root.op}` ({shape})" + (f" from `{root.source}`" if root.source else "")
    if root.reaches:
        return text + f", reaching {', '.join(f'`{o}`' for o in root.reaches)}"
    return text + (", reaching no output" if root.reaches == () else "")
