"""``torch.export`` as capture calls it, and why it failed in plain words: one line at the user's
line with a hint, never torch's partial graph; and the program's outputs made a flat tuple of
named tensors (:func:`flatten_outputs`), so that a script importing only torch can load it."""

from __future__ import annotations

import io
import os
import re
import sys
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.errors import ReprokitError, ReprokitWarning

OUTPUT = "output"  # the prefix of the outputs' names: output.0, output.logits, ...

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
        with _quiet_export(), _library_frames():
            program = torch.export.export(module, args, kwargs)
    except Exception as exc:  # export raises many kinds; its message says what went wrong
        raise _refusal(name, exc) from None
    _refuse_value_dependent_shapes(name, program)
    _warn_if_random(program)
    _public_traces(program)
    return program


def _public_traces(program: Any) -> None:
    """Each operation's recorded stack with the user's files as a public issue may show them
    (the program travels into run folders, reports and bundles): relative to here when below
    it, under ``~`` when below the home folder, else the file's name alone; never the
    machine's layout (``/tmp/nrmx/model.py``). An installed package's file stays as it is:
    the reports cut it to its packages folder (reports/paths.py)."""

    def public(found: re.Match) -> str:
        filename = found[1]
        if _LIBRARY.search(filename) or filename.startswith("<"):
            return found[0]
        return f'File "{_public_file(Path(filename))}"'

    for node in program.graph.nodes:
        trace = node.meta.get("stack_trace")
        if trace:
            node.meta["stack_trace"] = re.sub(r'File "([^"]+)"', public, trace)


def _public_file(path: Path) -> str:
    for folder, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            return prefix + str(path.resolve().relative_to(folder.resolve()))
        except (ValueError, RuntimeError, OSError):  # not below it; no home to tell
            continue
    return path.name


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


_LIBRARY = re.compile(r"[/\\](site|dist)-packages[/\\]")


@contextmanager
def _library_frames() -> Iterator[None]:
    """Each operation's recorded stack with the frames of the functions that are not
    ``forward`` methods too, below the first forward (torch.export keeps only forward
    methods' frames): so that an operation in a library helper, transformers' masking code,
    names its line. torch's own frames stay out, as before."""
    import torch
    from torch.fx.proxy import TracerBase

    original = getattr(TracerBase, "_filter_traceback_frames", None)
    if original is None:  # another torch: its own choice of frames
        yield
        return
    left_out = tuple(os.path.join(Path(m.__file__).parent, "") for m in (torch, traceback))

    def frames(self: Any, summary: traceback.StackSummary) -> traceback.StackSummary:
        kept = original(self, summary)
        forward = next((i for i, f in enumerate(summary) if f.name == "forward"), None)
        if not getattr(self, "_record_forward_stack_traces_only", False) or forward is None:
            return kept
        helpers = [f for f in summary[forward:] if not f.filename.startswith((*left_out, "<"))]
        chosen = {id(f) for f in [*kept, *helpers]}  # the same frames, in the stack's order
        return traceback.StackSummary.from_list([f for f in summary if id(f) in chosen])

    TracerBase._filter_traceback_frames = frames
    try:
        yield
    finally:
        TracerBase._filter_traceback_frames = original


def _frames(frames: list[traceback.FrameSummary]) -> tuple[Any, Any]:
    """The innermost frame of the user's code and the innermost of an installed library
    (torchvision, transformers), either None: never torch's, the standard library's or
    reprokit's own."""
    import torch

    packages = (torch, traceback, sys.modules["reprokit"])  # a folder's files: not torchvision's
    skip = tuple(os.path.join(Path(m.__file__).parent, "") for m in packages)
    theirs = [f for f in frames if not f.filename.startswith((*skip, "<"))]
    user = [f for f in theirs if not _LIBRARY.search(f.filename)]
    library = [f for f in theirs if _LIBRARY.search(f.filename)]
    return (user[-1] if user else None), (library[-1] if library else None)


def _refusal(name: str, exc: Exception) -> ReprokitError:
    """Why torch.export failed, in plain words, at the user's line (and the library's)."""
    user, library = _frames(traceback.extract_tb(exc.__traceback__))
    what, hint = _why(exc)
    return _at_user_line(f"torch.export cannot capture {name}: {what}", user, hint, library)


_GENERIC_HINT = (
    "reprokit exports with strict=False, torch's default. Capture a smaller part (a submodule "
    "and its inputs), or change what the message names; see https://pytorch.org/docs/stable/export.html"
)


