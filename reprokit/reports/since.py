"""The one line an issue says about other releases, from what ``reprokit bisect`` found for its
repro (a root's ``since`` in summary.json; records/since.py): a maintainer's second question
after "is it known" is "is it a regression"."""

from __future__ import annotations

from collections.abc import Iterable

from reprokit.records import Root
from reprokit.records.since import read_since


def since_line(roots: Iterable[Root]) -> tuple[str, ...]:
    """("Also on torch_xla 2.8 (every release tried: 2.8-2.9).",), ("A regression: right on
    torch_xla 2.8, wrong since 2.9.",), ("Fixed in ...",); () when not bisected, or when the
    repro could not tell or did not show on any release tried."""
    text = next((r.since for r in roots if r.since), "")
    said = read_since(text)
    if said.kind == "every" and said.first != said.last:
        return (f"Also on torch_xla {said.first} (every release tried: {said.first}-{said.last}).",)
    if said.kind == "since":
        return (f"A regression: right on torch_xla {said.last}, wrong since {said.first}.",)
    if said.kind == "fixed":
        return (f"Fixed in torch_xla {said.first}: wrong on {said.last}.",)
    return ()
