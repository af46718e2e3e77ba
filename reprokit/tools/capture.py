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

What a ``.pt2`` makes torch 2.9.0's ``torch.export.load`` run (read in torch/export/,
torch/export/pt2_archive/_package.py, torch/_export/serde/serialize.py; the first two and the
sympify one tried with crafted input, and they ran):
``data/sample_inputs/*.pt`` (``torch.load(weights_only=False)``); weights or constants marked
``use_pickle`` and the legacy ``data/weights|constants/<model>.pt`` (the same);
``data/constants/custom_obj_*`` (TorchScript's unpickler); ``data/aotinductor/`` (a shared
library is loaded); the pre-2.8 layout (``serialized_*.pt``), tried when the new one fails;
``expr_str`` of symbolic shapes (``sympy.sympify``, which is ``eval``); and ``guards_code``,
which ``ep.module()`` pastes into source and ``exec``s. Other tensors are raw bytes,
operators are looked up among registered ones, node names are sanitised by torch.fx. So
:func:`check_program` admits only a plain archive's members, an empty ``sample_inputs``, no
``use_pickle``, no expression and no guards (dynamic shapes are refused); the rendered script
repeats the check and calls ``module(check_guards=False)``.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import re
import shutil
import sys
import tempfile
import traceback
import warnings
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.errors import ReprokitError, ReprokitWarning

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch

TEMPLATE = "exported_program"
INPUTS = "inputs.json"  # the extra file holding the inputs (extra/inputs.json in the archive)
SEED = 0  # of random inputs
_NAME = re.compile(r"[A-Za-z0-9_][\w.-]{0,79}")  # short: the script names its .pt2
# Everything a plain exported program consists of, below the archive's top folder.
_MEMBERS = re.compile(
    r"archive_format|archive_version|byteorder|\.data/(version|serialization_id)"
    r"|models/\w+\.json|data/weights/(weight_\d+|\w+_weights_config\.json)"
    r"|data/constants/(tensor_\d+|\w+_constants_config\.json)"
    r"|data/sample_inputs/\w+\.pt|extra/[\w.-]+"
)
_PT2_HINT = (
    "reprokit runs programs it can read as data, as `reprokit capture` writes them: "
    "torch.export.save with ep.example_inputs = None, static shapes, no pickles."
)


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
    import torch

    if not _NAME.fullmatch(name):
        raise ReprokitError(f"{name!r} cannot name a case", hint="Use letters, digits, _ . -")
    if state_dict is not None:
        load_state_dict(module, Path(state_dict))
    program = export(module, tuple(args), dict(kwargs or {}))
    inputs = _inputs_record(program, args, kwargs or {}, random_inputs)
    program.example_inputs = None  # else torch.export.load would unpickle them (see above)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # the program is in place before the case that names it
    with _staged(out / f"{name}.toml") as case, _staged(out / f"{name}.pt2") as pt2:
        torch.export.save(program, pt2, extra_files={INPUTS: json.dumps(inputs)})
        check_program(pt2)
        _loads_back(pt2)
        case.write_text(_case_text(module, name, random_inputs), encoding="utf-8")
    return out / f"{name}.toml"


def export(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch.export.export`` (strict=False, its default); its failure, and a program whose
    shapes depend on values, refused in one line naming the user's line, with a hint."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ReprokitError(f"capture needs a torch.nn.Module, not {type(module).__name__}")
    name = type(module).__name__
    try:
        with _quiet_export():
            program = torch.export.export(module, args, kwargs)
    except Exception as exc:  # export raises many kinds; its message says what went wrong
        raise _refusal(name, exc) from None
    _refuse_value_dependent_shapes(name, program)
    _warn_if_random(program)
    return program


@contextmanager
def _quiet_export() -> Iterator[None]:
    """torch.export prints the partial graph to stderr, twice, when it fails, and warns through
    its own loggers (torch._logging sets their levels, so a parent's level is ignored): the
    user gets one line from us instead."""
    import contextlib
    import logging

    def below_error(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR

    loggers = [logging.getLogger(n) for n in ("torch.fx.experimental.symbolic_shapes",
                                              "torch._export", "torch.export")]  # fmt: skip
    for logger in loggers:
        logger.addFilter(below_error)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(below_error)


def _user_frame(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The innermost frame of the user's code: not torch's, not the standard library's."""
    import torch

    skip = (str(Path(torch.__file__).parent), str(Path(traceback.__file__).parent), "<")
    mine = [f for f in frames if not f.filename.startswith(skip)]
    return mine[-1] if mine else None


def _refusal(name: str, exc: Exception) -> ReprokitError:
    """Why torch.export failed, in plain words, at the user's line."""
    frame = _user_frame(traceback.extract_tb(exc.__traceback__))
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    if "data-dependent" in str(exc) or "GuardOnDataDependent" in type(exc).__name__:
        what = "control flow depends on a tensor's value"
        hint = ("Compute both branches and choose with torch.where, or capture the part of "
                "the model before or after the branch (a submodule and its inputs).")  # fmt: skip
    else:
        what = f"{type(exc).__name__}: {first[:300]}"
        hint = ("reprokit exports with strict=False, torch's default. Capture a smaller part "
                "(a submodule and its inputs), or change what the message names; see "
                "https://pytorch.org/docs/stable/export.html")  # fmt: skip
    return _at_user_line(f"torch.export cannot capture {name}: {what}", frame, hint)


def _at_user_line(message: str, frame: Any, hint: str) -> ReprokitError:
    """The error at the user's file and line (a FrameSummary, or None), quoting the line."""
    if frame is None:
        return ReprokitError(message, hint=hint)
    code = f" (`{frame.line.strip()}`)" if frame.line else ""
    return ReprokitError(message + code, _shown(frame.filename), frame.lineno, hint)


def _shown(filename: str) -> str:
    """A path as the user would write it: relative to here when below it, else as is."""
    try:
        return str(Path(filename).resolve().relative_to(Path.cwd()))
    except ValueError:
        return filename


def _refuse_value_dependent_shapes(name: str, program: Any) -> None:
    """A program whose shapes depend on tensor values (``x[x > 0]``, nonzero) cannot be run
    with static shapes: refused at the first such operation's line in the user's code."""
    import torch

    for node in program.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and any(
            isinstance(size, torch.SymInt) for size in value.shape
        ):
            trace = node.meta.get("stack_trace") or ""
            where = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)', trace)
            frames = [traceback.FrameSummary(f, int(n), "", line=code) for f, n, code in where]
            raise _at_user_line(
                f"cannot capture {name}: the shape of {node.target} depends on tensor values",
                _user_frame(frames),
                "reprokit runs programs with static shapes: keep the shape fixed (a mask and "
                "torch.where instead of boolean indexing or nonzero), or capture the part of "
                "the model before or after it.",
            )


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


def _warn_if_random(program: Any) -> None:
    """A program that draws random numbers cannot agree across backends: say so now."""
    import warnings

    drawn = sorted({str(n.target) for n in program.graph.nodes if _draws(n)})
    if drawn:
        warnings.warn(
            f"the program draws random numbers ({', '.join(drawn)}): each backend draws its "
            "own, so they will differ; call model.eval() or set dropout to 0 before capturing",
            ReprokitWarning,
            stacklevel=3,
        )


def _draws(node: Any) -> bool:
    """A random operation that does draw: not a dropout with p=0 or outside training."""
    import torch

    tags = getattr(node.target, "tags", ())
    if node.op != "call_function" or torch.Tag.nondeterministic_seeded not in tags:
        return False
    schema = node.target._schema.arguments
    given = {a.name: a.default_value for a in schema if a.has_default_value()}
    given |= dict(zip([a.name for a in schema], node.args, strict=False)) | dict(node.kwargs)
    return given.get("p", given.get("dropout_p")) != 0 and given.get("train") is not False


def check_program(path: Path | str) -> None:
    """Refuse a ``.pt2`` that ``torch.export.load`` would run code from (module docstring)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            for name in names:
                _check_member(path, name, names.count(name), archive.read(name))
    except (OSError, zipfile.BadZipFile) as exc:
        error = ReprokitError(f"not an exported program (.pt2): {exc}", path, hint=_PT2_HINT)
        raise error from None
    if not any(n.endswith("/archive_version") for n in names):
        raise ReprokitError("not an exported program: no archive_version", path, hint=_PT2_HINT)


def _check_member(path: Path, name: str, count: int, data: bytes) -> None:
    inner = name.partition("/")[2]  # below the archive's top folder
    if count > 1 or not _MEMBERS.fullmatch(inner):
        why = f"{name!r}, no part of a plain exported program (pickles, compiled code, old layouts)"
    elif inner.startswith("data/sample_inputs/") and data:
        why = "pickled example inputs, which torch.export.load unpickles with weights_only=False"
    elif inner.endswith(".json"):
        try:
            json.loads(data, object_pairs_hook=lambda pairs: _plain(path, inner, pairs))
        except ValueError as exc:
            raise ReprokitError(f"{inner} is not JSON: {exc}", path, hint=_PT2_HINT) from None
        return
    else:
        return
    raise ReprokitError(f"the archive holds {why}", path, hint=_PT2_HINT)


_RUNS = {
    "expr_str": "symbolic shapes (sympy.sympify evaluates them as Python)",
    "use_pickle": "pickled tensors (loaded with weights_only=False)",
    "guards_code": "guards (Python source that ep.module() executes)",
}


def _plain(path: Path, inner: str, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object of the archive, refused if it holds what would run when loaded."""
    for key, value in pairs:
        if key == "expr_str" or (key in ("use_pickle", "guards_code") and value):
            raise ReprokitError(
                f"{inner} holds {_RUNS[key]}",
                path,
                hint="reprokit runs programs with static shapes and unpickled weights: "
                "capture without dynamic_shapes or data-dependent sizes (.item(), nonzero).",
            )
    return dict(pairs)


def _loads_back(path: Path) -> None:
    """The program must load as the script will load it (custom ops may not)."""
    import torch

    try:
        with warnings.catch_warnings():  # torch's own note on its read-only buffers: noise here
            warnings.filterwarnings("ignore", "The given buffer is not writable")
            torch.export.load(path).module(check_guards=False)
    except Exception as exc:  # what deserialising a program raises is not documented
        raise ReprokitError(
            f"the exported program does not load back: {type(exc).__name__}: {exc}",
            hint="A custom operator must be registered in the process that loads the program; "
            "capture a part of the model without it.",
        ) from None


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
) -> Path:
    """``reprokit capture FILE.py:FUNCTION``: the case file written (name: FUNCTION's)."""
    module, args, kwargs = load_factory(spec)
    name = name or spec.rpartition(":")[2]
    options = {"out_dir": out_dir, "state_dict": state_dict, "random_inputs": random_inputs}
    return capture(module, args, kwargs, name=name, **options)
