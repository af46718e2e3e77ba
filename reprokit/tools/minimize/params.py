"""Minimize: shrink a variant to the smallest one that still shows the same outcome.

The search follows delta debugging: first every parameter at once to its simplest value
(declared ``min``, ``false``, the first of its ``choices``), then halves of that set, then
quarters, down to one parameter at a time; parameters that cannot reach their simplest value
are then bisected between it and their current value. Each candidate is an ordinary variant run
by the runner, ``jobs`` of them side by side (the next chunks are tried speculatively while
others run). Results are cached by script and environment, across calls. The result, a
:class:`MinimizeResult`, lands in the output folder's summary.json.

"Same outcome" means the same :class:`Outcome`, and for a mismatch the same kind of first
diverging tensor (its name with the numbers taken out, ``act.#``), for an error, crash or
timeout the same failing stage: so that the search does not drift to another bug.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from reprokit.environment.machine import capture as capture_env
from reprokit.environment.machine import versions
from reprokit.generate.render import render
from reprokit.generate.templates import Param
from reprokit.generate.variants import Variant
from reprokit.infra.caching import Store
from reprokit.records import (
    Change,
    MinimizeResult,
    Outcome,
    RunSummary,
    VariantResult,
    write_summary,
)
from reprokit.runner.options import Options
from reprokit.runner.scheduler import Interrupted, run


@dataclass(frozen=True)
class Observation:
    """What must stay the same while the variant shrinks."""

    outcome: Outcome
    clue: str | None  # diverging tensor kind, or failing stage

    @classmethod
    def of(cls, result: VariantResult) -> Observation:
        if result.outcome is Outcome.MISMATCH:
            first = next((t for t in result.first_divergence.values() if t), None)
            return cls(result.outcome, re.sub(r"\d+", "#", first) if first else None)
        failed = result.failed_stage
        return cls(result.outcome, failed.name if failed else None)

    def describe(self) -> str:
        return f"{self.outcome.value} ({self.clue})" if self.clue else self.outcome.value


class Cache:
    """Variant results by script content and environment, kept across calls."""

    def __init__(self, folder: Path | None = None) -> None:
        self.store = Store("minimize", root=folder)

    @staticmethod
    def key(script: str, options: Options) -> str:
        environment = [options.xla_device, options.timeout, sys.version, versions()]
        text = script + json.dumps(environment, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> VariantResult | None:
        data = self.store.get_json(key)
        try:
            return VariantResult.from_json(data) if isinstance(data, dict) else None
        except (ValueError, KeyError, TypeError):  # another version's
            return None

    def put(self, key: str, result: VariantResult) -> None:
        self.store.put_json(key, result.to_json())


def run_batch(
    search: Any, variants: list[Variant], keys: list[str], results: list[Any], todo: list[int]
) -> None:
    """Run the candidates at ``todo`` side by side, in a run folder of their own, into
    ``results`` and the cache; counted in ``search`` (a :class:`Search`, or the graph search:
    ``out_dir``, ``options``, ``cache``, ``runs``, ``batches``)."""
    if not todo:
        return
    search.batches += 1
    folder = search.out_dir / "candidates" / f"batch-{search.batches:03d}"
    search.runs += len(todo)
    summary = run([variants[i] for i in todo], run_dir=folder, options=search.options)
    for i, result in zip(todo, summary.variants, strict=True):
        results[i] = result
        search.cache.put(keys[i], result)


class BudgetSpent(Exception):
    """No candidate runs are left."""


@dataclass
class Search:
    """The state of one minimization: the best variant so far and what it cost."""

    variant: Variant
    options: Options
    out_dir: Path
    budget: int
    cache: Cache
    target: Observation | None = None
    best: dict[str, Any] = field(default_factory=dict)
    best_result: VariantResult | None = None
    runs: int = 0
    hits: int = 0
    batches: int = 0

    def try_all(self, candidates: list[dict[str, Any]]) -> list[VariantResult | None]:
        """Run the candidates side by side (cached ones are not run); None when over budget."""
        variants = [self._candidate(params) for params in candidates]
        scripts = [render(v) for v in variants]
        keys = [Cache.key(s, self.options) for s in scripts]
        results: list[VariantResult | None] = [self.cache.get(k) for k in keys]
        self.hits += sum(r is not None for r in results)
        todo = [i for i, r in enumerate(results) if r is None][: self.budget - self.runs]
        run_batch(self, variants, keys, results, todo)
        return results

    def _candidate(self, params: dict[str, Any]) -> Variant:
        """An ordinary variant, named after its content so folders never collide."""
        digest = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:8]
        case = dataclasses.replace(self.variant.case, name=f"c-{digest}", matrix={})
        return Variant(case, params)

    def keeps(self, result: VariantResult | None) -> bool:
        return result is not None and Observation.of(result) == self.target

    def accept(self, params: dict[str, Any], result: VariantResult) -> None:
        self.best, self.best_result = dict(params), result


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


def shrink(search: Search) -> None:
    """Passes of :func:`shrink_once` until one changes nothing: a value that could not move
    may move once another has (fewer layers once the divergence sits earlier)."""
    while True:
        before = dict(search.best)
        shrink_once(search)
        if search.best == before:
            return


def shrink_once(search: Search) -> None:
    """Delta debugging over the 'make it simplest' changes, then bisection of what is left."""
    params = search.variant.template.params
    current = search.best
    changes = {
        name: simplest(p)
        for name, p in params.items()
        if simplest(p) is not None and current.get(name) != simplest(p)
    }
    pending = list(changes)
    chunks = 1
    while pending:
        size = -(-len(pending) // chunks)
        groups = [pending[i : i + size] for i in range(0, len(pending), size)]
        accepted = _first_keeping(search, [{n: changes[n] for n in g} for g in groups])
        if accepted is not None:
            pending = [n for n in pending if n not in accepted]
            chunks = max(1, chunks - 1)
        elif chunks >= len(pending):
            break
        else:
            chunks = min(2 * chunks, len(pending))
    for name in pending:
        if params[name].type in ("int", "float"):
            bisect_param(search, name, params[name])


def _first_keeping(search: Search, groups: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Try groups of changes, ``jobs`` at a time; the first that keeps the outcome is applied."""
    for start in range(0, len(groups), search.options.jobs):
        batch = groups[start : start + search.options.jobs]
        candidates = [{**search.best, **group} for group in batch]
        results = search.try_all(candidates)
        for group, params, result in zip(batch, candidates, results, strict=True):
            if search.keeps(result):
                search.accept(params, result)
                return group
        if any(r is None for r in results):
            raise BudgetSpent
    return None


