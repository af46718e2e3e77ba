"""``torch.export`` as capture calls it, and why it failed in plain words: one line at the user's
line with a hint, never torch's partial graph."""

from __future__ import annotations

import io
import re
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.errors import ReprokitError, ReprokitWarning

if TYPE_CHECKING:
    from collections.abc import Iterator


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


def _warn_if_random(program: Any) -> None:
    """A program that draws random numbers cannot agree across backends: say so now."""

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
