"""``reprokit bisect``: the torch_xla release where a case's outcome changed.

Each release is one environment (torch_xla and its torch, built with uv, see envs.py) and one
run folder, ``OUT/<release>/``. The first and the last release run first; if their outcomes
differ, bisection runs the release halfway between the last one that behaved like the first
and the first one that behaved like the last, until they are neighbours: ceil(log2(n - 1))
runs more for n releases. An outcome is every variant's outcome (a case with a matrix changes
when any of its variants does). Like git bisect, it assumes the change happened once; where
it flipped back and forth, it names one release where it changed, not the first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.environment.releases import release_env
from reprokit.generate.variants import load_variants
from reprokit.records import EnvSpec, RunSummary, write_json
from reprokit.records.since import BISECT
from reprokit.reports import write_reports
from reprokit.runner.options import TIMEOUT, Options
from reprokit.runner.scheduler import run

RESULT = BISECT  # where bisect writes its answer


@dataclass
class Bisection:
    """What ran, what each release gave, and where the outcome changed."""

    releases: list[str]
    tried: dict[str, RunSummary] = field(default_factory=dict)
    changed: str | None = None  # the first release with the last one's outcome
    before: str | None = None  # the release just before it, with the first one's outcome

    def outcome(self, release: str) -> tuple[tuple[str, str], ...]:
        """Each variant's outcome there, by its label without the environment."""
        return tuple((v.base_label, v.outcome.value) for v in self.tried[release].variants)

    def to_json(self) -> dict[str, Any]:
        return {
            "releases": self.releases,
            "changed": self.changed,
            "before": self.before,
            "tried": {release: dict(self.outcome(release)) for release in self.tried},
            "divergence": {
                release: _divergences(self.tried[release])
                for release in (self.before, self.changed)
                if release is not None
            },
        }


def bisect(
    selectors: Iterable[str],
    releases: list[str],
    out: Path,
    *,
    options: Options,
    sets: dict[str, Any] | None = None,
    cases: Iterable[Path] = (),
    templates: Iterable[Path] = (),
    announce: Callable[[str], None] = lambda line: None,
) -> Bisection:
    """Run the selected cases on ``releases`` (oldest first) as bisection needs; write each
    release's run folder and reports under ``out``, and ``out/bisect.json``."""
    selectors, cases, templates = list(selectors), list(cases), list(templates)
    found = Bisection(list(releases))

    def outcome(index: int) -> tuple[tuple[str, str], ...]:
        release = releases[index]
        if release not in found.tried:
            env = release_env(release)
            variants = load_variants(
                selectors, sets=sets, cases=cases, templates=templates, envs=[env]
            )
            announce(f"release {release}: {len(variants)} variants ({' '.join(env.requirements)})")
            argv = _rerun_argv(selectors, env, sets or {}, options, cases, templates)
            found.tried[release] = run(variants, run_dir=out / release, options=options, argv=argv)
            write_reports(out / release)
            announce(f"release {release}: {_shown(found.outcome(release))}")
        return found.outcome(release)

    low, high = 0, len(releases) - 1
    if outcome(low) != outcome(high):
        while high - low > 1:
            middle = (low + high) // 2
            if outcome(middle) == outcome(low):
                low = middle
            else:
                high = middle
        found.before, found.changed = releases[low], releases[high]
    write_json(out / RESULT, found.to_json())
    return found


def _rerun_argv(
    selectors: list[str],
    env: EnvSpec,
    sets: dict[str, Any],
    options: Options,
    cases: list[Path],
    templates: list[Path],
) -> tuple[str, ...]:
    """The ``reprokit run`` that gives one release's run folder again: what its report's "To
    Reproduce" says (``--set`` values as TOML, which is how ``--set`` reads them)."""
    argv = ["reprokit", "run", *selectors, "--env", f"{env.name}={' '.join(env.requirements)}"]
    argv += [arg for key, value in sets.items() for arg in ("--set", f"{key}={json.dumps(value)}")]
    argv += [arg for folder in cases for arg in ("--cases", str(folder))]
    argv += [arg for folder in templates for arg in ("--templates", str(folder))]
    if options.timeout != TIMEOUT:
        argv += ["--timeout", f"{options.timeout:g}"]
    return tuple(argv)


def _shown(outcome: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{label} {value}" for label, value in outcome)


def _divergences(summary: RunSummary) -> dict[str, dict[str, Any]]:
    """Each variant's outcome and where it first diverged (or why it failed)."""
    return {
        v.base_label: {
            "outcome": v.outcome.value,
            "reason": v.reason,
            "first_divergence": v.first_divergence,
        }
        for v in summary.variants
    }


def describe(found: Bisection) -> list[str]:
    """The lines ``reprokit bisect`` prints: the finding, then both sides' divergences."""
    first, last = found.releases[0], found.releases[-1]
    if found.changed is None or found.before is None:
        return [f"no change: {first} and {last} give the same outcome "
                f"({_shown(found.outcome(first))})"]  # fmt: skip
    lines = [
        f"the outcome changed in torch_xla {found.changed} (from {found.before}; "
        f"{len(found.tried)} of {len(found.releases)} releases run)"
    ]
    before, after = (_divergences(found.tried[r]) for r in (found.before, found.changed))
    for label in dict.fromkeys([*before, *after]):
        lines.append(f"  {label}")
        for release, side in ((found.before, before), (found.changed, after)):
            seen = side.get(label, {})
            first = _first(seen.get("first_divergence") or {})
            where = "; ".join(filter(None, [seen.get("reason"), first and f"first: {first}"]))
            lines.append(f"    {release}: {seen.get('outcome', 'not run')}  {where}")
    return lines


def _first(divergence: dict[str, str | None]) -> str:
    return "; ".join(f"{stage}: {where}" for stage, where in divergence.items() if where)
