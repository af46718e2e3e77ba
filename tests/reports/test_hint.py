"""The `reprokit minimize` hint a report prints works pasted into a shell: its path quoted and
naming the variant's real folder, and that folder's case.toml this variant, --set values and
matrix values included."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

from conftest import DATA, TEST_TEMPLATES

import reprokit
from reprokit.generate.selection import load_variant
from reprokit.reports.hint import minimize_hint


def test_the_hint_names_the_set_variants_case_and_that_case_keeps_its_set_value(tmp_path):
    case = tmp_path / "my case.toml"  # a space, as a user's file name may have
    case.write_text(
        (DATA / "cases" / "mismatch.toml").read_text() + "\n[matrix]\nmegabytes = [1, 2]\n"
    )
    run_dir = tmp_path / "runs" / "seed"
    found = reprokit.load_cases([str(case)], sets={"mode": "loud"}, templates=[TEST_TEMPLATES])
    options = reprokit.Options(templates=(TEST_TEMPLATES,), stages=("first",))  # no stage run
    summary = reprokit.run(found[1:], run_dir=run_dir, options=options)
    (variant,) = summary.variants
    assert variant.label == "my case[2-mode=loud]"

    hint = minimize_hint(run_dir, variant.label)
    words = shlex.split(hint)
    assert words[:2] == ["reprokit", "minimize"] and words[3] == "-o"
    assert "&&" in words and words[words.index("&&") + 1 :] == ["reprokit", "report", words[4]]
    named = Path(words[2])
    assert named.is_file() and named.parent.name == "my case[2-mode=loud]"

    again = load_variant(str(named), templates=[TEST_TEMPLATES])  # one variant: no --set
    assert again.params == {"mode": "loud", "megabytes": 2}
    assert tomllib.loads(named.read_text())["params"] == {"mode": "loud", "megabytes": 2}


def test_a_case_nothing_was_chosen_in_is_carried_as_it_was(tmp_path):
    case = tmp_path / "mismatch.toml"
    case.write_text("# my comment\n" + (DATA / "cases" / "mismatch.toml").read_text())
    run_dir = tmp_path / "run"
    found = reprokit.load_cases([str(case)], templates=[TEST_TEMPLATES])
    options = reprokit.Options(templates=(TEST_TEMPLATES,), stages=("first",))
    reprokit.run(found, run_dir=run_dir, options=options)
    assert (run_dir / "mismatch" / "case.toml").read_text() == case.read_text()
