"""reprokit: minimal reproductions and issue-ready bug reports for PyTorch/XLA.

The pipeline in five calls (the CLI and the pytest plugin call the same ones)::

    import reprokit
    variants = reprokit.load_cases(["xser_to_spmd"], sets={"train_steps": 2})
    script = reprokit.render(variants[0])            # the standalone repro.py
    summary = reprokit.run(variants, run_dir="runs/seed", options=reprokit.Options(jobs=2))
    reprokit.report("runs/seed")                     # report.md, .html, .json, bundle.zip
    diffs = reprokit.compare("a.pt", "b.safetensors", atol=1e-5)
    reprokit.convert("model.xser", "model.safetensors")   # checkpoints that leave torch_xla
    case = reprokit.capture(model, (batch,), name="mine")   # your own model, as a case

The tools on top of it, as the commands of the same names run them::

    reprokit.minimize(variants[0], out_dir="minimized")  # the smallest variant or program
    reprokit.merge(["runs/cpu", "runs/tpu"], out_dir="runs/both")  # one run from several
    reprokit.bisect(["xm_save_vs_xser"], releases=["2.5", "2.9"], out_dir="runs/bisect")
    reprokit.wrap(["python", "train.py"], run_dir="runs/mine")  # your script, as a stage
    reprokit.sweep(["timm:convnext_atto", "hf:gpt2"], run_dir="runs/zoo")  # models x dtypes

Importing reprokit does not import torch: only ``compare`` (and running a verdict) does.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from reprokit.errors import ReprokitError
    from reprokit.generate.render import render
    from reprokit.generate.variants import Variant
    from reprokit.generate.variants import load_variants as load_cases
    from reprokit.records import (
        Comparison,
        MinimizeResult,
        Outcome,
        Reports,
        RunSummary,
        VariantResult,
    )
    from reprokit.runner.options import Options
    from reprokit.runner.processes.stage import Executor
    from reprokit.runner.scheduler import Interrupted, Reporter
    from reprokit.tools.bisect import Bisection
    from reprokit.tools.convert import Conversion
    from reprokit.tools.model_sweep import SweepResult

# The API's names, imported on first use (PEP 562): a process that imports one module of
# reprokit's (a warm server's fork comparing tensors, infra/offload.py) pays for that module
# alone, not for the whole pipeline (185 ms against 50 ms with torch imported already)
_LAZY = {
    "ReprokitError": ("reprokit.errors", "ReprokitError"),
    "render": ("reprokit.generate.render", "render"),
    "Variant": ("reprokit.generate.variants", "Variant"),
    "load_cases": ("reprokit.generate.variants", "load_variants"),
    "Comparison": ("reprokit.records", "Comparison"),
    "Outcome": ("reprokit.records", "Outcome"),
    "RunSummary": ("reprokit.records", "RunSummary"),
    "VariantResult": ("reprokit.records", "VariantResult"),
    "Options": ("reprokit.runner.options", "Options"),
    "Interrupted": ("reprokit.runner.scheduler", "Interrupted"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'reprokit' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = globals()[name] = getattr(importlib.import_module(module), attribute)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "Comparison",
    "Interrupted",
    "Options",
    "Outcome",
    "ReprokitError",
    "RunSummary",
    "Variant",
    "VariantResult",
    "bisect",
    "capture",
    "compare",
    "convert",
    "load_cases",
    "merge",
    "minimize",
    "render",
    "report",
    "run",
    "sweep",
    "wrap",
]


def capture(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None, *,
            name: str, out_dir: Path | str = ".", state_dict: Path | str | None = None,
            random_inputs: bool = False, train: bool = False) -> Path:  # fmt: skip
    """Your own model: ``torch.export`` it into ``OUT_DIR/NAME.pt2`` and write the case that
    runs it, ``OUT_DIR/NAME.toml``; returns the case's path (reprokit.tools.capture).
    ``train=True``: its forward returns the loss first, and the program is the training step,
    forward and backward (reprokit.tools.capture.train)."""
    from reprokit.tools.capture import capture as capture_program  # torch: only here

    if train:
        from reprokit.tools.capture.train import capture_training as capture_program
    return capture_program(module, args, kwargs, name=name, out_dir=out_dir,
                           state_dict=state_dict, random_inputs=random_inputs)  # fmt: skip


def report(
    run_dir: Path | str, *, formats: str = "all", out_dir: Path | str | None = None,
    options: Options | None = None,
) -> Reports:  # fmt: skip
    """report.md (issue-ready), report.html, report.json and bundle.zip of a run folder. A
    captured program that differs has each of its roots written as a repro first and run
    alone (reprokit.tools.root_repro): each root's issue carries its own (issues/NAME.md)."""
    from reprokit.reports import write_reports
    from reprokit.tools.root_repro import write_root_repros

    write_root_repros(Path(run_dir), options)
    out = Path(out_dir) if out_dir is not None else None
    return write_reports(Path(run_dir), formats=formats, out_dir=out)


def compare(
    reference: Path | str, target: Path | str, *, rtol: float | None = None,
    atol: float | None = None,
) -> list[Comparison]:  # fmt: skip
    """Tensor by tensor, two checkpoints of any format ``reprokit diff`` reads."""
    from reprokit.comparison.checkpoints import diff_checkpoints  # torch: only here

    return diff_checkpoints(reference, target, rtol=rtol, atol=atol)


