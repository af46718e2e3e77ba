"""Sharding invariance, in the worker: one sample run on XLA under SPMD with its tensor
arguments sharded on a mesh of devices, against the same sample unsharded in the same process
(and float64 on CPU as the arbiter). A result must not depend on how its inputs are laid out.

The specs: reprokit/tools/ops/mesh.py.
"""

from __future__ import annotations

import re
import time
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

import reprokit.tools.ops.worker.explain as explain
import reprokit.tools.ops.worker.judge as judge
from reprokit.tools.ops.mesh import AXES, CONTROL, placements


def mesh_of(shape: tuple[int, ...]) -> Any:
    import numpy as np
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    return xs.Mesh(np.arange(xr.global_runtime_device_count()), shape, tuple(AXES[: len(shape)]))


def judge_sharded(
    op: Any,
    sample: Any,
    dtype: torch.dtype,
    spec: str,
    mesh: Any,
    *,
    grad: bool = False,
    fallbacks: Any,
    inplace: bool = False,
) -> dict[str, Any]:
    """The verdict of one sample under ``spec`` (``grad``: of its arguments' gradients;
    ``inplace``: of the op's in-place variant, which writes into its laid-out input):
    ``match`` (the same as unsharded XLA, or within float64's rounding rule of it: sums
    reassociated across shards are precision, not a bug), ``differs`` (its kind and detail, in
    sharded and unsharded words) or ``skip``; with its seconds, as judge.judge's."""
    begun = time.monotonic()
    try:
        found = _judged(op, sample, dtype, (spec, mesh), (grad, inplace), fallbacks)
    except judge.Skip as why:
        found = {"verdict": "skip", "reason": str(why)}
    return found | {"seconds": round(time.monotonic() - begun, 4)}


def _judged(op: Any, sample: Any, dtype: torch.dtype, on: tuple, passed: tuple, fallbacks: Any):
    (spec, mesh), (grad, inplace) = on, passed
    leaves, tree = tree_flatten((sample.input, tuple(sample.args)))
    sharded, view = _placements(spec, leaves)
    call = judge.call_for(op, sample, inplace=inplace)
    kwargs = judge.move(sample, "xla")[2]

    def laid_out(marked: bool, seed: int = 0) -> list[Any]:
        """The op's results (``grad``: its arguments' gradients, as judge.evaluate's) with its
        arguments laid out by ``spec``, sharded or not: the unsharded control takes the same
        view (as_strided reads a slice's storage on XLA, sharded or not: no sharding's doing)."""
        given = [t.detach().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                 for t in leaves]  # fmt: skip
        moved = [_placed(t, p, view, mesh if marked else None) if p else _moved(t)
                 for t, p in zip(given, sharded, strict=True)]  # fmt: skip
        input_, args = tree_unflatten(moved, tree)
        laid = _first_laid(moved, sharded) if marked and not view else None
        _seeded(seed)  # the same random numbers unsharded and sharded
        with torch.enable_grad() if grad else torch.no_grad():
            out = call(input_, *args, **kwargs)
            if grad:
                ins = [m for m, t in zip(moved, given, strict=True) if judge._needs_grad(t)]
                out = judge.gradients(out, ins, dtype)
        outs = tree_leaves(out)
        results = [judge._on_cpu(leaf) for leaf in judge._fetched(outs)]
        if marked:
            ran.append((laid, outs))  # the results' shardings exist once run
        return results

    ran: list[tuple[Any, list[Any]]] = []  # the sharded call's first argument and its results
    try:
        plain = laid_out(False)
    except judge.Skip:
        raise
    except Exception as exc:  # the plain sweep's finding, not sharding's
        raise judge.Skip(f"unsharded XLA raises {type(exc).__name__}") from None
    if fell := fallbacks():  # as the plain sweep: an op XLA does not lower is not judged
        raise judge.Skip(f"CPU fallback ({', '.join(sorted(fell))})")
    try:
        found = laid_out(True)
    except Exception as exc:  # the partitioner's refusal where unsharded runs: the finding
        return judge._differs("error", f"sharded {spec}: {judge._first_line(exc)}")
    if len(found) != len(plain):
        return judge._differs("shape", f"{len(found)} results sharded, {len(plain)} unsharded")
    laid = "" if grad or view or not _elementwise(op) else _layout(*ran[0])
    layout = {"layout": laid} if laid else {}
    if judge._identical(plain, found):
        return {"verdict": "match"} | layout
    run = judge._runner(op, sample, dtype, grad=grad, inplace=inplace)
    verdict = _against_unsharded(op, sample, run, (plain, found), spec, grad=grad)
    if verdict["verdict"] == "differs" and not judge._identical(plain, laid_out(False, seed=1)):
        raise judge.Skip("random: unsharded XLA gives other values for another seed")
    return verdict | layout


def _placements(spec: str, leaves: list[Any]) -> tuple[list[Any], str]:
    """Each argument's placements under ``spec`` (None: left unsharded) and the spec's view;
    a sample the spec cannot lay out is a skip."""
    sharded = [placements(spec, t.dim()) if _shardable(t) else None for t in leaves]
    if spec != CONTROL and not any(sharded):
        raise judge.Skip(f"no tensor argument has the dims of {spec.split('/')[0]}")
    view = spec.partition("/")[2]
    if view == "transpose" and not any(p and len(p) >= 2 for p in sharded):
        raise judge.Skip("no sharded argument of rank 2 or more to transpose")
    return sharded, view


