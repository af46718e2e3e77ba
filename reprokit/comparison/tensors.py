"""Compare named tensors: per-tensor differences, mismatch counts, and the first divergence.

One module serves the runner (stage vs reference stage), the reports and ``reprokit diff``.
Tensors are compared one at a time so that memory stays near the size of the largest one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch.testing._comparison import default_tolerances  # torch.testing's per-dtype table

from reprokit.records import Comparison, Worst

if TYPE_CHECKING:
    from collections.abc import Mapping

WORST = 3  # elements shown per mismatching tensor, pytest.approx style
FP64_TOL = 1e-4  # the fp64 method's tolerance when the case gives no atol (dynamo's default)


def _tolerances(a: torch.Tensor, b: torch.Tensor, rtol: float | None, atol: float | None):
    default_rtol, default_atol = default_tolerances(a, b)
    return (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)


def compare_tensor(
    name: str,
    expected: torch.Tensor,
    actual: torch.Tensor,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    reference: str = "reference",
    target: str = "target",
    arbiter: torch.Tensor | None = None,
) -> Comparison:
    """Compare one tensor pair; a shape or dtype mismatch is reported, never raised.

    With an ``arbiter`` (the same tensor computed in float64) the verdict is the dynamo
    accuracy minifier's (:func:`_same`); the figures stay those of the plain comparison.
    """
    common = {"tensor": name, "reference": reference, "target": target}
    dtype = str(actual.dtype).removeprefix("torch.")
    if actual.shape != expected.shape:
        return _other_shape(common, dtype, expected, actual)
    case_atol = atol
    rtol, atol = _tolerances(actual, expected, rtol, atol)
    same_dtype = actual.dtype == expected.dtype
    tally = _tally(actual, expected, rtol, atol)
    dtype_note = "" if same_dtype else _dtype_note(actual, expected, tally, reference, target)
    allclose = tally.mismatched == 0 and not dtype_note
    errors = bound = None
    if arbiter is not None and arbiter.shape == actual.shape:
        errors = (_rmse(arbiter, expected), _rmse(arbiter, actual))
        tol = FP64_TOL if case_atol is None else case_atol
        allclose = not dtype_note and _same(expected, actual, arbiter, errors, tol)
        bound = _bound(actual, errors[0], tol)
    return Comparison(
        **common,
        shape=tuple(actual.shape),
        dtype=dtype,
        max_abs=tally.max_abs,
        max_rel=tally.max_rel,
        mismatched=tally.mismatched,
        total=actual.numel(),
        allclose=allclose,
        rtol=rtol,
        atol=atol,
        equal=same_dtype and tally.all_zero,
        nan=(tally.nan[0], tally.nan[1]),
        inf=(tally.inf[0], tally.inf[1]),
        worst=_worst(tally, actual, expected, arbiter, judged=not allclose),
        note=dtype_note,
        method="allclose" if arbiter is None else "fp64",
        errors=errors,
        bound=bound,
    )


def _dtype_note(
    actual: torch.Tensor, expected: torch.Tensor, tally: _Tally, reference: str, target: str
) -> str:
    """Two dtypes, still a mismatch (a program downstream sees another type), said in words:
    ``values equal; dtype bool on xla, int64 on cpu`` where only the dtype differs (XLA's
    cumsum of a bool tensor, whose values are equal while they stay 0 or 1)."""
    mine, theirs = (str(t.dtype).removeprefix("torch.") for t in (actual, expected))
    said = f"dtype {mine} on {target}, {theirs} on {reference}"
    return f"values equal; {said}" if tally.all_zero else said


def _other_shape(
    common: dict[str, str], dtype: str, expected: torch.Tensor, actual: torch.Tensor
) -> Comparison:
    """Tensors of two shapes: nothing to compare element-wise, every element mismatched."""
    return Comparison(
        **common,
        shape=tuple(actual.shape),
        dtype=dtype,
        max_abs=math.inf,
        max_rel=math.inf,
        mismatched=actual.numel(),
        total=max(actual.numel(), expected.numel()),
        allclose=False,
        note=f"shape {list(actual.shape)} vs {list(expected.shape)} in {common['reference']}",
    )


def _rmse(arbiter: torch.Tensor, other: torch.Tensor) -> float:
    """Root mean square error against the float64 result, computed in float64; an element
    equal to float64's adds nothing, an infinity included (inf - inf is NaN: a CPU that
    gives float64's inf had a NaN error, and where both sides' were NaN the verdict passed
    whatever else differed)."""
    if other.numel() == 0:
        return 0.0
    a, b = _as_float64(arbiter), _as_float64(other)
    return torch.sqrt(torch.mean(torch.where(a == b, 0.0, a - b) ** 2)).item()


def _same(
    expected: torch.Tensor,
    actual: torch.Tensor,
    arbiter: torch.Tensor,
    errors: tuple[float, float],
    tol: float,
) -> bool:
    """dynamo's accuracy rule (``same()`` in torch/_dynamo/utils.py, torch 2.9): close at
    rtol = atol = tol; else the target's RMSE against float64 at most a few times the
    reference's (3x for half types, small tensors, 1x1 images and a large tol, else 2x) plus
    tol / 10. NaN in the reference alone, where float64 and the target agree, and NaN errors on
    both sides pass too. Integer and flag results too are judged against the float64 run's
    (dynamo compares them exactly): an index computed from floats (T5's position buckets,
    ``.long()`` of a log) where the target equals float64 and the reference is the one off is
    not the target's mismatch."""
    a, e = (t.to(torch.uint8) if t.dtype == torch.bool else t for t in (actual, expected))
    if torch.allclose(a, e, rtol=tol, atol=tol, equal_nan=True):  # in their own dtype
        return True
    if arbiter.is_complex():  # the rule is for real numbers
        return False
    a, e = actual.double(), expected.double()
    if e.isnan().any() and not arbiter.isnan().any() and not a.isnan().any():
        if torch.allclose(arbiter, a, rtol=4e-2, atol=4e-2):  # the target is the better one
            return True
    ref_error, res_error = errors
    if math.isnan(ref_error) and math.isnan(res_error):
        return True
    return res_error <= _bound(actual, ref_error, tol)


