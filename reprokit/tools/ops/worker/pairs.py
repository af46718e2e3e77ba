"""Pairs of calls, in the worker (torch imported): samples of one op whose tensors have the same
shapes and dtypes but whose other arguments differ, run one after the other in one process.

torch_xla keys a compiled graph by a hash of its IR nodes; a node whose hash leaves out one of
its non-tensor arguments (``avg_pool2d``'s ``divisor_override``, ``pixel_shuffle``'s
``upscale_factor``: pytorch/xla#8353 and #9350 show the class) reuses the graph compiled for an
earlier call with the same shapes, and returns that call's answer. A sweep that runs an op's
samples in one process is where this shows, and where it is misread as the op being wrong.

- :func:`probes`: for an op's forward samples, each non-tensor argument changed alone, on the
  smallest sample that has it, to another value the op's own samples give it (OpInfo's samples
  rarely differ in one argument only);
- :class:`History`: the samples that matched in this process, by shapes and dtypes; a sample
  that differs is a stale-graph candidate when CPU, given an earlier matched sample's other
  arguments and this sample's tensors, gives XLA's answer (:meth:`History.explain`);
- :func:`rebuild`: a sample again from its source (``worker.code_of``), so that a fresh process
  judges the very same values alone and after its predecessor (``worker.recheck``).
"""

from __future__ import annotations

import ast
import json
import math
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

import torch
from torch.testing._internal.opinfo.core import SampleInput
from torch.utils._pytree import tree_flatten, tree_unflatten

import reprokit.tools.ops.worker.judge as judge
from reprokit.infra.python_source import parse_python
from reprokit.tools.ops.worker.samples import with_slot

MOST_PROBES = 8  # argument slots changed per op and dtype
MOST_ELEMENTS = 4096  # a probe's base sample holds at most this many elements
KEPT = 8  # matched samples remembered per op and shapes (the first compiled is what is reused)
TRIED = 4  # of them, tried as the explanation of a sample that differs
KINDS = ("value", "nan-inf", "shape", "dtype")  # what a reused graph can look like
_none = object()  # an argument a sample does not pass
Slot = int | str  # a positional argument's index in ``sample.args``, or a keyword's name


def signature(sample: SampleInput) -> tuple:
    """The sample's tensors' shapes and dtypes, in order: what a graph's hash always holds."""
    leaves, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return tuple((tuple(t.shape), str(t.dtype)) for t in leaves if isinstance(t, torch.Tensor))


def _plain(value: Any) -> bool:
    """An argument a probe may change: a number, bool, string, None or a tuple of numbers."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    return isinstance(value, tuple | list) and all(isinstance(v, bool | int | float) for v in value)


def slots(sample: SampleInput) -> dict[Slot, Any]:
    """The sample's non-tensor arguments a probe may change, by position or keyword."""
    found: dict[Slot, Any] = {i: v for i, v in enumerate(sample.args) if _plain(v)}
    found |= {k: v for k, v in sample.kwargs.items() if _plain(v)}
    return found


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and repr(a) == repr(b)


def probes(op: Any, samples: list[SampleInput]) -> list[tuple[SampleInput, int, Slot]]:
    """Each argument slot changed alone (at most :data:`MOST_PROBES`), on the sample of fewest
    elements (none empty) that has it: to the first other value another sample gives it, else
    to one made from its own (:func:`another`); then each parameter of the op's signature with
    a number or bool default that no sample passes, passed by keyword with another value
    (``celu``'s samples never pass ``alpha``, whose value its graph's hash leaves out).
    Deterministic: the same samples give the same probes in any process."""
    sizes = [sum(t.numel() for t in _tensors(s)) for s in samples]
    found: list[tuple[SampleInput, int, Slot]] = []
    seen: set[Slot] = set()
    for s in samples:
        for slot in slots(s):
            if slot in seen or len(found) >= MOST_PROBES:
                continue
            having = [i for i, t in enumerate(samples) if slot in slots(t)]
            bases = [i for i in having if 0 < sizes[i] <= MOST_ELEMENTS]
            if not bases:
                continue
            base = min(bases, key=lambda i: (sizes[i], i))
            ours = slots(samples[base])[slot]
            values = (slots(samples[i])[slot] for i in having)
            other = next((v for v in values if not _same(v, ours)), another(ours))
            if other is _none:
                continue
            seen.add(slot)
            found.append((with_slot(samples[base], slot, other), base, slot))
    return found + _unpassed(op, samples, sizes, MOST_PROBES - len(found))


