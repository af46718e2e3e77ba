"""The comparisons of a variant's stage pairs: the verdict's part that needs torch.

It is offloaded (infra/offload.py: in a fork of a warm server, where torch is imported) as
:data:`COMPARE`, a function of JSON to JSON; this module imports little else, as each such
fork imports it anew (the verdict's own imports, its cache among them, cost a fork 25 ms).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.comparison import trust
from reprokit.errors import ReprokitError
from reprokit.infra.torch_import import import_module
from reprokit.records import Comparison, Stage, first_divergence
from reprokit.records.folder import VariantFolder

COMPARE = "reprokit.comparison.pairs:compare_pairs"  # the offloaded work


@dataclass
class Compared:
    """Every stage against its reference: the comparisons, the first divergence per target
    stage, and why a tensors.pt could not be read (a crash mid-save, a pickle that runs code)."""

    comparisons: list[Comparison] = field(default_factory=list)
    divergence: dict[str, str | None] = field(default_factory=dict)
    problem: str | None = None
    # a faithful stage's outputs against its instrumented stage's, at the case's tolerances
    fusion: list[Comparison] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        comparisons = [c.to_json() for c in self.comparisons]
        return {"comparisons": comparisons, "divergence": self.divergence, "problem": self.problem,
                "fusion": [c.to_json() for c in self.fusion]}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Compared:
        found = [Comparison.from_json(c) for c in data["comparisons"]]
        fusion = [Comparison.from_json(c) for c in data["fusion"]]
        return cls(found, dict(data["divergence"]), data["problem"], fusion)


def compare_pairs(request: dict[str, Any]) -> dict[str, Any]:
    """:func:`compare_stages`' torch part, of JSON and to JSON (an offloaded work)."""
    pairs = [Stage.from_json(s) for s in request["pairs"]]
    tolerances, folder = request["tolerances"], Path(request["folder"])
    return _compare(tolerances, pairs, request["judges"], folder).to_json()


def _compare(
    tolerances: dict[str, Any], pairs: list[Stage], judges: dict[str, str | None], folder: Path
) -> Compared:
    compared = Compared()
    load_tensors = import_module("reprokit.comparison.checkpoints").load_tensors  # torch: only
    compare_tensors = import_module("reprokit.comparison.tensors").compare_tensors  # here

    loaded: dict[str, Any] = {}

    def tensors(name: str) -> Any:
        if name not in loaded:
            loaded[name] = load_tensors(VariantFolder(folder).stage(name).tensors)
        return loaded[name]

    try:
        for stage in pairs:
            judge, saved = judges[stage.name], tensors(stage.name)
            found = compare_tensors(
                trust.part(stage, tensors(stage.reference), saved),
                trust.part(stage, saved, tensors(stage.reference)),
                **tolerances,
                reference=stage.reference,
                target=stage.name,
                arbiter=trust.part(stage, tensors(judge), saved) if judge else None,
            )
            compared.comparisons += found
            first = first_divergence(found)
            compared.divergence[stage.name] = first.tensor if first else None
        for stage in trust.faithful_pairs(pairs):  # the same outputs, recorded or not
            instrumented = trust.part(stage, tensors(stage.of), tensors(stage.name))
            compared.fusion += compare_tensors(instrumented, tensors(stage.name),
                                               **tolerances, reference=stage.of,
                                               target=stage.name)  # fmt: skip
    except ReprokitError as exc:
        compared.problem = str(exc).split("\n")[0]
    return compared
