"""A group says which report of docs/examples it is: by its op, or its op and OpInfo variant
first; one op may have several reports, each of the kinds of groups it covers; and every
report named exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from reprokit.records.ops import Group
from reprokit.tools.ops.groups import KNOWN, _known

EXAMPLES = Path(__file__).parents[3] / "docs" / "examples"


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


def test_every_report_named_exists():
    named = {report for reports in KNOWN.values() for report, _, _ in reports}
    assert named and all((EXAMPLES / report).is_file() for report in named), sorted(
        r for r in named if not (EXAMPLES / r).is_file()
    )
