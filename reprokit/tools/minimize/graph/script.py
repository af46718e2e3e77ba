"""The stage-protocol repro_stages.py of a minimized program: its aten calls as Python, one a
line, run as stages in fresh processes (the short, pasteable repro.py is
:mod:`~reprokit.tools.minimize.graph.short`'s).

The script is rendered by the project's sandboxed Jinja environment from
``templates/_graph_repro.py.j2``. Every operation and argument reaches it as data (a node as
a checked name, a value as a literal, a dtype or layout as a checked torch attribute name), so
that nothing in a program becomes code. Inputs of at most :data:`LITERAL_LIMIT` finite
elements are printed into the script; larger ones go into :data:`INPUTS_FILE` beside it, read
back with ``weights_only=True``. The script needs neither reprokit nor the ``.pt2``.
"""

from __future__ import annotations

import keyword
import math
import re
from pathlib import Path
from typing import Any

import reprokit.tools.minimize.graph.program as program
from reprokit.errors import ReprokitError
from reprokit.generate.render import environment
from reprokit.generate.templates import template_dirs
from reprokit.generate.variables import with_variables
from reprokit.generate.variants import Variant
from reprokit.records.minimize import REPRO_STAGES, REPRO_STAGES_INPUTS
from reprokit.tools.minimize.graph.program import Original, State

TEMPLATE = "_graph_repro.py.j2"
SCRIPT, INPUTS_FILE = REPRO_STAGES, REPRO_STAGES_INPUTS
LITERAL_LIMIT = 256  # elements of one input printed into the script ("a few hundred")
PER_LINE = 4  # printed values a line: full precision, so that the inputs are exact
_TAKEN = {"torch", "inputs", "device", "dtype", "faulty", "floating", "Path"}


def standalone(
    original: Original, state: State, variant: Variant, perturbed: str | None
) -> tuple[str, dict[str, Any]]:
    """The script of ``state`` run as ``variant`` says, and the inputs too large to print
    (for inputs.pt beside it)."""
    inputs, fed, weights = program.reads(original, state)
    values = {n: original.values[n] for n in [*inputs, *fed, *weights]}
    printable = {n: v for n, v in values.items() if _printable(v)}
    ops = [n for n in state.ops if program.is_tensor_op(original, n)]
    results = [
        {"saved": f"node.{i:04d}.{program.op_name(original.nodes[n])}", "var": _var(n)}
        for i, n in enumerate(ops)
    ]
    results += [{"saved": f"output.{i}", "var": _var(o)} for i, o in enumerate(state.outputs)]
    context = {
        "case": {
            "name": variant.case.name,
            "title": f"{variant.case.title} (minimized program)",
            "description": _description(original, state),
        },
        "compare": variant.compare,
        "fp64": variant.method == "fp64",
        "dtype": variant.params.get("dtype", "captured"),
        "matmul_precision": variant.params.get("matmul_precision", "default"),
        "perturbed": perturbed in state.ops,
        "literals": [_literal(n, v) for n, v in printable.items()],
        "stored": sorted(set(values) - set(printable)),
        "names": [{"var": _var(n), "key": n} for n in values],
        "lines": [_line(original, n, perturbed) for n in state.ops],
        "results": results,
        "inputs_file": INPUTS_FILE,
    }
    dirs = tuple(dict.fromkeys([variant.template.path.parent, *template_dirs()]))
    script = environment(dirs).get_template(TEMPLATE).render(context)
    script = with_variables(script, variant.variables, variant.case_variables)  # as render()'s
    compile(script, SCRIPT, "exec")  # a template bug, not the user's: let it raise
    return script, {n: v for n, v in values.items() if n not in printable}


def _description(original: Original, state: State) -> str:
    before = sum(program.is_tensor_op(original, n) for n in original.ops())
    after = sum(program.is_tensor_op(original, n) for n in state.ops)
    return (
        f"The {after} of {before} operations of the captured program that still show it, "
        "as aten calls; the values they read from removed operations were recorded on CPU."
    )


def _var(name: str) -> str:
    """A node's name as a variable that shadows nothing the script uses."""
    return f"{name}_" if name in _TAKEN or keyword.iskeyword(name) else name


