"""The samples of one OpInfo in one dtype, in the worker (torch imported): OpInfo's own, made
the same each time (a fixed seed before each op), and ``--edge``'s, made from them; and a
sample written as Python source for its repro.

Edge values (docs/ops.md says why each): near the dtype's largest finite value, its square and
cube roots (where x * x and x ** 3 overflow), the log of its largest value (where exp
overflows: fp16 softplus for 11.1 < x <= 20), the smallest normal and subnormal values,
+-0, +-inf, NaN, and the boundaries of clipping activations and domains (+-1, 0, 3, 6, 20).
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.testing._internal.opinfo.core import ReductionOpInfo, SampleInput, UnaryUfuncInfo
from torch.utils._pytree import tree_flatten, tree_unflatten

import reprokit.tools.ops.worker.forms as forms

SEED = 0  # torch.manual_seed before each op's samples: the same samples in every process
LARGE = 70_000  # elements of the large reduction sample: past 2^16, where fp16 counts overflow
BASE_MAX = 4096  # elements of the OpInfo sample the edge samples are made from, at most
LOWERING_TRIES = 20  # samples tried, largest first, for one XLA lowers (a fallback: no compile)
FILLED = "edge-filled"  # the name of a sample whose tensors hold the edge values over and over
NAN = "nan-seeded"  # the name of a sample whose one small tensor starts with NaN
EMPTY_DIMS = "empty dim list"  # the name of a sample given dim=[]
NAN_SEEDED = 3  # tensors of a sample given a NaN each, at most (one sample each)
ARG_SETS = 3  # sets of arguments a unary op's line of edge values is called with, at most
LITERAL = 64  # elements a repro writes as a literal; a larger tensor goes into its .pt file
# Reductions OpInfo does not file as ReductionOpInfo, that get the large sample too
REDUCING = {
    "mean",
    "sum",
    "nansum",
    "std",
    "var",
    "std_mean",
    "var_mean",
    "norm",
    "logsumexp",
    "softmax",
    "log_softmax",
    "nn.functional.softmax",
    "nn.functional.log_softmax",
    "cumsum",
    "linalg.vector_norm",
    "linalg.norm",
    "nn.functional.normalize",
    "nn.functional.layer_norm",
    "nn.functional.adaptive_avg_pool1d",
    "nn.functional.adaptive_avg_pool2d",
    "nn.functional.avg_pool1d",
    # normalizations and pools reduce too: an edge-filled sample of them is order-dependent
    "nn.functional.batch_norm",
    "nn.functional.instance_norm",
    "nn.functional.group_norm",
    "nn.functional.rms_norm",
    "nn.functional.local_response_norm",
    "native_layer_norm",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "nn.functional.avg_pool2d",
    "nn.functional.avg_pool3d",
    "nn.functional.adaptive_avg_pool3d",
}


def edge_values(dtype: torch.dtype) -> list[float | int | bool]:
    """The values where kernels break, in ``dtype`` (docs/ops.md, "Edge values")."""
    if dtype == torch.bool:
        return [False, True]
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return [0, 1, -1, 2, info.max, info.min, info.max - 1, info.min + 1, 127, 255, 256]
    info = torch.finfo(dtype)
    big, eps = info.max, info.eps
    ends = [big, big * (1 - 4 * eps), math.sqrt(big), math.sqrt(big) * 1.01, big ** (1 / 3) * 1.1]
    exp = [math.log(big), math.log(big) * 1.2, 20.0, 30.0]  # exp overflows; softplus' threshold
    tiny = [info.tiny, info.tiny / 16, info.tiny * eps]  # the smallest normal, subnormals
    bounds = [0.0, 1.0, 1 - eps, 1 + 2 * eps, 0.5, 3.0, 6.0, 6 * (1 - eps), 6 * (1 + 2 * eps)]
    signed = [v for x in ends + exp + tiny + bounds for v in (x, -x)]
    return [*signed, math.inf, -math.inf, math.nan]


def op_samples(
    op: Any,
    dtype: torch.dtype,
    *,
    grad: bool,
    edge: bool,
    lowers: Callable[[SampleInput], bool] | None = None,
) -> Iterator[SampleInput]:
    """OpInfo's samples of ``op`` on CPU and the call forms they leave out (forms.py; ``edge``:
    the edge samples made from them instead, from a base sample that ``lowers`` says XLA
    lowers), the same in every process."""
    torch.manual_seed(SEED)
    made = op.sample_inputs("cpu", dtype, requires_grad=grad)
    if not edge:
        seen = []
        for sample in made:  # one by one: a generator that raises part-way is CPU's refusal
            seen.append(sample)  # after the samples it made (main._made_while_cpu_can)
            yield sample
        yield from forms.forms(op, seen, dtype)
        yield from forms.operand_forms(op, seen, dtype)
        return
    first = list(itertools.islice(made, 20))
    base = _base(first, lowers)
    if base is None:
        return
    values = edge_values(dtype)
    yield _filled(base, values, dtype, shifted=False)
    if sum(1 for t in _tensors(base) if t.dtype == dtype) > 1:
        yield _filled(base, values, dtype, shifted=True)
    if isinstance(op, UnaryUfuncInfo) and isinstance(base.input, torch.Tensor):
        yield from _lines(op, first, base, values, dtype)
    yield from _nan_seeded(base, len(values), dtype)
    yield from _empty_dim_list(first)
    if dtype.is_floating_point and (isinstance(op, ReductionOpInfo) or op.name in REDUCING):
        yield from _large(base, dtype)


def _lines(
    op: Any, first: list[SampleInput], base: SampleInput, values: list, dtype: torch.dtype
) -> Iterator[SampleInput]:
    """A unary op on every edge value at once: with its defaults unless it requires other
    arguments (threshold's: called so, the line was CPU's TypeError), and with each set of
    arguments its own samples pass (at most :data:`ARG_SETS`, the base's first)."""
    grad = base.input.requires_grad
    line = torch.tensor(values, dtype=dtype)
    sets: list[tuple[tuple, dict]] = []
    for sample in [base, *first]:
        if _tensors(sample) and len(_tensors(sample)) > 1:
            continue  # a tensor argument has its own shape: a line does not fit it
        chosen = (tuple(sample.args), dict(sample.kwargs))
        if chosen not in sets and len(sets) < ARG_SETS:
            sets.append(chosen)
    if _takes_defaults(op, first):
        yield SampleInput(line.clone().requires_grad_(grad))  # the op's defaults
    for args, kwargs in sets:
        if args or kwargs:
            yield SampleInput(line.clone().requires_grad_(grad), args=args, kwargs=kwargs)


def _takes_defaults(op: Any, first: list[SampleInput]) -> bool:
    """The op can be called with its input alone: one of its samples does, or its Python
    signature requires nothing else (a builtin's cannot be read: tried, as before, and a
    refusal is CPU's, a skip). softplus' samples all pass beta, yet its defaults are where
    float16 overflows."""
    if any(not s.args and not s.kwargs for s in first):
        return True
    try:
        params = list(inspect.signature(op.op).parameters.values())[1:]
    except (TypeError, ValueError):
        return True
    named = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    named += (inspect.Parameter.KEYWORD_ONLY,)
    return not any(p.default is p.empty and p.kind in named for p in params)


def _nan_seeded(base: SampleInput, values: int, dtype: torch.dtype) -> Iterator[SampleInput]:
    """For each tensor of ``dtype`` too small to hold every edge value (so that the filled
    sample has no NaN in it), the base sample with NaN as that tensor's first element: NaN in,
    a number out is then found for every elementwise op, whatever its samples' sizes."""
    if not dtype.is_floating_point:
        return
    leaves, spec = tree_flatten((base.input, base.args, base.kwargs))
    small = [
        i
        for i, leaf in enumerate(leaves)
        if isinstance(leaf, torch.Tensor) and leaf.dtype == dtype and 0 < leaf.numel() < values
    ]
    for i in small[:NAN_SEEDED]:
        seeded = list(leaves)
        x = leaves[i].detach().clone(memory_format=torch.contiguous_format)
        x.view(-1)[0] = math.nan
        seeded[i] = x.requires_grad_(leaves[i].requires_grad)
        input_, args, kwargs = tree_unflatten(seeded, spec)
        yield SampleInput(input_, args=args, kwargs=kwargs, name=NAN)


def _empty_dim_list(first: list[SampleInput]) -> Iterator[SampleInput]:
    """The first sample that passes ``dim`` by keyword, given ``dim=[]``: torch reduces over
    every dim then (amax, var, std, vector_norm), which XLA has read as over none
    (docs/examples/empty_dim_reductions.md). One per op: OpInfo's samples rarely hold it."""
    for sample in first:
        if "dim" in sample.kwargs and sample.kwargs["dim"] not in ([], ()):
            fresh = with_slot(sample, "dim", [])  # its tensors fresh leaves
            yield SampleInput(fresh.input, args=fresh.args, kwargs=fresh.kwargs, name=EMPTY_DIMS)
            return


def with_slot(sample: SampleInput, slot: int | str, value: Any) -> SampleInput:
    """``sample`` with one argument replaced (its tensors cloned: a fresh leaf each)."""
    leaves, spec = tree_flatten((sample.input, list(sample.args), dict(sample.kwargs)))
    input_, args, kwargs = tree_unflatten([_clone(v) for v in leaves], spec)
    if isinstance(slot, int):
        args[slot] = value
    else:
        kwargs[slot] = value
    return SampleInput(input_, args=tuple(args), kwargs=kwargs)


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    return value


def _base(
    first: list[SampleInput], lowers: Callable[[SampleInput], bool] | None = None
) -> SampleInput | None:
    """The OpInfo sample the edge samples start from: the one of most elements (at most
    :data:`BASE_MAX`) among the first twenty, or the next largest where ``lowers`` (run on
    XLA) says XLA ran it as a CPU fallback: adaptive_avg_pool2d falls back for an output size
    that does not divide the input and lowers a global pool, whose bfloat16 sum is a model's
    (at most :data:`LOWERING_TRIES`; none lowering, the largest)."""
    sized = [(sum(t.numel() for t in _tensors(s)), -i, s) for i, s in enumerate(first)]
    ranked = [s for size, _, s in sorted(sized, key=lambda x: x[:2], reverse=True)]
    ranked = [s for s in ranked if sum(t.numel() for t in _tensors(s)) <= BASE_MAX]
    if lowers is not None:
        for sample in ranked[:LOWERING_TRIES]:
            if lowers(sample):
                return sample
    return ranked[0] if ranked else None


def _tensors(sample: SampleInput) -> list[torch.Tensor]:
    leaves, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _filled(base: SampleInput, values: list, dtype: torch.dtype, *, shifted: bool) -> SampleInput:
    """``base`` with each of its tensors of ``dtype`` holding the edge values over and over
    (``shifted``: each tensor starting further along them, so that pairs of values differ)."""
    leaves, spec = tree_flatten((base.input, base.args, base.kwargs))
    count = 0
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor) and leaf.dtype == dtype and leaf.numel():
            start = 7 * count if shifted else 0
            cycle = [values[(start + j) % len(values)] for j in range(leaf.numel())]
            filled = torch.tensor(cycle, dtype=dtype).reshape(leaf.shape)
            leaves[i] = filled.requires_grad_(leaf.requires_grad)
            count += 1
    input_, args, kwargs = tree_unflatten(leaves, spec)
    return SampleInput(input_, args=args, kwargs=kwargs, name=FILLED)


