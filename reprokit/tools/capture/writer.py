"""The one writer of a captured program (the forward one and the training step's alike):
NAME.pt2 beside the case NAME.toml that runs it, both or neither, the archive checked as data
(:mod:`reprokit.tools.capture.program_file`) and loaded back in a fresh interpreter, as the
script will load it.

The inputs are data, not pickles: ``torch.export.load`` unpickles a program's example inputs
with ``weights_only=False``, so they are cleared (``data/sample_inputs`` stays empty) and the
archive's extra file ``inputs.json`` holds the flat leaves of ``(args, kwargs)`` in the
program's order: each tensor's shape and dtype, and unless inputs are random, the values as a
base64 ``torch.save`` blob (extra files are text) that the script reads with
``weights_only=True``. Random inputs keep only shapes, dtypes and a seed (numbers and flags
among the inputs are constants of the program, so they are kept).
"""

from __future__ import annotations

import base64
import io
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.runner.processes.procs import started_early
from reprokit.tools.capture.program_file import check_program

INPUTS = "inputs.json"  # the extra file holding the inputs (extra/inputs.json in the archive)
OUTPUTS = "outputs.json"  # the extra file naming the outputs' tensors
SEED = 0  # of random inputs
LOAD_TIMEOUT = 600.0  # seconds the fresh interpreter may take to load the program
_NAME = re.compile(r"[A-Za-z0-9_][\w.-]{0,79}")  # short: the script names its .pt2


def check_name(name: str) -> None:
    """A case's name: one the script and the file system can both carry."""
    if not _NAME.fullmatch(name):
        raise ReprokitError(f"{name!r} cannot name a case", hint="Use letters, digits, _ . -")


def write_program(
    program: Any, extra: dict[str, str], loads_back: Callable[[Path], None], text: str, case: Path
) -> Path:
    """The program beside its case file ``case`` (whose text is ``text``), checked as data and
    loaded back: both, or neither (the program is in place before the case that names it)."""
    import torch

    program.example_inputs = None  # else torch.export.load would unpickle them (see above)
    case.parent.mkdir(parents=True, exist_ok=True)
    with _staged(case) as staged_case, _staged(case.with_suffix(".pt2")) as pt2:
        torch.export.save(program, pt2, extra_files=extra)
        check_program(pt2)
        loads_back(pt2)
        staged_case.write_text(text, encoding="utf-8")
    return case


def load_state_dict(module: Any, path: Path) -> None:
    """Load a checkpoint into ``module``, strictly: every name on both sides."""
    from reprokit.comparison.checkpoints import open_checkpoint

    checkpoint = open_checkpoint(path)
    expected = list(module.state_dict())
    missing = [k for k in expected if k not in checkpoint]
    unexpected = sorted(checkpoint.keys() - set(expected))
    if missing or unexpected:
        shown = [f"missing: {', '.join(missing[:5])}"] if missing else []
        shown += [f"unexpected: {', '.join(unexpected[:5])}"] if unexpected else []
        raise ReprokitError(
            f"the state dict does not fit {type(module).__name__}: "
            f"{len(missing)} missing, {len(unexpected)} unexpected ({'; '.join(shown)})",
            path,
            hint="Give the model's own state_dict(), saved alone (names like "
            f"{expected[0] if expected else 'fc.weight'}), not nested in a larger dict.",
        )
    try:
        module.load_state_dict({k: checkpoint[k] for k in expected}, strict=True)
    except RuntimeError as exc:  # shapes differ
        raise ReprokitError(f"cannot load the state dict: {exc}", path) from None


def inputs_record(
    program: Any, args: Any, kwargs: dict[str, Any], random_inputs: bool
) -> dict[str, Any]:
    """The inputs as data: the flat leaves in the program's order (see the module docstring)."""
    import torch
    import torch.utils._pytree as pytree

    in_spec = program.call_spec.in_spec
    order = in_spec.children_specs[1].context  # the kwargs' names as the program takes them
    leaves, spec = pytree.tree_flatten((tuple(args), {k: kwargs[k] for k in order}))
    assert spec == in_spec, f"inputs {spec} do not flatten as the program's {in_spec}"
    described: list[dict[str, Any]] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            described.append({"shape": list(leaf.shape), "dtype": str(leaf.dtype).split(".")[1]})
        elif leaf is None or isinstance(leaf, bool | int | float | str):
            described.append({"value": leaf})
        else:
            raise ReprokitError(
                f"an input of type {type(leaf).__name__} cannot be stored",
                hint="Pass tensors, numbers, strings or None (in tuples, lists, dicts).",
            )
    record: dict[str, Any] = {"leaves": described}
    if random_inputs:
        return record | {"seed": SEED}
    values = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in leaves]
    blob = io.BytesIO()
    torch.save(values, blob)
    return record | {"data": base64.b64encode(blob.getvalue()).decode("ascii")}


# What the script does first, in a fresh interpreter that imports torch and nothing else
_LOAD = """\
import sys, warnings
import torch
path = sys.stdin.readline().strip()
warnings.filterwarnings("ignore")
if path:
    torch.export.load(path).module(check_guards=False)
"""


@contextmanager
def fresh_interpreter() -> Iterator[Callable[[Path], None]]:
    """A check that a program loads where the script will load it: a fresh interpreter
    (``-I``: no PYTHONPATH, no user site), so without the pytree nodes, custom operators and
    classes the user's imports register. Started at once, so that it imports torch while
    the module is exported; stopped when the block ends, checked or not."""
    with started_early([sys.executable, "-I", "-c", _LOAD]) as answer:

        def loads_back(path: Path) -> None:
            returncode, stderr = answer(str(path.resolve()), LOAD_TIMEOUT)
            if returncode == 0:
                return
            raise ReprokitError(
                "the exported program does not load back in a fresh interpreter: "
                + _cause(stderr, returncode),
                hint="The script imports only torch: a custom operator, class or input type "
                "must be one torch itself knows; capture a part of the model without it.",
            )

        yield loads_back


_RAISED = re.compile(r"(?:[\w.]+\.)?(\w+(?:Error|Exception): .*)")  # module path left out


def _cause(stderr: str, returncode: int) -> str:
    """Why a program did not load, in one sentence: the error torch logs on the way (which
    operator or type it could not resolve) rather than its last words, "We ran into an error
    when deserializing the saved file"."""
    raised = [m[1] for m in map(_RAISED.search, stderr.splitlines()) if m]
    found = [e for e in raised if "ran into an error when deserializing" not in e] or raised
    if not found:
        return f"exit code {returncode}"
    return re.split(r"(?<=\.) ", found[0], maxsplit=1)[0][:300]


@contextmanager
def _staged(final: Path) -> Iterator[Path]:
    """``final``'s name in a temporary folder beside it, moved onto ``final`` only if the block
    succeeds (the name, not a temporary one: torch.export.save names the archive's folder
    after the file)."""
    folder = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    try:
        yield folder / final.name
        (folder / final.name).replace(final)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
