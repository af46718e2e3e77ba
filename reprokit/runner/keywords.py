"""``-k EXPR``: choose variants by label, the way pytest's ``-k`` chooses tests.

A word matches when it is a substring of the label (case-insensitive); words combine with
``and``, ``or``, ``not`` and parentheses. A tiny recursive-descent parser is all it takes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from reprokit.errors import ReprokitError

T = TypeVar("T")
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def select(items: Iterable[T], expr: str | None, label: Callable[[T], str]) -> list[T]:
    """The items whose label satisfies ``expr`` (all of them when there is none)."""
    items = list(items)
    if not expr or not expr.strip():
        return items
    _Parser(expr, "").parse()  # report a bad expression even when there is nothing to match
    return [item for item in items if matches(expr, label(item))]


def matches(expr: str, label: str) -> bool:
    """Whether ``label`` satisfies the ``-k`` expression ``expr``."""
    return _Parser(expr, label.lower()).parse()


class _Parser:
    """expr := term ('or' term)*; term := factor ('and' factor)*; factor := 'not' factor |
    '(' expr ')' | word."""

    def __init__(self, expr: str, label: str) -> None:
        self.expr = expr
        self.tokens = _TOKEN.findall(expr)
        self.label = label
        self.at = 0

    def parse(self) -> bool:
        value = self._expr()
        if self.at != len(self.tokens):
            self._fail(f"unexpected {self.tokens[self.at]!r}")
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            self._fail("it ends too early")
        self.at += 1
        return token

    def _expr(self) -> bool:
        value = self._term()
        while self._peek() == "or":
            self.at += 1
            value = self._term() or value  # evaluate both sides: errors show either way
        return value

    def _term(self) -> bool:
        value = self._factor()
        while self._peek() == "and":
            self.at += 1
            value = self._factor() and value
        return value

    def _factor(self) -> bool:
        token = self._take()
        if token == "not":
            return not self._factor()
        if token == "(":
            value = self._expr()
            if self._take() != ")":
                self._fail("a '(' is not closed")
            return value
        if token in ("and", "or", ")"):
            self._fail(f"unexpected {token!r}")
        return token.lower() in self.label

    def _fail(self, why: str):
        raise ReprokitError(
            f"bad -k expression {self.expr!r}: {why}",
            hint="Words match parts of a variant's label; combine them with and, or, not and "
            "parentheses, e.g. -k 'spmd and not highest'.",
        )