def _printable(value: Any) -> bool:
    """Small, finite, and of a dtype whose values print as exact Python numbers."""
    import torch

    exact = (torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.int64,
             torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)  # fmt: skip
    if not isinstance(value, torch.Tensor) or value.dtype not in exact or not value.numel():
        return False
    finite = bool(value.isfinite().all()) if value.is_floating_point() else True
    return value.numel() <= LITERAL_LIMIT and finite


def _literal(name: str, value: Any) -> dict[str, Any]:
    flat = value.flatten().tolist()  # float32 and bfloat16 as doubles: printed exactly
    chunks = [flat[i : i + PER_LINE] for i in range(0, len(flat), PER_LINE)]
    return {
        "name": name,
        "dtype": str(value.dtype).split(".")[1],
        "shape": list(value.shape),
        "chunks": chunks,
    }


def _line(original: Original, name: str, perturbed: str | None) -> dict[str, Any]:
    """One call: the op's namespace, name and overload, its arguments as data."""
    import operator

    node = original.nodes[name]
    line: dict[str, Any] = {"var": _var(name), "comment": _comment(node)}
    line["perturbed"] = name == perturbed
    line["args"] = [_arg(a) for a in node.args]
    if node.target is operator.getitem:
        return line | {"getitem": True, "index": node.args[1]}
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        raise ReprokitError(
            f"{name} calls {node.target}, which the repro cannot write as an aten call",
            hint="minimal.pt2 and minimal.toml still reproduce it: `reprokit run minimal.toml`.",
        )
    namespace, _, op = schema.name.partition("::")
    line["kwargs"] = [{"name": k, "value": _arg(v)} for k, v in node.kwargs.items()]
    overload = node.target._overloadname
    return line | {"getitem": False, "ns": namespace, "op": op, "overload": overload}


def _comment(node: Any) -> str:
    """The node's name, its module and the user's line (the last frame outside installed
    packages), short enough for one comment line."""
    stack = list(node.meta.get("nn_module_stack", {}).values())
    frames = re.findall(
        r'File "(.+)", line (\d+), in .*\n\s*(.*)', node.meta.get("stack_trace") or ""
    )
    user = [f for f in frames if not re.search(r"[/\\](site|dist)-packages[/\\]", f[0])] or frames
    text = node.name
    if stack and (module := stack[-1][0]):  # a Sequential's child is a number: said as such
        text += f" in {'submodule ' * module.split('.')[-1].isdigit()}{module}"
    if user:
        file, line, code = user[-1]
        text += f", from {Path(file).name}:{line}: {code.strip()}"
    return text if len(text) <= 92 else text[:89] + "..."


def _arg(value: Any) -> dict[str, Any]:
    """One argument as data for the template (see its ``arg`` macro)."""
    import torch

    if isinstance(value, torch.fx.Node):
        return {"k": "ref", "v": _var(value.name)}
    if isinstance(value, list | tuple):
        return {"k": "list", "v": [_arg(v) for v in value]}
    if isinstance(value, float) and not math.isfinite(value):
        return {"k": "float", "v": str(value)}
    if isinstance(value, bool | int | float | str) or value is None:
        return {"k": "lit", "v": value}
    if isinstance(value, torch.dtype):
        kind = "fdtype" if value.is_floating_point else "torch"
        return {"k": kind, "v": str(value).split(".")[1]}
    if isinstance(value, torch.device):
        return {"k": "device"}
    if isinstance(value, torch.layout | torch.memory_format):
        return {"k": "torch", "v": str(value).split(".")[1]}
    raise ReprokitError(
        f"an argument of type {type(value).__name__} cannot be written into the repro",
        hint="minimal.pt2 and minimal.toml still reproduce it: `reprokit run minimal.toml`.",
    )


def write(folder: Path, script: str, stored: dict[str, Any]) -> None:
    """repro_stages.py, and its inputs file beside it when some inputs are too large to
    print."""
    import torch

    (folder / SCRIPT).write_text(script, encoding="utf-8")
    (folder / INPUTS_FILE).unlink(missing_ok=True)
    if stored:
        torch.save({k: v.contiguous() for k, v in stored.items()}, folder / INPUTS_FILE)
