"""What the float64 reference must know to be right about a low-precision sample, in the worker
(torch imported):

- :func:`pinned`: defaults that torch takes from the input's dtype, written out. A sample run
  in float64 would otherwise get float64's: ``nan_to_num``'s posinf / neginf are the dtype's
  largest and lowest finite values, so bfloat16's CPU result (3.39e38) looked wrong beside
  float64's (1.8e308, inf once rounded) and the sweep blamed CPU (``cpu_wrong``) where XLA was
  the one leaving inf.
- :func:`nan_lost`: NaN where CPU and float64 both give NaN and the backend a number
  (``threshold(NaN, 0.5, 7)`` is 7 on XLA). The fp64 rule cannot see it: float64's NaN makes
  both errors NaN, which that rule passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.testing._internal.opinfo.core import SampleInput


def _nan_to_num(sample: SampleInput, dtype: torch.dtype) -> dict[str, Any]:
    """nan_to_num(input, nan=0.0, posinf=None, neginf=None): None means the dtype's limits."""
    info = torch.finfo(dtype)
    given = dict(zip(("nan", "posinf", "neginf"), sample.args, strict=False)) | sample.kwargs
    return {k: v for k, v in (("posinf", info.max), ("neginf", info.min)) if given.get(k) is None}


def _rms_norm(sample: SampleInput, dtype: torch.dtype) -> dict[str, Any]:
    """rms_norm(input, normalized_shape, weight=None, eps=None): None means the eps of the type
    CPU computes in, float32 for float16 and bfloat16 too (its opmath type: measured, 1e-3 in
    bfloat16 normalizes to 0.945 as with float32's eps, 0.011 with bfloat16's)."""
    if len(sample.args) >= 3 or sample.kwargs.get("eps") is not None:
        return {}
    return {"eps": torch.finfo(torch.float32).eps}


def _rank_tolerance(sample: SampleInput, dtype: torch.dtype) -> dict[str, Any]:
    """matrix_rank and pinv with neither atol nor rtol: rtol is eps(dtype) * max(m, n)."""
    if sample.args or any(sample.kwargs.get(k) is not None for k in ("atol", "rtol", "tol")):
        return {}
    x = sample.input
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        return {}
    return {"rtol": torch.finfo(dtype).eps * max(x.shape[-2:])}


# OpInfo name -> the keyword arguments whose defaults depend on the dtype, for a sample
DEFAULTS: dict[str, Callable[[SampleInput, torch.dtype], dict[str, Any]]] = {
    "nan_to_num": _nan_to_num,
    "nn.functional.rms_norm": _rms_norm,
    "linalg.matrix_rank": _rank_tolerance,
    "linalg.pinv": _rank_tolerance,
}


def pinned(op: Any, sample: SampleInput, dtype: torch.dtype) -> SampleInput:
    """``sample`` with the defaults torch takes from ``dtype`` (a floating one) written out, for
    its run in float64; the sample itself where the op has none or they are given."""
    rule = DEFAULTS.get(op.name)
    if rule is None or not dtype.is_floating_point:
        return sample
    extra = rule(sample, dtype)
    if not extra:
        return sample
    return SampleInput(
        sample.input, args=sample.args, kwargs=dict(sample.kwargs) | extra, name=sample.name
    )


def nan_lost(c: torch.Tensor, t: torch.Tensor, f: torch.Tensor | None) -> str | None:
    """Where CPU (``c``) and float64 (``f``) both give NaN and the backend (``t``) a number: a
    line saying how many and the first, or None."""
    if f is None or f.shape != c.shape or not (c.is_floating_point() or c.is_complex()):
        return None
    lost = c.isnan() & f.isnan() & ~t.isnan()
    count = int(lost.sum())
    if not count:
        return None
    at = tuple(lost.nonzero()[0].tolist())
    return (
        f"{count}/{c.numel()} NaN (CPU and float64) are numbers on the backend; "
        f"at {list(at)}: backend {t[at].item():.6g}, cpu nan, float64 nan"
    )
