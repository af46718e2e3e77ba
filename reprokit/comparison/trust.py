"""The verdict's rules for a captured program's extra XLA stages (docs/verdicts.md).

A stage may have a role towards the instrumented stage it names in ``of`` (the xla stage,
which makes every operation's result an output of the graphs it runs):

- ``faithful`` (xla_faithful): the program as captured, one graph of its outputs only, as a
  user runs it. Recording changes what XLA compiles (an output cannot be fused away), so the
  outputs' verdict is this stage's; the instrumented stage's outputs only localise. When the
  two runs' outputs differ from each other, or only one diverges from the reference, the
  divergence is *sensitive to fusion*.
- ``isolated`` (xla_isolated): each operation alone, fed CPU's values of its inputs. Its
  comparisons are each operation's *own* error, told beside the accumulated one (the first
  divergence), never judged: they decide no outcome.
- ``narrowing`` (xla_narrowed): delta debugging over the recorded results, in its process;
  it saves the positions of the fewest whose recording alone changes the outputs.

Torch-free: tensors arrive as mappings, comparisons as records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from reprokit.records import Comparison, Stage

FAITHFUL, ISOLATED, NARROWING = "faithful", "isolated", "narrowing"
T = TypeVar("T")


def part(stage: Stage, tensors: Mapping[str, T], other: Mapping[str, T]) -> Mapping[str, T]:
    """What of ``tensors`` ``stage`` is compared on: a stage with a role saves a part of its
    reference's tensors (the outputs, the operations it ran; a narrowing stage none), and
    only the names both sides have are compared."""
    if stage.role is None:
        return tensors
    return {name: tensor for name, tensor in tensors.items() if name in other}


def faithful_pairs(stages: Iterable[Stage]) -> list[Stage]:
    """The faithful stages whose instrumented stage is among ``stages`` too."""
    stages = list(stages)
    names = {s.name for s in stages}
    return [s for s in stages if s.role == FAITHFUL and s.of in names]


def judged(stages: Iterable[Stage], comparisons: Iterable[Comparison]) -> list[Comparison]:
    """The comparisons the outcome rests on: an isolated stage's are told, not judged, and a
    faithful stage's outputs are judged instead of its instrumented stage's."""
    stages, comparisons = list(stages), list(comparisons)
    roles = {s.name: s.role for s in stages}
    faithful = {s.name: s.of for s in faithful_pairs(stages)}
    replaced = {(faithful[c.target], c.tensor) for c in comparisons if c.target in faithful}
    told = {name for name, role in roles.items() if role == ISOLATED}
    return [c for c in comparisons if c.target not in told and (c.target, c.tensor) not in replaced]


def accumulated(stages: Iterable[Stage], divergence: Mapping[str, str | None]) -> dict:
    """The first divergence per target stage, the stages with a role left out: it localises,
    which the instrumented stage does (a faithful stage has only the outputs; an isolated
    stage's is :func:`own`)."""
    served = {s.name for s in stages if s.role is not None}
    return {name: first for name, first in divergence.items() if name not in served}


def own(stages: Iterable[Stage], divergence: Mapping[str, str | None]) -> dict:
    """Per instrumented stage, the first operation whose own error (its isolated stage's
    comparison) is beyond the bound; empty when no isolated stage was compared."""
    return {s.of: divergence[s.name] for s in stages
            if s.role == ISOLATED and s.of and s.name in divergence}  # fmt: skip


def narrowed(stages: Iterable[Stage], results: Mapping[str, Any],
             comparisons: Iterable[Comparison]) -> tuple[str, ...]:  # fmt: skip
    """The recorded results whose recording alone changes XLA's outputs, by name: the
    narrowing stage's positions ("narrowed", in its result's metrics) among the instrumented
    stage's recorded results (node.NNNN...), in the order it saved them."""
    comparisons = list(comparisons)
    for stage in (s for s in stages if s.role == NARROWING and s.name in results):
        positions = results[stage.name].metrics.get("narrowed")
        recorded = [c.tensor for c in comparisons
                    if c.target == stage.of and c.tensor.startswith("node.")]  # fmt: skip
        if isinstance(positions, list) and all(0 <= p < len(recorded) for p in positions):
            return tuple(recorded[p] for p in positions)
    return ()


def fusion_sensitive(
    stages: Iterable[Stage], comparisons: Iterable[Comparison], fusion: Iterable[Comparison]
) -> bool | None:
    """Whether recording every operation changes the outputs: the faithful run's outputs
    differ from the instrumented run's beyond the case's tolerances (``fusion``), or only one
    of the two diverges from the reference. None: no faithful stage was compared."""
    comparisons, fusion = list(comparisons), list(fusion)
    pairs = faithful_pairs(stages)
    if not pairs or not fusion:
        return None
    verdicts = {(c.target, c.tensor): c.allclose for c in comparisons}
    split = any(
        verdicts.get((stage.of, c.tensor)) != verdicts.get((stage.name, c.tensor))
        for stage in pairs
        for c in comparisons
        if c.target == stage.name
    )
    return split or any(not c.allclose for c in fusion)
