# ruff: noqa: E501 - the templates are the repro's own lines, which may be long
"""A group's repro: ``repro_<id>.py``, torch and torch_xla only, at most 25 lines, that runs
the witness sample on CPU, on XLA and in float64 on CPU, prints where they part and exits 1
when XLA differs (a crash repro dies as the sweep's worker died). Written from the witness's
source (worker.code_of), without torch; checked by running it alone (minimize's ``alone``)."""

from __future__ import annotations

import ast
import math
from typing import Any

from reprokit.infra.python_source import parse_python
from reprokit.records.ops import FORMS
from reprokit.tools.ops.mesh import AXES, placements

MOST_LINES = 25
# torch.testing's tolerances per dtype: within them of CPU an element is no divergence (the
# sweep's comparison counts elements so); the fp64 rule's own is 1e-4
TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
}

_HEAD = """\
# {title}. reprokit ops: OpInfo {name}, {dtype}, {which}; exit 1: XLA differs
import torch
import torch_xla  # noqa: F401
from torch.utils._pytree import tree_leaves, tree_map
"""

_RUN = """\
def run(device, f64=False):  # the op's result {leaf}on device (f64: float types as float64)
    wide = lambda d: torch.float64 if f64 and d in (torch.float16, torch.bfloat16, torch.float32) else d
    to = lambda v: v.detach().to(device, wide(v.dtype), copy=True) if isinstance(v, torch.Tensor) else wide(v) if isinstance(v, torch.dtype) else v
    a, k = tree_map(to, A), dict(tree_map(to, K), **({{"device": device}} if "device" in K else {{}}))
"""

_FORWARD = """\
    out = tree_leaves({call}(*a, **k))[{leaf}]
    return out.cpu() if isinstance(out, torch.Tensor) else torch.tensor(out)
"""

# each result's incoming gradient, as the worker makes it (worker/judge.py's cotangent)
_COTANGENTS = "[torch.randn(o.shape, generator=torch.Generator().manual_seed(j)).to({dtype}).to(o) for j, o in enumerate(outs)]"

_BACKWARD = """\
    ins = [tree_leaves(a)[i].requires_grad_() for i in {grads}]
    outs = [o for o in tree_leaves({call}(*a, **k)) if isinstance(o, torch.Tensor) and o.requires_grad]
    g = {cotangents}
    return torch.autograd.grad(outs, ins, g, allow_unused=True)[{leaf}].cpu()  # d(outs . g)/d input
"""

_JUDGE = """\
xla, cpu, ref = run("xla"), run("cpu"), run("cpu", f64=True)  # XLA first: its runtime up before autograd's first backward
if (xla.dtype, xla.shape) != (cpu.dtype, cpu.shape) or not (cpu.is_floating_point() or cpu.is_complex()):
    same = (xla.dtype, xla.shape) == (cpu.dtype, cpu.shape) and torch.equal(xla, cpu)
    raise SystemExit(print(f"{{'XLA matches' if same else 'XLA DIFFERS'}}: xla {{xla.dtype}}{{list(xla.shape)}} {{xla.flatten()[:8].tolist()}}, cpu {{cpu.dtype}}{{list(cpu.shape)}} {{cpu.flatten()[:8].tolist()}}") or int(not same))
flat = lambda t: (torch.view_as_real(t.resolve_conj()) if t.is_complex() else t).flatten().double()  # complex: both parts
x, c, r = (flat(t) for t in (xla, cpu, torch.where(ref.to(cpu.dtype).isinf() & ref.isfinite(), ref.to(cpu.dtype).to(ref.dtype), ref)))
def err(t): return torch.where((t == r) | (x.isnan() & c.isnan()), 0, t - r).pow(2).mean().sqrt().item()
gap = torch.where((x == r) | (x.isnan() & r.isnan()), 0.0, (x - r).abs()).nan_to_num(float("inf"))
print("\\n".join(f"[{{i}}] xla {{x[i].item():.6g}}  cpu {{c[i].item():.6g}}  float64 {{r[i].item():.6g}}" for i in gap.topk(min(3, gap.numel())).indices.tolist()))
bound, odd = (3 if cpu.dtype in (torch.float16, torch.bfloat16) or cpu.numel() < 1000 else 2) * err(c) + 1e-5, ((x.isnan() != c.isnan()) | (x.isinf() != c.isinf())).sum().item()
print(f"RMSE vs float64: xla {{err(x):.3g}}, cpu {{err(c):.3g}} (bound {{bound:.3g}}); NaN/inf not on CPU: {{odd}}")
raise SystemExit(print("XLA DIFFERS") or 1 if odd or not (torch.allclose(x, c, {rtol}, {atol}, equal_nan=True) or err(x) <= bound) else 0)
"""

