"""The search for the smallest subgraph of a captured program that keeps the outcome.

Strategies, cheapest first, repeated until a pass removes nothing (as torch's FX minifier,
torch/_functorch/fx_minifier.py, repeats its own): truncate after the first diverging
operation; drop outputs; remove dead code; delta debugging over blocks of operations (half the
program, then quarters, ... one at a time), a removed block's consumers fed the values the
block produced in one recorded CPU run; inputs nothing reads are never part of a candidate.
Every candidate is a ``.pt2`` named after its content, run as an ordinary variant of the case
(``reprokit.runner.scheduler.run``: a fresh process per stage, timeouts, crash classification),
``jobs`` at a time, and cached by script and environment like the parameter minimizer's
candidates. Then the parameters shrink as ``reprokit.tools.minimize.params`` shrinks them.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import reprokit.tools.minimize.graph.program as program
from reprokit.generate.render import render
from reprokit.generate.variants import Variant
from reprokit.records import Outcome, VariantResult
from reprokit.runner.options import Options
from reprokit.tools.minimize.graph.program import Original, State
from reprokit.tools.minimize.params import BudgetSpent, Cache, Search, run_batch

_NODE = re.compile(r"node\.(\d+)\.\w+")
SIMILAR = 0.6  # how close a candidate's error message must be to the original's (difflib)


@dataclass(frozen=True)
class Target:
    """What every candidate must still show: the outcome, for a mismatch the kind of the
    first diverging operation (``node.#.layer_norm``: the same aten op), for a failure the
    failing stage and a message close to the original's."""

    outcome: Outcome
    clue: str | None
    message: str = ""

    @classmethod
    def of(cls, result: VariantResult) -> Target:
        if result.outcome is Outcome.MISMATCH:
            first = next((t for t in result.first_divergence.values() if t), None)
            return cls(result.outcome, re.sub(r"\d+", "#", first) if first else None)
        failed = result.failed_stage
        if failed is None:
            return cls(result.outcome, None)
        said = failed.error or failed.signal or failed.status.value
        return cls(result.outcome, failed.name, re.sub(r"\d+", "#", said))

    def kept_by(self, result: VariantResult | None) -> bool:
        if result is None:
            return False
        found = Target.of(result)
        if (found.outcome, found.clue) != (self.outcome, self.clue):
            return False
        ratio = difflib.SequenceMatcher(None, found.message, self.message).ratio()
        return not self.message or ratio >= SIMILAR

    def describe(self) -> str:
        message = " ".join(self.message.split())  # one line: it lands in a TOML comment too
        said = f": {message[:117]}..." if len(message) > 120 else f": {message}" if message else ""
        return f"{self.outcome.value} ({self.clue}{said})" if self.clue else self.outcome.value


@dataclass
class GraphSearch:
    """One minimization of a captured program: the best candidate so far and what it cost."""

    original: Original
    variant: Variant
    options: Options
    out_dir: Path
    budget: int
    cache: Cache
    target: Target | None = None
    best: State | None = None
    best_result: VariantResult | None = None
    runs: int = 0
    hits: int = 0
    batches: int = 0
    steps: dict[str, list[int]] = field(default_factory=dict)  # strategy: runs, removed
    use_truncation: bool = True
    chosen: dict[str, Any] | None = None  # the parameters the parameter search kept

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
        folder = self.out_dir / "programs"
        params = {**self.variant.params, "program": str(folder / self.file(state))}
        if "perturb_node" in params and self.perturbed:
            saved = program.saved_name(self.original, state, self.perturbed)
            params["perturb_node"] = saved or ""  # the node is gone, and its fault with it
        return params

    def file(self, state: State) -> str:
        return f"g-{state.digest(self.original.digest)}.pt2"

    def try_states(self, states: Sequence[State]) -> tuple[list[VariantResult | None], bool]:
        """Run the candidates side by side (cached ones are not run, nor ones torch.export
        cannot rebuild); and whether the budget left some out."""
        variants = [self._variant(self.params(s)) for s in states]
        keys = [Cache.key(render(v), self.options) for v in variants]
        results: list[VariantResult | None] = [self.cache.get(k) for k in keys]
        self.hits += sum(r is not None for r in results)
        buildable = [i for i, r in enumerate(results) if r is None and self._built(states[i])]
        todo = buildable[: self.budget - self.runs]
        run_batch(self, variants, keys, results, todo)
        return results, len(todo) < len(buildable)

    def _built(self, state: State) -> bool:
        """The candidate's .pt2 exists or could be written (torch.export may refuse one)."""
        path = self.out_dir / "programs" / self.file(state)
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                program.save(self.original, state, path)
            except Exception:  # export's failures are many; such a candidate is not tried
                return False
        return True

    def _variant(self, params: dict[str, Any]) -> Variant:
        digest = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:8]
        case = dataclasses.replace(self.variant.case, name=f"g-{digest}", matrix={})
        return Variant(case, params)

    def first_keeping(self, strategy: str, states: Sequence[State]) -> State | None:
        """Try the candidates, ``jobs`` at a time, in order; the first that keeps the outcome
        becomes the best. Candidates equal to the best are not tried."""
        states = [s for s in dict.fromkeys(states) if s != self.best]
        for start in range(0, len(states), self.options.jobs):
            batch = states[start : start + self.options.jobs]
            before = self.runs
            results, over = self.try_states(batch)
            self.steps.setdefault(strategy, [0, 0])[0] += self.runs - before
            for state, result in zip(batch, results, strict=True):
                if self.target is not None and self.target.kept_by(result):
                    self.accept(strategy, state, result)
                    return state
            if over:
                raise BudgetSpent
        return None

    def accept(self, strategy: str, state: State, result: VariantResult) -> None:
        assert self.best is not None
        removed = self.count(self.best)[0] - self.count(state)[0]
        self.steps.setdefault(strategy, [0, 0])[1] += removed
        self.best, self.best_result = state, result

    def count(self, state: State) -> tuple[int, int, int]:
        return program.counts(self.original, state)


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


