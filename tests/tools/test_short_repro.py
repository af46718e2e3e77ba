"""The short repro's pure parts: its verdict agrees with the harness's fp64 method
(reprokit.comparison.tensors) tensor by tensor, as tests/comparison/test_agreement.py checks
for the stage-protocol script; each input is written as the shortest thing that is still the
program's, and the script draws exactly the values minimize checked with the oracle."""

from __future__ import annotations

import re

import pytest
import torch

from reprokit.comparison.tensors import compare_tensor
from reprokit.tools.minimize.graph import short

NAN = float("nan")


def rendered(inputs: list[short.Input], tol: float = 1e-4) -> str:
    """A short repro of one relu over its first input."""
    line = {"var": "y", "comment": "relu (top) model.py:3: return x.relu()", "perturbed": False,
            "args": [{"k": "ref", "v": inputs[0].key}], "kwargs": [], "getitem": False,
            "ns": "aten", "op": "relu", "overload": "default"}  # fmt: skip
    context = {
        "title": "t", "description": "1 of 3 operations", "variables": [],
        "random": any(s.kind in ("randn", "randint") for s in inputs),
        "stored": any(s.kind == "stored" for s in inputs),
        "inputs": [s.context() for s in inputs],
        "names": [s.key for s in inputs], "dtype": "captured", "tol": tol, "tol_said": "t",
        "lines": [line], "results": [{"var": "y"}],
    }  # fmt: skip
    return short.rendered(context)


def script_of(inputs: list[short.Input], tol: float = 1e-4) -> dict:
    """The short repro executed as a module (its main guard not run)."""
    namespace = {"__name__": "short_repro"}
    exec(compile(rendered(inputs, tol), "repro.py", "exec"), namespace)
    return namespace


def cases() -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(CPU, XLA, float64) triples: every branch of the rule."""
    torch.manual_seed(0)
    big = torch.randn(100, 30)
    truth = big.double() + 1e-4 * torch.randn(100, 30, dtype=torch.float64)
    half = torch.randn(40, 30).half()
    image = big.reshape(100, 30, 1, 1)
    return {
        "equal": (big, big.clone(), truth),
        "noise as far from float64 as CPU": (big, big + 1e-4 * torch.randn(100, 30), truth),
        "far": (big, big + 1.0, truth),
        "3x for few elements": (big[:5], big[:5] + 2.5e-4, truth[:5]),
        "2x for a large float32": (big, big + 2.5e-4, truth),
        "half, small error": (half, half + 1e-3, half.double()),
        "half, large error": (half, half + 5e-2, half.double()),
        "3x for 1x1 images": (image, image + 2.5e-4, truth.reshape(100, 30, 1, 1)),
        "ints": (torch.arange(6), torch.arange(6).flip(0), torch.arange(6)),
        "equal bools": (torch.tensor([True, False]),) * 3,
        "nan on both sides": (torch.tensor([NAN, 1.0]),) * 2 + (torch.tensor([1.0, 1.0]).double(),),
        "cumsum of bools: bool on XLA": (torch.tensor([1, 2, 3]), torch.tensor([True] * 3),
                                         torch.tensor([1, 2, 3])),
        "equal values, other dtype": (torch.tensor([1, 1]), torch.tensor([True, True]),
                                      torch.tensor([1, 1])),
        "ints: XLA is float64's, CPU off": (torch.tensor([0, 1, 3]), torch.tensor([0, 1, 2]),
                                            torch.tensor([0, 1, 2])),
    }  # fmt: skip


@pytest.mark.parametrize("tol", [1e-4, 3e-2])
def test_the_short_verdict_and_the_harness_agree(tol):
    verdict = script_of([short.Input("x", "full", (2,), "float32", (("value", 1.0),))], tol)
    for name, (cpu, xla, fp64) in cases().items():
        harness = compare_tensor(name, cpu, xla, atol=tol, arbiter=fp64).allclose
        same, said = verdict["verdict"](cpu, xla, fp64)
        assert same == harness, (name, tol, said)
    # the cases that make the test bite (at a large tol, most are close before float64 judges)
    rule, triples = verdict["verdict"], cases()
    assert not rule(*triples["far"])[0] and not rule(*triples["half, large error"])[0]
    if tol == 1e-4:
        assert rule(*triples["noise as far from float64 as CPU"])[0]
        assert rule(*triples["3x for few elements"])[0] and rule(*triples["3x for 1x1 images"])[0]
        assert not rule(*triples["2x for a large float32"])[0]
        assert "error against float64: XLA" in rule(*triples["far"])[1]
    assert rule(*triples["equal values, other dtype"]) == (
        False, f"dtype torch.bool on XLA, torch.int64 on CPU; values agree within {tol}"
    )  # fmt: skip
    far = rule(*triples["far"])[1]  # the worst elements' values, each side and float64
    assert re.search(r"\n  at \[\d+, \d+\]: XLA -?[\d.]+, CPU -?[\d.]+, float64 -?[\d.]+", far)
    assert not rule(*triples["cumsum of bools: bool on XLA"])[0]  # no allclose of bool and int


def test_each_input_is_written_as_the_shortest_thing_that_is_still_the_programs():
    torch.manual_seed(0)
    values = {
        "ones": torch.ones(16, dtype=torch.float16),
        "few": torch.tensor([1.5, -2.0, 3.25]),
        "x": (torch.randn(2, 6, 16) + 8).half(),
        "index": torch.tensor([[0, 3, 2, 1, 4, 4, 0, 1, 2, 3]]),
        "bad": torch.tensor([1.0, float("inf")] * 8),
    }
    kinds = {s.key: s.kind for s in short.plan(values, random=True)}
    assert kinds == {"ones": "full", "few": "literal", "x": "randn", "index": "randint",
                     "bad": "stored"}  # fmt: skip
    assert {s.kind for s in short.plan(values, random=False)} == {"full", "literal", "stored"}
    x = next(s for s in short.plan(values, random=True) if s.key == "x")
    assert dict(x.fields) == {"mean": pytest.approx(8.0, abs=0.1), "std": pytest.approx(1, 0.1)}


def test_the_script_draws_the_values_minimize_checked():
    torch.manual_seed(0)
    values = {"x": (torch.randn(4, 16) * 3 + 8).half(), "w": torch.ones(16),
              "i": torch.randint(0, 5, (20,)), "b": torch.tensor([0.5, -1.25])}  # fmt: skip
    inputs = short.plan(values, random=True)
    drawn = short.drawn(inputs, values)
    written = script_of(inputs)["INPUTS"]
    assert written.keys() == drawn.keys()
    for key, value in drawn.items():
        assert written[key].dtype == value.dtype and torch.equal(written[key], value), key
    assert int(drawn["i"].min()) >= 0 and int(drawn["i"].max()) <= 4  # the range kept


def test_inputs_random_draws_cannot_stand_in_for_are_read_from_inputs_pt_and_it_says_so():
    torch.manual_seed(0)
    values = {"x": torch.randn(4, 16), "w": torch.ones(16)}
    script = rendered(short.plan(values, random=False))
    assert 'torch.load(Path(__file__).with_name("inputs.pt"), weights_only=True)' in script
    assert "# needs inputs.pt beside it" in script and "generator=g" not in script
    assert "inputs.pt" not in rendered(short.plan(values, random=True))
