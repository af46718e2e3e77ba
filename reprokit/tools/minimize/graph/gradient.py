"""The short repro of a minimized training capture as training computes it: by torch.autograd.

A minimized joint graph is often one backward operation (``elu_backward``), and calling it by
hand is not how a user meets the bug: autograd picks that kernel, with arguments of its own.
:func:`of` finds, for a subgraph of backward operations only, the forward operations they
differentiate (the mark :mod:`reprokit.tools.capture.train` leaves on every operation), the values
those read (the leaves, made to require grad) and, for each forward result, the recorded value
a backward operation takes as its incoming gradient (a backward value of the result's shape).
The short repro then runs the forward operations and ``torch.autograd.grad`` with those
gradients on CPU, XLA and CPU in float64. Autograd may run other kernels than the captured
graph did, so minimize runs the script once (:func:`reproduces`) and keeps the direct aten
calls when it does not show the difference.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit.runner.options import Options
from reprokit.runner.processes.alone import run_alone
from reprokit.tools.minimize.graph.program import Original, State, is_tensor_op


@dataclass(frozen=True)
class Gradient:
    """The forward operations a backward subgraph differentiates, what they read (``leaves``:
    node names, floating ones made to require grad), and each forward result's incoming
    gradient (``grads``: result node -> the node whose recorded value it is)."""

    forward: tuple[str, ...]
    leaves: tuple[str, ...]
    grads: tuple[tuple[str, str], ...]
    backward: tuple[str, ...]  # the backward operations of the subgraph, for the comment

    def grad_key(self, result: str) -> str:
        """The short repro's name of ``result``'s incoming gradient."""
        return f"grad_{result}"


def mark(node: Any) -> dict[str, Any]:
    """What the training capture says of an operation: its pass and forward origin."""
    return node.meta.get("custom", {}).get("reprokit", {})


def of(original: Original, state: State) -> Gradient | None:
    """The autograd form of ``state``, or None: not every operation is a backward one with
    its forward origin known, or no incoming gradient can be told."""
    ops = original.ops()
    marks = {n: mark(original.nodes[n]) for n in state.ops}
    if not marks or any(m.get("pass") != "bwd" or "forward" not in m for m in marks.values()):
        return None
    origins = {ops[m["forward"]] for m in marks.values()}
    forward = [n for n in ops if n in origins or _result_of(original, n, origins)]
    inside = set(forward)
    leaves = [a.name for n in forward for a in original.nodes[n].all_input_nodes]
    leaves = [n for n in dict.fromkeys(leaves) if n not in inside]
    grads = {}
    for result in (n for n in forward if is_tensor_op(original, n)):
        source = _incoming(original, ops, state, result, inside | set(leaves))
        if source is not None:
            grads[result] = source
    if not grads:
        return None
    named = tuple(n for n in state.ops if original.nodes[n].target is not operator.getitem)
    return Gradient(tuple(forward), tuple(leaves), tuple(grads.items()), named)


def _result_of(original: Original, name: str, origins: set[str]) -> bool:
    """``name`` is one result of a forward operation that returns several (layer norm's)."""
    node = original.nodes[name]
    return node.target is operator.getitem and node.args[0].name in origins


def _incoming(
    original: Original, ops: tuple[str, ...], state: State, result: str, known: set[str]
) -> str | None:
    """The gradient flowing into ``result``: a value a backward operation of ``result``'s
    operation reads that is neither forward nor a leaf, of ``result``'s shape and dtype."""
    node = original.nodes[result]
    made_by = {result, node.args[0].name} if node.target is operator.getitem else {result}
    want = node.meta["val"]
    for name in state.ops:
        if ops[mark(original.nodes[name])["forward"]] not in made_by:
            continue
        for arg in original.nodes[name].all_input_nodes:
            value = original.values.get(arg.name)
            if arg.name in known or not hasattr(value, "shape"):
                continue
            if value.shape == want.shape and value.dtype == want.dtype:
                return arg.name
    return None


def values(original: Original, gradient: Gradient) -> dict[str, Any]:
    """What the short repro's INPUTS hold, by name: the leaves, then each incoming gradient."""
    made = {n: original.values[n] for n in gradient.leaves}
    for result, source in gradient.grads:
        made[gradient.grad_key(result)] = original.values[source]
    return made


def reproduces(write: Callable[[Path], None], options: Options, folder: Path) -> bool:
    """Run the short repro alone, as a maintainer would (``write`` puts repro.py and its
    inputs.pt into a folder of its own): it shows the difference when it says so and exits 1."""
    return run_alone(write, options, folder).shows()
