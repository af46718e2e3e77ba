"""The one line an issue says about other releases, from what ``reprokit bisect`` found for its
repro (a root's ``since`` in summary.json; records/since.py): a maintainer's second question
after "is it known" is "is it a regression"."""

from __future__ import annotations

import re
from collections.abc import Iterable

from reprokit.records import Root
from reprokit.records.since import DOES_NOT, SHOWS, ReproSince, change, read_since


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


# The lines context_line writes (or a list item of one): found again to be replaced
# (bench/examples_since.py --write)
SINCE_LINE = re.compile(
    r"^(- )?(?:Also on torch_xla |A regression: right on torch_xla |Fixed in torch_xla "
    r"|Not on torch_xla |Only tried on torch_xla |Cannot tell on torch_xla ).*$",
    re.MULTILINE,
)


def context_line(found: ReproSince) -> str:
    """Every release a repro ran on, in one line of an issue's context: "Also on torch_xla
    2.5-2.8 (tried: 2.5-2.9).", "A regression: right on torch_xla 2.5-2.6, wrong since 2.7
    (...).", with "cannot tell on 2.5: <why>" for each release where the repro could not run
    (a release without an API it uses is that, never "right")."""
    order = found.releases
    tried = {r: found.tried[r] for r in order if r in found.tried}
    shows = [r for r, t in tried.items() if t.verdict == SHOWS]
    right = [r for r, t in tried.items() if t.verdict == DOES_NOT]
    whys: dict[str, list[str]] = {}
    for release, t in tried.items():
        if not t.tells:
            whys.setdefault(t.why, []).append(release)
    blind = "; ".join(f"cannot tell on {_span(rs, order)}: {w}" for w, rs in whys.items())
    span = f"tried: {_span(list(tried), order)}" + (f"; {blind}" if blind else "")
    changed, _ = change(order, tried)
    others = [r for r in shows if r != order[-1]]
    if (not shows and not right) or (changed is None and shows and not others and blind):
        return f"Cannot tell on torch_xla {blind.removeprefix('cannot tell on ')}."
    if changed is None and shows:
        if not others:
            return f"Only tried on torch_xla {_span(shows, order)}."
        return f"Also on torch_xla {_span(others, order)} ({span})."
    if changed is None:
        return f"Not on torch_xla {_span(right, order)}: the repro agrees there ({span})."
    if tried[changed].verdict == SHOWS:
        earlier = [r for r in right if order.index(r) < order.index(changed)]
        return (f"A regression: right on torch_xla {_span(earlier, order)}, wrong since "
                f"{changed} ({span}).")  # fmt: skip
    return f"Fixed in torch_xla {changed}: wrong on {_span(shows, order)} ({span})."


def _span(some: list[str], order: tuple[str, ...]) -> str:
    """``2.5-2.8`` for releases next to each other in ``order``, else ``2.5, 2.7``."""
    runs: list[list[str]] = []
    for release in some:
        if runs and order.index(release) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(release)
        else:
            runs.append([release])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
