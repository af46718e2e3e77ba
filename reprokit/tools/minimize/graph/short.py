"""The short repro of a minimized program: the 10-40 lines a maintainer pastes into an issue.

``repro.py`` is rendered from ``templates/_graph_short.py.j2``, then given the variables the
variant runs with (before torch is imported, as every rendered script): the inputs, the
subgraph as aten calls with the user's line above each, one run on CPU, XLA and CPU in
float64 in this one process, the fp64 method's verdict (the rule of
:func:`reprokit.comparison.tensors._same`, written out) and the exit code: 1 when it
reproduces (or raises), 0 when not. The stage-protocol version stays beside it as
``repro_stages.py`` (:mod:`~reprokit.tools.minimize.graph.script`).

Each input is written as the shortest thing that is still the program's (:func:`plan`): a
constant as ``torch.full``, a few values as a literal, else a seeded random draw of the same
shape, dtype, mean and spread (integers: the same range) when ``random`` holds (minimize
checks that the outcome reproduces with them, through the same oracle, before it writes
them: :func:`drawn` makes the very values the script will draw), else the recorded value from
``inputs.pt`` beside the script, which the script then says it needs.

A training capture's subgraph of backward operations is written as training computes it
instead: its forward operations and ``torch.autograd.grad`` (``gradient``, a
:class:`~reprokit.tools.minimize.graph.gradient.Gradient`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import reprokit.tools.minimize.graph.program as program
from reprokit.comparison.tensors import FP64_TOL
from reprokit.generate.render import environment
from reprokit.generate.templates import template_dirs
from reprokit.generate.variables import with_variables
from reprokit.generate.variants import Variant
from reprokit.records.folder import SCRIPT
from reprokit.records.minimize import SHORT_INPUTS
from reprokit.tools.minimize.graph.gradient import Gradient
from reprokit.tools.minimize.graph.program import Original, State
from reprokit.tools.minimize.graph.script import _line, _var

TEMPLATE = "_graph_short.py.j2"
INPUTS_FILE = SHORT_INPUTS
SHORT_LITERAL = 8  # elements of an input printed as a literal: one line
SEED = 0


@dataclass(frozen=True)
class Input:
    """How the short repro writes one input: ``kind`` full, literal, randn, randint or
    stored, and what that kind needs (rounded as the script prints it)."""

    key: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    fields: tuple[tuple[str, Any], ...] = ()

    def context(self) -> dict[str, Any]:
        return {"key": self.key, "kind": self.kind, "shape": list(self.shape),
                "dtype": self.dtype, **dict(self.fields)}  # fmt: skip


def values_read(original: Original, state: State) -> dict[str, Any]:
    """What the candidate reads (inputs, values fed for removed operations, weights), in the
    original order, as recorded on CPU."""
    inputs, fed, weights = program.reads(original, state)
    return {n: original.values[n] for n in [*inputs, *fed, *weights]}


def plan(values: Mapping[str, Any], *, random: bool) -> list[Input]:
    """Each input as the short repro writes it; ``random``: draws where a value is too large
    to print (else the recorded value, stored)."""
    return [_input(name, value, random) for name, value in values.items()]


def _input(name: str, value: Any, random: bool) -> Input:
    import torch

    if not isinstance(value, torch.Tensor) or value.is_complex():
        return _stored(name, value)
    dtype, shape = str(value.dtype).split(".")[1], tuple(value.shape)
    floating = value.is_floating_point()
    if floating and dtype.startswith("float8"):
        return _stored(name, value)
    finite = bool(value.isfinite().all()) if floating and value.numel() else True
    flat = value.flatten()
    if value.numel() and bool((flat == flat[0]).all()):  # NaN and inf printed as float("inf")
        return Input(name, "full", shape, dtype, (("value", flat[0].item()),))
    if value.numel() <= SHORT_LITERAL:
        return Input(name, "literal", shape, dtype, (("numbers", flat.tolist()),))
    if not random or not finite:
        return _stored(name, value)
    if floating:
        spread = value.double()
        moments = (("mean", _round(spread.mean().item())), ("std", _round(spread.std().item())))
        return Input(name, "randn", shape, dtype, moments)
    ints = value.long()
    bounds = (("low", int(ints.min())), ("high", int(ints.max()) + 1))
    return Input(name, "randint", shape, dtype, bounds)


def _stored(name: str, value: Any) -> Input:
    shape = tuple(getattr(value, "shape", ()))
    return Input(name, "stored", shape, str(getattr(value, "dtype", "-")).split(".")[-1])


def _round(x: float) -> float:
    return float(f"{x:.3g}")


def drawn(inputs: list[Input], values: Mapping[str, Any]) -> dict[str, Any]:
    """The values the short repro's INPUTS holds: the same draws from the same generator in
    the same order (so that the oracle's check runs exactly what the script will)."""
    import torch

    g = torch.Generator().manual_seed(SEED)
    made: dict[str, Any] = {}
    for spec in inputs:
        dtype, f = getattr(torch, spec.dtype, None), dict(spec.fields)
        if spec.kind == "randn":
            made[spec.key] = (torch.randn(list(spec.shape), generator=g) * f["std"]
                              + f["mean"]).to(dtype)  # fmt: skip
        elif spec.kind == "randint":
            ints = torch.randint(f["low"], f["high"], list(spec.shape), generator=g)
            made[spec.key] = ints.to(dtype)
        else:
            made[spec.key] = values[spec.key]
    return made


def stored(inputs: list[Input], values: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded values the short repro reads from inputs.pt."""
    return {s.key: values[s.key] for s in inputs if s.kind == "stored"}


def short_repro(
    original: Original,
    state: State,
    variant: Variant,
    inputs: list[Input],
    perturbed: str | None,
    gradient: Gradient | None = None,
) -> str:
    """The short repro.py of ``state`` run as ``variant`` says (``gradient``: by autograd),
    with the variables the variant runs with set before torch is imported (as every rendered
    script sets them)."""
    ops = [n for n in state.ops if program.is_tensor_op(original, n)]
    before = sum(program.is_tensor_op(original, n) for n in original.ops())
    atol = variant.compare.get("atol")
    named = ", ".join(dict.fromkeys(str(original.nodes[n].target) for n in ops[:3]))
    named += ", ..." * (len(ops) > 3)
    described = (
        f"{len(ops)} of the {before} operations"
        if len(ops) < before
        else f"all {before} operations"
        if before > 1
        else "the one operation"
    )
    described += " of a captured model"
    if gradient is not None:
        named = ", ".join(_op(original, n) for n in gradient.backward) + " (by autograd)"
    context = {  # what the script is, in a maintainer's words: no case or tool names
        "title": f"{named} on XLA against CPU and float64",
        "description": described,
        "random": any(s.kind in ("randn", "randint") for s in inputs),
        "stored": any(s.kind == "stored" for s in inputs),
        "inputs": [s.context() for s in inputs],
        "names": [_var(s.key) for s in inputs],
        "dtype": variant.params.get("dtype", "captured"),
        "tol": FP64_TOL if atol is None else float(atol),
        "tol_said": "the fp64 method's default" if atol is None else "the case's atol",
        "lines": [_line(original, n, perturbed) for n in state.ops],
        "results": [{"var": _var(n)} for n in ops],
    }
    if gradient is not None:
        context |= {"lines": [_line(original, n, None) for n in gradient.forward],
                    "autograd": _autograd(original, gradient)}  # fmt: skip
    text = rendered(context, (variant.template.path.parent,))
    return with_variables(text, variant.variables, variant.case_variables)


def _autograd(original: Original, gradient: Gradient) -> dict[str, Any]:
    """What the template's autograd lines name: the leaves that require grad, the forward
    results, their incoming gradients, the names of the gradients returned."""
    import torch

    values = {n: original.values[n] for n in gradient.leaves}
    floating = [
        n for n, v in values.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
    ]
    return {
        "leaves": [_var(n) for n in floating],
        "results": [_var(r) for r, _ in gradient.grads],
        "grads": [_var(gradient.grad_key(r)) for r, _ in gradient.grads],
        "names": [f"grad.{n}" for n in floating],
        "backward": ", ".join(dict.fromkeys(_op(original, n) for n in gradient.backward)),
    }


def _op(original: Original, name: str) -> str:
    return program.op_name(original.nodes[name])


def rendered(context: Mapping[str, Any], dirs: tuple[Path, ...] = ()) -> str:
    """The template with ``context``, compile()-checked (a template bug, not the user's:
    it raises)."""
    found = tuple(dict.fromkeys([*dirs, *template_dirs()]))
    script = environment(found).get_template(TEMPLATE).render(dict(context))
    compile(script, SCRIPT, "exec")
    return script


def write(folder: Path, script: str, stored_values: Mapping[str, Any]) -> None:
    """repro.py, and inputs.pt beside it only when the short repro reads it."""
    import torch

    (folder / SCRIPT).write_text(script, encoding="utf-8")
    (folder / INPUTS_FILE).unlink(missing_ok=True)
    if stored_values:
        torch.save({k: v.contiguous() for k, v in stored_values.items()}, folder / INPUTS_FILE)
