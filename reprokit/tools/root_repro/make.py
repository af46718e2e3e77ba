"""Each root of a captured program that differs, as a repro an issue carries inline (torch:
reprokit.tools.root_repro decides without it whether there is one to make).

The run recorded where each difference is born (a root: an operation that differs while its
inputs agree, reprokit.comparison.roots) and the program holds that operation's call. So no
search is needed: the repro is the root's operation (with the multi-output op a result is
taken from), called on inputs made in the script, on CPU, in float64 and on XLA. A training
capture's root is called as training meets it, by torch.autograd: a forward op whose
gradient differs too is one issue with two symptoms (float16 softplus: inf forward, NaN
gradient), as is a backward root whose forward agrees.

Inputs are made, never read from a file the issue cannot carry: a literal when small, else a
constant (the value at the element that differs most, where the input is as large as the
result; else its median; or the input's NaN or infinity), a range over the recorded values,
seeded random values of the same mean and spread (with the input's few NaN and infinities
where they were), in an order that suits the difference (:data:`STRATEGIES`). Each is kept
only when the repro shows the model's difference run alone
(:func:`reprokit.runner.processes.alone.run_alone`: an empty folder, a fresh ``python -I``,
only PATH, HOME and XLA's device set; :func:`same_symptom`). What it printed and its exit code
are kept beside it; ``reprokit report`` reads them (reprokit.records.issues).
"""

from __future__ import annotations

import math
import operator
import os
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import reprokit.tools.minimize.graph.program as program
from reprokit.comparison.roots import ROUNDING, compared, described, roots, rounding
from reprokit.errors import ReprokitError
from reprokit.generate.render import environment
from reprokit.generate.templates import template_dirs
from reprokit.records import Root, VariantResult
from reprokit.records.folder import ISSUES, REPRO_OUT, SCRIPT
from reprokit.records.issues import RootRepro
from reprokit.records.run import PROGRAM
from reprokit.runner.options import Options
from reprokit.runner.processes.alone import run_alone
from reprokit.tools.minimize.graph.script import _line

TEMPLATE = "_root_repro.py.j2"
MOST_LINES = 30  # with imports: what an issue shows without folding
LITERAL = 8  # elements of an input written out as numbers
# For inputs too large to write out; "nonfinite": an input with NaN or infinities as a constant
# of its first such value (a fully masked row: every element -inf); "kept": random values with
# the input's few NaN and infinities where they were. A NaN or an overflow shows at a value:
# a constant first; other values are best shown by many (a constant can make a degenerate
# case of its own: layer norm of a constant row amplifies a rounding of its mean 300 times)
STRATEGIES = {
    "nonfinite": ("constant", "nonfinite", "range", "kept", "random"),
    "value": ("range", "kept", "random", "constant", "nonfinite"),
}
KEPT = 8  # non-finite elements an input may have for "kept": one line of indices each value
SEVERITY = ("shape", "dtype", "nan-inf", "value")  # the worst first


@dataclass(frozen=True)
class Family:
    """The roots one call shows: a forward op's, its gradient's, a multi-output op's."""

    node: str  # the program's node the repro calls (a forward op, for a gradient)
    roots: tuple[Root, ...]
    gradient: bool  # judged by torch.autograd too
    items: tuple[int, ...] = ()  # a multi-output op's results that differ

    def why_not(self) -> str:
        """Why this family is no issue of its own: it reaches no output, or XLA's error is
        within a few times the bound (rounding, not a wrong kernel: listed apart)."""
        wrong = [r for r in self.roots if not rounding(r)]
        if not wrong:
            return f"XLA's error against float64 is within {ROUNDING:g}x the bound: rounding"
        if not any(r.reaches or r.reaches is None for r in wrong):
            return "every result that reads it agrees: harmless to the outputs"
        return ""


def variant_repros(variant: VariantResult, folder: Path, options: Options) -> list[RootRepro]:
    """The variant's root families' repros, the worst kind first, each checked alone."""
    try:
        original = program.load(_program_path(variant, folder))
    except ReprokitError as error:
        return [RootRepro("program", (), "", "", False, why_not=error.message)]
    families = sorted(_families(variant, original), key=_severity)
    dtype = variant.variant.get("dtype", "captured")
    slugs = _slugs(original, families)
    # two repros at once at most: each is a fresh interpreter compiling for XLA
    with ThreadPoolExecutor(min(2, os.cpu_count() or 1)) as pool:

        def made(at: int) -> RootRepro:
            return _repro(families[at], slugs[at], original, variant, dtype, folder, options)

        return list(pool.map(made, range(len(families))))


