"""Minimize a captured program: the few operations of an ``exported_program`` case that still
show its outcome (a mismatch at the same kind of operation, or the same failure).

``minimize_graph`` is ``reprokit minimize`` for such a case: the program strategies of
:mod:`~reprokit.tools.minimize.graph.strategies`, then the parameter search of
:mod:`reprokit.tools.minimize.params` on the minimal program, both through one
:class:`~reprokit.tools.minimize.search.Runner` (one budget, one cache, one count). It writes,
into the output folder, ``minimal.pt2``, ``minimal.toml`` (the case on the minimal program),
the short ``repro.py`` a maintainer pastes (:mod:`~reprokit.tools.minimize.graph.short`; its
``inputs.pt`` only when neither literals nor seeded random inputs show the outcome, which one
more oracle run checks), the stage-protocol ``repro_stages.py`` beside it, and a summary.json
that ``reprokit report`` reads, with the search's record
(:class:`~reprokit.records.minimize.GraphShrink` in ``run.minimized.graph``). The oracle's run
folders go under ``candidates/`` and the candidates' programs under ``programs/``: the
bundle leaves both out. Budget and Ctrl-C stop it with the best found so far written out.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit.comparison.roots import roots, said
from reprokit.errors import ReprokitError
from reprokit.generate.render import render
from reprokit.generate.variants import Variant
from reprokit.records import (
    MinimizeResult,
    Outcome,
    Root,
    VariantResult,
    read_summary,
    write_summary,
)
from reprokit.records.minimize import (
    CANDIDATES,
    GRADIENT,
    MINIMAL_PROGRAM,
    PROGRAMS,
    GraphShrink,
    Step,
)
from reprokit.records.run import PROGRAM
from reprokit.runner.options import Options
from reprokit.runner.processes.alone import keep_output
from reprokit.runner.scheduler import Interrupted
from reprokit.tools.minimize.candidate_cache import Cache
from reprokit.tools.minimize.graph import gradient, program, script, short
from reprokit.tools.minimize.graph.program import State
from reprokit.tools.minimize.graph.strategies import Programs, strategies
from reprokit.tools.minimize.output import result_of, write_out
from reprokit.tools.minimize.params import shrink
from reprokit.tools.minimize.search import (
    BudgetSpent,
    Runner,
    Search,
    candidate,
    fixpoint,
    until_stopped,
)
from reprokit.tools.minimize.target import Target
from reprokit.tools.whose import whose

WHOSE = "whose"  # the folder of the HLO text whose() attaches
# A training capture's joint graph is a program of the same kind (records.run.captured): its
# candidates are subgraphs of forward and backward operations, run by the training template
# (no gradients left to it: one step of the graph as it is).

__all__ = ["minimize_graph"]


def minimize_graph(
    variant: Variant,
    *,
    out_dir: Path,
    options: Options | None = None,
    budget: int = 60,
    cache: Cache | None = None,
    truncate: bool = True,
    root: str = "",
) -> MinimizeResult:
    """Shrink the program of an ``exported_program`` variant, then its parameters, keeping
    ``root`` (a root's recorded name or op; else the first that reaches an output).
    ``truncate=False`` leaves out the first strategy (bench/minimize_graph.py compares)."""
    if not variant.captured:
        raise ReprokitError(
            f"{variant.case.name} does not run a captured program", variant.case.path
        )
    runner = Runner.into(out_dir, options, budget, cache)
    original = program.load(Path(variant.params[PROGRAM]))
    programs = Programs(original, variant, runner.out_dir / PROGRAMS)
    start, searches = time.monotonic(), _Searches()

    def work() -> None:
        searches.graph = graph = baseline(programs, runner, root)
        searches.root = graph.target.found(graph.best_result) or ""
        searches.others = tuple(r for r in roots(graph.best_result) if r.tensor != searches.root)
        searches.whole = graph.best_result
        fixpoint(graph, strategies(programs.original, truncation=truncate))
        searches.params = params = Search(
            runner, graph.target, programs.params(graph.best), graph.best_result,
            lambda chosen: candidate(variant, chosen), steps=graph.steps,
        )  # fmt: skip
        shrink(params, variant.template.params, lambda chosen: render(variant.with_params(chosen)))

    stopped = until_stopped(work)
    record = write(programs, runner, searches, stopped, time.monotonic() - start)
    if root or stopped == "interrupted":
        return record
    return each_other(variant, record, searches.others, runner, truncate)


def each_other(
    variant: Variant, record: MinimizeResult, others: tuple[Root, ...], runner: Runner,
    truncate: bool,
) -> MinimizeResult:  # fmt: skip
    """Each other root that reaches an output minimized the same way, into ``roots/NAME``
    beside the first (its own short repro: a second bug is a second issue); the record, and
    summary.json, name those folders. One cache: the whole program runs once."""
    folders = []
    for other in (r for r in others if r.reaches):
        folder = f"roots/{other.tensor}"
        found = minimize_graph(
            variant, out_dir=runner.out_dir / folder, options=runner.options,
            budget=runner.budget, cache=runner.cache, truncate=truncate, root=other.tensor,
        )  # fmt: skip
        folders.append(folder)
        if found.stopped == "interrupted":
            break
    if not folders or record.graph is None:
        return record
    graph = dataclasses.replace(record.graph, elsewhere=tuple(folders))
    return _rewritten(dataclasses.replace(record, graph=graph), runner.out_dir)


@dataclass
class _Searches:
    """How far a minimization got: the program's search, then the parameters'."""

    graph: Search[State] | None = None
    params: Search[dict[str, Any]] | None = None
    root: str = ""  # the root kept, by its name in the whole program
    others: tuple[Root, ...] = ()  # the program's other roots: independent divergences
    whole: VariantResult | None = None  # the whole program's result

    def said(self) -> tuple[str, ...]:
        """The other roots in words."""
        return tuple(said(self.whole, r) for r in self.others) if self.whole else ()


def baseline(programs: Programs, runner: Runner, root: str = "") -> Search[State]:
    """The whole program, rebuilt as every candidate is: its outcome is the target."""
    original = programs.original
    whole = State(original.ops(), original.outputs())
    if not programs.ready(whole):
        raise ReprokitError(
            "torch.export cannot rebuild the captured program from its own graph",
            original.path,
            hint="Capture a smaller part of the model, or minimize its parameters only.",
        )
    (result,), _ = runner.run([programs.variant_of(whole)])
    if result is None:
        raise BudgetSpent
    if result.outcome is Outcome.MATCH:
        raise ReprokitError(
            "the captured program's backends agree: there is nothing to minimize",
            programs.variant.case.path,
            hint="Minimize a case that mismatches or fails (`reprokit run` shows its outcome).",
        )
    target = Target.of(result, with_message=True, root=root)
    return Search(runner, target, whole, result, programs.variant_of, programs.ready, programs.size)


def write(
    programs: Programs, runner: Runner, searches: _Searches, stopped: str, seconds: float
) -> MinimizeResult:
    """minimal.pt2, minimal.toml, repro.py (and inputs.pt), summary.json: the best so far."""
    original, variant, out_dir = programs.original, programs.variant, runner.out_dir
    graph, chosen = searches.graph, searches.params
    best = graph.best if graph else State(original.ops(), original.outputs())
    # the .pt2 of a candidate found in the cache is made now, for minimal.pt2
    made = programs.path(best) if programs.ready(best) else original.path
    (out_dir / MINIMAL_PROGRAM).unlink(missing_ok=True)  # a run folder may hold a link to it
    shutil.copyfile(made, out_dir / MINIMAL_PROGRAM)
    params = chosen.best if chosen else programs.params(best)
    minimal = variant.with_params({**params, PROGRAM: str(out_dir / MINIMAL_PROGRAM)})
    text, stored = script.standalone(original, best, minimal, programs.perturbed)
    checking = graph.target if graph and stopped != "interrupted" else None  # Ctrl-C: no run
    by_autograd = gradient_repro(programs, runner, best, minimal, checking)
    if by_autograd is not None:
        pasted, pasted_stored, told = by_autograd
    else:
        inputs, told = short_inputs(programs, runner, best, params, checking)
        pasted = short.short_repro(original, best, minimal, inputs, programs.perturbed)
        pasted_stored = short.stored(inputs, short.values_read(original, best))

    def write_scripts(folder: Path) -> None:
        script.write(folder, text, stored)
        short.write(folder, pasted, pasted_stored)

    record = result_of(
        variant,
        minimal,
        graph.target if graph else None,
        runner,
        lines=(render(variant).count("\n"), pasted.count("\n")),
        seconds=seconds,
        stopped=stopped,
        graph=_shrunk(
            programs,
            best,
            graph.steps if graph else {},
            told,
            by_autograd is not None,
            searches.said(),
            searches.root,
        ),
    )
    last = chosen or graph  # the parameter search, once it started, has the last result
    kept = last.best_result if last else None
    target = graph.target if graph else None
    write_out(out_dir, record, kept, minimal, target, write_scripts)
    if stopped == "interrupted" or kept is None:
        return record
    written = functools.partial(short.write, script=pasted, stored_values=pasted_stored)
    return _run_short(record, written, runner, minimal.label)


def _run_short(
    record: MinimizeResult, written: Callable[[Path], None], runner: Runner, label: str
) -> MinimizeResult:
    """The short repro run alone, its output kept for the report to show; where it shows the
    difference, XLA's passes asked on it whose the bug is."""
    out_dir = runner.out_dir
    ran = keep_output(written, [out_dir, out_dir / label], runner.options,
                      out_dir / CANDIDATES)  # fmt: skip
    if not ran.shows() or record.graph is None:
        return record
    found = whose(written, runner.options, out_dir / WHOSE)  # XLA's passes on the short repro
    hlo = tuple(str(Path(p).relative_to(out_dir.resolve())) for p in found.hlo)  # resolved
    graph = dataclasses.replace(record.graph, whose=dataclasses.replace(found, hlo=hlo))
    return _rewritten(dataclasses.replace(record, graph=graph), out_dir)


def _rewritten(record: MinimizeResult, out_dir: Path) -> MinimizeResult:
    """summary.json's search record replaced by ``record`` (what was found after writing)."""
    summary = read_summary(out_dir)
    write_summary(dataclasses.replace(summary, minimized=record), out_dir)
    return record


def short_inputs(
    programs: Programs, runner: Runner, best: State, params: dict[str, Any], target: Target | None
) -> tuple[list[short.Input], str]:
    """How the short repro writes its inputs, and what the record says of them: seeded random
    draws where a value is too large to print, when the oracle shows the outcome with them
    too (one more run, within the budget); else the recorded values, from inputs.pt."""
    original = programs.original
    values = short.values_read(original, best)
    chosen = short.plan(values, random=True)
    if not any(s.kind in ("randn", "randint") for s in chosen):
        return chosen, "stored" if short.stored(chosen, values) else "literals"
    if target is None:
        return short.plan(values, random=False), "stored (not checked: the search was stopped)"
    drawn = dataclasses.replace(original, values={**original.values, **short.drawn(chosen, values)})
    draws = hashlib.sha256(repr([s.context() for s in chosen]).encode()).hexdigest()[:8]
    path = programs.folder / f"r-{draws}-{best.digest(original.digest)}.pt2"
    result = None
    try:
        if path.is_file() or _saved(drawn, best, path):
            params = {**params, PROGRAM: str(path)}
            (result,), _ = runner.run([candidate(programs.variant, params, "r")])
    except (Interrupted, KeyboardInterrupt):
        result = None
    if target.kept_by(result):
        return chosen, "random"
    why = "not checked: no budget left" if result is None else "random inputs do not show it"
    return short.plan(values, random=False), f"stored ({why})"


def gradient_repro(
    programs: Programs, runner: Runner, best: State, minimal: Variant, target: Target | None
) -> tuple[str, dict[str, Any], str] | None:
    """The short repro by torch.autograd (:mod:`~reprokit.tools.minimize.graph.gradient`) of
    a mismatching subgraph of backward operations, when it shows the difference run alone
    (seeded random inputs first, then the recorded ones: a run each): the script, what its
    inputs.pt holds, how it writes its inputs. None: the aten calls' repro is written."""
    original = programs.original
    if target is None or target.outcome is not Outcome.MISMATCH or minimal.env is not None:
        return None  # a failure, a stopped search, another release: no run to check it with
    found = gradient.of(original, best) if programs.perturbed not in best.ops else None
    if found is None:
        return None
    values = gradient.values(original, found)
    for random in (True, False):
        inputs = short.plan(values, random=random)
        drawn = any(s.kind in ("randn", "randint") for s in inputs)
        if random and not drawn:
            continue
        text = short.short_repro(original, best, minimal, inputs, None, gradient=found)
        stored = short.stored(inputs, values)
        written = functools.partial(short.write, script=text, stored_values=stored)
        if gradient.reproduces(written, runner.options, runner.out_dir / GRADIENT):
            return text, stored, "random" if drawn else "stored" if stored else "literals"
    return None


def _saved(original: program.Original, state: State, path: Path) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        program.save(original, state, path)
    except Exception:  # as Programs.ready: export's failures are many
        return False
    return True


def _shrunk(
    programs: Programs,
    best: State,
    steps: dict[str, list[int]],
    short_inputs: str,
    by_autograd: bool,
    others: tuple[str, ...] = (),
    root: str = "",
) -> GraphShrink:
    """What the program lost (operations, inputs, weights: before -> after), what each
    strategy cost, how the short repro writes its inputs and whether by autograd."""
    original = programs.original
    before = program.counts(original, State(original.ops(), original.outputs()))
    after = program.counts(original, best)
    return GraphShrink(
        nodes=(before[0], after[0]),
        inputs=(before[1], after[1]),
        weights=(before[2], after[2]),
        steps=tuple(Step(k, runs, removed) for k, (runs, removed) in steps.items()),
        short_inputs=short_inputs,
        by_autograd=by_autograd,
        others=others,
        root=root,
    )
