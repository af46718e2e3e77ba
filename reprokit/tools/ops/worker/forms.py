"""Call forms an OpInfo's samples leave out, made from its own samples, in the worker (torch
imported): an op's Python operator and a Python-number operand (below, :func:`operand_forms`),
and clamp's bounds. OpInfo's ``clamp`` samples pass tensor bounds only (one None at most), and
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
import operator
from typing import Any

import torch
from torch.testing._internal.opinfo.core import SampleInput, UnaryUfuncInfo

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


# Forms a user writes that OpInfo's samples never call: the op's Python operator (``x >> y``,
# ``x >>= y`` in place: ``__rshift__`` is another aten op than ``bitwise_right_shift``, lowered on
# its own path) and a Python number as the second operand (``x >> 2``: a Scalar overload). A
# form sample is named for its form; judge.call_for calls it so, and its record says which.
OPERATOR = "operator form"
NUMBER = "number operand"
# OpInfo names no operator for these (its default looks up ``operator.<name>``)
OPERATORS = {("div", "no_rounding_mode"): "truediv", ("floor_divide", ""): "floordiv"}
OPERATORS |= {("true_divide", ""): "truediv"}
NO_OPERATOR = ("getitem", "concat")  # indexing, a sequence's concatenation: not the op's math


def operator_of(op: Any, *, inplace: bool = False) -> Any:
    """The op's Python operator (``operator.rshift``; with ``inplace``, ``operator.irshift``),
    or None."""
    named = OPERATORS.get((op.name, op.variant_test_name))
    if named:
        return getattr(operator, f"i{named}" if inplace else named)
    found = op.inplace_operator_variant if inplace else op.operator_variant
    return None if getattr(found, "__name__", None) in NO_OPERATOR else found


def form_of(sample: SampleInput) -> str:
    """The sample's form as its record says it: "operator", "number", "operator, number" or ""
    (OpInfo's own call)."""
    name = getattr(sample, "name", "") or ""
    return ", ".join(f for f, said in (("operator", OPERATOR), ("number", NUMBER)) if said in name)


def called(op: Any, sample: SampleInput, *, inplace: bool) -> tuple[Any, str]:
    """What a sample calls, and its form as its record says it: the op's function (or in-place
    variant), or for a sample of the operator form its operator (``operator.rshift``, in place
    ``operator.irshift``; where the op has none in place, its in-place variant)."""
    form = form_of(sample)
    fn = operator_of(op, inplace=inplace) if "operator" in form else None
    if fn is not None:
        return fn, form
    return (op.inplace_variant if inplace else op.op), form.replace("operator", "").strip(", ")


def operand_forms(op: Any, made: list[SampleInput], dtype: torch.dtype) -> list[SampleInput]:
    """The operator and number-operand forms of ``op`` made from its first sample with a
    tensor input of at least 4 elements and nothing but one tensor operand (or none: a
    unary operator such as ``~x``), its operand's values kept: the number is its first
    nonzero element (``x >> 0`` would hide every shift)."""
    fn = operator_of(op)
    numbers = getattr(op, "supports_rhs_python_scalar", False)
    operands = 0 if isinstance(op, UnaryUfuncInfo) else 1
    base = next((s for s in made if _operand_base(s, operands)), None)
    if base is None or (fn is None and not numbers):
        return []
    found = []
    if fn is not None:
        found.append(_named(base, base.args, OPERATOR))
    if numbers and base.args:
        number = _first_nonzero(base.args[0])
        found.append(_named(base, (number,), NUMBER))
        if fn is not None:
            found.append(_named(base, (number,), f"{OPERATOR}, {NUMBER}"))
    return found


def _operand_base(sample: SampleInput, operands: int) -> bool:
    x, args = sample.input, sample.args
    if not isinstance(x, torch.Tensor) or x.numel() < 4 or sample.kwargs or len(args) != operands:
        return False
    return all(isinstance(a, torch.Tensor) and a.numel() for a in args)


def _first_nonzero(t: torch.Tensor) -> bool | int | float:
    flat = t.detach().reshape(-1)
    nonzero = flat[flat != 0]
    return (nonzero if nonzero.numel() else flat)[0].item()


def _named(base: SampleInput, args: tuple, name: str) -> SampleInput:
    """``base`` with ``args`` (its tensors fresh leaves), named for its form."""
    fresh = [
        a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
        for a in (base.input, *args)
    ]
    return SampleInput(fresh[0], args=tuple(fresh[1:]), name=name)