def _program_path(variant: VariantResult, folder: Path) -> Path:
    """The run's copy of the program beside the variant's script, else where the case named."""
    named = Path(str(variant.variant[PROGRAM]))
    beside = folder / named.name
    return beside if beside.is_file() else named


def _families(variant: VariantResult, original: program.Original) -> list[Family]:
    """The roots grouped by the call that shows them."""
    tensor_ops = [n for n in original.ops() if program.is_tensor_op(original, n)]
    grouped: dict[str, list[Root]] = {}
    items: dict[str, list[int]] = {}
    training = any(n.startswith("node.") and ".bwd." in n for n in described(variant, "cpu"))
    for root in roots(variant):
        node = _node_of(root.tensor, tensor_ops, original)
        info = described(variant, root.target).get(root.tensor, {})
        if forward := info.get("forward"):  # a gradient: the forward op autograd differentiates
            node = _node_of(forward, tensor_ops, original) or node
        if node is not None and original.nodes[node].target is operator.getitem:
            index = original.nodes[node].args[1]
            node = original.nodes[node].args[0].name  # a multi-output op's result: the op
            items.setdefault(node, []).append(index)
        if node is not None:
            grouped.setdefault(node, []).append(root)
    return [Family(node, tuple(found), training and not items.get(node)
                   and _differentiable(original, node), tuple(sorted(set(items.get(node, ())))))
            for node, found in grouped.items()]  # fmt: skip


def _node_of(tensor: str, tensor_ops: list[str], original: program.Original) -> str | None:
    """The program's node a recorded result is (node.0012.fwd.elu: the 13th tensor operation),
    when its op name agrees."""
    found = re.match(r"node\.(\d+)\.(?:fwd\.|bwd\.)?(\w+)$", tensor)
    if not found or int(found.group(1)) >= len(tensor_ops):
        return None
    name = tensor_ops[int(found.group(1))]
    node = original.nodes[name]
    op = node.args[0] if node.target is operator.getitem else node
    return name if found.group(2).startswith(program.op_name(op)) else None


def _differentiable(original: program.Original, name: str) -> bool:
    import torch

    node = original.nodes[name]
    value = node.meta.get("val")
    return bool(
        "backward" not in program.op_name(node)
        and any(_floating(original.values.get(a.name)) for a in node.all_input_nodes)
        and isinstance(value, torch.Tensor)
        and value.is_floating_point()
    )


def _floating(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _severity(family: Family) -> tuple:
    worst = min(SEVERITY.index(r.kind) if r.kind in SEVERITY else len(SEVERITY)
                for r in family.roots)  # fmt: skip
    return (not any(r.reaches for r in family.roots), worst)


def _repro(
    family: Family, slug: str, original: program.Original, variant: VariantResult, dtype: str,
    folder: Path, options: Options,
) -> RootRepro:  # fmt: skip
    """The first input strategy whose repro shows the difference run alone, written into its
    folder with what it printed; the last one tried when none does."""
    record = RootRepro(slug, tuple(r.tensor for r in family.roots),
                       str(original.nodes[family.node].target), "", family.gradient)  # fmt: skip
    if why := family.why_not():
        return replace(record, why_not=why)
    try:
        scripts = list(_scripts(family, original, variant, dtype))
    except ReprokitError as error:
        return replace(record, why_not=error.message)
    where = folder / ISSUES / slug
    where.mkdir(parents=True, exist_ok=True)
    for inputs, text, dtypes in scripts:
        ran = run_alone(lambda d, t=text: (d / SCRIPT).write_text(t, "utf-8"), options, where)
        record = replace(record, inputs=inputs, lines=_count(text), returncode=ran.returncode,
                         output=ran.transcript(options.xla_device), why_not="",
                         dtypes=dtypes)  # fmt: skip
        (where / SCRIPT).write_text(text, "utf-8")
        (where / REPRO_OUT).write_text(record.output, "utf-8")
        if record.shows and same_symptom(record, _witnesses(variant, family)):
            return record
        if record.shows:  # another difference of the op (a made input's own overflow)
            record = replace(record, why_not="its repro shows another difference than the model's")
    return record


def _witnesses(variant: VariantResult, family: Family) -> list[tuple[float, float, bool]]:
    """The model's worst elements of the family's roots: CPU's value, XLA's, a gradient's."""
    grads = {r.tensor for r in family.roots if ".bwd." in r.tensor}
    return [(w.reference, w.target, r.tensor in grads)
            for r in family.roots for w in compared(variant, r).worst]  # fmt: skip


def same_symptom(record: RootRepro, model: list[tuple[float, float, bool]]) -> bool:
    """Whether the repro shows the model's difference, not another of the same op: at an
    element it prints, XLA's value is of the class it was in the model (NaN, inf, -inf or a
    number), and where that class is NaN or an infinity, CPU's within 5% of the model's there
    (a made input that overflows elsewhere is another difference). A gradient's CPU values
    depend on the gradient flowing in (ones in the repro), and a number's on the made inputs:
    only XLA's class counts for them. Another dtype or shape, or a model without witnesses,
    is the same by its kind."""
    differing = [s for s in record.seen() if s.differs]
    if not model or any(not s.rows for s in differing):
        return bool(differing)
    for seen in differing:
        gradient = seen.name.endswith(" gradient")
        for _, cpu, _, xla in seen.rows:
            for ours, theirs, of_gradient in model:
                if gradient != of_gradient or _class(float(xla)) != _class(theirs):
                    continue
                if gradient or _class(theirs) == "number" or _near(float(cpu), ours):
                    return True
    return False


def _class(x: float) -> str:
    return "nan" if math.isnan(x) else str(x) if math.isinf(x) else "number"


def _near(a: float, b: float) -> bool:
    return a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 0.05 * abs(b))


