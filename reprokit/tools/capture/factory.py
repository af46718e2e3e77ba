"""The CLI's ``FILE.py:FUNCTION``: the user's file run, its function called, and what it returns
checked: ``(module, args)`` or ``(module, args, kwargs)``; ``command`` is ``reprokit capture``'s
whole job."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.tools.capture.forward import capture


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