def _seeded(seed: int) -> None:
    import torch_xla

    torch.manual_seed(seed)
    torch_xla.manual_seed(seed)  # XLA's own generator: torch.manual_seed leaves it


def _elementwise(op: Any) -> bool:
    """An op whose result is laid out as its input is: OpInfo's unary and binary ufuncs."""
    from torch.testing._internal.opinfo.core import BinaryUfuncInfo, UnaryUfuncInfo

    return isinstance(op, UnaryUfuncInfo | BinaryUfuncInfo)


def _layout(laid: tuple[str, Any] | None, outs: list[Any]) -> str:
    """How the results of the first sharded argument's shape are laid out against the sharding
    it had (``laid``: its spec and shape, taken before the call, which an in-place variant
    writes into): "kept", "input's -> result's" in XLA's words where one is not ("{devices=
    [2,1,2]0,1,2,3 ...} -> {replicated}": each device holds the whole result, memory and not a
    wrong value), or "" where no result has that shape or nothing was sharded."""
    import torch_xla

    spec_of = torch_xla._XLAC._get_xla_sharding_spec
    if laid is None or laid[0] in ("", "{replicated}"):
        return ""
    want, shape = laid
    like = [o for o in outs if isinstance(o, torch.Tensor) and o.is_xla and o.shape == shape]
    lost = [got for o in like if (got := spec_of(o)) != want]
    return f"{want} -> {lost[0] or 'none'}" if lost else "kept" if like else ""


def _first_laid(moved: list[Any], sharded: list[Any]) -> tuple[str, Any] | None:
    """The first sharded argument's spec and shape, as mark_sharding left them."""
    import torch_xla

    first = next((t for t, p in zip(moved, sharded, strict=True) if p), None)
    return None if first is None else (torch_xla._XLAC._get_xla_sharding_spec(first), first.shape)


def _against_unsharded(op, sample, run, results, spec, *, grad: bool) -> dict[str, Any]:
    """Sharded against unsharded, float64 the arbiter (the sweep's own per-result rule); an
    edge sample's +-max mixed by a reduction depends on the order of its additions, which
    sharding changes: order, not a bug (as in the plain sweep, explain.mixed)."""
    try:
        ref = run("cpu", f64=True)
    except Exception:  # whatever torch's float64 kernel refuses: judged without an arbiter
        ref = None
    plain, found = results
    ties = judge._index_op(op.name) and judge._ties(sample)
    for k, (u, s) in enumerate(zip(plain, found, strict=True)):
        f = ref[k] if ref is not None and len(ref) == len(plain) else None
        if isinstance(f, torch.Tensor) and isinstance(u, torch.Tensor) and f.shape != u.shape:
            raise judge.Skip("unsharded XLA's shape is not CPU's: the plain sweep's finding")
        verdict = judge._leaf(k, u, s, f, sample, ties=ties)
        if verdict is None or verdict["verdict"] != "differs":
            continue
        if verdict["kind"] in ("value", "nan-inf") and explain.mixed(op, sample, run, grad=grad):
            raise judge.Skip("edge values mixed by a reduction: order-dependent across shards")
        return verdict | {"detail": f"sharded {spec}: {_words(verdict['detail'])}", "leaf": k}
    return {"verdict": "match", "note": "within float64's rounding rule of unsharded XLA"}


def _words(detail: str) -> str:
    """judge's detail in this comparison's words: its target is the sharded run and its
    reference the unsharded one (judge names them the backend and CPU; rewriting its few fixed
    words keeps judge's sentences in one place)."""
    detail = re.sub(r"\b(on )?the backend\b|\bbackend\b", "sharded", detail)
    return re.sub(r"\b(on )?CPU\b|\bcpu\b", "unsharded", detail)


def _shardable(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() > 0 and value.numel() > 1


def _moved(value: Any) -> Any:
    return value.to("xla") if isinstance(value, torch.Tensor) else value


def _placed(t: torch.Tensor, placed: tuple[Any, ...], view: str, mesh: Any) -> torch.Tensor:
    """``t`` on XLA laid out for ``placed``, as itself or as ``view`` of a larger tensor; sharded
    so on ``mesh``, or left unsharded where ``mesh`` is None (the control)."""
    import torch_xla.distributed.spmd as xs

    def marked(whole: torch.Tensor) -> torch.Tensor:
        if mesh is not None:
            xs.mark_sharding(whole, mesh, placed)
        return whole

    if view == "transpose" and t.dim() >= 2:
        return marked(t.transpose(0, -1).contiguous().to("xla")).transpose(0, -1)
    if view == "slice":
        d = next(i for i, p in enumerate(placed) if p is not None)
        edge = t.narrow(d, 0, 1)
        return marked(torch.cat([edge, t, edge], dim=d).to("xla")).narrow(d, 1, t.shape[d])
    return marked(t.to("xla"))
