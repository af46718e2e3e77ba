"""One sample judged, in the worker: run on CPU, in float64 on CPU and on the backend, each of
the backend's results judged by its error against float64 relative to CPU's own (the ``fp64``
method of captured programs: :func:`reprokit.comparison.tensors.compare_tensor`), integers and
bools exactly, shape and dtype first. What cannot be compared is a skip with its reason."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.testing._comparison import default_tolerances
from torch.utils._pytree import tree_leaves, tree_map

import reprokit.tools.ops.worker.explain as explain
import reprokit.tools.ops.worker.forms as forms
import reprokit.tools.ops.worker.precision as precision
import reprokit.tools.ops.worker.reference as reference
from reprokit.comparison.tensors import compare_tensor

# Ops whose integer results are indices chosen among equal values (any is right): with ties in
# the input only their values are compared
INDEX_OPS = {
    "sort",
    "argsort",
    "msort",
    "topk",
    "mode",
    "kthvalue",
    "max",
    "min",
    "argmax",
    "argmin",
    "median",
    "nanmedian",
    "cummax",
    "cummin",
    "unique",
    "unique_consecutive",
}
# Decompositions that are unique only up to signs or phases: any of them is right
NOT_UNIQUE = {
    "svd",
    "linalg.svd",
    "linalg.eig",
    "linalg.eigh",
    "pca_lowrank",
    "svd_lowrank",
    "linalg.svdvals_rank_restricted",
    "linalg.qr",
    "qr",
    "geqrf",
    "linalg.householder_product",
    "linalg.eigvals",
    "linalg.eigvalsh",
}
UNSIGNED = {torch.uint8, torch.uint16, torch.uint32, torch.uint64}


class Skip(Exception):
    """The sample cannot be compared; the message says why."""


def move(sample: Any, device: str, *, f64: bool = False) -> tuple[Any, tuple, dict]:
    """The sample's arguments on ``device`` (``f64``: floating tensors and dtypes in float64),
    each tensor a new leaf that requires grad where the sample's did."""

    def to(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            dtype = _wide(value.dtype) if f64 else value.dtype
            return value.detach().to(device, dtype).requires_grad_(value.requires_grad)
        if f64 and isinstance(value, torch.dtype):
            return _wide(value)
        return value

    input_, args, kwargs = tree_map(to, (sample.input, tuple(sample.args), dict(sample.kwargs)))
    if "device" in kwargs:  # a factory function's device
        kwargs["device"] = device
    return input_, args, kwargs


def _wide(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_complex:
        return torch.complex128
    return torch.float64 if dtype.is_floating_point else dtype


def evaluate(
    call: Callable,
    sample: Any,
    device: str,
    *,
    grad: bool,
    dtype: torch.dtype,
    f64: bool = False,
    inplace: bool = False,
) -> list[Any]:
    """The results (``grad``: the gradients of the sample's inputs that require grad, for a
    fixed random cotangent) of ``call`` on the sample on ``device``, on CPU (``inplace``: call
    writes into the input, a copy of the sample's)."""
    input_, args, kwargs = move(sample, device, f64=f64)
    if inplace and isinstance(input_, torch.Tensor):  # .to() of CPU to CPU is the same tensor
        input_ = input_.clone()
    out = call(input_, *args, **kwargs)  # seeded by the caller: another seed finds random ops
    if grad:
        out = gradients(out, [t for t in tree_leaves((input_, args)) if _needs_grad(t)], dtype)
    return [_on_cpu(leaf) for leaf in _fetched(tree_leaves(out))]


def gradients(out: Any, ins: list[torch.Tensor], dtype: torch.dtype) -> tuple[Any, ...]:
    """d(outs . g)/d ``ins``, g the fixed random :func:`cotangent` of each result that needs
    a gradient."""
    outs = [o for o in tree_leaves(out) if _needs_grad(o)]
    if not ins or not outs:
        raise Skip("no differentiable input or result")
    cts = [cotangent(o, j, dtype) for j, o in enumerate(outs)]
    return torch.autograd.grad(outs, ins, cts, allow_unused=True)


def _fetched(leaves: list[Any]) -> list[Any]:
    """The leaves, those on XLA brought to CPU together: one graph for all of an op's results
    (as a step's outputs are), not one compile and run per result that re-traces the others."""
    on_xla = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor) and x.is_xla]
    if len(on_xla) < 2:
        return leaves
    import torch_xla

    fetched = torch_xla._XLAC._xla_get_cpu_tensors([leaves[i].detach() for i in on_xla])
    kept = list(leaves)
    for i, tensor in zip(on_xla, fetched, strict=True):
        kept[i] = tensor
    return kept