def _bound(actual: torch.Tensor, ref_error: float, tol: float) -> float:
    """The most the target's RMSE against float64 may be: a few times the reference's own
    (3x for half types, small tensors, 1x1 images and a large tol, else 2x) plus tol / 10."""
    one_by_one = actual.dim() == 4 and actual.shape[-1] == actual.shape[-2] == 1
    half = actual.dtype in (torch.float16, torch.bfloat16)
    multiplier = 3.0 if half or actual.numel() < 1000 or one_by_one or tol >= 2e-2 else 2.0
    return multiplier * ref_error + tol / 10


CHUNK = 1 << 20  # elements compared at once: the float64 temporaries stay near 50 MiB


@dataclass
class _Tally:
    """What the chunks of one tensor pair add up to."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    mismatched: int = 0
    all_zero: bool = True  # every difference is zero (bitwise equal, NaNs aside)
    nan: list[int] = field(default_factory=lambda: [0, 0])  # reference, target
    inf: list[int] = field(default_factory=lambda: [0, 0])
    worst: list[tuple[float, int, float, float]] = field(default_factory=list)

    def top(self) -> list[tuple[float, int, float, float]]:
        """The largest mismatches over all chunks (each chunk kept its own few)."""
        return sorted(self.worst, key=lambda w: (-w[0], w[1]))[: min(WORST, self.mismatched)]


def _tally(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> _Tally:
    """Differences in float64, a chunk at a time, so that peak memory does not grow with the
    tensor; equal tensors of one dtype take a shortcut with the same result."""
    tally = _Tally()
    if actual.dtype == expected.dtype and torch.equal(actual, expected):  # so no NaN either
        if actual.is_floating_point() or actual.is_complex():
            count = int(actual.isinf().sum())
            tally.inf = [count, count]
        return tally
    a_flat, e_flat = actual.reshape(-1), expected.reshape(-1)
    for start in range(0, a_flat.numel(), CHUNK):
        a = _as_float64(a_flat[start : start + CHUNK])
        e = _as_float64(e_flat[start : start + CHUNK])
        _tally_chunk(tally, a, e, start, rtol, atol)
    return tally


def _tally_chunk(
    tally: _Tally, a: torch.Tensor, e: torch.Tensor, start: int, rtol: float, atol: float
) -> None:
    same = (a == e) | (a.isnan() & e.isnan())  # equal infinities and NaNs differ by nothing
    diff = torch.where(same, 0.0, (a - e).abs()).nan_to_num(math.inf, math.inf)
    # relative to a reference that is not zero: where it is, max_abs tells (no inf from 0)
    rel = torch.where((diff == 0) | (e == 0), 0.0, diff / e.abs()).nan_to_num(math.inf, math.inf)
    close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    mismatched = int((~close).sum())
    tally.max_abs = _nan_max(tally.max_abs, diff.max().item())
    tally.max_rel = _nan_max(tally.max_rel, rel.max().item())
    tally.mismatched += mismatched
    tally.all_zero = tally.all_zero and bool((diff == 0).all())
    tally.nan = [tally.nan[0] + int(e.isnan().sum()), tally.nan[1] + int(a.isnan().sum())]
    tally.inf = [tally.inf[0] + int(e.isinf().sum()), tally.inf[1] + int(a.isinf().sum())]
    if mismatched:
        key = torch.where(close, -1.0, diff)
        for i in _largest(key, min(WORST, mismatched)).tolist():
            tally.worst.append((key[i].item(), start + i, a[i].item(), e[i].item()))


def _largest(key: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest values, ties to the lowest index, so that the worst
    elements shown do not depend on how the tensor was cut into chunks."""
    kth = torch.topk(key, k).values[-1]
    above = (key > kth).nonzero().flatten()
    return torch.cat([above, (key == kth).nonzero().flatten()[: k - above.numel()]])


