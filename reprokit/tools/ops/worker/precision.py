"""Precision apart from bugs, in the worker: a float16 or bfloat16 result that differs from CPU's
only by what the dtype's rounding of the op's terms explains is ``precision``, not a divergence.

Two conditions, both needed (docs/ops.md, "Precision apart from bugs"):

- **Within a bound scaled to the inputs.** Every element of XLA's result is within
  ``TERMS * eps(dtype) * terms + ULPS * ulp(result)`` of float64's, where ``terms`` is the sum
  of the magnitudes of the op's terms, taken as the first-order componentwise condition of the
  op at the sample, ``sum_i |dy/dx_i| |x_i|`` over its floating inputs, in float64 (for a sum
  of products, ``conv3d``'s or ``trapezoid``'s, that is the sum of the products' magnitudes,
  once per factor: what rounding each term to the dtype moves the result by), and never less
  than float64's result itself. It comes from the op's Jacobian where that is small, else is
  estimated from below by a few Jacobian-vector products with random signs (never larger than
  the exact sum: an estimate can only call more samples bugs). Where there is no derivative (or
  in a gradient pass) the result's own magnitude stands in. Unlike the fp64 rule's bound (a few
  times CPU's own error) it does not collapse where CPU happens to be exact, and it has no
  factor of the problem's size: an error that grows with the size leaves it, and stays a bug.
- **Right in float32.** The sample run again with its float16/bfloat16 tensors and dtype
  arguments in float32, on XLA and on CPU, is judged a match by the sweep's own rule: the
  lowering is right, only the dtype kept for its intermediates differs.
- **And stays right under stress.** The float32 sample with its input's mean shifted far from
  zero is still right (:func:`stressed`): an error that grows with the mean is a formula that
  cancels, a bug at a user's values however small it is at OpInfo's.

inf/NaN, a dtype or shape differing, errors and crashes are never precision (only ``value``
differences are asked about). A finding says its size in ulps of the dtype at the terms'
magnitude (XLA's and CPU's) and at the result itself, the share of the bound it takes, and the
dtype XLA keeps its intermediates in: the dtype itself where XLA's result is not its own
float32 result rounded to the dtype, float32 where it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.testing._internal.opinfo.core import SampleInput
from torch.utils._pytree import tree_flatten, tree_unflatten

LOW = (torch.float16, torch.bfloat16)
# eps(dtype) times the terms' magnitude: three roundings of half an ulp each (a term's product,
# its running sum, the result's conversion). Measured (docs/ops.md): the precision groups of
# issue 57 sit at 1.6 ulps of their terms at most; bilinear upsampling's source coordinates
# kept in bfloat16 (a bug) at 4.4; TERMS = 2 let that one through
TERMS = 1.5
ULPS = 2.0  # and ulps of the result: its own rounding and one last operation's
OUTPUTS = 1 << 20  # a result's elements at most for its terms
ENTRIES = 1 << 14  # a Jacobian's entries at most (beyond, the terms are estimated)
SIGNS = 4  # random sign vectors for an estimate
ROWS = 64  # a result's elements at most for a Jacobian taken row by row (unbatched)
SHIFT = 1000.0  # a stressed sample's input moved by this many times its largest magnitude
LARGEST_SHIFT = 1e30  # and by no more: float32's own range is not what is asked


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype``'s numbers at each ``|x|`` (float64): eps times the power of two
    below it; the smallest subnormal's at zero and below the smallest normal; inf at inf/NaN."""
    info = torch.finfo(dtype)
    a = x.detach().double().abs()
    _, exponent = torch.frexp(a.nan_to_num(0.0, 0.0, 0.0))  # a = m * 2**e, 0.5 <= m < 1
    spacing = torch.ldexp(torch.full_like(a, info.eps), exponent - 1)
    spacing = torch.where(a < info.tiny, info.tiny * info.eps, spacing)
    return torch.where(a.isfinite(), spacing, math.inf)


