"""The search for the smallest subgraph of a captured program that keeps the outcome.

Strategies, cheapest first, repeated until a pass removes nothing (as torch's FX minifier,
torch/_functorch/fx_minifier.py, repeats its own): truncate after the first diverging
operation; drop outputs; remove dead code; delta debugging over blocks of operations (half the
program, then quarters, ... one at a time), a removed block's consumers fed the values the
block produced in one recorded CPU run; inputs nothing reads are never part of a candidate
(:func:`~reprokit.tools.minimize.graph.program.build` leaves them out). Each strategy proposes
:class:`State` s to the shared search's one predicate
(:meth:`~reprokit.tools.minimize.search.Search.first`); :class:`Programs` turns a state into a
``.pt2`` named after its content and an ordinary variant of the case that runs it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import reprokit.tools.minimize.graph.program as program
from reprokit.generate.variants import Variant
from reprokit.records import Outcome
from reprokit.records.run import PROGRAM
from reprokit.tools.minimize.ddmin import ddmin
from reprokit.tools.minimize.graph.program import Original, State
from reprokit.tools.minimize.search import Search, Strategy, candidate

_NODE = re.compile(r"node\.(\d+)\.[\w.]+")  # node.0012.layer_norm, node.0016.bwd.elu_backward


@dataclass
class Programs:
    """A captured program's candidates as variants of its case: each state a ``.pt2`` in
    ``folder``, named after the state and the original's content."""

    original: Original
    variant: Variant
    folder: Path

    @functools.cached_property
    def perturbed(self) -> str | None:
        """The original node the test-only fault names (``perturb_node``), if any."""
        wanted = self.variant.params.get("perturb_node") or ""
        ops = [n for n in self.original.ops() if program.is_tensor_op(self.original, n)]
        for index, name in enumerate(ops):
            node = self.original.nodes[name]
            if wanted in (name, f"node.{index:04d}.{program.op_name(node)}"):
                return name
        return None

    def params(self, state: State) -> dict[str, Any]:
        """The case's parameters for a candidate: its program, and the fault moved along with
        the node it names (the template names nodes by their position)."""
        params = {**self.variant.params, PROGRAM: str(self.path(state))}
        if "perturb_node" in params and self.perturbed:
            saved = program.saved_name(self.original, state, self.perturbed)
            params["perturb_node"] = saved or ""  # the node is gone, and its fault with it
        return params

    def path(self, state: State) -> Path:
        return self.folder / f"g-{state.digest(self.original.digest)}.pt2"

    def variant_of(self, state: State) -> Variant:
        return candidate(self.variant, self.params(state), "g")

    def ready(self, state: State) -> bool:
        """The candidate's .pt2 exists or could be written (torch.export may refuse one)."""
        path = self.path(state)
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                program.save(self.original, state, path)
            except Exception:  # export's failures are many; such a candidate is not tried
                return False
        return True

    def size(self, state: State) -> int:
        """Its tensor operations: what a step's "removed" counts."""
        return program.counts(self.original, state)[0]


def dead_code_removed(original: Original, state: State) -> State:
    """Only the operations the outputs depend on; an in-place one stays while the tensor it
    writes into is read (as torch.fx keeps impure nodes)."""
    live = set(state.outputs)
    for name in reversed(state.ops):
        if name in live or program.writes(original.nodes[name]) & live:
            live |= {name, *(n.name for n in original.nodes[name].all_input_nodes)}
    return State(tuple(n for n in state.ops if n in live), state.outputs)


def without(original: Original, state: State, block: Sequence[str]) -> State | None:
    """``state`` without ``block``, what only it used removed too; None if nothing is left to
    return. A removed operation whose value is no tensor (a tuple) cannot be fed as an input:
    the operations reading it (getitem) go with it, and are fed instead."""
    removed = set(block)
    while True:
        readers = {
            name
            for name in state.ops
            if name not in removed
            and any(
                n.name in removed and not program.is_tensor_op(original, n.name)
                for n in original.nodes[name].all_input_nodes
            )
        }
        if not readers:
            break
        removed |= readers
    ops = tuple(n for n in state.ops if n not in removed)
    outputs = tuple(o for o in state.outputs if o in ops) or _frontier(original, ops, removed)
    if not outputs:
        return None
    return dead_code_removed(original, State(ops, outputs))


def _frontier(original: Original, ops: tuple[str, ...], removed: set[str]) -> tuple[str, ...]:
    """When a block took every output with it (the tail of the program), the tensors it read
    are returned instead: a failure upstream of the block still shows."""
    read = {n.name for r in removed for n in original.nodes[r].all_input_nodes}
    return tuple(n for n in ops if n in read and program.is_tensor_op(original, n))


def truncate(search: Search[State], original: Original) -> None:
    """Return only the root kept, and drop every operation after it."""
    first = search.target.found(search.best_result)  # the root kept
    match = _NODE.fullmatch(first or "")
    if search.target.outcome is not Outcome.MISMATCH or not match:
        return
    ops = [n for n in search.best.ops if program.is_tensor_op(original, n)]
    node = ops[int(match.group(1))] if int(match.group(1)) < len(ops) else None
    if node is None:
        return
    kept = search.best.ops[: search.best.ops.index(node) + 1]
    search.first("truncate", [State(kept, (node,))])


def drop_outputs(search: Search[State]) -> None:
    """Delta debugging over the outputs: keep as few as still show the outcome."""

    def first(rests: list[list[str]]) -> int | None:
        states = [State(search.best.ops, tuple(rest)) if rest else None for rest in rests]
        return search.first("drop outputs", states)

    ddmin(search.best.outputs, first, batch=search.jobs)


def remove_dead_code(search: Search[State], original: Original) -> None:
    search.first("dead code", [dead_code_removed(original, search.best)])


def remove_blocks(search: Search[State], original: Original) -> None:
    """Delta debugging over blocks of operations, each removed block fed from the record.
    What ddmin still lists may hold operations an earlier removal took along (dead code):
    removing only those is the best itself, which keeps without a run."""

    def first(rests: list[list[str]]) -> int | None:
        best = search.best
        states = [without(original, best, [o for o in best.ops if o not in set(r)]) for r in rests]
        return search.first("blocks", states)

    ddmin(search.best.ops, first, batch=search.jobs)


def strategies(original: Original, *, truncation: bool = True) -> list[Strategy[State]]:
    """The program's strategies, cheapest first (``truncation=False`` leaves out the first)."""
    cut: list[Strategy[State]] = [functools.partial(truncate, original=original)]
    return [
        *(cut if truncation else []),
        drop_outputs,
        functools.partial(remove_dead_code, original=original),
        functools.partial(remove_blocks, original=original),
    ]
