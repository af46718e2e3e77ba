"""reports/since.py: what an issue says of other releases, from its roots' ``since`` (what
``reprokit bisect`` wrote into summary.json); root issues carry it in their context."""

from __future__ import annotations

from dataclasses import replace

from test_root_issues import recorded, softplus_step

from reprokit.records import Root
from reprokit.records.since import CANNOT_TELL, DOES_NOT, SHOWS, ReproSince, Tried
from reprokit.reports.root_issues import root_issues
from reprokit.reports.since import SINCE_LINE, context_line, since_line


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


def bisected(**verdicts: str) -> ReproSince:
    """A repro run on 2.5..2.9: each release's verdict, "why" naming it."""
    releases = ("2.5", "2.6", "2.7", "2.8", "2.9")
    tried = {f"2.{k[-1]}": Tried(v, WHYS.get(v, "exit 1")) for k, v in verdicts.items()}
    return ReproSince("repro.py", "repro.py", "d", releases, tried)


WHYS = {CANNOT_TELL: "raised AttributeError: module 'torch_xla' has no attribute 'sync'",
        DOES_NOT: "exit 0"}  # fmt: skip


def test_every_release_in_one_line_of_the_issue():
    every = bisected(r5=SHOWS, r6=SHOWS, r7=SHOWS, r8=SHOWS, r9=SHOWS)
    assert context_line(every) == "Also on torch_xla 2.5-2.8 (tried: 2.5-2.9)."
    regression = bisected(r5=DOES_NOT, r6=DOES_NOT, r7=SHOWS, r8=SHOWS, r9=SHOWS)
    assert context_line(regression) == (
        "A regression: right on torch_xla 2.5-2.6, wrong since 2.7 (tried: 2.5-2.9)."
    )
    fixed = bisected(r5=SHOWS, r6=SHOWS, r7=DOES_NOT, r8=DOES_NOT, r9=DOES_NOT)
    assert context_line(fixed).startswith("Fixed in torch_xla 2.7: wrong on 2.5-2.6")


def test_a_release_without_the_api_is_cannot_tell_with_why_never_right():
    older = bisected(r5=CANNOT_TELL, r6=CANNOT_TELL, r7=SHOWS, r8=SHOWS, r9=SHOWS)
    assert context_line(older) == (
        "Also on torch_xla 2.7-2.8 (tried: 2.5-2.9; cannot tell on 2.5-2.6: raised "
        "AttributeError: module 'torch_xla' has no attribute 'sync')."
    )
    only_last = bisected(r5=CANNOT_TELL, r6=CANNOT_TELL, r7=CANNOT_TELL, r8=CANNOT_TELL,
                         r9=SHOWS)  # fmt: skip
    assert context_line(only_last).startswith("Cannot tell on torch_xla 2.5-2.8: raised")
    gap = bisected(r5=SHOWS, r6=CANNOT_TELL, r7=SHOWS, r8=SHOWS, r9=SHOWS)
    assert context_line(gap).startswith("Also on torch_xla 2.5, 2.7-2.8 (tried: 2.5-2.9; ")
    for line in map(context_line, (every_shows := bisected(r9=SHOWS), older, only_last, gap)):
        assert SINCE_LINE.fullmatch(line), line  # what --write finds again to replace
    assert context_line(every_shows) == "Only tried on torch_xla 2.9."