_ERROR = """\
try:  # XLA first: its runtime up before autograd's first backward
    xla = run("xla")
except Exception as e:  # noqa: BLE001
    cpu = run("cpu")
    raise SystemExit(print(f"XLA DIFFERS: CPU gives {{cpu.dtype}}{{list(cpu.shape)}}, XLA raises {{type(e).__name__}}: {{str(e).strip()[:300]}}") or 1) from None
print(f"XLA matches: {{xla.dtype}}{{list(xla.shape)}}, no error")
"""

_CRASH = """\
print("XLA (the sweep saw it {died}):", flush=True)
xla = run("xla")
print(f"XLA gives {{xla.dtype}}{{list(xla.shape)}}: it did not {died}")
"""


_SHARDED_HEAD = """\
# {title}. reprokit ops --mesh {mesh}: OpInfo {name}, {dtype}, {which}; exit 1: sharded XLA differs from unsharded
import os, sys, traceback
os.environ.setdefault("PJRT_DEVICE", "CPU"), os.environ.setdefault("CPU_NUM_DEVICES", "{devices}")  # XLA:CPU's virtual devices
import numpy as np, torch, torch_xla.distributed.spmd as xs, torch_xla.runtime as xr
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten
xr.use_spmd()
mesh = xs.Mesh(np.arange(xr.global_runtime_device_count()), {shape}, {axes})
"""

_SHARD = """\
SPEC = {spec}  # per tensor rank, how it is sharded{view_note}
to = lambda v: v.to("xla") if isinstance(v, torch.Tensor) else v
def lay(t, on):  # t on XLA laid out by SPEC, sharded if on (unsharded: the same layout)
    p = SPEC.get(t.dim()) if isinstance(t, torch.Tensor) and t.numel() > 1 else None
    if p is None: return to(t)
"""

_PLACE = {  # how lay() lays t out: as itself, or as a view of a larger sharded tensor
    "": """\
    w = t.to("xla")
    if on: xs.mark_sharding(w, mesh, p)
    return w
""",
    "slice": """\
    d = next(i for i, q in enumerate(p) if q)  # the split dim: one element more at each end
    w = torch.cat([t.narrow(d, 0, 1), t, t.narrow(d, 0, 1)], d).to("xla")
    if on: xs.mark_sharding(w, mesh, p)
    return w.narrow(d, 1, t.shape[d])
""",
    "transpose": """\
    w = t.transpose(0, -1).contiguous().to("xla")
    if on: xs.mark_sharding(w, mesh, p)
    return w.transpose(0, -1)
""",
}

_SHARDED_FORWARD = """\
def run(sharded):  # the op's result {note}on XLA, its tensor arguments sharded or not
    out = tree_leaves({call}(*tree_map(lambda t: lay(t, sharded), A), **tree_map(to, K)))[{leaf}]
    return out.cpu() if isinstance(out, torch.Tensor) else torch.tensor(out)
"""

_SHARDED_BACKWARD = """\
def run(sharded):  # d(outs . g)/d(grad input {leaf}) on XLA, g fixed random, its tensor arguments sharded or not
    flat, tree = tree_flatten(A)
    a = [lay(t.detach().requires_grad_() if i in {grads} else t, sharded) for i, t in enumerate(flat)]
    outs = [o for o in tree_leaves({call}(*tree_unflatten(a, tree), **tree_map(to, K))) if isinstance(o, torch.Tensor) and o.requires_grad]
    return torch.autograd.grad(outs, [a[i] for i in {grads}], {cotangents}, allow_unused=True)[{leaf}].cpu()
"""

