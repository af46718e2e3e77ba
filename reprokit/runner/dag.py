"""The stage DAG a script declares with ``--list-stages``, read and checked.

The runner trusts nothing it is printed: a hand-written template may print a cycle, an
unknown backend or a stage that needs a stage that is not there, and the runner must say so
rather than wait forever.
"""

from __future__ import annotations

import json

from reprokit.records import Stage, StageResult, Status
from reprokit.runner.backends import BACKENDS


def parse_stages(text: str) -> list[Stage]:
    """The stage DAG that ``--list-stages`` printed, checked: a ValueError says what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, list) or not data:
        raise ValueError("expected a non-empty JSON list of stages")
    stages = []
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError(f"a stage without a name: {item!r}")
        needs = item.get("needs") or []
        if item.get("backend") not in BACKENDS:
            raise ValueError(f"stage {item['name']!r}: unknown backend {item.get('backend')!r}")
        if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
            raise ValueError(f"stage {item['name']!r}: needs must be a list of names")
        devices = item.get("devices")
        if devices is not None and (type(devices) is not int or devices < 1):
            raise ValueError(f"stage {item['name']!r}: devices must be a positive number")
        stages.append(
            Stage(
                item["name"],
                item["backend"],
                tuple(needs),
                item.get("reference"),
                devices,
                item.get("arbiter"),
            )
        )
    check_dag(stages)
    return stages


def check_dag(stages: list[Stage]) -> None:
    """Names unique, every name it points at known, and no cycle."""
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise ValueError("two stages have the same name")
    for stage in stages:
        for other in (*stage.needs, *filter(None, (stage.reference, stage.arbiter))):
            if other not in names:
                raise ValueError(f"stage {stage.name!r} names an unknown stage {other!r}")
    done: set[str] = set()
    while len(done) < len(stages):  # a cycle would leave the runner waiting forever
        ready = {s.name for s in stages if s.name not in done and set(s.needs) <= done}
        if not ready:
            raise ValueError("the needs form a cycle: " + ", ".join(sorted(set(names) - done)))
        done |= ready


def blocked(stages: list[Stage], results: dict[str, StageResult]) -> dict[str, StageResult]:
    """A skipped result for every stage that can no longer run: a stage it needs failed."""
    found: dict[str, StageResult] = {}
    done = dict(results)
    changed = True
    while changed:  # a skip may block further stages
        changed = False
        for stage in (s for s in stages if s.name not in done):
            failed = [done[n] for n in stage.needs if n in done and done[n].status is not Status.OK]
            if failed:
                reason = f"needs {failed[0].name}, which {failed[0].ended()}"
                done[stage.name] = found[stage.name] = StageResult(
                    stage.name, stage.backend, Status.SKIPPED, reason=reason
                )
                changed = True
    return found
