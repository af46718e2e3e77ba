"""What explains a difference that is not XLA's kernel being wrong, in the worker: randomness
OpInfo hides (it seeds the op itself), the order of a reduction over edge values, and XLA:CPU's
subnormal flushing (inputs, results and intermediates written as zero); and the reduction of a
loss whose terms are right (a cause shared by every loss that reduces so). judge.py asks these
once a sample's results differ; each answer is a named skip, the platform class, or a cause."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.testing._comparison import default_tolerances
from torch.testing._internal.opinfo.core import ReductionOpInfo, SampleInput
from torch.utils._pytree import tree_leaves

import reprokit.tools.ops.worker.precision as precision
from reprokit.comparison.tensors import compare_tensor
from reprokit.tools.ops.worker.samples import FILLED, REDUCING


def inputs(sample: Any) -> list[torch.Tensor]:
    """The sample's tensors: its input's, its arguments' and its keyword arguments'."""
    leaves = tree_leaves((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def seeded(op: Any) -> bool:
    """OpInfo wraps its random ops (dropout in attention, rrelu, ...) in ``wrapper_set_seed``,
    which seeds torch's CPU generator inside the call: CPU's result is the same for every seed
    (the seed check cannot see it), XLA's generator another."""
    code = getattr(op.op, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


def mixed(op: Any, sample: Any, run: Callable, *, grad: bool) -> bool:
    """An edge-filled sample (samples.FILLED) of an op that is not elementwise: a sum of +-max
    and small values depends on the order of the additions, on any backend."""
    if getattr(sample, "name", "") != FILLED:
        return False
    if isinstance(op, ReductionOpInfo) or op.name in REDUCING:
        return True
    try:
        shape = torch.broadcast_shapes(*(t.shape for t in inputs(sample)))
        forward = run("cpu", forward=True) if grad else run("cpu")
    except Exception:  # no common shape: not elementwise
        return True
    return any(isinstance(t, torch.Tensor) and tuple(t.shape) != tuple(shape) for t in forward)


def flushed(run: Callable, leaf: int, target: list[Any], sample: Any) -> bool:
    """XLA:CPU flushes subnormal values to zero, inside an op as well (``3 / x`` as ``3 * (1 /
    x)``: 1 / 1e38 is subnormal): the difference is that alone when, of an elementwise op, it
    differs only at elements that read or make a subnormal value (``atan2`` of two is NaN); or
    when CPU gives the backend's result computing with flush-to-zero
    (``torch.set_flush_denormal``); or, where CPU's kernel leaves that out (half types), on
    inputs flushed so, its result flushed so too."""
    t = target[leaf]
    if not isinstance(t, torch.Tensor):
        return False
    c, f = run("cpu")[leaf], run("cpu", f64=True)[leaf]
    tiny = torch.finfo(t.dtype).tiny if t.is_floating_point() else 0.0
    if _confined(sample, c, t, lambda x: (x != 0) & (x.abs() < tiny), also=[c, f]):
        return True  # every element that differs reads or makes a subnormal (atan2 of two)
    try:
        ftz = run("cpu", flush=True)[leaf]
    except Exception:
        ftz = None
    if isinstance(ftz, torch.Tensor) and ftz.shape == t.shape and ftz.dtype == t.dtype:
        rtol, atol = default_tolerances(t)
        if bool(torch.isclose(ftz, t, rtol=rtol, atol=atol, equal_nan=True).all()):
            return True
    if not any(_subnormal(x) for x in inputs(sample)) and not _subnormal(run("cpu")[leaf]):
        return False
    try:
        again = run("cpu", given=sample.transform(_flush))
    except Exception:
        return False
    c = _flush(again[leaf])
    if not isinstance(c, torch.Tensor) or c.shape != t.shape:
        return False
    return compare_tensor("flushed", c, _flush(t)).allclose


def _confined(sample: Any, c: Any, t: Any, marks: Callable, also: Any = None) -> bool:
    """An elementwise result (the shape its inputs broadcast to) that differs only where some
    input element, or ``also`` (CPU's or float64's result), is marked by ``marks``."""
    tensors = all(isinstance(x, torch.Tensor) for x in (c, t))
    if not tensors or c.shape != t.shape or not t.is_floating_point():
        return False
    ins = [x for x in inputs(sample) if x.is_floating_point()]
    try:
        shape = torch.broadcast_shapes(*(x.shape for x in inputs(sample)))
    except RuntimeError:
        return False
    if not ins or tuple(shape) != tuple(c.shape):
        return False
    off = _off(c, t)
    marked = torch.zeros(c.shape, dtype=torch.bool)
    for x in [*ins, *([] if also is None else also)]:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            marked |= marks(x.detach().to(torch.float64)).expand(c.shape)
    return bool(off.any()) and bool(marked[off].all())


def _off(c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Where the backend's result is not CPU's within the dtype's tolerance (NaN equal NaN)."""
    rtol, atol = default_tolerances(t)
    return ~torch.isclose(c, t, rtol=rtol, atol=atol, equal_nan=True)


def _subnormal(t: Any) -> bool:
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
        return False
    tiny = torch.finfo(t.dtype).tiny
    a = t.detach().abs()
    return bool(((a > 0) & (a < tiny)).any())


def _flush(t: Any) -> Any:
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return t
    tiny = torch.finfo(t.dtype).tiny
    kept = t.detach().clone()
    kept[(kept.abs() < tiny)] = 0.0
    return kept.requires_grad_(t.requires_grad)


REDUCTIONS = ("mean", "sum")  # a loss's reductions that are torch ops of their own


def reduced(sample: Any, run: Callable, leaf: int, target: list[Any], device: str) -> str | None:
    """The reduction a loss's difference comes from, named once at that op (float16 ``mean``
    overflowing inside every loss that reduces by mean: poisson_nll_loss's inf), or None. Said
    where the sample reduces by ``mean`` (the default) or ``sum``, its loss unreduced
    (``reduction="none"``) agrees with CPU's, and the backend's own ``torch.mean`` (``sum``) of
    its unreduced result, on the backend, is its reduced result: the loss's terms are right,
    their reduction is not."""
    how = sample.kwargs.get("reduction", "mean")
    t = target[leaf]
    if how not in REDUCTIONS or not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return None
    kwargs = dict(sample.kwargs) | {"reduction": "none"}
    plain = SampleInput(sample.input, args=sample.args, kwargs=kwargs)
    try:
        c, u = run("cpu", given=plain)[leaf], run(device, given=plain)[leaf]
        again = getattr(torch, how)(u.to(device)).cpu()
    except Exception:  # no reduction argument, or the unreduced call fails: not this cause
        return None
    if not _rounding_apart(c, u) or again.shape != t.shape or again.dtype != t.dtype:
        return None
    return how if not bool(_off(again, t).any()) else None


def _rounding_apart(c: torch.Tensor, u: torch.Tensor) -> bool:
    """Two results the same but for a few ulps of rounding (precision.bound at their own size:
    poisson_nll_loss's terms in float16, 16.766 on CPU, 16.75 on XLA), NaN and inf alike."""
    if c.shape != u.shape or c.dtype != u.dtype or not c.is_floating_point():
        return False
    if not torch.equal(c.isnan(), u.isnan()) or not torch.equal(c.isinf(), u.isinf()):
        return False
    a, b = c.double(), u.double()
    near = (a - b).abs() <= precision.bound(a, a.abs(), c.dtype)
    return bool((near | (a == b) | a.isnan()).all())
