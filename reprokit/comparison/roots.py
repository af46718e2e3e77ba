"""Where each difference is born: the roots of a variant's divergences, and what each reaches.

A root is a recorded result that differs from its reference while every recorded result it
reads agrees (the stage records each result's inputs among the recorded ones: exported
programs do). One program can hold several: an upsampling bug beside a cumsum bug is a second
issue, not noise after the first. Read from the records only (no torch): reports use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from reprokit.records import Comparison, VariantResult


@dataclass(frozen=True)
class Root:
    """A result that differs while its inputs agree; ``reaches``: the outputs beyond tolerance
    that read it (itself included when it is an output; None: not known, the stage recorded no
    inputs); ``also``: the other target stages where the same result is a root."""

    comparison: Comparison
    said: Mapping[str, Any]  # what the stage said of it: op, shape, module, source line
    reaches: tuple[str, ...] | None = ()
    also: tuple[str, ...] = ()

    @property
    def op(self) -> str:
        return str(self.said.get("op") or self.comparison.tensor)


def roots(variant: VariantResult) -> list[Root]:
    """Every root of every target that recorded its results' inputs, those that reach an
    output first; else the first divergence of each target, as the only one known. A result
    that is a root in several targets (XLA and XLA SPMD) is one root, the others in ``also``."""
    found: list[Root] = []
    for target in dict.fromkeys(c.target for c in variant.comparisons):
        compared = [c for c in variant.comparisons if c.target == target and c.shape is not None]
        stage = next((s for s in variant.stages if s.name == target), None)
        said = stage.described if stage is not None else {}
        if any("inputs" in info for info in said.values()):
            found += _roots(compared, said)
        elif first := next((c for c in compared if not c.allclose), None):
            if found and first.tensor not in said:  # an output of the same program, run whole
                continue
            found.append(Root(first, said.get(first.tensor, {}), reaches=None))
    return sorted(_merged(found), key=lambda root: root.reaches == ())


def _merged(found: list[Root]) -> list[Root]:
    merged: dict[str, Root] = {}
    for root in found:
        name = root.comparison.tensor
        if name in merged:
            merged[name] = replace(merged[name], also=(*merged[name].also, root.comparison.target))
        else:
            merged[name] = root
    return list(merged.values())


def _roots(compared: list[Comparison], said: Mapping[str, Mapping[str, Any]]) -> list[Root]:
    differing = {c.tensor: c for c in compared if not c.allclose}
    readers: dict[str, list[str]] = {}
    for name, info in said.items():
        for source in info.get("inputs", ()):
            readers.setdefault(source, []).append(name)
    found = []
    for name, c in differing.items():
        info = said.get(name)
        if info is None or any(source in differing for source in info.get("inputs", ())):
            continue
        reached = [o for n in _downstream(name, readers) for o in said[n].get("outputs", ())]
        found.append(Root(c, info, tuple(o for o in dict.fromkeys(reached) if o in differing)))
    return found


def _downstream(name: str, readers: Mapping[str, list[str]]) -> list[str]:
    """``name`` and every recorded result that reads it, directly or not, in order met."""
    seen, todo = [name], [name]
    while todo:
        for reader in readers.get(todo.pop(), ()):
            if reader not in seen:
                seen.append(reader)
                todo.append(reader)
    return seen


def said(root: Root) -> str:
    """A root in a line: its op, shape and source line, and the outputs it reaches."""
    info, shape = root.said, "x".join(map(str, root.comparison.shape or ())) or "a scalar"
    text = f"`{root.op}` ({shape})" + (f" from `{info['source']}`" if info.get("source") else "")
    if root.reaches:
        return text + f", reaching {', '.join(f'`{o}`' for o in root.reaches)}"
    return text + (", reaching no output" if root.reaches == () else "")
