"""records/since.py: the one-phrase answer of a bisected repro, read back as written; and the
records that carry it (ops.json's groups, summary.json's roots) still load from older files."""

from __future__ import annotations

from reprokit.records import Root
from reprokit.records.ops import Group, OpsSweep
from reprokit.records.since import (
    CANNOT_TELL,
    DOES_NOT,
    SHOWS,
    ReproSince,
    Said,
    Tried,
    change,
    read_since,
    since,
)

RELEASES = ("2.5", "2.6", "2.7", "2.8", "2.9")
SHOW, RIGHT = Tried(SHOWS, "exit 1: XLA DIFFERS", 1), Tried(DOES_NOT, "exit 0: XLA agrees", 0)
BLIND = Tried(CANNOT_TELL, "raised ImportError: cannot import name 'f'", 1)


def test_each_answer_in_a_phrase_that_reads_back():
    cases = {
        "on every release tried (2.5-2.9)": ({"2.5": SHOW, "2.9": SHOW},
                                             Said("every", "2.5", "2.9")),
        "since 2.8 (right on 2.7)": (
            {"2.5": RIGHT, "2.7": RIGHT, "2.8": SHOW, "2.9": SHOW}, Said("since", "2.8", "2.7")),
        "fixed in 2.6 (wrong on 2.5)": ({"2.5": SHOW, "2.6": RIGHT, "2.9": RIGHT},
                                        Said("fixed", "2.6", "2.5")),
        "on no release tried (2.5-2.9)": ({"2.5": RIGHT, "2.9": RIGHT}, Said("none", "2.5", "2.9")),
        "since 2.7 (right on 2.5; cannot tell on 2.6)": (
            {"2.5": RIGHT, "2.6": BLIND, "2.7": SHOW, "2.9": SHOW}, Said("since", "2.7", "2.5")),
    }  # fmt: skip
    for phrase, (tried, said) in cases.items():
        assert since(RELEASES, tried) == phrase
        assert read_since(phrase) == said
    only_blind = since(RELEASES, {"2.5": BLIND, "2.9": BLIND})
    assert only_blind.startswith("cannot tell on any release tried (raised ImportError")
    assert read_since(only_blind).kind == "unknown" and read_since("").kind == "unknown"


def test_the_change_is_the_last_one_where_the_verdict_flipped_back_and_forth():
    tried = {"2.5": SHOW, "2.6": RIGHT, "2.7": BLIND, "2.8": SHOW, "2.9": SHOW}
    assert change(RELEASES, tried) == ("2.8", "2.6")
    assert change(RELEASES, {"2.5": BLIND, "2.9": BLIND}) == (None, None)


def test_a_repros_bisection_round_trips_through_json():
    found = ReproSince("repro.py", "small/repro.py", "abc", ("2.8", "2.9"),
                       {"2.8": RIGHT, "2.9": SHOW})  # fmt: skip
    data = found.to_json()
    assert (data["since"], data["changed"], data["before"]) == ("since 2.9 (right on 2.8)", "2.9",
                                                                "2.8")  # fmt: skip
    assert data["tried"]["2.8"] == {"verdict": "does not", "why": "exit 0: XLA agrees",
                                    "returncode": 0, "seconds": 0.0, "cached": False}  # fmt: skip
    assert ReproSince.from_json("repro.py", ("2.8", "2.9"), data) == found


def test_groups_and_roots_written_before_since_still_load():
    group = {
        "id": "mean_error",
        "op": "mean",
        "variant": "",
        "backend": "xla",
        "dtypes": ["float16"],
        "kind": "error",
        "grad": False,
        "witness": {},
        "samples": 2,
    }
    old = {"argv": [], "versions": {}, "backends": ["xla"], "dtypes": ["float16"], "grad": False,
           "edge": False, "seconds": 1.0, "groups": [group]}  # fmt: skip
    assert OpsSweep.from_json(old).groups[0].since == ""
    marked = Group.from_json(group | {"since": "on every release tried (2.8-2.9)"})
    assert Group.from_json(marked.to_json()) == marked
    root = {"tensor": "node.0002.fwd.softplus", "target": "xla", "op": "aten.softplus.default"}
    assert Root.from_json(root).since == ""
    said = Root.from_json(root | {"since": "since 2.9 (right on 2.8)"})
    assert Root.from_json(said.to_json()) == said