# Parameters whose other value is not another computation of the same op: the result's
# placement or type, randomness, or a write into the input
NOT_PROBED = ("inplace", "out", "dtype", "device", "layout", "pin_memory", "requires_grad")
NOT_PROBED += ("memory_format", "generator", "names", "training")


def _unpassed(
    op: Any, samples: list[SampleInput], sizes: list[int], most: int
) -> list[tuple[SampleInput, int, Slot]]:
    """Probes of the op's defaulted number and bool parameters that its samples never pass:
    each by keyword, with :func:`another` of its default, on the smallest sample."""
    params = parameters(op)
    names = [p.name for p in params if p.positional]
    passed = {names[i] if i < len(names) else i for s in samples for i in range(len(s.args))}
    passed |= {k for s in samples for k in s.kwargs}
    bases = [i for i, size in enumerate(sizes) if 0 < size <= MOST_ELEMENTS]
    if not bases or most <= 0:
        return []
    base = min(bases, key=lambda i: (sizes[i], i))
    found = []
    for name, default, _ in params:
        if name in passed or name in NOT_PROBED or not isinstance(default, bool | int | float):
            continue
        other = another(default)
        if other is not _none and len(found) < most:
            found.append((with_slot(samples[base], name, other), base, name))
    return found


def another(value: Any) -> Any:
    """A value other than ``value`` of its kind, for a probe where no sample gives one: a bool
    flipped, an int one further from 0 (a dim stays a dim), a float doubled (0.5 for 0, 2.0
    for inf and NaN), a tuple each so; ``_none`` for a string or None (no other is known)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1 if value >= 0 else value - 1
    if isinstance(value, float):
        return value * 2 if math.isfinite(value) and value else 0.5 if value == 0 else 2.0
    if isinstance(value, tuple | list) and value:
        made = [another(v) for v in value]
        return _none if _none in made else type(value)(made)
    return _none


def _tensors(sample: SampleInput) -> list[torch.Tensor]:
    leaves, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor)]


class Parameter(NamedTuple):
    name: str
    default: Any  # ``_none``: required
    positional: bool


def parameters(op: Any) -> list[Parameter]:
    """The op's parameters after its input (``avg_pool2d``: kernel_size, stride, ...) with
    their defaults, from its signature or, for a builtin, its docstring's first line
    (``var(input, dim=None, *, correction=1, ...)``); [] when neither says."""
    import inspect

    try:
        params = list(inspect.signature(op.op).parameters.values())
    except (TypeError, ValueError):
        return _documented(op.op)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    made = [
        Parameter(p.name, _none if p.default is p.empty else p.default, p.kind in kinds)
        for p in params
        if p.kind in (*kinds, inspect.Parameter.KEYWORD_ONLY)
    ]
    return made[1:]


def _documented(fn: Any) -> list[Parameter]:
    """A builtin's parameters from its docstring's first line, read as a Python signature."""
    first = (getattr(fn, "__doc__", None) or "").strip().split("\n", 1)[0]
    found = re.match(r"[\w.]+\(([^)]*)\)", first)
    if not found:
        return []
    try:
        args = parse_python(f"def f({found.group(1)}): pass").body[0].args  # type: ignore[attr-defined]
    except SyntaxError:  # ``approximate = 'none'`` parses; anything else: names alone
        names = [p.split("=")[0].strip() for p in found.group(1).split(",")]
        return [Parameter(n, _none, True) for n in names if n.isidentifier()][1:]
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    made = [Parameter(a.arg, _literal(d), True) for a, d in zip(positional, defaults, strict=True)]
    made += [
        Parameter(a.arg, _literal(d), False)
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    return made[1:]


def _literal(node: ast.AST | None) -> Any:
    if node is None:
        return _none
    try:
        return ast.literal_eval(node)
    except ValueError:  # a name (torch.contiguous_format): nothing a probe changes
        return _none


def param_names(op: Any) -> list[str]:
    """The op's positional parameter names after its input: a sample's ``args[i]`` is
    the i-th."""
    return [p.name for p in parameters(op) if p.positional]


def differing(op: Any, a: SampleInput, b: SampleInput) -> list[str]:
    """The names of the non-tensor arguments that differ between two samples."""
    names = param_names(op)
    found = []
    for i in range(max(len(a.args), len(b.args))):
        x, y = (s.args[i] if i < len(s.args) else _none for s in (a, b))
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor) or _same(x, y):
            continue
        found.append(names[i] if i < len(names) else f"argument {i + 2}")
    for key in sorted(set(a.kwargs) | set(b.kwargs)):
        x, y = a.kwargs.get(key, _none), b.kwargs.get(key, _none)
        if not (isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor) or _same(x, y)):
            found.append(key)
    return found


def grafted(a: SampleInput, b: SampleInput) -> SampleInput:
    """``a``'s other arguments with ``b``'s tensors: what a graph compiled for ``a`` computes
    when it is handed ``b``'s inputs."""
    theirs = iter(_tensors(b))
    leaves, spec = tree_flatten((a.input, list(a.args), dict(a.kwargs)))
    leaves = [next(theirs) if isinstance(v, torch.Tensor) else v for v in leaves]
    input_, args, kwargs = tree_unflatten(leaves, spec)
    return SampleInput(input_, args=tuple(args), kwargs=kwargs)


