"""``reprokit bisect REPRO``: since which torch_xla release a repro shows its bug.

What the other tools write holds repros (a repro file, a minimize folder, a run folder's root
repros, an op sweep's groups: found.py). Each runs alone on a release's python (tried.py): the
first and the last release first, then bisection where they differ (``all_releases``: every
one). A release where the repro cannot tell (it exits 2, or raises because the release lacks
an API) is skipped as ``git bisect skip`` does; where the first release cannot tell, the first
that can is found by bisection too (an API appears once). Like git bisect it assumes the
verdict changed once. The answers go to OUT/bisect.json (per repro, per release), to ops.json's
groups and summary.json's roots as ``since`` (records/since.py words them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reprokit.environment.releases import release_python
from reprokit.records import write_json
from reprokit.records.since import BISECT, VERSION, ReproSince, Tried, change, since
from reprokit.runner.options import Options
from reprokit.tools.since.found import Repro, find_repros, record
from reprokit.tools.since.tried import try_release

__all__ = ["ReprosBisection", "bisect_repros", "describe", "search"]


@dataclass(frozen=True)
class ReprosBisection:
    """Every repro bisected over ``releases`` (oldest first)."""

    releases: tuple[str, ...]
    found: tuple[ReproSince, ...]
    all_releases: bool = False

    @property
    def changed(self) -> bool:
        """Some repro's verdict changed between the releases tried."""
        return any(change(f.releases, f.tried)[0] for f in self.found)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "releases": list(self.releases),
            "all_releases": self.all_releases,
            "repros": {f.name: f.to_json() for f in self.found},
        }


def bisect_repros(
    paths: Iterable[Path],
    releases: list[str],
    out: Path | None = None,
    *,
    options: Options,
    all_releases: bool = False,
    announce: Callable[[str], None] = lambda line: None,
) -> ReprosBisection:
    """Bisect every repro in ``paths`` over ``releases``; write OUT/bisect.json (OUT: the
    first path's folder unless given) and each answer into its record."""
    paths = [Path(p) for p in paths]
    found = {path: find_repros(path) for path in paths}
    if len(paths) > 1:  # two minimize folders' repro.py: named by where they are
        found = {path: [_named(r, path) for r in rs] for path, rs in found.items()}
    repros = [r for rs in found.values() for r in rs]
    out = Path(out) if out is not None else (paths[0] if paths[0].is_dir() else paths[0].parent)
    out.mkdir(parents=True, exist_ok=True)
    python = _Pythons(announce)
    announce(f"{len(repros)} repros on torch_xla {', '.join(releases)}")

    def verdict(repro: Repro, release: str) -> Tried:
        tried = try_release(repro, release, python(release), options, out)
        cached = " (cached)" if tried.cached else f" ({tried.seconds:.0f} s)"
        announce(f"{repro.name} on {release}: {tried.verdict}{cached}: {tried.why}")
        return tried

    def one(repro: Repro) -> ReproSince:
        tried = search(releases, lambda r: verdict(repro, r), all_releases=all_releases)
        return ReproSince(repro.name, str(repro.script), repro.digest(), tuple(releases), tried)

    for release in dict.fromkeys([releases[0], releases[-1]]):
        python(release)  # the ends' environments built first, one at a time
    with ThreadPoolExecutor(max(1, options.jobs)) as pool:
        answers = list(pool.map(one, repros))
    result = ReprosBisection(tuple(releases), tuple(answers), all_releases)
    write_json(out / BISECT, result.to_json())
    said = {a.name: since(a.releases, a.tried) for a in answers}
    for path, rs in found.items():
        if path.is_dir():
            record(rs, said, path)
    return result


def _named(repro: Repro, given: Path) -> Repro:
    """Its name with the path given before it: ``small/repro.py``, ``ops-out/mean_error``."""
    return replace(repro, name=str(given) if given.is_file() else f"{given}/{repro.name}")


class _Pythons:
    """Each release's python, its environment built once (one build at a time)."""

    def __init__(self, announce: Callable[[str], None]) -> None:
        self.announce, self.lock, self.found = announce, threading.Lock(), {}

    def __call__(self, release: str) -> Path:
        with self.lock:
            if release not in self.found:
                self.found[release] = release_python(release, announce=self.announce)
            return self.found[release]


def search(
    releases: list[str], verdict: Callable[[str], Tried], *, all_releases: bool = False
) -> dict[str, Tried]:
    """The releases tried and what each gave: the ends, then bisection between the last
    release with the first one's verdict and the first with the last one's."""
    tried: dict[str, Tried] = {}

    def at(index: int) -> Tried:
        if releases[index] not in tried:
            tried[releases[index]] = verdict(releases[index])
        return tried[releases[index]]

    if all_releases:
        return {r: at(i) for i, r in enumerate(releases)}
    low, high = 0, len(releases) - 1
    first, last = at(low), at(high)
    if not last.tells or (not first.tells and high - low < 2):
        return tried
    if not at(low).tells:  # the first release it can tell on: bisected, as for a change
        low = _first(low, high, lambda i: at(i).tells)
    skipped: set[int] = set()
    while at(low).verdict != at(high).verdict:
        between = [i for i in range(low + 1, high) if i not in skipped]
        if not between:
            break
        middle = min(between, key=lambda i: abs(2 * i - low - high))
        if not at(middle).tells:
            skipped.add(middle)  # git bisect skip: another release between
        elif at(middle).verdict == at(low).verdict:
            low = middle
        else:
            high = middle
    return tried


def _first(low: int, high: int, good: Callable[[int], bool]) -> int:
    """The first index in (low, high] where ``good`` holds, given it fails at low and holds
    at high (and changes once)."""
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if good(middle) else (middle, high)
    return high


def describe(result: ReprosBisection) -> list[str]:
    """The lines ``reprokit bisect`` prints: each repro's answer, then each release tried."""
    lines = []
    for found in result.found:
        lines.append(f"{found.name}: {since(found.releases, found.tried)}")
        for release in found.releases:
            if tried := found.tried.get(release):
                lines.append(f"  {release}: {tried.verdict}  {tried.why}")
    return lines