def truncate(search: GraphSearch) -> None:
    """Return only the first diverging operation, and drop every operation after it."""
    assert search.best is not None and search.best_result is not None
    first = next((t for t in search.best_result.first_divergence.values() if t), None)
    match = _NODE.fullmatch(first or "")
    mismatch = search.target is not None and search.target.outcome is Outcome.MISMATCH
    if not (search.use_truncation and mismatch and match):
        return
    ops = [n for n in search.best.ops if program.is_tensor_op(search.original, n)]
    node = ops[int(match.group(1))] if int(match.group(1)) < len(ops) else None
    if node is None:
        return
    kept = search.best.ops[: search.best.ops.index(node) + 1]
    search.first_keeping("truncate", [State(kept, (node,))])


def drop_outputs(search: GraphSearch) -> None:
    """Delta debugging over the outputs: keep as few as still show the outcome."""

    def candidate(chunk: Sequence[str]) -> State | None:
        assert search.best is not None
        outputs = tuple(o for o in search.best.outputs if o not in chunk)
        return State(search.best.ops, outputs) if outputs else None

    ddmin(search, "drop outputs", lambda: list(search.best.outputs), candidate)


def remove_dead_code(search: GraphSearch) -> None:
    assert search.best is not None
    search.first_keeping("dead code", [dead_code_removed(search.original, search.best)])


def remove_blocks(search: GraphSearch) -> None:
    """Delta debugging over blocks of operations, each removed block fed from the record."""

    def candidate(chunk: Sequence[str]) -> State | None:
        assert search.best is not None
        return without(search.original, search.best, chunk)

    ddmin(search, "blocks", lambda: list(search.best.ops), candidate)


def ddmin(
    search: GraphSearch,
    strategy: str,
    items: Callable[[], list[str]],
    candidate: Callable[[Sequence[str]], State | None],
) -> None:
    """Remove chunks of ``items()``: halves first, then quarters, ... single items; a chunk
    that can go goes, and the search goes on from where it was."""
    size = max(1, len(items()) // 2)
    while True:
        start = 0
        while start < len(items()):
            current = items()
            chunks = [current[i : i + size] for i in range(start, len(current), size)]
            batch = chunks[: search.options.jobs]
            made = {c: candidate(c) for c in map(tuple, batch)}
            states = [s for s in made.values() if s is not None]
            accepted = search.first_keeping(strategy, states) if states else None
            if accepted is None:
                start += len(batch) * size
            else:  # the next chunk starts where the removed one was
                start += size * next(i for i, s in enumerate(made.values()) if s == accepted)
        if size == 1:
            return
        size //= 2


STRATEGIES = (truncate, drop_outputs, remove_dead_code, remove_blocks)


def shrink_graph(search: GraphSearch) -> None:
    """Every strategy in turn, cheapest first, until a whole pass changes nothing."""
    while True:
        before = search.best
        for strategy in STRATEGIES:
            strategy(search)
        if search.best == before:
            return


class ParamSearch(Search):
    """The parameter minimizer on the minimal program, judged by the graph search's target
    (a failure's message as well as its stage)."""

    graph_target: Target | None = None

    def keeps(self, result: VariantResult | None) -> bool:
        return self.graph_target is not None and self.graph_target.kept_by(result)
