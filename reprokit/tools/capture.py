"""Capture: the user's own model as an exported program and a case that runs it.

``capture(module, args)`` exports the module with ``torch.export`` (in whatever train/eval mode
the user left it) and writes ``NAME.pt2`` and ``NAME.toml`` (template ``exported_program``,
judged against float64); ``load_factory`` reads the CLI's ``FILE.py:FUNCTION``, ``command`` is
the CLI's whole job.

The inputs are data, not pickles: ``torch.export.load`` unpickles a program's example inputs
with ``weights_only=False``, so they are cleared (``data/sample_inputs`` stays empty) and the
archive's extra file ``inputs.json`` holds the flat leaves of ``(args, kwargs)`` in the
program's order: each tensor's shape and dtype, and unless inputs are random, the values as a
base64 ``torch.save`` blob (extra files are text) that the script reads with
``weights_only=True``. Random inputs keep only shapes, dtypes and a seed (numbers and flags
among the inputs are constants of the program, so they are kept).

The outputs, whatever tree they form (a transformers ``ModelOutput``, a dataclass, a dict), are
made a flat tuple whose tensors the extra file ``outputs.json`` names by their path
(``{"names": ["output.logits", "output.hidden_states.0", ...]}``): the script imports only
torch, and ``torch.export.load`` cannot rebuild a tree of types it has not imported. The
archive must load back in a fresh interpreter that imports nothing else, as the script's.

What an archive may hold is checked by :mod:`reprokit.tools.program_file`; how torch.export is
called, and its refusals in plain words, by :mod:`reprokit.tools.export`.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.errors import ReprokitError
from reprokit.tools.export import export, flatten_outputs
from reprokit.tools.program_file import check_program

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import torch

TEMPLATE = "exported_program"
INPUTS = "inputs.json"  # the extra file holding the inputs (extra/inputs.json in the archive)
OUTPUTS = "outputs.json"  # the extra file naming the outputs' tensors
SEED = 0  # of random inputs
_NAME = re.compile(r"[A-Za-z0-9_][\w.-]{0,79}")  # short: the script names its .pt2


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
    if not _NAME.fullmatch(name):
        raise ReprokitError(f"{name!r} cannot name a case", hint="Use letters, digits, _ . -")
    with _fresh_interpreter() as loads_back:  # it imports torch while the module is exported
        if state_dict is not None:
            load_state_dict(module, Path(state_dict))
        program = export(module, tuple(args), dict(kwargs or {}))
        extra = {
            OUTPUTS: json.dumps({"names": flatten_outputs(program)}),
            INPUTS: json.dumps(_inputs_record(program, args, kwargs or {}, random_inputs)),
        }
        program.example_inputs = None  # else torch.export.load would unpickle them (see above)
        return _write(program, extra, loads_back, _case_text(module, name, random_inputs),
                      Path(out_dir) / f"{name}.toml")  # fmt: skip


def _write(
    program: Any, extra: dict[str, str], loads_back: Callable[[Path], None], text: str, case: Path
) -> Path:
    """The program beside its case file ``case``, checked as data and loaded back: both, or
    neither (the program is in place before the case that names it)."""
    import torch

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


def _inputs_record(
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
def _fresh_interpreter() -> Iterator[Callable[[Path], None]]:
    """A check that a program loads where the script will load it: a fresh interpreter
    (``-I``: no PYTHONPATH, no user site), so without the pytree nodes, custom operators and
    classes the user's imports register. Started at once, so that it imports torch while
    the module is exported; stopped when the block ends, checked or not."""
    child = subprocess.Popen(
        [sys.executable, "-I", "-c", _LOAD],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip

    def loads_back(path: Path) -> None:
        _, stderr = child.communicate(f"{path.resolve()}\n", timeout=600)
        if child.returncode == 0:
            return
        raise ReprokitError(
            "the exported program does not load back in a fresh interpreter: "
            + _cause(stderr, child.returncode),
            hint="The script imports only torch: a custom operator, class or input type must "
            "be one torch itself knows; capture a part of the model without it.",
        )

    try:
        yield loads_back
    finally:
        if child.returncode is None:  # not checked: the block failed first
            child.kill()
            child.communicate()


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


def load_factory(spec: str) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """Run ``FILE.py`` and call its ``FUNCTION``: ``(module, args)`` or ``(module, args,
    kwargs)``."""
    file, sep, function = spec.rpartition(":")
    if not sep or not file or not function.isidentifier():
        raise ReprokitError(
            f"{spec!r} is not FILE.py:FUNCTION",
            hint="Example: reprokit capture model.py:make_model, where make_model() returns "
            "(model, (x,)) or (model, (x,), {'mask': m}).",
        )
    path = Path(file)
    if not path.is_file():
        raise ReprokitError("no such file", path, hint="Give the path of a Python file.")
    namespace = _run_file(path)
    factory = namespace.get(function)
    if not callable(factory):
        found = ", ".join(k for k, v in namespace.items() if callable(v) and not k.startswith("_"))
        raise ReprokitError(
            f"{path.name} defines no function {function!r}", path, hint=f"It defines: {found}."
        )
    with _guarded(path, f"{function}() raised"):
        result = factory()
    return _checked(result, path, function)


def _run_file(path: Path) -> dict[str, Any]:
    """The user's file run as a module named after it, its folder importable (as python
    does for a script)."""
    name = path.stem if path.stem.isidentifier() else "model"
    name = name if name not in sys.modules else f"_reprokit_capture_{name}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ReprokitError("cannot load it as Python", path, hint="Give a .py file.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    sys.path.insert(0, str(path.resolve().parent))
    with _guarded(path, "running it raised"):
        spec.loader.exec_module(module)
    return vars(module)


@contextmanager
def _guarded(path: Path, what: str) -> Iterator[None]:
    """The user's code failing, as a ReprokitError pointing at their line."""
    try:
        yield
    except SyntaxError as exc:
        raise ReprokitError(f"not valid Python: {exc.msg}", path, exc.lineno) from None
    except Exception as exc:
        trace = traceback.extract_tb(exc.__traceback__)
        lines = [f.lineno for f in trace if Path(f.filename).resolve() == path.resolve()]
        line = lines[-1] if lines else None
        raise ReprokitError(f"{what}: {type(exc).__name__}: {exc}", path, line) from None


