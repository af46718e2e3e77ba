"""Roots, from records alone: a result that differs while every recorded result it reads agrees
is where a difference is born; what reads it is not another root; a root that reaches no output
is kept, last."""

from __future__ import annotations

from dataclasses import replace

from reprokit.comparison.roots import roots
from reprokit.records import Comparison, Outcome, StageResult, Status, VariantResult


def compared(name: str, close: bool) -> Comparison:
    return Comparison(name, "cpu", "xla", (4,), "float32", 0.0 if close else 1.0, 0.0,
                      0 if close else 4, 4, close)  # fmt: skip


def variant(said: dict, differing: set[str], names: list[str]) -> VariantResult:
    stage = StageResult("xla", "xla", Status.OK, described=said)
    return VariantResult(
        case="m", label="m", variant={}, outcome=Outcome.MISMATCH, expected=Outcome.MATCH,
        seconds=1.0, stages=(StageResult("cpu", "cpu", Status.OK), stage),
        comparisons=tuple(compared(n, n not in differing) for n in names),
    )  # fmt: skip


def test_two_independent_roots_each_with_the_outputs_it_reaches_and_a_harmless_one_last():
    said = {
        "node.0000.sink": {"op": "aten.sum.default", "inputs": []},  # differs, read by nothing
        "node.0001.cumsum": {"op": "aten.cumsum.default", "inputs": []},
        "node.0002.add": {"op": "aten.add.Tensor", "inputs": ["node.0001.cumsum"]},
        "node.0003.mul": {"op": "aten.mul.Tensor", "inputs": ["node.0002.add"],
                          "outputs": ["output.0"]},
        "node.0004.upsample": {"op": "aten.upsample_bilinear2d.vec", "inputs": [],
                               "outputs": ["output.1"]},
        "node.0005.relu": {"op": "aten.relu.default", "inputs": [], "outputs": ["output.2"]},
    }  # fmt: skip
    differing = {*list(said)[:5], "output.0", "output.1"}  # relu agrees
    found = roots(variant(said, differing, [*said, "output.0", "output.1", "output.2"]))
    assert [(r.op, r.reaches) for r in found] == [
        ("aten.cumsum.default", ("output.0",)),  # add and mul only carry it on
        ("aten.upsample_bilinear2d.vec", ("output.1",)),
        ("aten.sum.default", ()),
    ]


def test_without_recorded_inputs_the_first_divergence_is_the_one_root_known():
    said = {"node.0000.a": {"op": "aten.a"}, "node.0001.b": {"op": "aten.b"}}
    found = roots(variant(said, {"node.0001.b", "output.0"}, [*said, "output.0"]))
    assert [(r.comparison.tensor, r.reaches) for r in found] == [("node.0001.b", None)]


def test_minimize_names_every_root_but_the_first_divergence_it_keeps():
    """The kept divergence reaches no output, so roots() lists it last: taking the list's
    tail as 'the others' named the kept one and hid the other."""
    from reprokit.tools.minimize.graph import others

    said = {
        "node.0000.sink": {"op": "aten.sum.default", "inputs": []},
        "node.0001.up": {"op": "aten.upsample_bilinear2d.vec", "inputs": [],
                         "outputs": ["output.0"]},
    }  # fmt: skip
    found = variant(said, {*said, "output.0"}, [*said, "output.0"])
    found = replace(found, first_divergence={"xla": "node.0000.sink"})
    (other,) = others(found)
    assert other.startswith("`aten.upsample_bilinear2d.vec`") and "output.0" in other