_SHARDED_JUDGE = """\
show = lambda t: f"{{t.dtype}}{{list(t.shape)}} {{t.flatten()[:6].tolist()}}"
sys.excepthook = lambda *e: (traceback.print_exception(*e), sys.stdout.flush(), os._exit(2))  # the repro failing in itself: exit 2, not 1
print("unsharded:", show(plain := run(False)), flush=True)
try:
    sharded = run(True)
except Exception as e:  # noqa: BLE001
    raise SystemExit(print(f"SHARDED XLA DIFFERS: it raises {{type(e).__name__}}: {{str(e).strip()[:300]}}") or 1) from None
same = (sharded.dtype, sharded.shape) == (plain.dtype, plain.shape) and torch.allclose(sharded.double(), plain.double(), {rtol}, {atol}, equal_nan=True)
raise SystemExit(print(f"sharded:   {{show(sharded)}}\\n" + ("sharded XLA matches" if same else "SHARDED XLA DIFFERS")) or int(not same))
"""


def _sharded_text(group: Any, code: dict[str, Any], call: str | None, saved: str | None) -> str:
    """A sharded group's repro (--mesh): the witness on XLA under SPMD, unsharded and then with
    its tensor arguments sharded as the sweep did (tools/ops/mesh.py); exit 1 where the sharded
    result differs or raises (a partitioner's abort kills it, as it killed the worker)."""
    witness = group.witness
    mesh = tuple(witness.get("mesh") or (2, 2))
    which = f"{'edge' if witness.get('edge') else 'OpInfo'} sample {witness['sample']}"
    passed = ", gradient" if group.grad else ", in-place variant" if group.inplace else ""
    which += f"{passed} sharded {group.shard}"
    found, call = _lookup(group, call, saved)
    text = _SHARDED_HEAD.format(
        title=title(group),
        mesh="x".join(map(str, mesh)),
        name=_name(group),
        dtype=witness["dtype"],
        which=which,
        devices=math.prod(mesh),
        shape=mesh,
        axes=tuple(AXES[: len(mesh)]),
    )
    text += found
    text += f"A, K = {code['A']}, {code['K']}  # the sample's arguments\n"
    ranks = {r: p for r in range(1, 7) if (p := placements(group.shard, r)) and any(p)}
    view = group.shard.partition("/")[2]
    reaches = f"; each reaches the op as a {view} of a sharded tensor" if view else ""
    text += _SHARD.format(spec=ranks, view_note=reaches) + _PLACE[view]
    leaf = code.get("leaf", 0)
    note = f"{leaf} " if leaf else ""
    if group.grad:
        cotangents = _COTANGENTS.format(dtype=f"torch.{witness['dtype']}")
        text += _SHARDED_BACKWARD.format(
            call=call, leaf=leaf, grads=code["G"], cotangents=cotangents
        )
    else:
        text += _SHARDED_FORWARD.format(call=call, leaf=leaf, note=note)
    rtol, atol = TOLERANCES.get(witness["dtype"], (1e-4, 1e-4))
    return text + _SHARDED_JUDGE.format(rtol=max(rtol, 1e-4), atol=max(atol, 1e-4))


def title(group: Any) -> str:
    """The one-line title of a group: what a maintainer reads first."""
    variant = f" ({group.variant})" if group.variant else ""
    if group.kind == "stale-graph":  # any dtype: the hash, not the arithmetic
        arg, passed = group.witness.get("arg") or "argument", "in-place " if group.inplace else ""
        return (
            f"{passed}{group.op}{variant} on XLA: a second call with another {arg} returns the "
            "first call's result (compiled graph reused)"
        )
    if getattr(group, "shard", ""):  # against itself unsharded, not CPU
        what = {"value": "other values", "nan-inf": "NaN/inf", "error": "raises",
                "crash": "kills the process", "hang": "hangs"}.get(group.kind, f"another {group.kind}")  # fmt: skip
        shard = f"{group.shard} on a {'x'.join(map(str, group.witness.get('mesh') or ()))} mesh"
        more = len(getattr(group, "shards", ())) - 1
        shard += f" (and {more} other sharding{'s' * (more > 1)})" if more > 0 else ""
        grad = "gradient of " if group.grad else ""
        return f"{'/'.join(group.dtypes)} {grad}{group.op}{variant} on XLA sharded {shard}: {what} than unsharded"
    what = {
        "value": "values far from float64",
        "nan-inf": "NaN/inf where CPU and float64 have none",
        "dtype": "another dtype than CPU",
        "shape": "another shape than CPU",
        "error": "raises where CPU does not",
        "crash": "kills the process",
        "hang": "hangs",
    }[group.kind]
    passed = "gradient of " if group.grad else "in-place " if group.inplace else ""
    trigger = getattr(group, "trigger", None) or {}
    when = f" when {trigger['condition']}" if _confirmed(trigger) else ""
    form = getattr(group, "form", "")
    called = f" (called with {FORMS[form]})" if form in FORMS else ""
    return f"{'/'.join(group.dtypes)} {passed}{group.op}{variant}{called} on XLA: {what}{when}"