def _why(exc: Exception) -> tuple[str, str]:
    """What went wrong in a few words, and what to do: torch's first line where we know no
    plainer one."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    returned = re.search(r"Found <class '([\w.]+)'> in output, which is not a known type", first)
    if "data-dependent" in str(exc) or "GuardOnDataDependent" in type(exc).__name__:
        return "control flow depends on a tensor's value", (
            "Compute both branches and choose with torch.where, or capture the part of the "
            "model before or after the branch (a submodule and its inputs)."
        )
    if returned and "Cache" in returned[1]:
        return f"its output holds a KV cache ({returned[1]}), which a program cannot return", (
            "Capture without the cache: use_cache=False in the model's config "
            "(model.config.use_cache = False) or among the inputs ({'use_cache': False})."
        )
    if returned:
        return f"its output holds a {returned[1]}, which a program cannot return", (
            "Return tensors in tuples, lists, dicts, or dataclasses registered with "
            "torch.utils._pytree.register_dataclass."
        )
    return f"{type(exc).__name__}: {first[:300]}", _GENERIC_HINT


def _at_user_line(message: str, frame: Any, hint: str, library: Any = None) -> ReprokitError:
    """The error at the user's file and line (FrameSummaries, or None), quoting the line, then
    the library's line where the failure sits inside one (``inside torchvision/ops/boxes.py:97:
    `if boxes.numel() == 0:```); at the library's line where no line of the user's is on the
    way (a model the user only built)."""
    if frame is not None and frame.line:
        message += f" (`{frame.line.strip()}`)"
    if library is not None:
        code = f": `{library.line.strip()}`" if library.line else ""
        message += f", inside {_package_path(library.filename)}:{library.lineno}{code}"
    where = frame or library
    if where is None:
        return ReprokitError(message, hint=hint)
    return ReprokitError(message, _shown(where.filename), where.lineno, hint)


def _package_path(filename: str) -> str:
    """An installed file as its package names it: torchvision/ops/boxes.py."""
    return _LIBRARY.split(filename)[-1]


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
                *_frames(frames)[:1],
                "reprokit runs programs with static shapes: keep the shape fixed (a mask and "
                "torch.where instead of boolean indexing or nonzero), or capture the part of "
                "the model before or after it.",
                _frames(frames)[1],
            )


def _warn_if_random(program: Any) -> None:
    """A program that draws random numbers cannot agree across backends: say so now."""

    drawn = sorted({str(n.target) for n in program.graph.nodes if draws(n)})
    if drawn:
        warnings.warn(
            f"the program draws random numbers ({', '.join(drawn)}): each backend draws its "
            "own, so they will differ; call model.eval() or set dropout to 0 before capturing",
            ReprokitWarning,
            stacklevel=3,
        )


def draws(node: Any) -> bool:
    """A random operation that does draw: not a dropout with p=0 or outside training."""
    import torch

    tags = getattr(node.target, "tags", ())
    if node.op != "call_function" or torch.Tag.nondeterministic_seeded not in tags:
        return False
    schema = node.target._schema.arguments
    given = {a.name: a.default_value for a in schema if a.has_default_value()}
    given |= dict(zip([a.name for a in schema], node.args, strict=False)) | dict(node.kwargs)
    return given.get("p", given.get("dropout_p")) != 0 and given.get("train") is not False


def flatten_outputs(program: Any) -> list[str]:
    """Make ``program`` return a flat tuple of its outputs' leaves and name its tensor leaves
    by their path (``output.logits``, ``output.hidden_states.3``; ``output.0`` for a bare
    tensor). The output's tree (a transformers ModelOutput, a dataclass, a dict) is saved
    with the program as the names of its types, which ``torch.export.load`` cannot read back
    in a process that has not imported the module registering them; a tuple it always can."""
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import OutputKind, TensorArgument

    signature = program.module_call_graph[0].signature  # the root's: what call_spec reads
    spec = signature.out_spec
    paths = _leaf_paths(spec)
    user = [s for s in program.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    tensors = [s for s in user if isinstance(s.arg, TensorArgument)]
    if len(user) != len(paths):  # not seen: left as torch made it, the outputs numbered
        return [f"{OUTPUT}.{i}" for i in range(len(tensors))]
    signature.out_spec = pytree.tree_structure(tuple(range(len(paths))))
    names = [p for p, s in zip(paths, user, strict=True) if isinstance(s.arg, TensorArgument)]
    return _unique(names)


def _leaf_paths(spec: Any) -> list[str]:
    """Each leaf of the tree ``spec`` describes, named by its path below OUTPUT; by its
    position where a type registered without keys gives no path."""
    import torch
    import torch.utils._pytree as pytree

    if spec.is_leaf():
        return [f"{OUTPUT}.0"]
    try:  # a tree of placeholders of the same structure, flattened with its keys
        tree = pytree.tree_unflatten([torch.empty(0)] * spec.num_leaves, spec)
        keyed, _ = pytree.tree_flatten_with_path(tree)
    except Exception:  # a node type without flatten_with_keys, or one that checks its values
        return [f"{OUTPUT}.{i}" for i in range(spec.num_leaves)]
    return [".".join([OUTPUT, *map(_key_name, path)]) for path, _ in keyed]


def _key_name(entry: Any) -> str:
    """One step of a path: a dict key, an attribute, an index; made of word characters."""
    for attribute in ("key", "name", "idx"):
        if hasattr(entry, attribute):
            return re.sub(r"[^\w-]+", "_", str(getattr(entry, attribute))) or "_"
    return re.sub(r"[^\w-]+", "_", str(entry)).strip("_") or "_"


def _unique(names: list[str]) -> list[str]:
    """Names made distinct (two keys that differ only in odd characters): a suffix _2, _3."""
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return unique
