"""Minimization: the smallest variant (params) or program (graph) that keeps an outcome."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from reprokit.errors import ReprokitError

if TYPE_CHECKING:
    from reprokit.generate.variants import Variant
    from reprokit.records import MinimizeResult
    from reprokit.runner.options import Options


def minimize(
    variant: Variant, *, out_dir: Path, options: Options | None = None, budget: int = 40,
    root: str = "",
) -> MinimizeResult:  # fmt: skip
    """Shrink ``variant`` with the strategy its template calls for: a captured program
    (template exported_program or training_program) to its fewest operations, then its
    parameters; any other case by its parameters. Writes the minimal case, script and
    summary.json into out_dir; a captured program keeps ``root`` (its name or op), else each
    root that reaches an output (tools/minimize/graph)."""
    # Imported here: the strategies import this package's modules, and it must stay light.
    from reprokit.tools.minimize import graph, params

    if variant.captured:
        return graph.minimize_graph(
            variant, out_dir=out_dir, options=options, budget=budget, root=root
        )
    if root:
        raise ReprokitError(
            f"--root names a root of a captured program; {variant.case.name} is not one",
            variant.case.path,
            hint="Leave --root out.",
        )
    return params.minimize(variant, out_dir=out_dir, options=options, budget=budget)
