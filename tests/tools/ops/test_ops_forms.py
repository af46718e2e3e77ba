"""The forms a user calls that OpInfo's samples leave out: an op's Python operator (``x >> t``)
and a Python-number operand (``x >> 2``), and the names a user has for an op (a dunder,
aten's). A real sweep of ``__rshift__`` in int64 gives a group for the tensor shift and one for
the number shift (XLA rounds a negative toward zero), each reproducing alone, while the
function's own samples and ``torch.bitwise_right_shift(x, 2)`` agree with CPU."""

from __future__ import annotations

import pytest
from ops_sweep import sweep_ops

from reprokit.records.ops import read_ops


@pytest.fixture(scope="module")
def op_db():
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


@pytest.mark.parametrize(
    ("name", "ops", "how"),
    [
        ("bitwise_right_shift", ["bitwise_right_shift"], ""),
        ("__rshift__", ["bitwise_right_shift"], "operator"),
        ("aten.__rshift__.Scalar", ["bitwise_right_shift"], "operator"),
        ("__and__", ["bitwise_and"], "operator"),
        ("__floordiv__", ["floor_divide"], "operator"),
        ("aten.linalg_vector_norm.default", ["linalg.vector_norm"], "aten"),
        ("torch.ops.aten.softplus", ["nn.functional.softplus"], "aten"),
        ("aten.mean.dim", ["mean"], "aten"),  # its own name before masked.mean's last part
        ("aten._adaptive_avg_pool2d.default", ["nn.functional.adaptive_avg_pool2d"], "aten"),
        ("no_such_op", [], ""),
    ],
)
def test_a_torch_aten_or_dunder_name_is_read_as_the_opinfo_it_means(op_db, name, ops, how):
    from reprokit.tools.ops.worker.names import full_name, resolve

    found, read = resolve(op_db, name)
    assert ([full_name(o) for o in found], read) == (ops, how)


def test_operand_forms_are_made_where_the_op_has_them(op_db):
    import torch

    from reprokit.tools.ops.worker import forms

    def made(name: str) -> list[str]:
        (op,) = [o for o in op_db if o.name == name and not o.variant_test_name]
        samples = list(op.sample_inputs("cpu", torch.int64))
        return [forms.form_of(s) for s in forms.operand_forms(op, samples, torch.int64)]

    assert made("bitwise_right_shift") == ["operator", "number", "operator, number"]
    assert made("bitwise_not") == ["operator"]  # ~x: unary, no operand
    assert made("gcd") == []  # no operator, no Python-number operand


def test_rshift_gives_a_group_for_the_tensor_and_the_number_shift(tmp_path):
    out, done = sweep_ops(tmp_path, "__rshift__", "--dtypes", "int64")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "__rshift__ is OpInfo bitwise_right_shift" in done.stderr  # progress, said
    groups = {g.form: g for g in read_ops(out).groups}
    assert set(groups) == {"operator", "operator, number"}, groups  # the function form agrees
    for group in groups.values():
        assert group.reproduces_alone is True, group.alone_output
        assert group.known == "rshift_negative_ints.md"  # known.toml names it __rshift__
        assert "operator.rshift(" in (out / group.repro).read_text()
    assert "forward, operator, number value" in done.stdout
