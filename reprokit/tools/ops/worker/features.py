"""A sample's features, in the worker (torch imported): the facts a group's trigger is stated
in (trigger.py). Its argument values by name (``dim``, ``keepdim``, ``p``, ``num_chunks``, ...:
the Python signature's names, else the aten schema's), shape facts (empty, 0-d, a size-1 dim,
inputs that broadcast, a non-contiguous input, uneven chunks where a chunk count and a dim say
so) and the classes of values its tensors hold (NaN, +-inf, -0, subnormal, near the dtype's
largest). Booleans and short strings: a record keeps them in ``described``.

And the other half of the trigger's loop: new samples made from the sweep's own by changing
one feature (an argument's value, a chunk count, a value class put in or taken out), those the
candidate rules disagree on chosen (trigger.choose), each judged as the sweep judges a sample.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import signal
from collections.abc import Callable, Iterator
from typing import IO, Any

import torch
from torch.testing._internal.opinfo.core import SampleInput
from torch.utils._pytree import tree_flatten, tree_unflatten

import reprokit.tools.ops.mesh as mesh
import reprokit.tools.ops.trigger as trigger
import reprokit.tools.ops.worker.judge as judge
import reprokit.tools.ops.worker.samples as samples
import reprokit.tools.ops.worker.sharding as sharding

CHUNKS = ("chunks", "num_chunks", "sections")  # arguments that are a chunk count
_NAMES: dict[tuple[str, str, int], list[str]] = {}


def of(op: Any, sample: SampleInput) -> dict[str, Any]:
    """The sample's features; {} where they cannot be read (never the sample's death)."""
    try:
        return _of(op, sample)
    except Exception:
        return {}


def _of(op: Any, sample: SampleInput) -> dict[str, Any]:
    tensors = samples._tensors(sample)
    first = _first(sample.input)
    found: dict[str, Any] = {
        "empty": any(t.numel() == 0 for t in tensors),
        "0-d": first is not None and first.dim() == 0,
        "size-1 dim": any(1 in t.shape for t in tensors),
        "broadcast": _broadcast(tensors),
        "non-contiguous": any(not t.is_contiguous() for t in tensors),
        "over 65504 elements": any(t.numel() > 65504 for t in tensors),
    }
    if first is not None:
        found["ndim"] = first.dim()
    named = {name: value for name, (_, value) in arguments(op, sample).items()}
    found |= {name: _short(v) for name, v in named.items() if _short(v) is not None}
    uneven = _uneven(named, sample.input)
    if uneven is not None:
        found["uneven chunks"] = uneven
    return found | value_classes(tensors) | _argument_classes(op, sample)


def _argument_classes(op: Any, sample: SampleInput) -> dict[str, bool]:
    """The value classes of each named floating tensor argument ("NaN in weight"), where a
    sample has two or more: a trigger then names the one that matters (a NaN in nll_loss's
    weight is not "an input holds NaN")."""
    tensors = named_tensors(op, sample)
    if len(tensors) < 2:
        return {}
    return {
        f"{cls}{trigger.IN}{name}": held
        for name, t in tensors.items()
        for cls, held in value_classes([t]).items()
    }


def named_tensors(op: Any, sample: SampleInput) -> dict[str, torch.Tensor]:
    """The sample's floating tensors that are whole arguments, by name: ``input`` for its
    input, the signature's (or aten schema's) name for a positional one, its keyword else."""
    found: dict[str, torch.Tensor] = {}
    if _floating(sample.input):
        found["input"] = sample.input
    names = _names(op, len(sample.args))
    for name, value in zip(names, sample.args, strict=True):
        if _floating(value):
            found[name] = value
    found |= {key: value for key, value in sample.kwargs.items() if _floating(value)}
    return found


def _first(value: Any) -> torch.Tensor | None:
    leaves, _ = tree_flatten(value)
    return next((t for t in leaves if isinstance(t, torch.Tensor)), None)


def _broadcast(tensors: list[torch.Tensor]) -> bool:
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) < 2:
        return False
    try:
        torch.broadcast_shapes(*shapes)
    except RuntimeError:
        return False
    return True


def arguments(op: Any, sample: SampleInput) -> dict[str, tuple[int | str, Any]]:
    """The sample's non-tensor arguments by name, each with where it is (its index among the
    positional arguments, or its keyword)."""
    found: dict[str, tuple[int | str, Any]] = {}
    for i, (name, value) in enumerate(zip(_names(op, len(sample.args)), sample.args, strict=True)):
        if not isinstance(value, torch.Tensor):
            found[name] = (i, value)
    for key, value in sample.kwargs.items():
        if not isinstance(value, torch.Tensor):
            found[key] = (key, value)
    return found


def _names(op: Any, count: int) -> list[str]:
    """The names of ``count`` positional arguments after the input: the Python function's
    where it names them, else those of the first aten schema that has enough."""
    key = (op.name, op.variant_test_name, count)
    if key not in _NAMES:
        _NAMES[key] = _named(op, count) or [f"arg{i + 1}" for i in range(count)]
    return _NAMES[key]


def _named(op: Any, count: int) -> list[str] | None:
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    try:
        params = inspect.signature(op.op).parameters.values()
        names = [p.name for p in params if p.kind in positional]
        if len(names) > count:
            return names[1 : count + 1]
    except (TypeError, ValueError):  # a builtin: no signature
        pass
    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{op.aten_name or op.name}")
    except Exception:
        return None
    for schema in schemas:
        names = [a.name for a in schema.arguments if not a.kwarg_only]
        if len(names) > count:
            return names[1 : count + 1]
    return None


def _short(value: Any) -> str | None:
    """An argument's value as a record keeps it (``-1``, ``True``, ``'reflect'``, ``(2, 2)``),
    None for one that is no plain value (a function, a tensor in a list)."""
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, list | tuple):
        if len(value) > 6 or not all(isinstance(v, bool | int | float) for v in value):
            return None
    elif value is not None and not isinstance(value, bool | int | float | str):
        return None
    return repr(value)


def _parse(text: str) -> Any:
    """Back from :func:`_short`."""
    if text.startswith("torch."):
        return getattr(torch, text.removeprefix("torch."))
    if text in ("inf", "-inf", "nan"):
        return float(text)
    return ast.literal_eval(text)


def _uneven(named: dict[str, Any], input_: Any) -> bool | None:
    """An input's size along ``dim`` is no multiple of the chunk count (it needs padding, or
    its last chunk is short); None where the sample has no chunk count."""
    count = next((named[n] for n in CHUNKS if isinstance(named.get(n), int)), None)
    dim = named.get("dim", 0)
    if not count or count < 1 or not isinstance(dim, int) or isinstance(count, bool):
        return None
    leaves, _ = tree_flatten(input_)
    sized = [t for t in leaves if isinstance(t, torch.Tensor) and -t.dim() <= dim < t.dim()]
    return any(t.shape[dim] % count for t in sized) if sized else None


def value_classes(tensors: list[torch.Tensor]) -> dict[str, bool]:
    """Which classes of values the floating tensors hold (all False for others)."""
    found = dict.fromkeys(trigger.VALUE_CLASSES, False)
    for t in tensors:
        x = t.detach()
        if x.is_complex():
            x = torch.view_as_real(x)
        if x.is_floating_point() and x.numel():
            for name, where in value_masks(x).items():
                found[name] = found[name] or bool(where.any())
    return found


def mutants(op: Any, sample: SampleInput, wanted: dict[str, list[str]]) -> Iterator[tuple]:
    """New samples made from ``sample``, each with one feature of ``wanted`` changed (an
    argument set to each value its op's samples had, a chunk count or dim varied, a value
    class put into the input or taken out of every tensor): (what changed, the new sample)."""
    named = arguments(op, sample)
    for name, values in wanted.items():
        valued = trigger.value_class(name)
        if valued and valued[1]:
            yield from _valued_argument(op, sample, *valued)
        elif valued:
            yield from _valued(sample, name)
        elif name == "uneven chunks":
            first = _first(sample.input)
            counts = [(n, str(k)) for n in CHUNKS if n in named for k in range(1, 7)]
            rank = first.dim() if first is not None else 0
            dims = [("dim", str(d)) for d in range(-rank, rank)]
            for arg, value in counts + (dims if "dim" in named else []):
                yield from _set(sample, named, arg, value)
        elif name in named:
            for value in values:
                yield from _set(sample, named, name, value)


def _set(sample: SampleInput, named: dict, name: str, text: str) -> Iterator[tuple]:
    where, old = named[name]
    try:
        value = _parse(text)
    except (ValueError, SyntaxError, AttributeError):
        return
    if _short(old) == text:
        return
    args, kwargs = list(sample.args), dict(sample.kwargs)
    if isinstance(where, int):
        args[where] = value
    else:
        kwargs[where] = value
    made = SampleInput(sample.input, args=tuple(args), kwargs=kwargs, name=sample.name)
    yield f"{name} {_short(old)} -> {text}", made


_PUT = {
    "NaN": lambda i: math.nan,
    "+inf": lambda i: math.inf,
    "-inf": lambda i: -math.inf,
    "-0": lambda i: -0.0,
    "subnormal": lambda i: i.tiny / 16,
    "|x| > sqrt(max)": lambda i: math.sqrt(i.max) * 2,
    "near max": lambda i: i.max / 2,
}


def _valued(sample: SampleInput, name: str) -> Iterator[tuple]:
    """The sample with ``name``'s value put into its first floating tensor (its first
    element), and with every such value of every tensor replaced by 0.5 (-0 by 0)."""
    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    floating = [i for i, t in enumerate(leaves) if _floating(t)]
    if not floating:
        return
    put = list(leaves)
    first = leaves[floating[0]].detach().clone()
    first[(0,) * first.dim()] = _PUT[name](torch.finfo(first.dtype))  # any strides
    put[floating[0]] = first.requires_grad_(leaves[floating[0]].requires_grad)
    yield f"{name} put into the input", _rebuilt(sample, put, spec)
    taken = list(leaves)
    for i in floating:
        x = leaves[i].detach()
        where = value_masks(x)[name]
        if bool(where.any()):
            fill = 0.0 if name == "-0" else 0.5
            taken[i] = x.masked_fill(where, fill).requires_grad_(leaves[i].requires_grad)
    yield f"{name} taken out", _rebuilt(sample, taken, spec)


def _valued_argument(op: Any, sample: SampleInput, cls: str, arg: str) -> Iterator[tuple]:
    """The sample with ``cls``'s value put into argument ``arg`` (its first element), and
    with every such value of that argument replaced by 0.5 (-0 by 0)."""
    tensor = named_tensors(op, sample).get(arg)
    if tensor is None:
        return
    put = tensor.detach().clone()
    put[(0,) * put.dim()] = _PUT[cls](torch.finfo(put.dtype))  # any strides
    yield f"{cls} put into {arg}", _replaced(sample, tensor, put)
    where = value_masks(tensor.detach())[cls]
    if bool(where.any()):
        taken = tensor.detach().masked_fill(where, 0.0 if cls == "-0" else 0.5)
        yield f"{cls} taken out of {arg}", _replaced(sample, tensor, taken)


def _replaced(sample: SampleInput, old: torch.Tensor, new: torch.Tensor) -> SampleInput:
    """``sample`` with the argument that is ``old`` (the very tensor) replaced by ``new``."""
    new = new.requires_grad_(old.requires_grad)
    swap = lambda v: new if v is old else v  # noqa: E731
    args = tuple(swap(a) for a in sample.args)
    kwargs = {k: swap(v) for k, v in sample.kwargs.items()}
    return SampleInput(swap(sample.input), args=args, kwargs=kwargs, name=sample.name)


def _floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0


def value_masks(x: torch.Tensor) -> dict[str, torch.Tensor]:
    info, size = torch.finfo(x.dtype), x.abs()
    return {
        "NaN": x.isnan(),
        "+inf": x == math.inf,
        "-inf": x == -math.inf,
        "-0": (x == 0) & x.signbit(),
        "subnormal": (x != 0) & (size < info.tiny),
        "|x| > sqrt(max)": x.isfinite() & (size > math.sqrt(info.max)),
        "near max": x.isfinite() & (size >= info.max / 4),
    }


def _rebuilt(sample: SampleInput, leaves: list, spec: Any) -> SampleInput:
    input_, args, kwargs = tree_unflatten(leaves, spec)
    return SampleInput(input_, args=args, kwargs=kwargs, name=sample.name)


def confirm(
    op_db: list, job: dict[str, Any], out: IO[str], device: str, fallbacks: Callable
) -> None:
    """Each request's new samples made, chosen and judged as the sweep judges a sample, each
    announced before it runs (``{"confirm": id, "begin": k, ...}``) and answered after. A
    sharded group's (``mesh``) are each sample under each spec, judged against unsharded."""
    by_name = {(o.name, o.variant_test_name): o for o in op_db}
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # past the timeout the process dies: a hang
    for request in job["confirm"]:
        op = by_name[(request["op"], request["variant"])]
        rules = [trigger.Rule.from_json(r) for r in request["rules"]]
        try:
            made = list(_made(op, request, (device, fallbacks, int(job["timeout"]))))
        except Exception:  # an odd sample: no new samples for this group, and no death
            made = []
        picked = trigger.choose(rules, [(d, f) for d, _, _, f, _, _ in made], request["limit"])
        if "only" in request:  # one new sample in this fresh worker (confirm.py: stale ops)
            picked = picked[request["only"] : request["only"] + 1]
        mesh = sharding.mesh_of(tuple(request["mesh"])) if request.get("mesh") else None
        for k in picked:
            differs, what, sample, features, dtype, spec = made[k]
            said = {"what": what, "dtype": dtype, "features": features, "from_differs": differs}
            _emit(out, {"confirm": request["id"], "begin": k} | said)
            signal.alarm(int(job["timeout"]))
            fallbacks(clear=True)
            how = {"grad": request["grad"], "fallbacks": fallbacks, "inplace": request["inplace"]}
            if spec:
                found = sharding.judge_sharded(op, sample, getattr(torch, dtype), spec, mesh, **how)
            else:
                found = judge.judge(op, sample, getattr(torch, dtype), device, **how)
            signal.alarm(0)
            _emit(out, {"confirm": request["id"], "record": found | said})
        _emit(out, {"confirm": request["id"], "done": True})


