"""reprokit: minimal reproductions and issue-ready bug reports for PyTorch/XLA.

The pipeline in five calls (the CLI and the pytest plugin call the same ones)::

    import reprokit
    variants = reprokit.load_cases(["xser_to_spmd"], sets={"train_steps": 2})
    script = reprokit.render(variants[0])            # the standalone repro.py
    summary = reprokit.run(variants, run_dir="runs/seed", options=reprokit.Options(jobs=2))
    reprokit.report("runs/seed")                     # report.md, .html, .json, bundle.zip
    diffs = reprokit.compare("a.pt", "b.safetensors", atol=1e-5)
    case = reprokit.capture(model, (batch,), name="mine")   # your own model, as a case

Importing reprokit does not import torch: only ``compare`` (and running a verdict) does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.generate.render import render
from reprokit.generate.variants import Variant
from reprokit.generate.variants import load_variants as load_cases
from reprokit.records import Comparison, Outcome, RunSummary, VariantResult
from reprokit.reports import write_reports as report
from reprokit.runner.options import Options
from reprokit.runner.scheduler import Interrupted, run

__all__ = [
    "Comparison",
    "Interrupted",
    "Options",
    "Outcome",
    "ReprokitError",
    "RunSummary",
    "Variant",
    "VariantResult",
    "capture",
    "compare",
    "load_cases",
    "render",
    "report",
    "run",
]


def capture(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None, *,
            name: str, out_dir: Path | str = ".", state_dict: Path | str | None = None,
            random_inputs: bool = False) -> Path:  # fmt: skip
    """Your own model: ``torch.export`` it into ``OUT_DIR/NAME.pt2`` and write the case that
    runs it, ``OUT_DIR/NAME.toml``; returns the case's path (reprokit.tools.capture)."""
    from reprokit.tools.capture import capture as capture_program  # torch: only here

    return capture_program(module, args, kwargs, name=name, out_dir=out_dir,
                           state_dict=state_dict, random_inputs=random_inputs)  # fmt: skip


def compare(
    reference: Path | str, target: Path | str, *, rtol: float | None = None,
    atol: float | None = None,
) -> list[Comparison]:  # fmt: skip
    """Tensor by tensor, two checkpoints of any format ``reprokit diff`` reads."""
    from reprokit.comparison.checkpoints import diff_checkpoints  # torch: only here

    return diff_checkpoints(reference, target, rtol=rtol, atol=atol)
