"""ddmin, the delta debugging both minimizers share: pure, torch-free, over any list."""

from __future__ import annotations

import itertools
import random

import pytest

from reprokit.tools.minimize.ddmin import ddmin, one_by_one


def needs(*wanted: int):
    """A predicate that holds while every wanted item is left, recording what it was asked."""
    asked: list[list[int]] = []

    def holds(rest: list[int]) -> bool:
        asked.append(list(rest))
        return set(wanted) <= set(rest)

    return holds, asked


def test_two_needed_items_are_all_that_is_left():
    holds, _ = needs(3, 7)
    assert ddmin(range(10), one_by_one(holds)) == [3, 7]


def test_the_whole_list_goes_first_then_halves():
    holds, asked = needs(5)
    ddmin(range(8), one_by_one(holds))
    assert asked[:3] == [[], [4, 5, 6, 7], [6, 7]]  # all at once; first half; then quarters


def test_what_nothing_needs_goes_in_one_question():
    holds, asked = needs()
    assert ddmin(["a", "b", "c"], one_by_one(holds)) == []
    assert asked == [[]]


def test_a_list_nothing_can_leave_stays_whole_and_in_order():
    holds, asked = needs(*range(6))
    assert ddmin(range(6), one_by_one(holds)) == list(range(6))
    assert len(asked) == 1 + 2 + 6  # sizes 6, 3, 1: one question per chunk


def test_an_empty_list_asks_nothing():
    holds, asked = needs()
    assert ddmin([], one_by_one(holds)) == [] and asked == []


@pytest.mark.parametrize("seed", range(20))
def test_the_rest_holds_and_no_single_item_can_leave_it(seed):
    """1-minimal for a monotone predicate, with any batch: what is left still holds, and
    without any one of its items it would not."""
    rng = random.Random(seed)
    items = list(range(rng.randint(1, 30)))
    wanted = set(rng.sample(items, rng.randint(0, min(4, len(items)))))
    holds = lambda rest: wanted <= set(rest)  # noqa: E731
    for batch in (1, 2, 3):
        left = ddmin(items, one_by_one(holds), batch=batch)
        assert holds(left)
        assert sorted(left) == left  # order kept
        assert not any(holds(left[:i] + left[i + 1 :]) for i in range(len(left)))
        assert set(left) == wanted


def test_a_batch_asks_about_several_rests_at_once_and_takes_the_first_that_holds():
    seen: list[int] = []

    def first(rests: list[list[int]]) -> int | None:
        seen.append(len(rests))
        return next((i for i, r in enumerate(rests) if 1 in r and 6 in r), None)

    assert ddmin(range(8), first, batch=3) == [1, 6]
    assert max(seen) == 3 and seen[0] == 1  # the whole list is one chunk


def test_after_a_removal_the_next_chunk_is_tried_where_the_removed_one_was():
    """Halves of [0..7] needing 0 and 7: sizes 4 fail, then at size 2 [2, 3] goes and the
    next question removes [4, 5], which moved into its place."""
    holds, asked = needs(0, 7)
    assert ddmin(range(8), one_by_one(holds)) == [0, 7]
    pairs = [sorted(set(range(8)) - set(r)) for r in asked if len(r) == 6]
    assert pairs[:2] == [[0, 1], [2, 3]]
    assert [0, 1, 6, 7] in asked and [0, 1, 7] not in asked[: asked.index([0, 1, 6, 7])]


def test_every_rest_asked_is_a_sublist_of_the_items():
    holds, asked = needs(2, 9, 11)
    ddmin(range(14), one_by_one(holds), batch=2)
    for rest in asked:
        assert all(a < b for a, b in itertools.pairwise(rest))
