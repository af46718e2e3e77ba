"""Call forms an OpInfo's samples leave out, made from its own samples, in the worker (torch
imported). OpInfo's ``clamp`` samples pass tensor bounds only (one of them None at most), and
``clamp_min`` / ``clamp_max`` a tensor bound only, so the sweep never called ``clamp(x, min=0)``:
the form whose omitted bound XLA fills with the dtype's largest finite value, turning +inf into
3.4e38 (docs/examples/clamp_omitted_bound.md).

For each op of :data:`BOUNDS`, every combination of its bounds as tensors, Python numbers or
None that none of OpInfo's samples shows (not all None, and not a tensor beside a number,
which torch refuses) is made from the first sample whose bounds are all tensors: a number is
the bound tensor's first element, two numbers ordered low to high. The form's input is that
sample's, with the dtype's extremes written first (+-inf and the largest and lowest finite
values; an integer type's limits): where an omitted or a number bound goes wrong, and what
OpInfo's random values never hold.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch.testing._internal.opinfo.core import SampleInput

# OpInfo name -> how many bounds follow the input, positionally (clamp(x, min, max))
BOUNDS = {"clamp": 2, "clamp_min": 1, "clamp_max": 1}
NAME = "call form"  # a form sample's name: what a record of it shows
KINDS = ("tensor", "number", "none")


def forms(op: Any, made: list[SampleInput], dtype: torch.dtype) -> list[SampleInput]:
    """The forms of ``op``'s call (made in ``dtype``) that ``made``, its OpInfo samples, leave
    out; none for an op without bounds, or bool (which clamp refuses)."""
    count = BOUNDS.get(op.name)
    if count is None or dtype == torch.bool:
        return []
    shown = {_form(s, count) for s in made}
    base = next((s for s in made if _form(s, count) == ("tensor",) * count and _sized(s)), None)
    if base is None:
        return []
    numbers = _numbers(base.args[:count])
    found = []
    for form in itertools.product(KINDS, repeat=count):
        if form in shown or set(form) == {"none"} or {"tensor", "number"} <= set(form):
            continue  # clamp takes its bounds as tensors or as numbers, never one of each
        bounds = [_bound(kind, b, n) for kind, b, n in zip(form, base.args, numbers, strict=False)]
        found.append(SampleInput(_extremes(base.input, dtype), args=tuple(bounds), name=NAME))
    return found


def _form(sample: SampleInput, count: int) -> tuple[str, ...] | None:
    """How the sample passes its bounds (``("tensor", "none")``); None for keywords, which
    this does not read."""
    if sample.kwargs or len(sample.args) > count:
        return None
    bounds = [*sample.args, *[None] * (count - len(sample.args))]
    return tuple(
        "none" if b is None else "tensor" if isinstance(b, torch.Tensor) else "number"
        for b in bounds
    )


def _sized(sample: SampleInput) -> bool:
    """An input with room for the extremes, and bounds that hold a first element."""
    bounds = [b for b in sample.args if isinstance(b, torch.Tensor)]
    x = sample.input
    return isinstance(x, torch.Tensor) and x.numel() >= 4 and all(b.numel() for b in bounds)


def _numbers(bounds: tuple) -> list[float | int]:
    """Each bound tensor's first element as a Python number; two of them low to high (so
    that a form with both is an ordinary clamp, not one whose min exceeds its max)."""
    numbers = [b.detach().reshape(-1)[0].item() for b in bounds]
    return sorted(numbers) if len(numbers) == 2 else numbers


def _bound(kind: str, tensor: torch.Tensor, number: float | int) -> Any:
    if kind == "tensor":
        return tensor.detach().clone().requires_grad_(tensor.requires_grad)
    return number if kind == "number" else None


def _extremes(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` (a new leaf) with the dtype's extremes as its first elements."""
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        values: list[float | int] = [math.inf, -math.inf, info.max, info.min]
    else:
        info_i = torch.iinfo(dtype)
        values = [info_i.max, info_i.min]
    made = x.detach().clone(memory_format=torch.contiguous_format)
    made.view(-1)[: len(values)] = torch.tensor(values, dtype=dtype)
    return made.requires_grad_(x.requires_grad)
