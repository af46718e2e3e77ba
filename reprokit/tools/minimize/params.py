"""Minimize: shrink a variant to the smallest one that still shows the same outcome.

The search follows delta debugging (:mod:`~reprokit.tools.minimize.ddmin`): first every
parameter at once to its simplest value (declared ``min``, ``false``, the first of its
``choices``), then halves of that set, then quarters, down to one parameter at a time;
parameters that cannot reach their simplest value are then bisected between it and their
current value. Each candidate is an ordinary variant run by the runner, ``jobs`` of them side
by side (:class:`~reprokit.tools.minimize.search.Search`), in the variant's own environment,
cached by script and interpreter across calls. The result, a :class:`MinimizeResult`, lands
in the output folder's summary.json; what "the same outcome" means is
:class:`~reprokit.tools.minimize.target.Target`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from reprokit.generate.render import render
from reprokit.generate.templates import Param
from reprokit.generate.variants import Variant
from reprokit.records import MinimizeResult
from reprokit.records.folder import SCRIPT
from reprokit.runner.options import Options
from reprokit.tools.minimize.candidate_cache import Cache
from reprokit.tools.minimize.ddmin import ddmin
from reprokit.tools.minimize.output import result_of, write_out
from reprokit.tools.minimize.search import (
    BudgetSpent,
    Runner,
    Search,
    candidate,
    fixpoint,
    until_stopped,
)
from reprokit.tools.minimize.target import Target

__all__ = ["Cache", "Params", "minimize", "param_search", "shrink", "simplest"]

Params = dict[str, Any]


def minimize(
    variant: Variant,
    *,
    out_dir: Path,
    options: Options | None = None,
    budget: int = 40,
    cache: Cache | None = None,
) -> MinimizeResult:
    """Shrink ``variant``; write the minimal case and its script into out_dir, with a
    summary.json that `reprokit report` reads (the search's record in it)."""
    runner = Runner.into(out_dir, options, budget, cache)
    start = time.monotonic()
    search: Search[Params] | None = None

    def work() -> None:
        nonlocal search
        search = param_search(variant, runner)
        shrink(search, variant.template.params, lambda params: render(variant.with_params(params)))

    stopped = until_stopped(work)
    minimal = variant.with_params(search.best if search else variant.params)
    target = search.target if search else None
    script = render(minimal)
    record = result_of(
        variant,
        minimal,
        target,
        runner,
        lines=(render(variant).count("\n"), script.count("\n")),
        seconds=time.monotonic() - start,
        stopped=stopped,
    )

    def write_script(folder: Path) -> None:
        (folder / SCRIPT).write_text(script, encoding="utf-8")
        minimal.copy_files(folder)

    best = search.best_result if search else None
    write_out(runner.out_dir, record, best, minimal, target, write_script)
    return record


def param_search(variant: Variant, runner: Runner) -> Search[Params]:
    """The search over ``variant``'s parameters, its target what the variant shows now."""
    (baseline,), _ = runner.run([candidate(variant, dict(variant.params))])
    if baseline is None:
        raise BudgetSpent
    return Search(
        runner,
        Target.of(baseline),
        dict(variant.params),
        baseline,
        lambda params: candidate(variant, params),
    )


def simplest(param: Param) -> Any:
    """The simplest value a parameter declares, or None when it is not to be minimized."""
    if not param.minimize:
        return None
    if param.type == "bool":
        return False
    if param.choices:
        return param.choices[0]
    if param.type == "int" and param.min is not None:
        return int(param.min)
    if param.type == "float" and param.min is not None:
        return float(param.min)
    return None


def shrink(
    search: Search[Params],
    declared: Mapping[str, Param],
    script: Callable[[Params], str] | None = None,
) -> None:
    """Passes of :func:`shrink_once` until one changes nothing. ``script``: the script the
    parameters render, when known: a parameter that leaves it as it is (`spmd_devices` of a
    program with no SPMD stage) is not a change to make, nor to report."""
    fixpoint(search, [partial(shrink_once, declared=declared, script=script)])


def shrink_once(
    search: Search[Params],
    declared: Mapping[str, Param],
    script: Callable[[Params], str] | None = None,
) -> None:
    """Delta debugging over the 'make it simplest' changes, then bisection of what is left:
    a change leaves the pending list when it is applied."""
    start = dict(search.best)
    changes = {
        name: simplest(p)
        for name, p in declared.items()
        if simplest(p) is not None and start.get(name) != simplest(p)
    }
    if script is not None:
        now = script(start)
        changes = {n: v for n, v in changes.items() if script({**start, n: v}) != now}

    def first(rests: list[list[str]]) -> int | None:
        tried = [{**start, **{n: v for n, v in changes.items() if n not in r}} for r in rests]
        return search.first("parameters", tried)

    for name in ddmin(list(changes), first, batch=search.jobs):
        if declared[name].type in ("int", "float"):
            bisect_param(search, name, declared[name])


def bisect_param(search: Search[Params], name: str, param: Param) -> None:
    """The smallest value between the simplest (which fails) and the current (which keeps):
    a k-ary search, every slot trying a point."""
    low, high = simplest(param), search.best[name]
    for _ in range(64 if param.type == "int" else 3):  # floats: a few rounds are enough
        count = search.jobs
        points = {_point(low, high, (i + 1) / (count + 1), param.type) for i in range(count)}
        points = sorted(p for p in points if low < p < high)
        if not points:
            return
        kept = search.first("parameters", [{**search.best, name: p} for p in points])
        if kept is not None:
            high = points[kept]
        low = max([p for p in points if p < high], default=low)


def _point(low: float, high: float, fraction: float, kind: str) -> float:
    value = low + (high - low) * fraction
    return round(value) if kind == "int" else value
