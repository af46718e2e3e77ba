"""A group says which report of docs/examples it is (reprokit/infra/known.toml): by its op, or
its op and OpInfo variant first; one op may have several reports, each of the kinds of groups
it covers; an error message or an argument can say it whatever the op."""

from __future__ import annotations

import pytest

from reprokit.records.ops import Group
from reprokit.tools.ops.harness.groups import _known


def group(op: str, kind: str, variant: str = "", dtypes=("float32",), grad=False) -> Group:
    return Group("id", op, variant, "xla", tuple(dtypes), kind, grad, {}, 1)


@pytest.mark.parametrize(
    ("found", "report"),
    [
        (group("cumsum", "dtype"), "cumsum_bool_int32.md"),  # one op, two reports: by kind
        (group("cumsum", "error"), "cumsum_cumprod_zero_size_dim.md"),
        (group("cumsum", "value"), ""),
        (group("norm", "value", "inf"), "norm_inf_is_one.md"),  # the variant first
        (group("norm", "value", "nuc"), "svdvals_batch_dims.md"),
        (group("norm", "value"), ""),  # the op alone: its half precision, not a report
        (group("norm", "nan-inf", "fro", ("float16",)), "fp16_vector_norm_overflow.md"),
        (group("norm", "nan-inf", "fro", ("float32",)), ""),  # fp16 reports: half types only
        (group("nn.functional.elu", "value", grad=False), ""),  # a backward report
        (group("nn.functional.elu", "value", grad=True), "elu_backward.md"),
    ],
)
def test_a_group_is_known_by_its_op_variant_and_kind(found, report):
    assert _known(found, {}) == report


@pytest.mark.parametrize(
    ("found", "witness", "known"),
    [
        (group("exp", "error", dtypes=("bool",)), {"detail": "[] aten::exp, xla_shape=pred[2]"},
         "bool_unary_float_ops.md"),
        (group("logsumexp", "error"), {"detail": "Dimension out of range (expected to be in "
         "range of [0, -1], but got 0)"}, "pytorch/xla#1958"),  # an issue, no report
        (group("sum", "value"), {"described": {"kwargs": {"dim": "[]"}}},
         "empty_dim_reductions.md"),
        (group("sum", "value"), {"described": {"kwargs": {"dim": "[0]"}}}, ""),
    ],
)  # fmt: skip
def test_an_error_message_or_an_argument_says_it(found, witness, known):
    assert _known(found, witness) == known
