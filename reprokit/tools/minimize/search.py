"""The loop both minimizers share: one candidate runner, one predicate, one fixpoint.

A *candidate* is whatever a strategy proposes (a parameter dict, a subgraph of a captured
program); a :class:`Search` turns it into an ordinary variant and runs it through the
:class:`Runner` (``reprokit.runner.scheduler.run``: a fresh process per stage, timeouts, crash
classification), ``jobs`` side by side, under a budget of runs, cached across calls. Every
strategy talks to the search through one predicate, :meth:`Search.first`: "which of these,
if any, still shows the target?" (as torch's fx_minifier keeps its strategies behind one
yes/no question); the first that does becomes the best. :func:`fixpoint` repeats the
strategies until a whole pass changes nothing, and :func:`until_stopped` says why a search
ended.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from reprokit.generate.render import render
from reprokit.generate.variants import Variant
from reprokit.records import VariantResult
from reprokit.records.minimize import CANDIDATES
from reprokit.runner.options import Options
from reprokit.runner.scheduler import Interrupted, run
from reprokit.tools.minimize.candidate_cache import Cache
from reprokit.tools.minimize.target import Target

C = TypeVar("C")


class BudgetSpent(Exception):
    """No candidate runs are left."""


@dataclass
class Runner:
    """Runs candidate variants side by side, each batch in a run folder of its own under
    ``out_dir/candidates``, at most ``budget`` runs in all; cached results are not run again.
    Counts what it did: ``runs`` (candidates run), ``hits`` (found in the cache), ``batches``."""

    options: Options
    out_dir: Path
    budget: int
    cache: Cache
    runs: int = 0
    hits: int = 0
    batches: int = 0

    @classmethod
    def into(
        cls, out_dir: Path, options: Options | None, budget: int, cache: Cache | None
    ) -> Runner:
        """A runner writing under ``out_dir`` (made), at least one run, the shared cache by
        default: what both searches start from."""
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        return cls(options or Options(), Path(out_dir), max(1, budget), cache or Cache())

    def run(
        self, variants: Sequence[Variant], ready: Callable[[int], bool] = lambda _: True
    ) -> tuple[list[VariantResult | None], bool]:
        """Each variant's result, cached or run (None: not run); and whether the budget left
        some out. ``ready(i)`` makes what variant ``i`` needs and says whether it could:
        asked only of those that must run (one that cannot is not run, and costs nothing)."""
        keys = [self.cache.key(render(v), self.options, v.env) for v in variants]
        results: list[VariantResult | None] = [self.cache.get(k) for k in keys]
        self.hits += sum(r is not None for r in results)
        missing = dict.fromkeys(k for k, r in zip(keys, results, strict=True) if r is None)
        wanted = [k for k in missing if ready(keys.index(k))]  # the same script runs once
        todo = wanted[: max(0, self.budget - self.runs)]
        got: dict[str, VariantResult] = {}
        if todo:
            self.batches += 1
            self.runs += len(todo)
            folder = self.out_dir / CANDIDATES / f"batch-{self.batches:03d}"
            chosen = [variants[keys.index(k)] for k in todo]
            summary = run(chosen, run_dir=folder, options=self.options)
            for key, result in zip(todo, summary.variants, strict=True):
                self.cache.put(key, result)
                got[key] = result
        results = [got.get(k) if r is None else r for k, r in zip(keys, results, strict=True)]
        return results, len(todo) < len(wanted)


def candidate(base: Variant, params: dict[str, Any], prefix: str = "c") -> Variant:
    """``base`` with ``params``, named after its content so that run folders never collide."""
    digest = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:8]
    return base.with_params(params, name=f"{prefix}-{digest}")


@dataclass
class Search(Generic[C]):
    """One minimization: the best candidate so far and its result, the target every
    candidate must keep, and what each strategy cost (``steps``: runs, and what it removed as
    ``measure`` counts it)."""

    runner: Runner
    target: Target
    best: C
    best_result: VariantResult
    variant: Callable[[C], Variant]  # a candidate as the variant that runs it
    ready: Callable[[C], bool] = lambda _: True  # make its files; False: it cannot be made
    measure: Callable[[C], int] = lambda _: 0  # its size, for the steps' "removed"
    steps: dict[str, list[int]] = field(default_factory=dict)  # strategy: runs, removed

    @property
    def jobs(self) -> int:
        return self.runner.options.jobs

    def first(self, strategy: str, candidates: Sequence[C | None]) -> int | None:
        """The predicate: the index of the first candidate that keeps the target, which
        becomes the best; None when none does. Tried in order, ``jobs`` at a time; None (no
        such candidate) never keeps; one equal to the best keeps without a run. Raises
        :class:`BudgetSpent` when the budget left some untried."""
        for start in range(0, len(candidates), self.jobs):
            batch = list(candidates[start : start + self.jobs])
            same = next((i for i, c in enumerate(batch) if c is not None and c == self.best), None)
            found = self._first_run(strategy, batch[:same])
            found = same if found is None else found
            if found is not None:
                return start + found
        return None

    def _first_run(self, strategy: str, batch: list[C | None]) -> int | None:
        """Run the batch side by side; the first that keeps the target is accepted."""
        made = [(i, c) for i, c in enumerate(batch) if c is not None]
        if not made:
            return None
        before = self.runner.runs
        variants = [self.variant(c) for _, c in made]
        results, over = self.runner.run(variants, lambda j: self.ready(made[j][1]))
        self.steps.setdefault(strategy, [0, 0])[0] += self.runner.runs - before
        for (i, chosen), result in zip(made, results, strict=True):
            if result is not None and self.target.kept_by(result):
                self.accept(strategy, chosen, result)
                return i
        if over:
            raise BudgetSpent
        return None

    def accept(self, strategy: str, best: C, result: VariantResult) -> None:
        removed = self.measure(self.best) - self.measure(best)
        self.steps.setdefault(strategy, [0, 0])[1] += removed
        self.best, self.best_result = best, result


Strategy = Callable[[Search[C]], None]


def fixpoint(search: Search[C], strategies: Sequence[Strategy[C]]) -> None:
    """Every strategy in turn, until a whole pass changes nothing: a value that could not
    move may move once another has (an operation once its neighbours are gone)."""
    while True:
        before = search.best
        for strategy in strategies:
            strategy(search)
        if search.best == before:
            return


def until_stopped(work: Callable[[], None]) -> str:
    """Run ``work``; why it ended: ``done``, ``budget`` or ``interrupted`` (Ctrl-C, SIGTERM),
    the best found so far kept either way."""
    try:
        work()
    except BudgetSpent:
        return "budget"
    except (Interrupted, KeyboardInterrupt):
        return "interrupted"
    return "done"