def cotangent(out: torch.Tensor, j: int, dtype: torch.dtype) -> torch.Tensor:
    """The j-th result's incoming gradient: the same values in every run (made in ``dtype``,
    the sample's, then cast), as the repro makes it."""
    made = torch.randn(out.shape, generator=torch.Generator().manual_seed(j))
    return made.to(dtype).to(out)


def _needs_grad(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad


def _on_cpu(leaf: Any) -> Any:
    if isinstance(leaf, torch.Tensor):
        return leaf.detach().cpu()
    if isinstance(leaf, bool | int | float | complex):
        return torch.tensor(leaf)
    return leaf


def judge(
    op: Any,
    sample: Any,
    dtype: torch.dtype,
    device: str,
    *,
    grad: bool,
    fallbacks: Callable,
    inplace: bool = False,
) -> dict[str, Any]:
    """The verdict on one sample: ``match``, ``differs`` (with its kind), ``skip`` (with its
    reason), ``platform`` (subnormal flushing), ``precision`` (a half type's rounding:
    precision.py) or ``cpu_wrong`` (the backend agrees with float64, CPU does not: torch's
    kernel)."""
    begun = time.monotonic()
    try:
        found = _judge(op, sample, dtype, device, grad=grad, fallbacks=fallbacks, inplace=inplace)
    except Skip as why:
        found = {"verdict": "skip", "reason": str(why)}
    return found | {"seconds": round(time.monotonic() - begun, 4)}


def _judge(
    op: Any,
    sample: Any,
    dtype: torch.dtype,
    device: str,
    *,
    grad: bool,
    fallbacks: Callable,
    inplace: bool,
) -> dict[str, Any]:
    if op.name in NOT_UNIQUE:
        raise Skip("decomposition unique only up to signs or phases")
    run = _runner(op, sample, dtype, grad=grad, inplace=inplace)
    try:
        cpu = run("cpu")
    except Skip:
        raise
    except Exception as exc:
        raise Skip(f"CPU raises {type(exc).__name__}") from None
    try:
        target = run(device)
    except Skip:
        raise
    except Exception as exc:  # the backend's refusal is the finding
        if "to be on cpu" in str(exc):  # an argument torch takes on CPU only, moved by us
            raise Skip("an argument the op takes on CPU only (moved to the device)") from None
        return {"verdict": "differs", "kind": "error", "detail": _first_line(exc)}
    # Before any other CPU run: nearly half of a whole sweep's samples fall back (logspace,
    # max_pool with indices, upsampling), and their verdict is known here
    fell = fallbacks()
    if fell:
        raise Skip(f"CPU fallback ({', '.join(sorted(fell))})")
    if len(target) != len(cpu):
        return {
            "verdict": "differs",
            "kind": "shape",
            "detail": f"{len(target)} results on {device}, {len(cpu)} on CPU",
        }
    ties = _index_op(op.name) and _ties(sample)
    if ties and grad:
        raise Skip("index ties in a gradient: any of the equal values' is right")
    tied = {"ties": True} if ties else {}
    if _identical(cpu, target):  # float64 could only say CPU and the backend are both off
        return {"verdict": "match"} | tied
    where = {"device": device, "fallbacks": fallbacks, "inplace": inplace}
    return _verdict(op, sample, run, cpu, target, grad=grad, ties=ties, **where) | tied


def _verdict(
    op: Any,
    sample: Any,
    run: Callable,
    cpu: list[Any],
    target: list[Any],
    *,
    grad: bool,
    ties: bool,
    device: str,
    fallbacks: Callable,
    inplace: bool,
) -> dict[str, Any]:
    """The verdict where the backend's results are not CPU's exactly: judged against float64;
    a difference that another seed, OpInfo's own seeding, a reduction's order, subnormal
    flushing or a half type's rounding (precision.py) explains is said so; one a loss's
    reduction makes names it (``cause``). The float64 and second-seed runs happen only here."""
    try:
        ref = run("cpu", f64=True)
    except Exception:
        ref = None
    verdicts = []
    for k, (c, t) in enumerate(zip(cpu, target, strict=True)):
        f = ref[k] if ref is not None and len(ref) == len(cpu) else None
        found = _leaf(k, c, t, f, sample, ties=ties)
        if found is not None:
            verdicts.append(found | {"leaf": k})
    bad = [v for v in verdicts if v["verdict"] == "differs"]
    chosen = bad[0] if bad else (verdicts[0] if verdicts else {"verdict": "match"})
    valued = chosen["verdict"] == "cpu_wrong" or chosen.get("kind") in ("value", "nan-inf")
    if not valued:
        return chosen
    # A random op differs from the backend whatever else: CPU against itself tells it
    if not _same_leaves(cpu, run("cpu", seed=1)):
        raise Skip("random: CPU gives other values for another seed")
    if not bad:
        return chosen
    if explain.seeded(op):
        raise Skip("random: OpInfo seeds the op itself (wrapper_set_seed), XLA's generator differs")
    if explain.mixed(op, sample, run, grad=grad):
        raise Skip("edge values mixed by a reduction: order-dependent")
    leaf = chosen["leaf"]
    if explain.flushed(run, leaf, target, sample):
        return {"verdict": "platform", "reason": "subnormal flushing", "leaf": leaf}
    where = {"device": device, "fallbacks": fallbacks, "inplace": inplace, "grad": grad}
    rounded = _precision(op, sample, run, (cpu, target, ref), bad, **where)
    if rounded is not None and "grows" in rounded:  # rounding at these values, not at others
        return chosen | {"detail": f"{chosen['detail']}; {rounded['grows']}"}
    if rounded is not None:
        return rounded | {"detail": chosen["detail"]}
    cause = None if grad else explain.reduced(sample, run, leaf, target, device)
    return chosen | ({"cause": cause} if cause else {})


def _precision(
    op: Any,
    sample: Any,
    run: Callable,
    results: tuple[list[Any], list[Any], list[Any] | None],
    bad: list[dict[str, Any]],
    *,
    device: str,
    fallbacks: Callable,
    inplace: bool,
    grad: bool,
) -> dict[str, Any] | None:
    """The precision record where every result that differs does so by value alone, within
    what its half type's rounding explains and right in float32 (precision.py); else None."""
    if any(v.get("kind") != "value" for v in bad):
        return None  # inf/NaN, a dtype or a shape: a bug whatever the dtype
    call = call_for(op, sample, inplace=inplace)

    def made() -> tuple[Callable, tuple[Any, ...]]:
        fresh = (lambda x, *a, **k: call(x.clone(), *a, **k)) if inplace else call
        return fresh, move(sample, "cpu", f64=True)

    def agree(k: int, c: Any, t: Any, f: Any) -> bool:  # the sweep's own rule, in float32
        found = _leaf(k, c, t, f, sample, ties=False)
        return found is None or found["verdict"] != "differs"

    leaves = [v["leaf"] for v in bad]
    where = {"fallbacks": fallbacks, "device": device, "made": None if grad else made}
    return precision.explain(sample, run, results, leaves, agree=agree, **where)


def _identical(cpu: list[Any], target: list[Any]) -> bool:
    """Every result the same on both: shapes, dtypes, values bit for bit (NaN where NaN)."""
    for c, t in zip(cpu, target, strict=True):
        if not isinstance(c, torch.Tensor) or not isinstance(t, torch.Tensor):
            if type(c) is not type(t) or c != t:
                return False
            continue
        if c.shape != t.shape or c.dtype != t.dtype:
            return False
        if c.is_floating_point() or c.is_complex():
            holes = c.isnan()
            if not torch.equal(holes, t.isnan()):
                return False
            c, t = c.masked_fill(holes, 0), t.masked_fill(holes, 0)
        if not torch.equal(c, t):
            return False
    return True


def lowering(
    op: Any, dtype: torch.dtype, device: str, fallbacks: Callable, timeout: int
) -> Callable:
    """A check of whether XLA lowers a sample of ``op`` (runs it without a CPU fallback), for
    choosing the edge samples' base (samples.op_samples): the edge samples of a fallback are
    all skips. A sample that raises counts as lowered: its error is the sweep's to judge. The
    graph compiled here is the one the edge samples reuse, their shapes being the base's.
    Past ``timeout`` seconds the worker dies (SIGALRM), as for a sample that hangs."""

    def lowers(sample: Any) -> bool:
        fallbacks(clear=True)
        signal.alarm(timeout)
        try:
            with torch.no_grad():
                evaluate(op.op, sample, device, grad=False, dtype=dtype)
        except Exception:
            return True
        finally:
            signal.alarm(0)
        return not fallbacks()

    return lowers


def call_for(op: Any, sample: Any, *, inplace: bool) -> Callable:
    """What a sample calls: forms.called's function."""
    return forms.called(op, sample, inplace=inplace)[0]


def _runner(op: Any, sample: Any, dtype: torch.dtype, *, grad: bool, inplace: bool) -> Callable:
    call = call_for(op, sample, inplace=inplace)

    def run(
        device: str,
        *,
        f64: bool = False,
        seed: int = 0,
        given: Any = None,
        forward: bool = False,
        flush: bool = False,
    ) -> list[Any]:
        torch.manual_seed(seed)
        backward = grad and not forward
        chosen = given or sample
        if f64:  # the dtype's defaults written out: float64 would take its own (reference.py)
            chosen = reference.pinned(op, chosen, dtype)
        with torch.enable_grad() if backward else torch.no_grad(), _flushing(flush):
            return evaluate(
                call, chosen, device, grad=backward, dtype=dtype, f64=f64, inplace=inplace
            )

    return run


@contextlib.contextmanager
def _flushing(on: bool) -> Iterator[None]:
    """CPU computing as XLA:CPU does (``on``): subnormal inputs read and results written as zero
    (the FTZ and DAZ bits, ``torch.set_flush_denormal``)."""
    if not on:
        yield
        return
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def _leaf(k: int, c: Any, t: Any, f: Any, sample: Any, *, ties: bool) -> dict[str, Any] | None:
    """The verdict on one result, None when it matches."""
    if not isinstance(c, torch.Tensor) or not isinstance(t, torch.Tensor):
        same = type(c) is type(t) and c == t
        return None if same else _differs("value", f"{t!r} on the backend, {c!r} on CPU")
    if c.shape != t.shape:
        return _differs("shape", f"shape {list(t.shape)} on the backend, {list(c.shape)} on CPU")
    if c.dtype != t.dtype:
        return _differs("dtype", f"dtype {_name(t.dtype)} on the backend, {_name(c.dtype)} on CPU")
    if not (c.is_floating_point() or c.is_complex()):
        return _exact(c, t, f, sample, ties=ties)
    arbiter = f if isinstance(f, torch.Tensor) and f.shape == c.shape else None
    if arbiter is not None and not (arbiter.is_floating_point() or arbiter.is_complex()):
        arbiter = None
    arbiter = _rounded(arbiter, c.dtype)
    lost = reference.nan_lost(c, t, arbiter)  # float64's NaN would make both errors NaN: passed
    if lost:
        return _differs("nan-inf", lost)
    mc, mt, mf = _masked(c, t, arbiter)
    cmp = compare_tensor(f"result {k}", mc, mt, reference="cpu", target="backend", arbiter=mf)
    if cmp.allclose:
        if cmp.mismatched and _far(c, arbiter) and not _far(t, arbiter):
            return {"verdict": "cpu_wrong", "detail": _said(cmp)}
        return None
    odd = (c.isnan() != t.isnan()) | (c.isinf() != t.isinf())
    kind = "nan-inf" if bool(odd.any()) else "value"
    if kind == "value" and not cmp.mismatched:  # every element within the dtype's tolerance
        return None
    found = _differs(kind, _said(cmp))
    return found | ({"owner": "torch"} if _far(c, arbiter) else {})


def _rounded(arbiter: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """float64's result, but inf where it rounds to inf in ``dtype`` (exp(100) in float16 is
    inf, rightly: CPU's inf there is no error, and an infinite error would excuse anything)."""
    if arbiter is None:
        return None
    low = arbiter.to(dtype)
    return torch.where(low.isinf() & arbiter.isfinite(), low.to(arbiter.dtype), arbiter)


def _masked(c: torch.Tensor, t: torch.Tensor, f: torch.Tensor | None) -> tuple[Any, Any, Any]:
    """The three results with the elements where CPU and the backend are both NaN set to 0:
    a NaN error there would make both errors NaN, which the fp64 rule passes whatever else
    differs (a NaN input among edge values would hide every other element)."""
    both = c.isnan() & t.isnan()
    if not bool(both.any()):
        return c, t, f
    zero = torch.zeros((), dtype=c.dtype)
    kept = torch.where(both, zero, c), torch.where(both, zero, t)
    return (*kept, None if f is None else torch.where(both, torch.zeros((), dtype=f.dtype), f))


def _exact(c: torch.Tensor, t: torch.Tensor, f: Any, sample: Any, *, ties: bool) -> dict | None:
    """Integers and bools: equal to CPU's, or to float64's run (an index computed from floats
    where CPU is the one off)."""
    if torch.equal(c, t):
        return None
    if isinstance(f, torch.Tensor) and f.shape == t.shape and torch.equal(f.to(t.dtype), t):
        return None
    if ties:
        return {"verdict": "match", "note": "index ties: values compared"}
    ins = explain.inputs(sample)
    if c.dtype in UNSIGNED and any(x.is_floating_point() and (x < 0).any() for x in ins):
        return {"verdict": "skip", "reason": "negative float to unsigned: undefined"}
    if c.dtype != torch.bool and any(_beyond(x, c.dtype) for x in ins):
        return {
            "verdict": "skip",
            "reason": "float to integer out of its range (inf, NaN): undefined",
        }
    wrong = (c != t).nonzero()
    first = tuple(wrong[0].tolist()) if len(wrong) else ()
    detail = f"{len(wrong)}/{c.numel()} differ; at {list(first)}: backend {t[first].item()}, "
    return _differs("value", detail + f"CPU {c[first].item()}")


def _beyond(x: torch.Tensor, dtype: torch.dtype) -> bool:
    """A floating tensor holding values an integer ``dtype`` cannot hold (C leaves their
    conversion undefined: CPU and XLA may give any value)."""
    if not x.is_floating_point():
        return False
    info = torch.iinfo(dtype)
    v = x.detach().double()
    return bool((~v.isfinite() | (v > info.max) | (v < info.min)).any())


def _differs(kind: str, detail: str) -> dict[str, Any]:
    return {"verdict": "differs", "kind": kind, "detail": detail}


def _said(cmp: Any) -> str:
    """A comparison in one line: counts, NaN and inf, both errors against float64, the worst."""
    parts = [f"{cmp.mismatched}/{cmp.total} differ, max abs {cmp.max_abs:.3g}"]
    if cmp.nan != (0, 0) or cmp.inf != (0, 0):
        parts.append(f"NaN cpu/backend {cmp.nan[0]}/{cmp.nan[1]}, inf {cmp.inf[0]}/{cmp.inf[1]}")
    if cmp.errors is not None:
        parts.append(f"RMSE vs float64 cpu {cmp.errors[0]:.3g}, backend {cmp.errors[1]:.3g}")
    for w in cmp.worst[:2]:
        fp64 = "" if w.fp64 is None else f", float64 {w.fp64:.6g}"
        parts.append(f"at {list(w.index)}: backend {w.target:.6g}, cpu {w.reference:.6g}{fp64}")
    return "; ".join(parts)


def _far(x: torch.Tensor, arbiter: torch.Tensor | None) -> bool:
    """``x`` is far from float64's result rounded to its dtype: beyond ten times torch.testing's
    tolerance of the dtype, or NaN / inf where float64 is not."""
    if arbiter is None:
        return False
    rounded = arbiter.to(x.dtype)
    rtol, atol = default_tolerances(x)
    return not bool(torch.isclose(x, rounded, rtol=10 * rtol, atol=10 * atol, equal_nan=True).all())


def _same_leaves(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if x.is_floating_point() or x.is_complex():
                if not torch.equal(x.nan_to_num(0), y.nan_to_num(0)):
                    return False
            elif not torch.equal(x, y):
                return False
        elif x is not y and x != y:
            return False
    return True


def _ties(sample: Any) -> bool:
    """The input holds a value twice (a NaN counts as equal to another)."""
    x = sample.input if isinstance(sample.input, torch.Tensor) else None
    if x is None or x.numel() < 2:
        return False
    flat = x.detach().reshape(-1).nan_to_num(nan=float("inf")) if x.is_floating_point() else x
    return torch.unique(flat.detach().reshape(-1)).numel() < x.numel()


def _index_op(name: str) -> bool:
    return name in INDEX_OPS or name in ("amax", "amin") or "max_pool" in name


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
