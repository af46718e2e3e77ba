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
    assert [(r.tensor, r.reaches) for r in found] == [("node.0001.b", None)]


def test_a_difference_stops_where_a_reader_agrees():
    """nll_loss_forward's total_weight differs (1 on XLA, 64 on CPU), but nll_loss_backward,
    which reads it, agrees: the gradients it leads to differ through another root only."""
    said = {
        "node.0000.total_weight": {"op": "aten.nll_loss_forward.default[1]", "inputs": []},
        "node.0001.nll_backward": {"op": "aten.nll_loss_backward.default",
                                   "inputs": ["node.0000.total_weight"]},
        "node.0002.hardtanh_backward": {"op": "aten.hardtanh_backward.default", "inputs": []},
        "node.0003.mm": {"op": "aten.mm.default",
                         "inputs": ["node.0001.nll_backward", "node.0002.hardtanh_backward"],
                         "outputs": ["grad.fc1.weight"]},
    }  # fmt: skip
    differing = {"node.0000.total_weight", "node.0002.hardtanh_backward", "node.0003.mm",
                 "grad.fc1.weight"}  # fmt: skip
    found = roots(variant(said, differing, [*said, "grad.fc1.weight"]))
    assert [(r.op, r.reaches) for r in found] == [
        ("aten.hardtanh_backward.default", ("grad.fc1.weight",)),
        ("aten.nll_loss_forward.default[1]", ()),
    ]


def test_minimize_keeps_the_root_reaching_an_output_or_the_one_named():
    """The graph-order first divergence reaches no output: the search keeps the root that
    does, a candidate still showing it is kept whatever differs before it, and --root picks
    another by its name or op."""
    import pytest

    from reprokit.errors import ReprokitError
    from reprokit.tools.minimize.target import Target

    said = {
        "node.0000.sink": {"op": "aten.sum.default", "inputs": []},
        "node.0001.up": {"op": "aten.upsample_bilinear2d.vec", "inputs": [],
                         "outputs": ["output.0"]},
    }  # fmt: skip
    whole = replace(variant(said, {*said, "output.0"}, [*said, "output.0"]),
                    first_divergence={"xla": "node.0000.sink"})  # fmt: skip
    target = Target.of(whole)
    assert target.clue == "node.#.up" and target.found(whole) == "node.0001.up"
    only_sink = variant(said, {"node.0000.sink"}, [*said, "output.0"])
    assert target.kept_by(whole) and not target.kept_by(only_sink)
    assert Target.of(whole, root="aten.sum.default").kept_by(only_sink)
    with pytest.raises(ReprokitError, match=r"node\.0001\.up"):
        Target.of(whole, root="aten.mm.default")
