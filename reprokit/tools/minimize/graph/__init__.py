"""Minimize a captured program: the few operations of an ``exported_program`` case that still
show its outcome (a mismatch at the same kind of operation, or the same failure).

``minimize_graph`` is ``reprokit minimize`` for such a case: the graph search of
:mod:`~reprokit.tools.minimize.graph.search`, then the parameter search of
:mod:`reprokit.tools.minimize.params` on the minimal program. It writes, into the output folder,
``minimal.pt2``, ``minimal.toml``
(the case on the minimal program), the standalone ``repro.py`` (and ``inputs.pt`` when its
inputs are too large to print), and a summary.json that ``reprokit report`` reads, with the
search's record (:class:`~reprokit.records.run.GraphShrink` in ``run.minimized.graph``).
Budget and Ctrl-C stop it with the best found so far written out.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

from reprokit.errors import ReprokitError
from reprokit.generate.render import render
from reprokit.generate.variants import Variant
from reprokit.records import Change, MinimizeResult, Outcome, write_summary
from reprokit.records.run import GraphShrink, Step
from reprokit.runner.options import Options
from reprokit.runner.scheduler import Interrupted
from reprokit.tools.minimize.graph import program, script
from reprokit.tools.minimize.graph.program import State
from reprokit.tools.minimize.graph.search import GraphSearch, ParamSearch, Target, shrink_graph
from reprokit.tools.minimize.params import BudgetSpent, Cache, case_toml, kept, shrink

TEMPLATE = "exported_program"

__all__ = ["TEMPLATE", "minimize_graph"]


def minimize_graph(
    variant: Variant,
    *,
    out_dir: Path,
    options: Options | None = None,
    budget: int = 60,
    cache: Cache | None = None,
    truncate: bool = True,
) -> MinimizeResult:
    """Shrink the program of an ``exported_program`` variant, then its parameters.
    ``truncate=False`` leaves out the first strategy (bench/minimize_graph.py compares)."""
    if variant.template.name != TEMPLATE:
        raise ReprokitError(
            f"{variant.case.name} does not run a captured program", variant.case.path
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    original = program.load(Path(variant.params["program"]))
    search = GraphSearch(original, variant, options or Options(), out_dir, max(1, budget),
                         cache or Cache(), use_truncation=truncate)  # fmt: skip
    search.best = State(original.ops(), original.outputs())
    start, stopped = time.monotonic(), "done"
    try:
        baseline(search)
        shrink_graph(search)
        shrink_params(search)
    except BudgetSpent:
        stopped = "budget"
    except (Interrupted, KeyboardInterrupt):
        stopped = "interrupted"
    params = search.chosen or search.params(search.best)
    return write(search, params, stopped, time.monotonic() - start)


def baseline(search: GraphSearch) -> None:
    """The whole program, rebuilt as every candidate is: its outcome is the target."""
    assert search.best is not None
    if not search._built(search.best):
        raise ReprokitError(
            "torch.export cannot rebuild the captured program from its own graph",
            search.original.path,
            hint="Capture a smaller part of the model, or minimize its parameters only.",
        )
    (result,), _ = search.try_states([search.best])
    if result is None:
        raise BudgetSpent
    search.best_result, search.target = result, Target.of(result)
    if result.outcome is Outcome.MATCH:
        raise ReprokitError(
            "the captured program's backends agree: there is nothing to minimize",
            search.variant.case.path,
            hint="Minimize a case that mismatches or fails (`reprokit run` shows its outcome).",
        )


def shrink_params(search: GraphSearch) -> None:
    """The parameter minimizer on the minimal program, under the same budget and cache."""
    found = ParamSearch(search.variant, search.options, search.out_dir, search.budget, search.cache)
    found.graph_target, found.best_result = search.target, search.best_result
    found.best = search.params(search.best)  # type: ignore[arg-type]
    found.runs, found.hits, found.batches = search.runs, search.hits, search.batches
    before = found.runs
    try:
        shrink(found)
    finally:
        search.runs, search.hits, search.batches = found.runs, found.hits, found.batches
        search.steps.setdefault("parameters", [0, 0])[0] += found.runs - before
        search.best_result, search.chosen = found.best_result, found.best


def write(search: GraphSearch, params: dict, stopped: str, seconds: float) -> MinimizeResult:
    """minimal.pt2, minimal.toml, repro.py (and inputs.pt), summary.json: the best so far."""
    assert search.best is not None
    variant, out_dir, best = search.variant, search.out_dir, search.best
    built = out_dir / "programs" / search.file(best)
    shutil.copyfile(built if built.is_file() else search.original.path, out_dir / "minimal.pt2")
    params = {**params, "program": str(out_dir / "minimal.pt2")}
    minimal = Variant(dataclasses.replace(variant.case, matrix={}), params)
    text, stored = script.standalone(search.original, best, minimal, search.perturbed)
    found = _result(search, minimal, text, stopped, seconds)
    summary, folders = kept(found, search.best_result, minimal, out_dir)
    for folder in folders:
        script.write(folder, text, stored)
    (out_dir / "minimal.toml").write_text(case_toml(minimal, search.target), encoding="utf-8")
    write_summary(summary, out_dir)
    return found


def _result(
    search: GraphSearch, minimal: Variant, text: str, stopped: str, seconds: float
) -> MinimizeResult:
    assert search.best is not None
    original, variant = search.original, search.variant
    before = program.counts(original, State(original.ops(), original.outputs()))
    after = program.counts(original, search.best)
    kinds = variant.template.params
    shrunk = GraphShrink(
        nodes=(before[0], after[0]),
        inputs=(before[1], after[1]),
        weights=(before[2], after[2]),
        steps=tuple(Step(k, runs, removed) for k, (runs, removed) in search.steps.items()),
    )
    return MinimizeResult(
        case=variant.case.name,
        target=search.target.describe() if search.target else None,
        changes=tuple(
            Change(k, v, minimal.params[k])
            for k, v in variant.params.items()
            if minimal.params[k] != v and kinds[k].type != "file"
        ),
        lines=(render(variant).count("\n"), text.count("\n")),
        candidates=search.runs,
        cache_hits=search.hits,
        seconds=round(seconds, 1),
        stopped=stopped,
        graph=shrunk,
    )
