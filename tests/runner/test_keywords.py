"""``-k EXPR``: words match parts of a label (any case), combined with and, or, not and
parentheses as pytest combines them; a bad expression says what is wrong, even when nothing
is there to match."""

from __future__ import annotations

import pytest

from reprokit.errors import ReprokitError
from reprokit.runner.keywords import matches, select

LABELS = ["seed[spmd-highest]", "seed[spmd-default]", "seed[xser]", "mlp[CPU]"]


def chosen(expr: str | None) -> list[str]:
    return select(LABELS, expr, label=lambda label: label)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("spmd", ["seed[spmd-highest]", "seed[spmd-default]"]),
        ("SPMD", ["seed[spmd-highest]", "seed[spmd-default]"]),  # any case, both ways
        ("cpu", ["mlp[CPU]"]),
        ("[xser]", ["seed[xser]"]),  # brackets are part of a word
        ("spmd and not highest", ["seed[spmd-default]"]),
        ("xser or mlp", ["seed[xser]", "mlp[CPU]"]),
        ("not seed", ["mlp[CPU]"]),
        ("not not mlp", ["mlp[CPU]"]),
        # and binds tighter than or: xser or (mlp and highest)
        ("xser or mlp and highest", ["seed[xser]"]),
        ("(xser or mlp) and cpu", ["mlp[CPU]"]),
        ("((spmd))", ["seed[spmd-highest]", "seed[spmd-default]"]),
        ("spmd  and\tdefault", ["seed[spmd-default]"]),
        ("nothing", []),
    ],
)
def test_an_expression_chooses_as_pytest_would(expr, expected):
    assert chosen(expr) == expected


@pytest.mark.parametrize("expr", [None, "", "   "])
def test_no_expression_chooses_everything(expr):
    assert chosen(expr) == LABELS


def test_matches_takes_one_label():
    assert matches("seed and (xser or spmd)", "seed[xser]")
    assert not matches("seed and not xser", "seed[xser]")


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("spmd and", "it ends too early"),
        ("not", "it ends too early"),
        ("(spmd", "it ends too early"),
        ("(spmd or xser", "it ends too early"),
        ("and spmd", "unexpected 'and'"),
        ("spmd or or xser", "unexpected 'or'"),
        ("spmd)", "unexpected ')'"),
        ("()", "unexpected ')'"),
        ("spmd xser", "unexpected 'xser'"),
        ("(spmd) (xser)", "unexpected '('"),
    ],
)
def test_a_bad_expression_says_what_is_wrong_and_how_to_write_one(expr, why):
    with pytest.raises(ReprokitError) as raised:
        matches(expr, "seed[spmd]")
    assert str(raised.value).startswith(f"bad -k expression {expr!r}: {why}")
    assert "-k 'spmd and not highest'" in raised.value.hint


def test_a_bad_expression_is_refused_when_there_is_nothing_to_choose():
    with pytest.raises(ReprokitError, match="unexpected 'or'"):
        select([], "or", label=str)


def test_both_sides_of_or_are_read_so_an_error_after_a_match_still_shows():
    with pytest.raises(ReprokitError, match="it ends too early"):
        matches("seed or (xser and", "seed[xser]")
