"""One way to derive a variant and one way back from a result: what each keeps."""

from __future__ import annotations

from conftest import TEST_TEMPLATES

from reprokit.environment.uv import EnvSpec
from reprokit.generate.cases import load_case
from reprokit.generate.variants import variant_of, variants
from reprokit.records import Outcome, VariantResult

CASE = """
[case]
title = "a matrix in an environment"
template = "faulty"

[matrix]
mode = ["ok", "mismatch"]

[envs]
six = "six==1.17.0"
"""


def the_variants(write_case, **sets):
    case = load_case(write_case(CASE), templates=[TEST_TEMPLATES])
    return case, variants(case, sets)


def test_a_variant_with_other_params_keeps_its_environment_and_drops_its_labels(write_case):
    _, (first, _second) = the_variants(write_case, megabytes=2)
    assert first.choice == {"mode": "ok"} and first.sets == {"megabytes": 2}
    derived = first.with_params({**first.params, "mode": "raise"}, name="c-1234")
    assert derived.env == EnvSpec("six", ("six==1.17.0",))
    assert derived.params["mode"] == "raise" and derived.params["megabytes"] == 2
    assert derived.case.name == "c-1234" and derived.case.matrix == {}
    assert derived.label == "c-1234@six"  # no stale matrix value or --set in its name
    assert first.with_params(first.params).case.name == first.case.name


def test_a_result_gives_its_variant_back(write_case):
    case, (_first, second) = the_variants(write_case)
    env = {"name": "six", "requirements": ["six==1.17.0"]}
    result = VariantResult(case.name, second.label, dict(second.params), Outcome.MISMATCH,
                           Outcome.MATCH, 1.0, env=env)  # fmt: skip
    again = variant_of(result, case)
    assert (again.params, again.choice, again.env) == (second.params, second.choice, second.env)
    assert again.label == result.label
    assert (
        variant_of(VariantResult(case.name, "x", {}, Outcome.MATCH, Outcome.MATCH, 1.0), case).env
        is None
    )