@dataclass
class History:
    """The samples that matched in this process, by op, pass and tensors' shapes and dtypes."""

    kept: dict[tuple, list[tuple[dict[str, Any], SampleInput]]] = field(default_factory=dict)

    def note(self, key: tuple, ref: dict[str, Any], sample: SampleInput) -> None:
        entries = self.kept.setdefault((*key, signature(sample)), [])
        if len(entries) < KEPT:
            entries.append((ref, sample))

    def explain(
        self, op: Any, key: tuple, sample: SampleInput, run: Callable[..., list[Any]]
    ) -> tuple[dict[str, Any], SampleInput, list[str]] | None:
        """The earlier matched sample whose graph this one got: CPU, given that sample's other
        arguments and this one's tensors, gives what XLA gave; with the arguments that
        differ. ``run(device, given=...)`` is the judge's runner."""
        entries = self.kept.get((*key, signature(sample)), [])
        tried = 0
        for ref, earlier in entries:
            args = differing(op, earlier, sample)
            if not args or tried >= TRIED:
                continue
            tried += 1
            try:
                xla, cpu = run("xla"), run("cpu", given=grafted(earlier, sample))
            except Exception:  # the other arguments refused these tensors
                continue
            if close(xla, cpu):
                return ref, earlier, args
        return None


def close(xs: list[Any], ys: list[Any]) -> bool:
    """Every result the same shape and dtype and close (exact for integers and bools)."""
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys, strict=True):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            if not _same(x, y):
                return False
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not (x.is_floating_point() or x.is_complex()):
            if not torch.equal(x, y):
                return False
            continue
        half = x.dtype in (torch.float16, torch.bfloat16)
        tol = (5e-2, 1e-2) if half else (1e-3, 1e-4)  # a filter: fresh processes decide
        if not torch.allclose(x.double(), y.double(), *tol, equal_nan=True):
            return False
    return True


def rebuild(code: dict[str, Any], saved: list[torch.Tensor] | None, *, first: bool) -> SampleInput:
    """A sample from its source (``worker.code_of``'s, of a pair): the second call's
    (``A``, ``K``) or, ``first``, the first's (``A0``, ``K0``), the same values the sweep ran."""
    names = {"torch": torch, "T": saved, "float": float, "slice": slice}
    args = eval(code["A0" if first else "A"], names)  # our own source (worker.code_of)
    kwargs = eval(code["K0" if first else "K"], names)
    return SampleInput(args[0], args=tuple(args[1:]), kwargs=kwargs)


def recheck(
    op_db: list, job: dict[str, Any], out: IO[str], device: str, fallbacks: Callable
) -> None:
    """Each item's pair rebuilt from its source and its second sample judged in this fresh
    process: alone (``mode`` "alone"), or right after its first sample ("after"). A fresh
    process holds no compiled graph: torch_xla 2.9 has no call that empties its compilation
    cache (``torch_xla._XLAC`` offers only counting it), so a new process is the sure way.
    Each item announced (``{"recheck": n, "begin": true}``) before it runs."""
    by_name = {(o.name, o.variant_test_name): o for o in op_db}
    witness = Path(job["witness_dir"])
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # past the timeout the process dies
    for n, item in enumerate(job["recheck"]):
        _answer(out, {"recheck": n, "begin": True})
        op = by_name[(item["op"], item["variant"])]
        code, dtype = item["pair"], getattr(torch, item["dtype"])
        saved = torch.load(witness / code["saved"]) if code.get("saved") else None
        how = {"grad": False, "fallbacks": fallbacks, "inplace": item.get("inplace", False)}
        signal.alarm(int(job["timeout"]))
        if job["mode"] == "after":
            judge.judge(op, rebuild(code, saved, first=True), dtype, device, **how)
        fallbacks(clear=True)
        found = judge.judge(op, rebuild(code, saved, first=False), dtype, device, **how)
        signal.alarm(0)
        _answer(out, {"recheck": n, "record": found})


def _answer(out: IO[str], message: dict[str, Any]) -> None:
    out.write(json.dumps(message, default=str) + "\n")
    out.flush()