def bisect_param(search: Search, name: str, param: Param) -> None:
    """The smallest value between the simplest (which fails) and the current (which keeps)."""
    low, high = simplest(param), search.best[name]
    for _ in range(64 if param.type == "int" else 3):  # floats: a few rounds are enough
        count = search.options.jobs  # k-ary search: every slot tries a point
        points = {_point(low, high, (i + 1) / (count + 1), param.type) for i in range(count)}
        points = sorted(p for p in points if low < p < high)
        if not points:
            return
        candidates = [{**search.best, name: p} for p in points]
        results = search.try_all(candidates)
        kept = [i for i, r in enumerate(results) if search.keeps(r)]
        if kept:
            search.accept(candidates[kept[0]], results[kept[0]])
            high = points[kept[0]]
        low = max([p for p in points if p < high], default=low)
        if any(r is None for r in results):
            raise BudgetSpent


def _point(low: float, high: float, fraction: float, kind: str) -> float:
    value = low + (high - low) * fraction
    return round(value) if kind == "int" else value


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
    options = options or Options()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    search = Search(variant, options, out_dir, max(1, budget), cache or Cache())
    start, stopped = time.monotonic(), "done"
    try:
        (baseline,) = search.try_all([dict(variant.params)])
        search.target = Observation.of(baseline)
        search.best, search.best_result = dict(variant.params), baseline
        shrink(search)
    except BudgetSpent:
        stopped = "budget"
    except (Interrupted, KeyboardInterrupt):
        stopped = "interrupted"
    return _write(search, stopped, time.monotonic() - start)


def _write(search: Search, stopped: str, seconds: float) -> MinimizeResult:
    """The minimal case file and its script (with the files it names), and a run folder
    `reprokit report` reads: the best result, expected to keep its outcome, and the search."""
    variant, out_dir = search.variant, search.out_dir
    minimal = Variant(dataclasses.replace(variant.case, matrix={}), search.best or variant.params)
    before, after = render(variant), render(minimal)
    found = MinimizeResult(
        case=variant.case.name,
        target=search.target.describe() if search.target else None,
        changes=tuple(
            Change(k, v, minimal.params[k])
            for k, v in variant.params.items()
            if minimal.params[k] != v
        ),
        lines=(before.count("\n"), after.count("\n")),
        candidates=search.runs,
        cache_hits=search.hits,
        seconds=round(seconds, 1),
        stopped=stopped,
    )
    summary, folders = kept(found, search.best_result, minimal, out_dir)
    for folder in folders:
        (folder / "repro.py").write_text(after, encoding="utf-8")
        minimal.copy_files(folder)
    (out_dir / "minimal.toml").write_text(case_toml(minimal, search.target), encoding="utf-8")
    write_summary(summary, out_dir)
    return found


def kept(
    found: MinimizeResult, best: VariantResult | None, minimal: Variant, out_dir: Path
) -> tuple[RunSummary, list[Path]]:
    """The run folder `reprokit report` reads: the search's record, and its best result as
    the one variant, expected to keep the outcome it kept; and the folders that get the
    minimal script (the output folder, and the variant's own)."""
    summary = RunSummary(started="", finished="", env=capture_env(quick=True), minimized=found)
    if best is None:
        return summary, [out_dir]
    result = dataclasses.replace(
        best,
        label=minimal.label,
        case=minimal.case.name,
        variant=minimal.script_params(),
        expected=best.outcome,
    )
    shutil.rmtree(out_dir / minimal.label, ignore_errors=True)
    (out_dir / minimal.label).mkdir()
    return summary.with_variants([result]), [out_dir, out_dir / minimal.label]


def case_toml(minimal: Variant, target: Observation | Any) -> str:
    """The minimal case: only what differs from the template's defaults."""
    original = tomllib.loads(minimal.case.path.read_text("utf-8"))
    defaults = minimal.template.defaults()
    params = minimal.script_params()  # a file by its name: it is copied beside the case
    params = {k: v for k, v in params.items() if defaults.get(k, object()) != v}
    data = {"case": {**original["case"], "title": f"{minimal.case.title} (minimized)"}}
    data |= {"params": params} if params else {}
    data |= {"compare": original["compare"]} if "compare" in original else {}
    if target is not None:
        data["expect"] = {"outcome": target.outcome.value}
    head = f"# Made by `reprokit minimize {minimal.case.name}`: the smallest variant found that\n"
    head += f"# still shows {target.describe() if target else 'the same outcome'}.\n"
    return head + tomli_w.dumps(data)
