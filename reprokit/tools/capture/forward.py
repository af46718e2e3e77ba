"""Capture: the user's own model as an exported program and a case that runs it.

``capture(module, args)`` exports the module with ``torch.export`` (in whatever train/eval mode
the user left it) and writes ``NAME.pt2`` and ``NAME.toml`` (template ``exported_program``,
judged against float64) with the one writer, :mod:`reprokit.tools.capture.writer` (the inputs
as data, the archive checked and loaded back).

The outputs, whatever tree they form (a transformers ``ModelOutput``, a dataclass, a dict), are
made a flat tuple whose tensors the extra file ``outputs.json`` names by their path
(``{"names": ["output.logits", "output.hidden_states.0", ...]}``): the script imports only
torch, and ``torch.export.load`` cannot rebuild a tree of types it has not imported.

How torch.export is called, and its refusals in plain words: :mod:`reprokit.tools.capture.export`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.records.run import EXPORTED
from reprokit.records.sweep import case_file
from reprokit.tools.capture.export import export, flatten_outputs
from reprokit.tools.capture.writer import (
    INPUTS,
    OUTPUTS,
    SEED,
    check_name,
    fresh_interpreter,
    inputs_record,
    load_state_dict,
    write_program,
)

if TYPE_CHECKING:
    import torch

TEMPLATE = EXPORTED


def capture(
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    name: str,
    out_dir: Path | str = ".",
    state_dict: Path | str | None = None,
    random_inputs: bool = False,
) -> Path:
    """Export ``module`` called with ``args``/``kwargs``; write NAME.pt2 and NAME.toml.

    ``state_dict`` (a checkpoint in any format ``reprokit diff`` reads) is loaded into the
    module first, strictly. Returns the case file's path. Nothing is left half-written.
    """
    check_name(name)
    with fresh_interpreter() as loads_back:  # it imports torch while the module is exported
        if state_dict is not None:
            load_state_dict(module, Path(state_dict))
        program = export(module, tuple(args), dict(kwargs or {}))
        extra = {
            OUTPUTS: json.dumps({"names": flatten_outputs(program)}),
            INPUTS: json.dumps(inputs_record(program, args, kwargs or {}, random_inputs)),
        }
        return write_program(program, extra, loads_back, _case_text(module, name, random_inputs),
                             Path(out_dir) / case_file(name))  # fmt: skip


def _case_text(module: Any, name: str, random_inputs: bool) -> str:
    import torch

    kind, mode = type(module).__name__, "training" if module.training else "eval"
    inputs = f"random inputs (seed {SEED})" if random_inputs else "the example inputs"
    description = (
        f"{kind} ({mode} mode) captured with torch.export, run with {inputs} on CPU, XLA and "
        "in float64; each XLA result judged by its error against float64 relative to CPU's."
    )
    return (
        f"# Made by `reprokit capture`: {kind} in {mode} mode, torch {torch.__version__}.\n"
        "[case]\n"
        f"title = {json.dumps(f'Captured {kind}: every operation on CPU, XLA vs float64')}\n"
        f'template = "{TEMPLATE}"\n'
        f"description = {json.dumps(description)}\n\n"
        f'[params]\nprogram = "{name}.pt2"  # relative to this file\n\n'
        "[compare]\nmethod = \"fp64\"  # XLA's error against float64, relative to CPU's\n\n"
        '[expect]\noutcome = "match"\n'
    )