def _slugs(original: program.Original, families: list[Family]) -> list[str]:
    """Each family's folder and issue file name: its op and worst kind (softplus_nan_inf),
    numbered from the second of a name (softplus_nan_inf_2)."""
    made: list[str] = []
    seen: dict[str, int] = {}
    for family in families:
        op = program.op_name(original.nodes[family.node])
        kinds = sorted({r.kind for r in family.roots}, key=SEVERITY.index)
        slug = re.sub(r"[^A-Za-z0-9]+", "_", f"{op}_{kinds[0]}").strip("_")
        seen[slug] = seen.get(slug, 0) + 1
        made.append(slug if seen[slug] == 1 else f"{slug}_{seen[slug]}")
    return made


def _count(text: str) -> int:
    return len(text.rstrip("\n").splitlines())


def _scripts(
    family: Family, original: program.Original, variant: VariantResult, dtype: str
) -> Iterable[tuple[str, str, tuple[str, ...]]]:
    """(how the inputs are made, the script, the inputs' dtypes) for each strategy worth
    trying, the plainest first: one only when every input is small enough to write out."""
    lines, reads = _calls(original, family.node)
    values = {n: _cast(original.values[n], dtype) for n in reads}
    at = _witness_index(variant, family)
    tried: set[str] = set()
    values_only = {r.kind for r in family.roots} == {"value"}
    for strategy in STRATEGIES["value" if values_only else "nonfinite"]:
        inputs = [_input(name, value, strategy, at) for name, value in values.items()]
        if strategy == "kept" and not any(i.get("patches") for i in inputs):
            continue  # no NaN or infinity to keep: it would be "random"
        kinds = {i["kind"] for i in inputs}
        said = strategy if kinds - {"literal", "full"} else "constant" if "full" in kinds \
            else "literal"  # fmt: skip
        text = _rendered(original, family, lines, inputs, dtype)
        if text in tried:
            continue
        tried.add(text)
        if _count(text) > MOST_LINES:
            raise ReprokitError(f"the repro of {family.node} needs {_count(text)} lines")
        yield said, text, tuple(i["dtype"] for i in inputs)