def _large(base: SampleInput, dtype: torch.dtype) -> Iterator[SampleInput]:
    """A reduction over more than 2^16 elements: a 1-D tensor of ones alone, and the base
    sample with its input's last dimension grown (its other arguments kept)."""
    grad = isinstance(base.input, torch.Tensor) and base.input.requires_grad
    yield SampleInput(torch.ones(LARGE, dtype=dtype).requires_grad_(grad))
    x = base.input
    if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.numel():
        rows = math.prod(x.shape[:-1])
        shape = (*x.shape[:-1], -(-LARGE // rows))
        yield SampleInput(
            torch.ones(shape, dtype=dtype).requires_grad_(grad), args=base.args, kwargs=base.kwargs
        )


def describe(sample: SampleInput) -> dict[str, Any]:
    """What a record says of a sample: its tensors' shapes and dtypes, its other arguments, its
    size (the smallest witness is the one of fewest elements)."""
    tensors = _tensors(sample)
    shapes = [f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in tensors]
    others = {k: _short(v) for k, v in sample.kwargs.items() if not isinstance(v, torch.Tensor)}
    args = [_short(a) for a in sample.args if not isinstance(a, torch.Tensor)]
    return {
        "tensors": shapes,
        "args": args,
        "kwargs": others,
        "numel": sum(t.numel() for t in tensors),
    } | ({"name": sample.name} if sample.name else {})  # edge-filled, nan-seeded, call form


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Unwritable(Exception):
    """A sample argument that has no Python source (a generator, an object of a class)."""


def source(value: Any, saved: list[torch.Tensor]) -> str:
    """``value`` as Python source for a repro: a small tensor as a literal, a large one as
    ``T[i]`` (appended to ``saved``, which the repro loads from its .pt file)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        dtype = f"torch.{str(value.dtype).removeprefix('torch.')}"
        if value.numel() == 0:
            return f"torch.zeros({tuple(value.shape)}, dtype={dtype})"
        if value.numel() <= LITERAL and not value.is_complex():
            return f"torch.tensor({_literal(value.tolist())}, dtype={dtype})"
        saved.append(value.clone())
        return f"T[{len(saved) - 1}]"
    if isinstance(value, torch.dtype | torch.memory_format | torch.layout):
        return str(value)
    if isinstance(value, torch.Size):
        return repr(tuple(value))
    if isinstance(value, list | tuple):
        inner = ", ".join(source(v, saved) for v in value)
        return (
            f"[{inner}]"
            if isinstance(value, list)
            else f"({inner}{',' if len(value) == 1 else ''})"
        )
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {source(v, saved)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return _literal(value)
    if value is None or isinstance(value, bool | int | str | complex) or value is Ellipsis:
        return repr(value)
    if isinstance(value, slice):
        return f"slice({value.start!r}, {value.stop!r}, {value.step!r})"
    raise Unwritable(f"{type(value).__name__} argument")


def _literal(value: Any) -> str:
    """A nested list of numbers as source, infinities and NaN as ``float("inf")``."""
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        name = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return f'float("{name}")'
    return repr(value)