def convert(source: Path | str, target: Path | str, *, to: str | None = None) -> Conversion:
    """A checkpoint of any format ``compare`` reads into another (torch, xser, safetensors,
    dcp: ``to``, else the target's name says), checked bit for bit (reprokit.tools.convert)."""
    from reprokit.tools.convert import convert as convert_checkpoint  # torch: only here

    return convert_checkpoint(source, target, to=to)


# The tools are imported when called: ``import reprokit`` stays light (and torch-free).


def run(
    variants: Iterable[Variant], *, run_dir: Path | str, options: Options | None = None,
    reporter: Reporter | None = None, argv: Iterable[str] = (), executor: Executor | None = None,
    announce: Callable[[str], None] | None = None,
) -> RunSummary:  # fmt: skip
    """Run ``variants`` into ``run_dir`` (reprokit.runner.scheduler.run), then triage each
    captured program's mismatch whose case asks for it, every one with ``options.triage``:
    run again at highest matmul precision and in float32, and labelled (reprokit.tools.triage)."""
    from reprokit.runner.scheduler import run as run_variants
    from reprokit.tools.triage import triage_summary

    variants = list(variants)
    summary = run_variants(variants, run_dir=Path(run_dir), options=options, reporter=reporter,
                           argv=argv, executor=executor, announce=announce)  # fmt: skip
    return triage_summary(summary, variants, run_dir=Path(run_dir), options=options,
                          every=bool(options and options.triage), announce=announce)  # fmt: skip


def minimize(
    variant: Variant, *, out_dir: Path | str, options: Options | None = None, budget: int = 40,
    root: str = "",
) -> MinimizeResult:  # fmt: skip
    """Shrink ``variant`` to the smallest one (a captured program: the fewest operations) that
    still shows its outcome, in at most ``budget`` candidate runs; writes OUT_DIR/minimal.toml,
    OUT_DIR/repro.py and a run folder that ``report`` reads (reprokit.tools.minimize). A
    captured program keeps ``root`` (its name or op), else minimizes each root that reaches
    an output, the first in OUT_DIR, the others in OUT_DIR/roots/NAME."""
    from reprokit.tools.minimize import minimize as shrink

    return shrink(variant, out_dir=Path(out_dir), options=options, budget=budget, root=root)


def merge(
    runs: Iterable[Path | str], *, out_dir: Path | str, cases: Iterable[Path] = (),
    templates: Iterable[Path] = (), argv: Iterable[str] = (),
) -> RunSummary:  # fmt: skip
    """One run, in ``out_dir``, from the stages of several run folders of the same cases (one
    machine's CPU side, another's TPU side): comparisons and verdicts computed anew."""
    from reprokit.tools.merge import merge as merge_runs

    return merge_runs([Path(r) for r in runs], Path(out_dir), cases=cases, templates=templates,
                      argv=argv)  # fmt: skip


def bisect(
    selectors: Iterable[str], *, releases: Iterable[str], out_dir: Path | str,
    options: Options | None = None, sets: dict[str, Any] | None = None,
    cases: Iterable[Path] = (), templates: Iterable[Path] = (),
    announce: Callable[[str], None] | None = None,
) -> Bisection:  # fmt: skip
    """The torch_xla release, of ``releases`` (oldest first), where the selected cases'
    outcome changed: each release run in a uv environment into OUT_DIR/RELEASE, the finding
    in OUT_DIR/bisect.json. ``announce`` hears a line as each release starts and ends."""
    from reprokit.runner.options import Options
    from reprokit.tools.bisect import bisect as bisect_releases

    return bisect_releases(
        selectors, list(releases), Path(out_dir), options=options or Options(), sets=sets,
        cases=cases, templates=templates, announce=announce or (lambda _line: None),
    )  # fmt: skip


def wrap(
    command: list[str], *, run_dir: Path | str, options: Options | None = None,
    recompiles: bool = False, repro: bool = False,
) -> RunSummary:  # fmt: skip
    """Run ``command`` (your own script) under torch_xla's debug settings as the one stage of
    a run in ``run_dir``, which ``report`` turns into an issue (reprokit.tools.wrap);
    ``recompiles``: each compile after the first explained (docs/recompiles.md); ``repro``:
    and the fewest lines of the script that still compile again."""
    from reprokit.runner.options import Options
    from reprokit.tools.wrap import wrap as wrap_command

    return wrap_command(list(command), run_dir=Path(run_dir), options=options or Options(),
                        recompiles=recompiles, repro=repro)  # fmt: skip


def sweep(
    models: Iterable[str], *, run_dir: Path | str, dtypes: Iterable[str] | None = None,
    options: Options | None = None, sets: dict[str, Any] | None = None,
    envs: Iterable[Any] | None = None, minimize: bool = False, budget: int = 40,
    watch: Callable[[int], AbstractContextManager[Reporter]] | None = None,
    argv: Iterable[str] = (), announce: Callable[[str], None] | None = None,
) -> SweepResult:  # fmt: skip
    """Named models (``torchvision:resnet18``, ``hf:gpt2``) or TOML lists of them, captured
    and run in each of ``dtypes`` (float32 and bfloat16 unless a list or the caller names
    them) into one run folder; ``minimize``: each divergence once, one witness shrunk to its
    short repro (reprokit.tools.model_sweep). ``report(run_dir)`` then shows the sweep's table."""
    from reprokit.tools import model_sweep as sweeps

    found, listed = sweeps.load_models(models)
    return sweeps.sweep(
        found, run_dir=Path(run_dir), dtypes=tuple(dtypes or listed or sweeps.DTYPES),
        options=options, sets=sets, envs=envs, minimize=minimize, budget=budget, watch=watch,
        argv=argv, announce=announce,
    )  # fmt: skip
