"""reports/since.py: what an issue says of other releases, from its roots' ``since`` (what
``reprokit bisect`` wrote into summary.json); root issues carry it in their context."""

from __future__ import annotations

from dataclasses import replace

from test_root_issues import recorded, softplus_step

from reprokit.records import Root
from reprokit.reports.root_issues import root_issues
from reprokit.reports.since import since_line


def root(since: str) -> Root:
    return Root("node.0002.fwd.softplus", "xla", "aten.softplus.default", since=since)


def test_each_answer_as_the_issue_says_it():
    assert since_line([root("on every release tried (2.8-2.9)")]) == (
        "Also on torch_xla 2.8 (every release tried: 2.8-2.9).",
    )
    assert since_line([root("since 2.9 (right on 2.8)")]) == (
        "A regression: right on torch_xla 2.8, wrong since 2.9.",
    )
    assert since_line([root("fixed in 2.9 (wrong on 2.8)")]) == (
        "Fixed in torch_xla 2.9: wrong on 2.8.",
    )
    for silent in ("", "on no release tried (2.8-2.9)", "on every release tried (2.9)",
                   "cannot tell on any release tried (raised ImportError: x)"):  # fmt: skip
        assert since_line([root(silent)]) == ()


def test_a_root_issue_says_since_when_its_repro_was_bisected(tmp_path):
    variant = softplus_step()
    said = "since 2.9 (right on 2.8; cannot tell on 2.7)"
    variant = replace(variant, roots=tuple(replace(r, since=said) for r in variant.roots))
    recorded(tmp_path, variant)
    (issue,) = root_issues(variant, tmp_path)
    assert issue.context[0] == "A regression: right on torch_xla 2.8, wrong since 2.9."
    assert issue.context[-1].startswith("Found with reprokit")
