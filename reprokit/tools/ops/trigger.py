"""A group's trigger: the condition over its op's samples (their features: dtype, argument
values, shape facts, value classes in the inputs; features.py) that separates the samples
that differ from those that agree, learnt from the counts, then checked on new samples built
to meet it and to break it (Alhazen's loop: learn, generate, check). Pure and torch-free: the
harness learns and settles here, the worker chooses its new samples here.

The search is written by hand, not with a decision-tree library: a group has a few dozen to a
few thousand samples and a handful of features, the answer a person reads is one condition or
two joined by "and", and scikit-learn would be a heavy dependency for these few lines. Each
condition's samples are one bit mask (a Python int), so a conjunction is one ``&`` and its
counts two ``bit_count`` calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

# Facts about a sample's values and shapes, before its argument values, before its dtype: of
# two conditions that separate the samples alike, the one that says why is stated
VALUE_CLASSES = ("NaN", "+inf", "-inf", "-0", "subnormal", "|x| > sqrt(max)", "near max")
IN = " in "  # a value class in one named argument: "NaN in weight" (features.py)
SHAPE_FACTS = ("uneven chunks", "empty", "0-d", "size-1 dim", "broadcast", "non-contiguous")
SHAPE_FACTS += ("over 65504 elements",)  # a float16 count or sum of ones past it is inf
KEEP = 6  # candidate rules kept for the confirmation to tell apart

Features = Mapping[str, Any]
Atom = tuple[str, str, Any]  # (feature, "=" or "!=", value)


@dataclass(frozen=True)
class Rule:
    """A conjunction of one or two conditions on a sample's features."""

    atoms: tuple[Atom, ...]

    def holds(self, features: Features) -> bool:
        return all((features.get(f) == v) == (op == "=") for f, op, v in self.atoms)

    def text(self) -> str:
        return " and ".join(_said(*a) for a in self.atoms)

    def names(self) -> list[str]:
        return [f for f, _, _ in self.atoms]

    def to_json(self) -> list[list[Any]]:
        return [list(a) for a in self.atoms]

    @classmethod
    def from_json(cls, data: Sequence[Sequence[Any]]) -> Rule:
        return cls(tuple((str(f), str(op), v) for f, op, v in data))


@dataclass(frozen=True)
class Score:
    """How a rule splits the samples: ``hit`` of the ``differs`` differing samples meet it,
    ``clear`` of the ``agrees`` agreeing ones do not."""

    hit: int
    differs: int
    clear: int
    agrees: int

    @property
    def perfect(self) -> bool:
        return self.hit == self.differs and self.clear == self.agrees

    @property
    def f1(self) -> float:
        met = self.hit + self.agrees - self.clear
        return 2 * self.hit / (met + self.differs) if self.hit else 0.0

    def __add__(self, other: Score) -> Score:
        return Score(
            self.hit + other.hit,
            self.differs + other.differs,
            self.clear + other.clear,
            self.agrees + other.agrees,
        )


def score(rule: Rule, differ: Sequence[Features], agree: Sequence[Features]) -> Score:
    hit = sum(rule.holds(f) for f in differ)
    clear = sum(not rule.holds(f) for f in agree)
    return Score(hit, len(differ), clear, len(agree))


def learn(
    differ: Sequence[Features], agree: Sequence[Features], *, keep: int = KEEP
) -> list[tuple[Rule, Score]]:
    """The best rules, best first: single conditions, and pairs of them where a pair does
    better than every single one; ranked by F1 (a perfect rule: 1), then fewer conditions,
    then facts before arguments before the dtype. None where no sample agrees (nothing to
    separate) or none differs."""
    if not differ or not agree:
        return []
    samples = [*differ, *agree]
    every, mine = (1 << len(samples)) - 1, (1 << len(differ)) - 1
    masks: dict[Atom, int] = {}
    for atom in _atoms(differ, agree):
        mask = sum(1 << i for i, f in enumerate(samples) if Rule((atom,)).holds(f))
        if mask not in (0, every) and mask & mine:  # says something, and of a differing one
            masks.setdefault(atom, mask)
    ranked = [((a,), m) for a, m in masks.items()]
    best = max((_f1(m, mine, len(differ)) for _, m in ranked), default=0.0)
    if best < 1.0:  # pairs only where no single condition is perfect
        for (a, ma), (b, mb) in combinations(masks.items(), 2):
            if a[0] != b[0] and _f1(ma & mb, mine, len(differ)) > best:
                ranked.append(((a, b), ma & mb))
    ranked.sort(key=lambda r: (-_f1(r[1], mine, len(differ)), len(r[0]), _rank(r[0]), repr(r[0])))
    return [(Rule(atoms), _score(m, mine, len(differ), len(agree))) for atoms, m in ranked[:keep]]


def _atoms(differ: Sequence[Features], agree: Sequence[Features]) -> list[Atom]:
    """feature = value for each value a differing sample has, feature != value for each an
    agreeing one has; a boolean's != written as = its other value."""
    found: dict[Atom, None] = {}
    for side, op in ((differ, "="), (agree, "!=")):
        for features in side:
            for name, value in features.items():
                if isinstance(value, bool) and op == "!=":
                    found[(name, "=", not value)] = None
                else:
                    found[(name, op, value)] = None
    return list(found)


