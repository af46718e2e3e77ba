"""The minimizer's shared loop without running anything: the one predicate (Search.first), the
parameter strategy over it, the target, and the cache key; a scripted runner answers in place
of the stages (the runner itself is tested end to end in tests/test_minimize*.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from reprokit.environment.uv import EnvSpec
from reprokit.generate.templates import Param
from reprokit.records import Outcome, StageResult, Status, VariantResult
from reprokit.runner.options import Options
from reprokit.tools.minimize.candidate_cache import Cache
from reprokit.tools.minimize.params import shrink
from reprokit.tools.minimize.search import BudgetSpent, Runner, Search
from reprokit.tools.minimize.target import Target


def mismatch(tensor: str) -> VariantResult:
    return VariantResult("c", "c", {}, Outcome.MISMATCH, Outcome.MISMATCH, 1.0,
                         first_divergence={"target": tensor})  # fmt: skip


def match() -> VariantResult:
    return VariantResult("c", "c", {}, Outcome.MATCH, Outcome.MATCH, 1.0)


class Scripted(Runner):
    """A runner whose candidates are their own answers: ``oracle(candidate)`` is the result."""

    def __init__(self, oracle: Callable[[Any], VariantResult], *, budget=100, jobs=1) -> None:
        super().__init__(Options(jobs=jobs), Path("unused"), budget, Cache())
        self.oracle, self.batch_sizes = oracle, []

    def run(self, variants: Sequence[Any], ready=lambda _: True):
        todo = [i for i in range(len(variants)) if ready(i)]
        allowed = todo[: self.budget - self.runs]
        self.runs += len(allowed)
        self.batch_sizes.append(len(allowed))
        results = [self.oracle(variants[i]) if i in allowed else None for i in range(len(variants))]
        return results, len(allowed) < len(todo)


def search_of(oracle, best, *, budget=100, jobs=1, ready=lambda _: True) -> Search:
    runner = Scripted(oracle, budget=budget, jobs=jobs)
    start = oracle(best)
    return Search(runner, Target.of(start), best, start, lambda c: c, ready, measure=len)


def deep(candidate: str) -> VariantResult:
    """Strings as candidates: one that still has an "x" keeps the mismatch."""
    return mismatch("act.3") if "x" in candidate else match()


def test_the_first_candidate_that_keeps_becomes_the_best():
    search = search_of(deep, "abcx", jobs=2)
    assert search.first("s", ["ab", "ax", "x"]) == 1
    assert search.best == "ax" and search.steps == {"s": [2, 2]}  # two run; "x" never asked
    assert search.runner.batch_sizes == [2]


def test_none_is_never_tried_and_the_best_itself_keeps_without_a_run():
    search = search_of(deep, "ax")
    assert search.first("s", [None, "ax", "x"]) == 1
    assert search.runner.runs == 0 and search.best == "ax"
    assert search.first("s", [None, None]) is None


def test_a_candidate_that_cannot_be_made_is_not_run():
    search = search_of(deep, "abx", ready=lambda c: c != "bx")
    assert search.first("s", ["bx", "ax"]) == 1 and search.runner.runs == 1


def test_the_budget_stops_the_search_after_what_it_could_run():
    search = search_of(deep, "abcx", budget=1)
    with pytest.raises(BudgetSpent):
        search.first("s", ["ab", "ax"])  # "ab" ran and lost; "ax" could not run
    search = search_of(deep, "abcx", budget=1)
    assert search.first("s", ["ax", "ab"]) == 0  # what kept before the budget ran out counts


def test_a_mismatch_elsewhere_is_not_the_target():
    target = Target.of(mismatch("act.3"))
    assert target.kept_by(mismatch("act.12")) and not target.kept_by(mismatch("loss"))
    assert not target.kept_by(match()) and not target.kept_by(None)
    assert target.describe() == "mismatch (act.#)"


def test_a_failure_keeps_its_stage_and_only_when_asked_its_message():
    def failed(error: str) -> VariantResult:
        stage = StageResult("xla", "xla", Status.ERROR, returncode=1, error=error)
        return VariantResult("c", "c", {}, Outcome.ERROR, Outcome.MATCH, 1.0, stages=(stage,))

    plain = Target.of(failed("RuntimeError: no"))
    assert plain.kept_by(failed("SystemExit: something else")) and plain.describe() == "error (xla)"
    said = Target.of(failed("RuntimeError: no such op 3"), with_message=True)
    assert said.kept_by(failed("RuntimeError: no such op 12"))
    assert not said.kept_by(failed("SystemExit: something else"))


PARAMS = {
    "layers": Param("layers", "int", "", 8, min=1),
    "width": Param("width", "int", "", 32, min=1),
    "optimizer": Param("optimizer", "str", "", "adam", choices=("sgd", "adam")),
    "seed": Param("seed", "int", "", 7, min=0, minimize=False),
}


@pytest.mark.parametrize("jobs", [1, 3])
def test_the_parameter_search_finds_the_smallest_that_keeps(jobs):
    """The divergence shows at layer 3 with a width of 2 or more: layers 4, width 2, sgd."""

    def oracle(params: dict) -> VariantResult:
        return mismatch("act.3") if params["layers"] >= 4 and params["width"] >= 2 else match()

    search = search_of(
        oracle, {"layers": 8, "width": 32, "optimizer": "adam", "seed": 7}, jobs=jobs
    )
    shrink(search, PARAMS)
    assert search.best == {"layers": 4, "width": 2, "optimizer": "sgd", "seed": 7}
    assert search.runner.runs <= 20


def test_the_cache_key_names_the_interpreter():
    options, script = Options(), "print('same script')"
    own = Cache.key(script, options)
    six, six_again = EnvSpec("six", ("six==1.17.0",)), EnvSpec("other", ("six==1.17.0",))
    assert Cache.key(script, options, six) != own  # [envs]: not reprokit's own python
    assert Cache.key(script, options, six) == Cache.key(script, options, six_again)  # by content
    assert Cache.key(script, options, EnvSpec("six", ("six==1.16.0",))) != Cache.key(
        script, options, six
    )
    assert Cache.key(script, Options(python="/other/python")) != own


def test_the_cache_key_names_the_code_that_judged(monkeypatch):
    """A candidate judged before a fix to the comparison (an inf - inf error, say) is judged
    again: the minimizer's cache served the old verdict to the report."""
    import reprokit.tools.minimize.candidate_cache as cache

    before = Cache.key("print()", Options())
    monkeypatch.setattr(cache, "comparing_code", lambda: {"tensors.py": "fixed"})
    assert Cache.key("print()", Options()) != before