def _calls(original: program.Original, name: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The call of ``name`` as template lines, and the nodes it reads (its inputs)."""
    import torch

    node = original.nodes[name]
    for arg in node.all_input_nodes:
        if not isinstance(original.values.get(arg.name), torch.Tensor):
            raise ReprokitError(f"{name} reads {arg.name}, which is not one tensor")
    return [_line(original, name, None)], [a.name for a in node.all_input_nodes]


def _cast(value: Any, dtype: str) -> Any:
    """A recorded value as the run had it: floating tensors in the run's dtype."""
    import torch

    if dtype == "captured" or not _floating(value):
        return value
    return value.to(getattr(torch, dtype))


def _witness_index(variant: VariantResult, family: Family) -> tuple[int, ...] | None:
    """The element that differs most in the family's first root (its comparison's first)."""
    found = compared(variant, family.roots[0])
    return tuple(found.worst[0].index) if found.worst else None


def _input(name: str, value: Any, strategy: str, at: tuple[int, ...] | None) -> dict[str, Any]:
    """One input as the template writes it."""
    from reprokit.tools.minimize.graph.script import _var

    dtype, shape = str(value.dtype).split(".")[1], list(value.shape)
    made = {"var": _var(name), "dtype": dtype, "shape": shape}
    flat = value.flatten()
    if value.numel() <= LITERAL:
        return made | {"kind": "literal", "numbers": flat.tolist()}
    if bool((flat == flat[0]).all()):
        return made | {"kind": "full", "value": flat[0].item()}
    finite = flat[flat.isfinite()] if value.is_floating_point() else flat
    if strategy == "nonfinite" and finite.numel() < flat.numel():
        return made | {"kind": "full", "value": flat[~flat.isfinite()][0].item()}
    if strategy in ("constant", "nonfinite"):
        return made | {"kind": "full", "value": _constant(value, at)}
    if strategy == "kept" and value.is_floating_point():
        patches = _patches(value)
        if patches:
            return _drawn(made, finite) | {"patches": patches}
    low, high = (finite.min().item(), finite.max().item()) if finite.numel() else (0, 0)
    if not value.is_floating_point():
        return made | {"kind": "randint", "low": int(low), "high": int(high) + 1}
    if strategy == "range":
        return made | {"kind": "range", "low": low, "high": high, "numel": value.numel()}
    return _drawn(made, finite)


def _drawn(made: dict[str, Any], finite: Any) -> dict[str, Any]:
    """Seeded random values of the finite values' mean and spread."""
    spread = finite.double()
    mean = _round(spread.mean().item()) if spread.numel() else 0.0
    std = _round(spread.std().item()) if spread.numel() > 1 else 1.0
    return made | {"kind": "randn", "mean": mean, "std": std}


def _patches(value: Any) -> list[dict[str, Any]]:
    """The input's NaN and infinities as (indices, value) per value, when there are at most
    KEPT of them: written back over random values, they keep a masked row's -inf or a NaN
    logit where the model had it."""

    odd = (~value.isfinite()).nonzero()
    if not 0 < len(odd) <= KEPT:
        return []
    patches: dict[str, list[list[int]]] = {}
    for index in odd.tolist():
        patches.setdefault(str(value[tuple(index)].item()), []).append(index)
    return [{"index": tuple(list(axis) for axis in zip(*indices, strict=True)),
             "value": float(number)} for number, indices in patches.items()]  # fmt: skip


def _constant(value: Any, at: tuple[int, ...] | None) -> Any:
    """The value at the element that differs most, where the input is the result's size (an
    elementwise op's); else the median."""
    if at is not None and len(at) == value.dim() and all(map(int.__lt__, at, value.shape)):
        return value[at].item()
    flat = value.flatten()
    flat = flat[flat.isfinite()] if value.is_floating_point() else flat
    return flat.double().median().item() if flat.numel() else 0


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def _rendered(
    original: program.Original, family: Family, lines: list[dict[str, Any]],
    inputs: list[dict[str, Any]], dtype: str,
) -> str:  # fmt: skip
    """The template with the family's call, compile()-checked."""
    from reprokit.tools.minimize.graph.script import _var

    node = original.nodes[family.node]
    leaf = next((i["var"] for i in inputs if i["dtype"].startswith(("float", "bfloat"))), None)
    said = program.op_name(node)
    returns = getattr(getattr(node.target, "_schema", None), "returns", ())
    named = [r.name or str(i) for i, r in enumerate(returns)]
    results = [{"said": f"{said}.{named[i] if i < len(named) else i}", "index": i}
               for i in family.items]  # fmt: skip
    shown = dtype if dtype != "captured" else (inputs[0]["dtype"] if inputs else "")
    context = {
        "title": f"torch_xla: {shown} aten.{said} on XLA against CPU and float64",
        "inputs": inputs,
        "lines": [_run_dtype(line, dtype) for line in lines],
        "result": _var(family.node),
        "said": said,
        "results": results or [{"said": said, "index": None}],
        "grad": {"leaf": leaf} if family.gradient and leaf else None,
        "layout": any(r.kind in ("dtype", "shape") for r in family.roots),
    }
    found = tuple(template_dirs())
    script = environment(found).get_template(TEMPLATE).render(context)
    compile(script, SCRIPT, "exec")
    return script


def _run_dtype(line: dict[str, Any], dtype: str) -> dict[str, Any]:
    """A floating dtype the call names, as the run had it: the run's dtype where it cast."""
    if dtype == "captured":
        return line

    def swap(a: Any) -> Any:
        if isinstance(a, dict) and a.get("k") == "fdtype":
            return {"k": "torch", "v": dtype}
        if isinstance(a, dict) and a.get("k") == "list":
            return a | {"v": [swap(x) for x in a["v"]]}
        return a

    swapped: Callable[[list], list] = lambda xs: [swap(x) for x in xs]  # noqa: E731
    kwargs = [k | {"value": swap(k["value"])} for k in line.get("kwargs", [])]
    return line | {"args": swapped(line["args"]), "kwargs": kwargs}