def _confirmed(trigger: dict[str, Any]) -> bool:
    """The trigger splits the sweep's samples exactly and new samples confirm it: a title
    may state it (the report states every other one with its counts)."""
    d, a = trigger.get("differs", [0, 1]), trigger.get("agrees", [0, 1])
    exact = trigger.get("condition") and d[0] == d[1] and a[0] == a[1]
    return bool(exact and trigger.get("confirmed") and not trigger.get("refuted"))


def repro_text(group: Any, code: dict[str, Any], call: str | None, saved: str | None) -> str:
    """The repro of ``group`` from its witness's source ``code``; ``call``: how to name the
    op (None: through OpInfo's database, which needs expecttest); ``saved``: the .pt file of
    its large tensors, beside it."""
    witness = group.witness
    if group.kind == "stale-graph":
        return _stale_text(group, code, call, saved)
    if group.shard:
        return _sharded_text(group, code, call, saved)
    which = f"{'edge' if witness.get('edge') else 'OpInfo'} sample {witness['sample']}"
    which += ", gradient" if group.grad else ", in-place variant" if group.inplace else ""
    text, call = _head(group, which, call, saved)
    text += f"A, K = {code['A']}, {code['K']}  # the sample's arguments\n"
    leaf = code.get("leaf", 0)
    text += _RUN.format(leaf=f"{leaf} " if leaf else "")
    if group.grad:
        cotangents = _COTANGENTS.format(dtype=f"torch.{witness['dtype']}")
        body = _BACKWARD.format(call=call, grads=code["G"], cotangents=cotangents, leaf=leaf)
    else:
        body = _FORWARD.format(call=call, leaf=leaf)
    text += body
    if group.kind in ("crash", "hang"):
        text += _CRASH.format(died="crash" if group.kind == "crash" else "hang")
    elif group.kind == "error":
        text += _ERROR.format()
    else:
        rtol, atol = TOLERANCES.get(witness["dtype"], (1e-4, 1e-4))
        text += _JUDGE.format(rtol=max(rtol, 1e-4), atol=max(atol, 1e-4))
    return text


_STALE = """\
A0, K0 = {A0}, {K0}  # the first call's arguments
A, K = {A}, {K}  # the second call's: the tensors' shapes the same, another {arg}
def run(device, A, K):  # the op's result {note}on device
    to = lambda v: v.detach().to(device, copy=True) if isinstance(v, torch.Tensor) else v
    a, k = tree_map(to, A), dict(tree_map(to, K), **({{"device": device}} if "device" in K else {{}}))
    out = tree_leaves({call}(*a, **k))[{leaf}]
    return out.cpu() if isinstance(out, torch.Tensor) else torch.tensor(out)
show = lambda t: f"{{t.dtype}}{{list(t.shape)}} {{t.flatten()[:6].tolist()}}"
first = run("xla", A0, K0)  # XLA compiles a graph for these shapes
xla, cpu = run("xla", A, K), run("cpu", A, K)  # the same shapes, another {arg}
print(f"first call:  xla {{show(first)}}, cpu {{show(run('cpu', A0, K0))}}")
print(f"second call: xla {{show(xla)}}, cpu {{show(cpu)}}")
same = xla.shape == cpu.shape and torch.allclose(xla.double(), cpu.double(), {rtol}, {atol}, equal_nan=True)
raise SystemExit(print("XLA matches" if same else "XLA DIFFERS: the second call got the first call's graph") or int(not same))
"""


def _head(group: Any, which: str, call: str | None, saved: str | None) -> tuple[str, str]:
    """The repro's first lines (its title and imports, then :func:`_lookup`'s), and how to
    name the op."""
    text = _HEAD.format(
        title=title(group), name=_name(group), dtype=group.witness["dtype"], which=which
    )
    found, call = _lookup(group, call, saved)
    return text + found, call


