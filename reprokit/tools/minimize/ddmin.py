"""Delta debugging over a list: remove chunks of it while what is left still holds.

Zeller's ddmin, its complement steps only (a chunk goes when the rest still shows the
outcome): the whole list first, then halves, quarters, ... single items. A sweep goes through
the list chunk by chunk; a chunk that can go goes, and the sweep goes on from where it was (the
next chunk has moved into its place). Both minimizers use it: the parameter search removes
"make it simplest" changes from the pending ones, the program search removes operations or
outputs.

Pure and generic: no runner, no torch. The predicate sees several rests at once, so that a
caller can run them side by side: it answers with the index of the first rest that holds, or
None. :func:`one_by_one` makes such a predicate of a plain yes/no one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

First = Callable[[list[list[T]]], "int | None"]  # rests -> the index of the first that holds


def ddmin(items: Sequence[T], first: First[T], *, batch: int = 1) -> list[T]:
    """What is left of ``items`` once no chunk of it can go: each sweep asks ``first`` about
    up to ``batch`` rests at a time (the list less one chunk each), in order; a rest that did
    not hold is never asked about again."""
    pool = list(items)
    current = list(range(len(pool)))  # positions in pool: a rest's identity
    refused: set[tuple[int, ...]] = set()
    size = len(current)
    while current:
        start = 0
        while start < len(current):
            chunks = ((at, _less(current, at, size)) for at in range(start, len(current), size))
            asked = [(at, rest) for at, rest in chunks if rest not in refused][: max(1, batch)]
            if not asked:
                break
            starts, rests = [at for at, _ in asked], [rest for _, rest in asked]
            index = first([[pool[i] for i in rest] for rest in rests])
            refused |= set(rests[:index])
            if index is None:
                start = starts[-1] + size
            else:  # the next chunk moved into the removed one's place: go on from there
                current, start = list(rests[index]), starts[index]
        if size == 1:
            break
        size //= 2
    return [pool[i] for i in current]


def _less(current: list[int], at: int, size: int) -> tuple[int, ...]:
    """``current`` without its chunk of ``size`` at ``at``."""
    return tuple(current[:at] + current[at + size :])


def one_by_one(holds: Callable[[list[T]], bool]) -> First[T]:
    """A predicate over several rests from a yes/no one, asked in order until one says yes."""

    def first(rests: list[list[T]]) -> int | None:
        return next((i for i, rest in enumerate(rests) if holds(rest)), None)

    return first