def _checked(result: Any, path: Path, function: str) -> tuple[Any, tuple[Any, ...], dict]:
    import torch

    shape = "(module, args) or (module, args, kwargs), args a tuple and kwargs a dict"
    ok = isinstance(result, tuple) and len(result) in (2, 3)
    ok = ok and isinstance(result[0], torch.nn.Module) and isinstance(result[1], tuple | list)
    ok = ok and (len(result) == 2 or isinstance(result[2], dict))
    if not ok:
        got = type(result).__name__
        if isinstance(result, tuple):
            got = f"({', '.join(type(x).__name__ for x in result)})"
        raise ReprokitError(
            f"{function}() returned {got}, not {shape}",
            path,
            hint="Example: return model, (torch.randn(8, 3, 32, 32),)",
        )
    return result[0], tuple(result[1]), dict(result[2]) if len(result) == 3 else {}


def command(
    spec: str,
    *,
    name: str | None = None,
    out_dir: Path | str = ".",
    state_dict: Path | str | None = None,
    random_inputs: bool = False,
    capturing: Callable[..., Path] | None = None,
) -> Path:
    """``reprokit capture FILE.py:FUNCTION``: the case file written (name: FUNCTION's);
    ``capturing``: what captures the model (:func:`capture`, or train.py's training step)."""
    module, args, kwargs = load_factory(spec)
    name = name or spec.rpartition(":")[2]
    options = {"out_dir": out_dir, "state_dict": state_dict, "random_inputs": random_inputs}
    return (capturing or capture)(module, args, kwargs, name=name, **options)
