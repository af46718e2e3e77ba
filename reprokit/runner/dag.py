"""The stage DAG a script declares (its STAGES literal, or ``--list-stages``), read and checked.

The runner trusts nothing it is printed: a hand-written template may print a cycle, an
unknown backend or a stage that needs a stage that is not there, and the runner must say so
rather than wait forever.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import json
from collections.abc import Iterable
from typing import Any

from reprokit.environment.specs import parse_env
from reprokit.errors import ReprokitError
from reprokit.infra.python_source import parse_python
from reprokit.records import Stage, StageResult, Status
from reprokit.runner.backends import BACKENDS


def parse_stages(text: str) -> list[Stage]:
    """The stage DAG that ``--list-stages`` printed, checked: a ValueError says what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    return checked_stages(data)


def read_stages(source: str) -> list[Stage] | None:
    """The stages a script assigns once, at its top level, as a literal (names of earlier
    top-level literals allowed: ``"devices": SPMD_DEVICES``), read without running it.

    None when the script computes or changes them: ``--list-stages`` answers then. Running
    the script to ask costs seconds (it imports torch before it parses its arguments).
    """
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return None
    stores = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Name | ast.Attribute | ast.Subscript)
        and _names(node, "STAGES")
        and (isinstance(node, ast.Attribute) or isinstance(node.ctx, ast.Store | ast.Del))
    ]
    literals: dict[str, Any] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        for target, value in _pairs(node.targets[0], node.value):
            if target == "STAGES" and stores == [node.targets[0]]:  # bound once, never changed
                try:
                    inlined = _Inline(literals).visit(copy.deepcopy(value))
                    return checked_stages(ast.literal_eval(inlined))
                except ValueError:
                    return None
            with contextlib.suppress(ValueError, TypeError, SyntaxError, MemoryError):
                literals[target] = ast.literal_eval(value)
    return None


def _names(node: ast.AST, name: str) -> bool:
    """Whether ``node`` is ``name``, or an attribute or item of it (``STAGES.append``)."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return isinstance(node, ast.Name) and node.id == name


def _pairs(target: ast.expr, value: ast.expr) -> list[tuple[str, ast.expr]]:
    """``A = 1`` and ``A, B = 1, 2`` as (name, value) pairs."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
        if len(target.elts) == len(value.elts):
            return [p for t, v in zip(target.elts, value.elts, strict=True) for p in _pairs(t, v)]
    return []


class _Inline(ast.NodeTransformer):
    """Names of known literals replaced by their values, for ast.literal_eval; given a copy,
    since it changes the tree in place and parse_python's trees are shared."""

    def __init__(self, literals: dict[str, Any]) -> None:
        self.literals = literals

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.literals:
            return ast.Constant(self.literals[node.id])
        return node


def checked_stages(data: Any) -> list[Stage]:
    """Stages from their JSON form, checked: a ValueError says what is wrong."""
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
        _check_env(item)
        stages.append(
            Stage(
                item["name"],
                item["backend"],
                tuple(needs),
                item.get("reference"),
                devices,
                item.get("arbiter"),
                item.get("role"),
                item.get("of"),
                item.get("env"),
                item.get("on_mismatch") is True,
                item.get("again_on_mismatch") is True,
            )
        )
    check_dag(stages)
    return stages


def _check_env(item: dict[str, Any]) -> None:
    """A stage's own environment, ``NAME=REQUIREMENTS`` as ``--env`` takes it."""
    if item.get("env") is None:
        return
    if not isinstance(item["env"], str):
        raise ValueError(f"stage {item['name']!r}: env must be NAME=REQUIREMENTS, a string")
    try:
        parse_env(item["env"])
    except ReprokitError as exc:
        raise ValueError(f"stage {item['name']!r}: env: {exc.message}") from None


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


def needed(stages: list[Stage], names: Iterable[str]) -> set[str]:
    """``names`` and every stage they need, however indirectly (a name that is no stage of
    ``stages`` counts, needing nothing)."""
    needs = {stage.name: stage.needs for stage in stages}
    found: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(needs.get(name, ()))
    return found


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
