"""``reprokit capture``: a model (or a named one) captured as a case."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from reprokit.cli.app import (
    out,
    reports_errors,
)
from reprokit.errors import ReprokitError
from reprokit.generate.variants import parse_sets

# The named-model form of capture and the sweep's: reprokit.tools.capture.zoo.
ConfigOpt = Annotated[
    list[str] | None,
    typer.Option("--config", help="a named model's configuration: KEY=VALUE (repeatable)"),
]

ShapeOpt = Annotated[
    str | None, typer.Option("--shape", help="a named model's input: 1,3,64,64 or 1,16 (ids)")
]


@reports_errors
def capture_(
    spec: Annotated[
        str,
        typer.Argument(
            metavar="FILE.py:FUNCTION | ZOO:MODEL",
            help="returns (module, args[, kwargs]); or a named model: torchvision:resnet18, "
            "timm:convnext_atto, hf:LlamaForCausalLM, hf:gpt2",
        ),
    ],
    name: Annotated[str | None, typer.Option("--name", help="the case's name [FUNCTION]")] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="write here")] = Path("."),
    state_dict: Annotated[
        Path | None, typer.Option("--state-dict", help="load these weights first (any format)")
    ] = None,
    random_inputs: Annotated[
        bool, typer.Option("--random-inputs", help="keep only shapes, dtypes and a seed")
    ] = False,
    config: ConfigOpt = None,
    shape: ShapeOpt = None,
    train: Annotated[
        bool, typer.Option("--train", help="a training step: forward returns the loss first")
    ] = False,
) -> None:
    """Your own model: export it with torch.export into NAME.pt2 and a case, NAME.toml, that
    runs every operation on CPU and XLA and judges XLA against float64. A named model
    (ZOO:MODEL) is built with random weights and inputs made for its family. --train: the loss
    and every gradient, as one joint forward-and-backward graph (--set steps=3 optimizer=adam)."""
    if _is_named(spec):
        case = _capture_named(spec, name, output, state_dict, config or [], shape, train)
    else:
        command = _capture_command(train)
        case = command(
            spec, name=name, out_dir=output, state_dict=state_dict, random_inputs=random_inputs
        )
    out.print(f"wrote {case} and {case.with_suffix('.pt2')}", highlight=False)
    run_dir = Path("runs") / case.stem  # the report is wanted most when the run mismatches (1)
    out.print(f"next: reprokit run {case} -o {run_dir}; reprokit report {run_dir}", highlight=False)


def _is_named(spec: str) -> bool:
    from reprokit.tools.capture.zoo import is_named

    return is_named(spec)


def _capture_named(
    spec: str, name: str | None, output: Path, state_dict: Path | None, config: list[str],
    shape: str | None, train: bool,
) -> Path:  # fmt: skip
    from reprokit.tools.capture import zoo

    if train:
        raise ReprokitError(
            f"--train is for your own FILE.py:FUNCTION, not a named model ({spec})",
            hint="Write a FUNCTION that returns the model with its loss (see README, "
            "'Your own training step').",
        )
    named = zoo.parse(spec, parse_sets(config), zoo.parse_shape(shape))
    return zoo.capture_named(named, name=name, out_dir=output, state_dict=state_dict)


def _capture_command(train: bool) -> Any:
    """The capture tool's command: the forward program's, or with --train the training
    step's (reprokit.tools.capture.train). torch is imported only for this command."""
    if train:
        from reprokit.tools.capture.train import command as capture_training

        return capture_training
    from reprokit.tools.capture import command

    return command