def bound(reference: torch.Tensor, terms: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The most a result in ``dtype`` may be off float64's ``reference`` by rounding alone:
    ``TERMS`` eps of the terms' magnitude (at least the result's own) and ``ULPS`` ulps."""
    magnitude = torch.maximum(terms.double(), reference.double().abs())
    return TERMS * torch.finfo(dtype).eps * magnitude + ULPS * ulp(reference, dtype)


def within(
    result: torch.Tensor, reference: torch.Tensor, terms: torch.Tensor, dtype: torch.dtype
) -> bool:
    """Every element of ``result`` within :func:`bound` of float64's (NaN where both are NaN
    and an infinity float64 has too count as equal; any other non-finite element is not)."""
    r, f = result.detach().double(), reference.detach().double()
    same = (r == f) | (r.isnan() & f.isnan())
    error = torch.where(same, 0.0, (r - f).abs()).nan_to_num(math.inf, math.inf, math.inf)
    close = f.isfinite() & (error <= bound(f, terms, dtype))
    return bool((same | close).all())


def used(
    result: torch.Tensor, reference: torch.Tensor, terms: torch.Tensor, dtype: torch.dtype
) -> float:
    """How much of :func:`bound` the largest difference takes (1: all of it), over the
    elements finite on both sides: how near a precision finding came to being a bug."""
    r, f = result.detach().double(), reference.detach().double()
    kept = r.isfinite() & f.isfinite()
    if not bool(kept.any()):
        return 0.0
    return float(((r - f).abs() / bound(f, terms, dtype))[kept].max())


def ulps(
    result: torch.Tensor,
    reference: torch.Tensor,
    dtype: torch.dtype,
    magnitude: torch.Tensor | None = None,
) -> float:
    """The largest difference from float64's result in ulps of ``dtype``: at the result itself,
    or (``magnitude``: the terms') at the larger of the two, where a result that cancels its
    terms is measured against what was rounded (elements finite on both sides)."""
    r, f = result.detach().double(), reference.detach().double()
    kept = r.isfinite() & f.isfinite()
    if not bool(kept.any()):
        return 0.0
    at = f if magnitude is None else torch.maximum(f.abs(), magnitude.double())
    return float(((r - f).abs() / ulp(at, dtype))[kept].max())


def terms(call: Callable, made: tuple[Any, ...], leaf: int) -> tuple[torch.Tensor, str] | None:
    """``sum_i |dy/dx_i| |x_i|`` for result ``leaf`` of ``call(*made)`` (the sample's arguments
    in float64, on CPU), over its floating tensors, each input taken alone (batch norm's running
    statistics have no derivative; the others still count), and how it was had (``jacobian``,
    or ``estimate`` where any input's Jacobian would be too large); None where no input has a
    derivative."""
    flat, spec = tree_flatten(made)
    where = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor) and v.is_floating_point()]

    def result(i: int, value: torch.Tensor) -> torch.Tensor:
        values = list(flat)
        values[i] = value
        input_, args, kwargs = tree_unflatten(values, spec)
        out = call(input_, *args, **kwargs)
        return tree_flatten(out)[0][leaf].reshape(-1)

    with torch.no_grad():
        shape = tree_flatten(call(*made[:1], *made[1], **made[2]))[0][leaf].shape
    size = math.prod(shape)
    if not where or not size or size > OUTPUTS:
        return None
    total, how = torch.zeros(size, dtype=torch.float64), set()
    for i in where:
        found = _magnitude(lambda v, i=i: result(i, v), flat[i].detach(), size)
        if found is not None:
            total += found[0]
            how.add(found[1])
    if not how:
        return None
    kept = torch.where(total.isfinite(), total, 0.0).reshape(shape)  # infinite: no help
    return kept, "estimate" if "estimate" in how else "jacobian"


def _magnitude(f: Callable, x: torch.Tensor, size: int) -> tuple[torch.Tensor, str] | None:
    """``sum_i |df/dx_i| |x_i|`` per element of ``f``'s (flat) result: exact from the Jacobian
    where it has at most ``ENTRIES`` entries; else from below, the largest of ``SIGNS``
    products ``|J (x * s)|`` for random signs ``s`` (each at most the sum, and for a sum of
    many terms within a small factor of it: Khintchine's inequality), each about two calls of
    the op (conv3d's 1,320 x 1,320 Jacobian took 1.4 s batched). None: no derivative."""
    if x.numel() == 0:
        return None
    try:
        with torch.enable_grad():
            if size * x.numel() <= ENTRIES:
                products = _jacobian(f, x, size).reshape(size, -1).abs() * x.reshape(1, -1).abs()
                flat = x.reshape(1, -1)
                return torch.where(flat == 0, 0.0, products).sum(1), "jacobian"  # 0 * inf: none
            draws = torch.Generator().manual_seed(0)
            found = torch.zeros(size, dtype=torch.float64)
            for _ in range(SIGNS):
                signs = torch.randint(0, 2, x.shape, generator=draws).to(x.dtype) * 2 - 1
                _, along = torch.autograd.functional.jvp(f, x, x * signs)
                found = torch.maximum(found, along.detach().abs().double().nan_to_num(0.0))
            return found, "estimate"
    except Exception:  # no derivative with respect to this input: it adds no term here
        return None


def widened(sample: Any) -> Any:
    """The sample with its float16 and bfloat16 tensors and dtype arguments in float32 (exact:
    the same numbers), each tensor requiring grad where it did."""

    def wide(value: Any) -> Any:
        if isinstance(value, torch.dtype):
            return torch.float32 if value in LOW else value
        if value.dtype in LOW:
            return value.detach().float().requires_grad_(value.requires_grad)
        return value

    return sample.transform(wide)


def intermediates(low: torch.Tensor, wide: torch.Tensor) -> str:
    """The dtype a result's intermediates are kept in: float32 where the result is its float32
    run's rounded to its dtype (NaN where NaN), else its own dtype."""
    rounded = wide.detach().to(low.dtype)
    holes = low.isnan() & rounded.isnan()
    same = bool(((low == rounded) | holes).all()) if low.shape == rounded.shape else False
    return "float32" if same else str(low.dtype).removeprefix("torch.")


def finding(
    leaves: Sequence[int],
    results: tuple[list[Any], list[Any], list[Any]],
    wide: tuple[list[Any], list[Any]],
    magnitudes: dict[int, torch.Tensor],
    proxy: str,
) -> dict[str, Any]:
    """The record of a precision finding: its size in ulps of the dtype at the terms'
    magnitude (``ulps``, XLA's; ``cpu_ulps``) and at the result itself (``result_ulps``), the
    largest over the results that differ, and the share of the bound it takes (``of_bound``);
    the dtype each keeps its intermediates in; and whether the terms (``terms``) or the
    result's magnitude (``result``) sized the bound."""
    cpu, target, ref = results
    cpu32, xla32 = wide
    k = leaves[0]
    dtype = target[k].dtype

    def size(side: list[Any], *, at_terms: bool = True) -> float:
        found = (ulps(side[j], ref[j], dtype, magnitudes[j] if at_terms else None) for j in leaves)
        return round(max(found), 1)

    return {
        "verdict": "precision",
        "leaf": k,
        "ulps": size(target),
        "cpu_ulps": size(cpu),
        "result_ulps": size(target, at_terms=False),
        "of_bound": round(max(used(target[j], ref[j], magnitudes[j], dtype) for j in leaves), 2),
        "intermediates": intermediates(target[k], xla32[k]),
        "cpu_intermediates": intermediates(cpu[k], cpu32[k]),
        "terms": proxy,
    }


def explain(
    sample: Any,
    run: Callable,
    results: tuple[list[Any], list[Any], list[Any] | None],
    leaves: Sequence[int],
    *,
    made: Callable[[], tuple[Callable, tuple[Any, ...]]] | None,
    agree: Callable[[int, Any, Any, Any], bool],
    fallbacks: Callable,
    device: str,
) -> dict[str, Any] | None:
    """The precision record of a sample whose results ``leaves`` differ by value, or None:
    each within the bound (``made``: the call and its float64 arguments, for the terms; None
    in a gradient pass, where the result's magnitude stands in), and the sample in float32
    right on the backend (``agree``: the sweep's rule on one result, with float64's)."""
    cpu, target, ref = results
    if ref is None or len(ref) != len(target):
        return None
    for k in leaves:
        t, f = target[k], ref[k]
        if not isinstance(t, torch.Tensor) or t.dtype not in LOW:
            return None
        if not isinstance(f, torch.Tensor) or f.shape != t.shape or f.is_complex():
            return None
    proxy, magnitudes = "result", {}
    for k in leaves:
        magnitudes[k] = ref[k].double().abs()
        if within(target[k], ref[k], magnitudes[k], target[k].dtype):
            continue  # within the result's own magnitude: the terms (a Jacobian) not needed
        sized = _terms(made, k)
        if sized is None or not within(target[k], ref[k], sized[0], target[k].dtype):
            return None
        magnitudes[k], proxy = sized
    wide = _float32(sample, run, fallbacks, device)
    if wide is None or len(wide[0]) != len(cpu) or len(wide[1]) != len(target):
        return None
    cpu32, xla32 = wide
    if not all(agree(k, c, t, ref[k]) for k, (c, t) in enumerate(zip(cpu32, xla32, strict=True))):
        return None
    grows = stressed(sample, run, agree, fallbacks, device)
    if grows:  # precision that grows is a bug: the sample stays a divergence, saying why
        return {"verdict": "differs", "grows": grows}
    return finding(leaves, (cpu, target, ref), wide, magnitudes, proxy)


def stressed(
    sample: Any, run: Callable, agree: Callable, fallbacks: Callable, device: str
) -> str | None:
    """What shows that a half type's error is not rounding alone, or None: the sample in
    float32 with its input's mean shifted far from zero (:data:`SHIFT` times its largest
    magnitude, plus one) is no longer right on the backend by the sweep's own rule. A formula
    that cancels (batch norm's variance as E[x^2] - E[x]^2, pytorch/xla#3249: float32
    [[10000.], [10001.]] gives +-158.1 where CPU gives +-1.0) is a few ulps of a half type at
    the sweep's small values and any size at a large mean."""
    wide = widened(sample)
    x = wide.input
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() < 2:
        return None
    offset = SHIFT * (float(x.detach().abs().max()) + 1)
    if not offset < LARGEST_SHIFT:  # inf, NaN or near float32's largest: nothing to learn
        return None
    moved = (x.detach() + offset).requires_grad_(x.requires_grad)
    shifted = SampleInput(moved, args=wide.args, kwargs=wide.kwargs)
    try:
        fallbacks(clear=True)
        target = run(device, given=shifted)
        if fallbacks():
            return None
        cpu, ref = run("cpu", given=shifted), run("cpu", f64=True, given=shifted)
    except Exception:
        return None
    if len(target) != len(cpu) or len(ref) != len(cpu):
        return None
    for k, (c, t) in enumerate(zip(cpu, target, strict=True)):
        if not agree(k, c, t, ref[k]):
            return (
                f"an error that grows: in float32 too once the input's mean is shifted by "
                f"{offset:.3g}, the backend is off where CPU is not"
            )
    return None


def _terms(made: Callable | None, leaf: int) -> tuple[torch.Tensor, str] | None:
    if made is None:
        return None
    try:
        call, args = made()
        return terms(call, args, leaf)
    except Exception:  # the result's magnitude stands in
        return None


def _float32(
    sample: Any, run: Callable, fallbacks: Callable, device: str
) -> tuple[list[Any], list[Any]] | None:
    """CPU's and the backend's results of the sample in float32; None where either raises or
    the backend fell back to CPU (its answer would be CPU's)."""
    wide = widened(sample)
    try:
        fallbacks(clear=True)
        xla32 = run(device, given=wide)
        if fallbacks():
            return None
        return run("cpu", given=wide), xla32
    except Exception:
        return None


def _jacobian(f: Callable, x: torch.Tensor, size: int) -> torch.Tensor:
    """``f``'s Jacobian at ``x``: batched (vmap over the rows, or over the columns by forward
    mode where the input is the smaller), one row at a time only for a small result (an op
    vmap cannot batch): conv3d's 1,320 x 1,320 took 2.9 s row by row, ~0.1 s batched."""
    jac = torch.autograd.functional.jacobian
    forward = x.numel() < size
    try:
        strategy = "forward-mode" if forward else "reverse-mode"
        return jac(f, x, vectorize=True, strategy=strategy)
    except Exception:
        if forward:
            try:
                return jac(f, x, vectorize=True)
            except Exception:
                pass
        if size > ROWS:
            raise
        return jac(f, x)