def _score(mask: int, mine: int, differs: int, agrees: int) -> Score:
    hit = (mask & mine).bit_count()
    return Score(hit, differs, agrees - (mask >> differs).bit_count(), agrees)


def _f1(mask: int, mine: int, differs: int) -> float:
    hit = (mask & mine).bit_count()
    return 2 * hit / (mask.bit_count() + differs) if hit else 0.0


def value_class(name: str) -> tuple[str, str] | None:
    """(the class, the argument) of a feature that is a value class: ("NaN", "") for "NaN" (in
    any input), ("NaN", "weight") for "NaN in weight"; None for any other feature."""
    cls, _, arg = name.partition(IN)
    return (cls, arg) if cls in VALUE_CLASSES and bool(arg) == (IN in name) else None


def _rank(atoms: tuple[Atom, ...]) -> tuple[int, ...]:
    """Of two conditions that split alike, the one that says most: a value class in a named
    argument, then in any input, then a shape fact, an argument's value, the dtype."""

    def one(atom: Atom) -> int:
        name, op, value = atom
        valued = value_class(name)
        if valued:
            kind = 1 if not valued[1] else 0
        else:
            kind = 2 if name in SHAPE_FACTS else 4 if name in ("dtype", "ndim") else 3
        return 2 * kind + (op != "=") + (value is False)

    return tuple(sorted(one(a) for a in atoms))


def _said(name: str, op: str, value: Any) -> str:
    """One condition in words: ``an input holds NaN``, ``dim = -1``, ``dtype != float16``."""
    valued = value_class(name) if isinstance(value, bool) else None
    if valued:
        holds, (cls, arg) = value == (op == "="), valued
        if arg:
            return f"{arg} holds {'' if holds else 'no '}{_VALUES.get(cls, cls)}"
        return f"{'an' if holds else 'no'} input holds {_VALUES.get(cls, cls)}"
    if isinstance(value, bool) and name in SHAPE_FACTS:
        holds = value == (op == "=")
        return _FACTS[name] if holds else f"not: {_FACTS[name]}"
    if value is None:
        return f"{name} {'not given' if op == '=' else 'given'}"
    return f"{name} {op} {value}"


_VALUES = {
    "NaN": "NaN",
    "+inf": "+inf",
    "-inf": "-inf",
    "-0": "-0.0",
    "subnormal": "a subnormal value",
    "|x| > sqrt(max)": "a value past the square root of the dtype's largest",
    "near max": "a value near the dtype's largest",
}
_FACTS = {
    "uneven chunks": "uneven chunks: an input's size along dim is no multiple of the chunk "
    "count, so it needs padding",
    "empty": "an input is empty",
    "0-d": "the input is 0-d",
    "size-1 dim": "an input has a size-1 dim",
    "broadcast": "the inputs broadcast",
    "non-contiguous": "an input is non-contiguous",
    "over 65504 elements": "an input has more than 65,504 elements (float16's largest number: "
    "a count or a sum of ones past it is inf)",
}


def choose(rules: Sequence[Rule], made: Sequence[tuple[bool, Features]], limit: int) -> list[int]:
    """Which of the new samples ``made`` (each: whether the sample it was made from differs,
    its features) to run, at most ``limit``: those the first rule says flip (made from an
    agreeing sample and meeting it, or from a differing one and breaking it) or on which the
    rules disagree, one of each features seen, meeting and breaking in turn."""
    if not rules:
        return []
    top, others = rules[0], rules[1:]
    meet: list[tuple[bool, int]] = []
    breaks: list[tuple[bool, int]] = []
    seen: set[tuple] = set()
    names = sorted({n for r in rules for n in r.names()})
    for i, (differs, features) in enumerate(made):
        says = top.holds(features)
        disagree = sum(r.holds(features) != says for r in others)
        if says == differs and not disagree:
            continue  # every rule expects what the sample it was made from showed
        key = (says, differs, tuple(repr(features.get(n)) for n in names))
        if key in seen:
            continue
        seen.add(key)
        (meet if says else breaks).append((says == differs, i))  # a flip first
    meet = [i for _, i in sorted(meet)]  # sorted is stable: made's order within each kind
    breaks = [i for _, i in sorted(breaks)]
    chosen: list[int] = []
    for pair in zip(meet, breaks, strict=False):
        chosen += pair
    longer = meet if len(meet) > len(breaks) else breaks
    chosen += longer[min(len(meet), len(breaks)) :]
    return chosen[:limit]


def settle(
    candidates: Sequence[tuple[Rule, Score]],
    new_differ: Sequence[Features],
    new_agree: Sequence[Features],
) -> dict[str, Any]:
    """The trigger: of the candidates, the one that splits the sweep's samples and the new
    ones best (the first on a tie), with its counts before and on the new samples."""
    best: tuple[float, int] | None = None
    chosen = 0
    for i, (rule, before) in enumerate(candidates):
        both = before + score(rule, new_differ, new_agree)
        key = (both.f1, -i)
        if best is None or key > best:
            best, chosen = key, i
    rule, before = candidates[chosen]
    new = score(rule, new_differ, new_agree)
    right = new.hit + new.clear
    return {
        "condition": rule.text(),
        "rule": rule.to_json(),
        "differs": [before.hit, before.differs],
        "agrees": [before.clear, before.agrees],
        "new": {"differs": [new.hit, new.differs], "agrees": [new.clear, new.agrees]},
        "confirmed": right,
        "refuted": new.differs + new.agrees - right,
    }
