"""The root repro's pure parts: whether a repro shows the model's own difference, and how an
input's few NaN and infinities are kept where they were."""

from __future__ import annotations

import math

import torch

from reprokit.records.issues import RootRepro
from reprokit.tools.root_repro.make import _input, same_symptom


def printed(*lines: str) -> RootRepro:
    output = "\n".join(["$ PJRT_DEVICE=CPU python repro.py", *lines, "exit 1"]) + "\n"
    return RootRepro("argmax_value", ("node.0001.argmax",), "aten.argmax.default", "constant",
                     False, 25, 1, output)  # fmt: skip


def test_a_repro_of_another_difference_of_the_op_is_not_the_models():
    model = [(3.855, math.inf, False)]  # softplus: inf where CPU gives 3.855
    elsewhere = printed("  at [0]: CPU 65504, float64 70000, XLA inf",
                        "softplus: XLA DIFFERS (4 of 4 elements)")  # fmt: skip
    assert not same_symptom(elsewhere, model)  # an overflow of the made input's own
    values = printed("  at [1]: CPU 0.38, float64 0.38, XLA 0.4",
                     "upsample_bilinear2d: XLA DIFFERS (1 of 4 elements)")  # fmt: skip
    assert same_symptom(values, [(20.9, 23.4, False)])  # numbers: the made inputs' own values


def test_the_class_of_xlas_value_must_be_the_models_and_a_gradient_counts_by_class_alone():
    model = [(3.855, math.inf, False), (0.0, math.nan, True)]
    forward = printed("  at [0, 0]: CPU 3.85547, float64 3.85547, XLA inf",
                      "softplus: XLA DIFFERS (1 of 1 elements)")  # fmt: skip
    assert same_symptom(forward, model)
    finite = printed("  at [0, 0]: CPU 3.85547, float64 3.85547, XLA 3.9",
                     "softplus: XLA DIFFERS (1 of 1 elements)")  # fmt: skip
    assert not same_symptom(finite, model)
    gradient = printed("  at [0, 0]: CPU 1, float64 0.99, XLA nan",
                       "softplus gradient: XLA DIFFERS (1 of 1 elements)")  # fmt: skip
    assert same_symptom(gradient, model)  # CPU's 1 against the model's 0: ones flowed in
    dtype = printed("cumsum: XLA DIFFERS (returns torch.bool [2] where CPU returns int64 [2])")
    assert same_symptom(dtype, model)
    assert not same_symptom(printed("softplus: XLA agrees (0 of 4 elements)"), model)


def test_a_few_nonfinite_values_are_written_back_where_they_were():
    x = torch.randn(4, 10)
    x[1, 3] = math.nan
    x[2, 0] = x[2, 5] = -math.inf
    made = _input("x", x, "kept", None)
    assert made["kind"] == "randn"
    kept = {"nan" if math.isnan(p["value"]) else p["value"]: p["index"] for p in made["patches"]}
    assert kept == {"nan": ([1], [3]), -math.inf: ([2, 2], [0, 5])}
    many = torch.full((4, 10), -math.inf)
    many[0, 0] = 1.0
    assert "patches" not in _input("x", many, "kept", None)  # too many: the constant tries it
