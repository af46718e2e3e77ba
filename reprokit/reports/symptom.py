"""What a target returns where its reference differs, in a few words and in its dtype's own
figures: the sentence a report's title and its pages share."""

from __future__ import annotations

import math
import re

from reprokit.records import Comparison


def reference_dtype(c: Comparison) -> str | None:
    """The reference's dtype where it is not the target's (the comparison's note says it)."""
    found = re.search(r"dtype \S+ on \S+, (\S+) on ", c.note)
    return found.group(1) if found else None


def value(number: float | None, dtype: str | None) -> str:
    """An element as its dtype prints it: NaN and inf named, a flag True or False."""
    if number is None:
        return "-"
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    if dtype == "bool":
        return str(bool(number))
    if dtype and not dtype.startswith(("float", "bfloat", "complex")):
        return f"{number:.0f}"
    return f"{number:.6g}"


def symptom(c: Comparison, reference: str) -> str:
    """What the target returns, in a few words: another dtype, NaN, inf, other values."""
    if other := reference_dtype(c):
        equal = " (the values equal)" if c.note.startswith("values equal") else ""
        return f"returns {c.dtype} where {reference} returns {other}{equal}"
    worst = c.worst[0] if c.worst else None
    if worst is None and c.errors is not None:
        e_ref, e_target = c.errors
        return f"is farther from float64 than {reference} (RMSE {e_target:.3g}, not {e_ref:.3g})"
    if worst is None:
        return f"differs from {reference} (max abs {c.max_abs:.3g})"
    got, want = value(worst.target, c.dtype), value(worst.reference, c.dtype)
    agree = worst.fp64 is not None and floating(c) and near(worst.reference, worst.fp64)
    return f"returns {got} where {reference}{' and float64 give' if agree else ' gives'} {want}"


def near(a: float, b: float) -> bool:
    """Near enough to say "CPU and float64 give": equal (infinities too) or within 1%."""
    return a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-2 * max(1, abs(b)))


def floating(c: Comparison) -> bool:
    """A floating result on both sides: float64's figures say something only for those."""
    kinds = (c.dtype, reference_dtype(c) or c.dtype)
    return all(k and k.startswith(("float", "bfloat", "complex")) for k in kinds)