def _nan_max(x: float, y: float) -> float:
    """max() that keeps a NaN, as torch's max does."""
    return math.nan if math.isnan(x) or math.isnan(y) else max(x, y)


def _worst(
    tally: _Tally,
    actual: torch.Tensor,
    expected: torch.Tensor,
    arbiter: torch.Tensor | None,
    *,
    judged: bool,
) -> tuple[Worst, ...]:
    """The elements beyond allclose's tolerance that differ most; under the fp64 method, when
    every element is within it but the tensor is judged to differ (its error against float64
    beyond the bound), the elements farthest from float64: a report shows values either way."""
    if tally.worst or not judged or arbiter is None or arbiter.shape != actual.shape:
        return tuple(_worst_entry(w, actual.shape, arbiter) for w in tally.top())
    if actual.is_complex() or actual.numel() == 0:
        return ()
    a, e, f = (t.reshape(-1).double() for t in (actual, expected, arbiter))
    gap = torch.where(a == f, 0.0, (a - f).abs()).nan_to_num(math.inf)
    found = [
        (0.0, i, a[i].item(), e[i].item()) for i in _largest(gap, min(WORST, a.numel())).tolist()
    ]
    return tuple(_worst_entry(w, actual.shape, arbiter) for w in found)


def _worst_entry(
    worst: tuple[float, int, float, float], shape: torch.Size, arbiter: torch.Tensor | None
) -> Worst:
    """One worst element, with the float64 run's value there: what a report's witness table
    shows (XLA NaN where CPU and float64 give 1.0)."""
    _, flat, target, reference = worst
    index = torch.unravel_index(torch.tensor(flat), shape) if len(shape) else ()
    fp64 = None
    if arbiter is not None and arbiter.shape == shape and not arbiter.is_complex():
        fp64 = arbiter.reshape(-1)[flat].double().item()
    return Worst(tuple(int(i) for i in index), target, reference, fp64)


def _as_float64(t: torch.Tensor) -> torch.Tensor:
    """Differences are taken in float64 so that they are exact for every smaller dtype."""
    if t.is_complex():
        return t.abs().double()
    return t.double()


def compare_tensors(
    expected: Mapping[str, torch.Tensor],
    actual: Mapping[str, torch.Tensor],
    *,
    rtol: float | None = None,
    atol: float | None = None,
    reference: str = "reference",
    target: str = "target",
    arbiter: Mapping[str, torch.Tensor] | None = None,
) -> list[Comparison]:
    """Every tensor of ``actual`` (in its order) against ``expected``; names on one side only
    are listed as not close, with a note. ``arbiter``: the float64 run, for the fp64 method."""
    names = list(actual) + [n for n in expected if n not in actual]
    results = []
    for name in names:
        if name not in expected or name not in actual:
            side = target if name in actual else reference
            results.append(_missing(name, side, reference, target))
            continue
        results.append(
            compare_tensor(
                name,
                expected[name],
                actual[name],
                rtol=rtol,
                atol=atol,
                reference=reference,
                target=target,
                arbiter=arbiter.get(name) if arbiter is not None else None,
            )
        )
    return results


def _missing(name: str, side: str, reference: str, target: str) -> Comparison:
    return Comparison(
        tensor=name,
        reference=reference,
        target=target,
        shape=None,
        dtype=None,
        max_abs=math.inf,
        max_rel=math.inf,
        mismatched=0,
        total=0,
        allclose=False,
        note=f"only in {side}",
    )