def _lookup(group: Any, call: str | None, saved: str | None) -> tuple[str, str]:
    """The lines that follow a repro's imports: the op looked up in OpInfo's database when
    ``call`` is None, the saved tensors read; and how to name the op."""
    text = ""
    if call is None:
        text += "from torch.testing._internal.common_methods_invocations import op_db\n"
        find = f"o.name == {group.op!r} and o.variant_test_name == {group.variant!r}"
        fn = "inplace_variant" if group.inplace else "op"
        text += f"OP = next(o.{fn} for o in op_db if {find})\n"
        call = "OP"
    if call.startswith("operator."):  # the op's operator form: operator.rshift is x >> y
        text += "import operator\n"
    if call.startswith("torch.testing._internal."):  # a helper OpInfo defines (max_pool2d_backward)
        text += f"import {call.rpartition('.')[0]}\n"
    if saved:  # beside the script, wherever it is run from
        text += (
            f'T = torch.load(__file__.rpartition("/")[0] + "/" * ("/" in __file__) + "{saved}")\n'
        )
    return text, call


def _name(group: Any) -> str:
    return f"{group.op!r}" + (f" variant {group.variant!r}" if group.variant else "")


def _stale_text(group: Any, code: dict[str, Any], call: str | None, saved: str | None) -> str:
    """A stale graph's repro: the pair's two calls in a row on XLA (``code``: the source of
    both, ``A0``/``K0`` and ``A``/``K``), the second's result against CPU's; exit 1 when it
    differs. It reproduces alone by construction: the first call is in it."""
    witness, arg = group.witness, group.witness.get("arg") or "argument"
    first = (witness.get("stale") or {}).get("after", {}).get("sample")
    which = f"OpInfo sample {first}, then sample {witness['sample']}"
    if witness.get("base") is not None:  # a probe: the sample with one argument changed
        which = f"OpInfo sample {first}, then sample {witness['base']} with another {arg}"
    which += ", in-place variant" if group.inplace else ""
    text, call = _head(group, which, call, saved)
    leaf = code.get("leaf", 0)
    rtol, atol = TOLERANCES.get(witness["dtype"], (1e-4, 1e-4))
    return text + _STALE.format(
        A0=code["A0"],
        K0=code["K0"],
        A=_shared(code["A"], code["A0"], "A0"),
        K=_shared(code["K"], code["K0"], "K0"),
        arg=arg,
        leaf=leaf,
        note=f"{leaf} " if leaf else "",
        call=call,
        rtol=max(rtol, 1e-4),
        atol=max(atol, 1e-4),
    )


TENSORS = ("torch.tensor(", "torch.zeros(", "T[")  # how a sample's tensor is written


def _shared(second: str, first: str, name: str) -> str:
    """The second call's arguments' source with each tensor the first call passes too, in the
    same place, written as the first's (``A0[0]``): the pair's one difference stands out."""
    ours, theirs = (_expression(text) for text in (second, first))
    if isinstance(ours, ast.List) and isinstance(theirs, ast.List):
        places = list(zip(range(len(ours.elts)), ours.elts, theirs.elts, strict=False))
    elif isinstance(ours, ast.Dict) and isinstance(theirs, ast.Dict):
        keys = [ast.literal_eval(k) if k is not None else None for k in theirs.keys]
        mine = [ast.literal_eval(k) if k is not None else None for k in ours.keys]
        places = [
            (k, v, theirs.values[keys.index(k)])
            for k, v in zip(mine, ours.values, strict=True)
            if k in keys
        ]
    else:
        return second
    parts, last = [], 0
    for where, node, other in places:
        text = ast.get_source_segment(second, node) or ""
        if text.startswith(TENSORS) and text == ast.get_source_segment(first, other):
            parts += [second[last : _offset(second, node)], f"{name}[{where!r}]"]
            last = _offset(second, node) + len(text)
    return "".join(parts) + second[last:]


def _expression(text: str) -> ast.AST | None:
    """The one expression ``text`` is (parsed under reprokit's one lock), else None."""
    body = parse_python(text).body
    return body[0].value if len(body) == 1 and isinstance(body[0], ast.Expr) else None


def _offset(text: str, node: ast.AST) -> int:
    line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    return line_starts[node.lineno - 1] + node.col_offset


def lines(text: str) -> int:
    return len(text.rstrip("\n").splitlines())