def _made(op: Any, request: dict[str, Any], where: tuple) -> Iterator[tuple]:
    """(from a differing sample, what changed, the new sample, its features, its dtype, its
    spec) for every new sample of the request's bases (the sweep's samples made again, the edge
    ones from the same base: the same lowering check)."""
    tasks: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for base in request["bases"]:
        tasks.setdefault((base["dtype"], base["edge"]), []).append(base)
    for (dtype, edge), bases in tasks.items():
        wanted = {b["sample"]: b for b in bases}
        torch_dtype = getattr(torch, dtype)
        lowers = judge.lowering(op, torch_dtype, *where) if edge else None  # device, ...
        made = samples.op_samples(op, torch_dtype, grad=request["grad"], edge=edge, lowers=lowers)
        for i, sample in enumerate(made):
            if i > max(wanted):
                break
            if i in wanted:
                new = _mutated(op, sample, request["wanted"], wanted[i], f"sample {i}")
                if request.get("mesh"):
                    new = _laid_out(op, sample, new, request, wanted[i])
                yield from new


def _laid_out(
    op: Any, sample: SampleInput, made: list[tuple], request: dict[str, Any], base: dict[str, Any]
) -> list[tuple]:
    """A sharded group's new samples: its base ``sample`` itself and each mutant, each under
    every spec (what a sharded trigger names is mostly the spec: which dim, over which axes, a
    view, a padded split), the spec's features added; "from a differing sample" only under the
    base's own spec (under another, what the base shows is not known)."""
    dtype = base["dtype"]
    itself = (
        base["differs"],
        f"sample {base['sample']}",
        sample,
        of(op, sample) | {"dtype": dtype},
    )
    laid = []
    for differs, what, new, seen, *_ in [itself, *made]:
        described = samples.describe(new)  # once a sample, not once a spec
        for spec in request["specs"]:
            spread = mesh.features(spec, request["mesh"], described)
            from_differs = differs and spec == base["shard"]
            laid.append((from_differs, f"{what}, sharded {spec}", new, seen | spread, dtype, spec))
    return laid


def _mutated(op: Any, sample: SampleInput, wanted: dict, base: dict, name: str) -> list[tuple]:
    """One base sample's new samples; none where making them fails (an odd sample)."""
    try:
        dtype = base["dtype"]
        return [
            (base["differs"], f"{name}: {what}", new, of(op, new) | {"dtype": dtype}, dtype, "")
            for what, new in mutants(op, sample, wanted)
        ]
    except Exception:
        return []


def _emit(out: IO[str], message: dict[str, Any]) -> None:
    out.write(json.dumps(message, default=str) + "\n")
    out.flush()
