"""Divergences as groups, not rows: one per (op, variant, backend, kind, forward or backward),
with the dtypes it shows in and its smallest witness; each group's repro written into the
sweep's folder and run alone (in a folder of its own, only PATH, HOME and XLA's device set,
forked warm as a stage is), its answer cached. Torch-free."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import reprokit.tools.ops.repro as repro
from reprokit.infra.caching import Store, file_digest
from reprokit.records import Status
from reprokit.records.folder import SCRIPT
from reprokit.records.ops import Group
from reprokit.runner.backends import stage_env
from reprokit.runner.options import Options
from reprokit.runner.processes.stage import Launch
from reprokit.runner.processes.warm import WarmExecutor

DTYPE_ORDER = (
    "float32",
    "bfloat16",
    "float16",
    "float64",
    "complex64",
    "complex128",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
)
ALONE_TIMEOUT = 180.0  # seconds a repro may take alone (a hang's is killed at that)
# The reports of docs/examples that OpInfo groups can be: op, or "op (variant)" before it, ->
# ((report, grad or None: either, the kinds of its groups or None: any), ...), the first that
# fits; a report whose name starts with fp16 is of half types' values (value, nan-inf) only
_HALF = ("value", "nan-inf")
_ZERO_SIZE_DIM = ("cumsum_cumprod_zero_size_dim.md", False, ("error",))
_DIAGONAL = ("diagonal_default_dims.md", False, ("value",))
_NORM_OVERFLOW = ("fp16_vector_norm_overflow.md", None, ("nan-inf",))
_SVDVALS = ("svdvals_batch_dims.md", False, ("value", "shape", "error"))
_AMAX = ("amax_amin_infinite_slice.md", False, ("nan-inf",))
_ARGMAX = ("argmax_argmin_nan.md", False, ("value",))
_SCALE_FACTOR = ("bilinear_upsample_8897.md", False, ("value",))
_MEAN_COUNT = ("fp16_mean_count.md", None, None)
_VECTOR_NORM = ("fp16_vector_norm_overflow.md", None, None)
_ADDCMUL = ("fp16_addcmul_adam.md", False, None)
_ELU = ("elu_backward.md", True, None)
_CLIP = ("clip_grad_boundaries.md", True, None)
_DIVISOR = ("avg_pool_divisor_override.md", False, ("value",))
_CLAMP_BROADCAST = ("clamp_min_broadcast.md", False, ("error",))
_REMAINDER = ("remainder_inf_divisor.md", False, ("nan-inf",))
_LOGSUMEXP = ("logsumexp_neg_inf.md", False, ("nan-inf",))
KNOWN: dict[str, tuple[tuple[str, bool | None, tuple[str, ...] | None], ...]] = {
    "nn.functional.softplus": (("fp16_softplus_overflow.md", None, None),),
    "mean": (_MEAN_COUNT,),
    "nn.functional.adaptive_avg_pool2d": (("fp16_mean_count.md", False, None),),
    "cumsum": (("cumsum_bool_int32.md", False, ("dtype",)), _ZERO_SIZE_DIM),
    "cumprod": (_ZERO_SIZE_DIM,),
    "masked.cumsum": (_ZERO_SIZE_DIM,),
    "masked.cumprod": (_ZERO_SIZE_DIM,),
    "clamp": (("clamp_omitted_bound.md", False, ("value", "nan-inf")),),
    "linalg.vector_norm": (_VECTOR_NORM,),
    "nn.functional.normalize": (_VECTOR_NORM,),
    "masked.normalize": (_NORM_OVERFLOW,),
    "linalg.norm": (_NORM_OVERFLOW,),
    "dist": (_NORM_OVERFLOW,),
    "norm": (_NORM_OVERFLOW,),
    "norm (inf)": (_NORM_OVERFLOW, ("norm_inf_is_one.md", False, ("value",))),
    "norm (nuc)": (_SVDVALS,),
    "addcmul": (_ADDCMUL,),
    "baddbmm": (_ADDCMUL,),
    "nn.functional.elu": (_ELU,),
    "nn.functional.celu": (_ELU,),
    "nn.functional.selu": (_ELU,),
    "nn.functional.gelu": (("fp16_gelu_tanh_backward.md", True, None),),
    "nn.functional.layer_norm": (("fp16_layer_norm_3658.md", False, None),),
    "std": (_MEAN_COUNT,),
    "var": (_MEAN_COUNT,),
    "std_mean": (_MEAN_COUNT,),
    "var_mean": (_MEAN_COUNT,),
    "nn.functional.hardtanh": (_CLIP,),
    "nn.functional.relu6": (_CLIP,),
    "roll": (("roll_empty_sigfpe.md", None, ("crash",)),),  # a gradient sample: in its forward
    "nn.functional.nll_loss": (("nll_loss_0d_target_segfault.md", None, ("crash",)),),
    # written from the sweep itself
    "diagonal": (_DIAGONAL,),
    "diagonal_copy": (_DIAGONAL,),
    "diagonal_scatter": (_DIAGONAL,),
    "linalg.diagonal": (_DIAGONAL,),
    "nn.functional.avg_pool2d": (_DIVISOR,),
    "nn.functional.avg_pool3d": (_DIVISOR,),
    "_chunk_cat": (("chunk_cat_nonzero_dim.md", False, ("value",)),),
    "nn.functional.logsigmoid": (("logsigmoid_neg_inf.md", False, ("nan-inf",)),),
    "nn.functional.pad": (("pad_negative_replicate_reflect.md", False, ("error",)),),
    "cdist": (("cdist_batch_broadcast.md", False, ("error",)),),
    "clamp_min": (_CLAMP_BROADCAST,),
    "clamp_max": (_CLAMP_BROADCAST,),
    "lerp": (("lerp_weight_one.md", False, ("value", "nan-inf")),),
    "__rmod__": (_REMAINDER,),
    "remainder": (_REMAINDER,),
    "nn.functional.silu": (("fp16_sigmoid_silu_exp_overflow.md", False, None),),
    "linalg.matrix_norm": (_SVDVALS,),
    "linalg.matrix_rank": (_SVDVALS,),
    "linalg.cond": (_SVDVALS,),
    "linalg.pinv (singular)": (_SVDVALS,),  # its other errors: an empty matrix's SVD
    "masked.amax": (_AMAX,),
    "masked.amin": (_AMAX,),
    "masked.norm": (_AMAX,),
    "amax": (_AMAX,),
    "amin": (_AMAX,),
    "masked.argmax": (_ARGMAX,),
    "masked.argmin": (_ARGMAX,),
    "argmax": (_ARGMAX,),
    "argmin": (_ARGMAX,),
    "masked.logsumexp": (_LOGSUMEXP,),
    "logsumexp": (_LOGSUMEXP,),
    "nn.functional.interpolate (bilinear)": (_SCALE_FACTOR,),
    "nn.functional.interpolate (nearest)": (_SCALE_FACTOR,),
    "nn.functional.upsample_nearest": (_SCALE_FACTOR,),
    "as_strided_scatter": (("as_strided_scatter_strides.md", False, ("value",)),),
    "count_nonzero": (("count_nonzero_dtype.md", False, ("dtype",)),),
}
SCALAR_DIM = ("expected to be in range of [0, -1]", "but tensor has no dimensions")
EMPTY_DIM = ("sum", "mean", "nansum", "amax", "amin", "std", "var", "prod", "logsumexp")


def build(records: list[dict[str, Any]]) -> list[Group]:
    """The groups of the sweep's ``differs`` records (each with op, variant, dtype, backend,
    grad, edge), witnessed by the smallest sample that has source for its repro."""
    keyed: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        if r["verdict"] == "differs":
            key = (r["op"], r["variant"], r["backend"], r["kind"], r["grad"])
            keyed.setdefault((*key, r.get("inplace", False)), []).append(r)
    groups = []
    for (op, variant, backend, kind, grad, inplace), found in sorted(keyed.items()):
        witness = min(found, key=_smallest)
        dtypes = sorted({r["dtype"] for r in found}, key=_dtype_rank)
        owner = "torch" if any(r.get("owner") == "torch" for r in found if r is witness) else ""
        group = Group(
            id=_slug(op, variant, kind, grad, backend) + ("_inplace" if inplace else ""),
            op=op,
            variant=variant,
            backend=backend,
            dtypes=tuple(dtypes),
            kind=kind,
            grad=grad,
            samples=len(found),
            owner=owner,
            witness={k: witness.get(k) for k in ("dtype", "edge", "sample", "described", "detail")},
            inplace=inplace,
        )
        groups.append(replace(group, known=_known(group, witness)))
    return groups


def _smallest(record: dict[str, Any]) -> tuple:
    code = record.get("code") or {}
    numel = (record.get("described") or {}).get("numel", 0)
    return ("A" not in code, numel, _dtype_rank(record["dtype"]), record["edge"], record["sample"])


def _dtype_rank(dtype: str) -> int:
    return DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)


def _slug(op: str, variant: str, kind: str, grad: bool, backend: str) -> str:
    parts = [
        op,
        variant,
        kind.replace("-", ""),
        "grad" if grad else "",
        "" if backend == "xla" else backend,
    ]
    return re.sub(r"[^A-Za-z0-9]+", "_", "_".join(p for p in parts if p)).strip("_")


def _known(group: Group, witness: dict[str, Any]) -> str:
    """The report of docs/examples this group is (by op and pass; an empty dim list for the
    reductions), or ""."""
    kwargs = (witness.get("described") or {}).get("kwargs", {})
    detail = witness.get("detail") or ""
    if group.kind == "error" and "xla_shape=pred" in detail:
        return "bool_unary_float_ops.md"
    if group.kind == "error" and any(s in detail for s in SCALAR_DIM):
        return "pytorch/xla#1958"  # a dim of a 0-d tensor: tracked upstream since 2020
    if group.op in EMPTY_DIM and (kwargs.get("dim") in ("[]", "()") or group.kind == "shape"):
        return "empty_dim_reductions.md"
    half = {"float16", "bfloat16"} & set(group.dtypes)
    reports = KNOWN.get(f"{group.op} ({group.variant})") or KNOWN.get(group.op, ())
    for report, grad, kinds in reports:
        if grad is not None and grad != group.grad:
            continue
        if group.kind not in (kinds or (group.kind,)):
            continue
        if report.startswith("fp16") and not (half and group.kind in _HALF):
            continue  # those reports are of half types' values
        return report
    return ""


def write_repros(
    groups: list[Group],
    by_group: dict[str, dict[str, Any]],
    calls: dict[tuple, str | None],
    out_dir: Path,
    witness_dir: Path,
) -> list[Group]:
    """Each group's ``repro_<id>.py`` (and its .pt) in ``out_dir``; the groups with ``repro``
    set, or ``why_no_repro``."""
    written = []
    for group in groups:
        code = by_group.get(group.id) or {}
        if "A" not in code:
            why = code.get("unwritable", "no source of the witness sample")
            written.append(replace(group, why_no_repro=why))
            continue
        saved = None
        if code.get("saved"):
            saved = f"repro_{group.id}.pt"
            shutil.copyfile(witness_dir / code["saved"], out_dir / saved)
        key = (group.op, group.variant) + (("inplace",) if group.inplace else ())
        text = repro.repro_text(group, code, calls.get(key), saved)
        name = f"repro_{group.id}.py"
        (out_dir / name).write_text(text, "utf-8")
        written.append(replace(group, repro=name))
    return written


def check_alone(
    groups: list[Group], out_dir: Path, options: Options, versions: dict[str, str]
) -> list[Group]:
    """Each repro run alone (``jobs`` at a time), the answer cached by the script's bytes:
    ``reproduces_alone`` and what it printed."""
    # minimize.graph's package imports torch; its alone.py is only needed once repros exist
    from reprokit.tools.minimize.graph.alone import Ran

    store = Store("ops-alone")
    scratch = out_dir / ".alone"
    executor = WarmExecutor(replace(options, timeout=ALONE_TIMEOUT))

    def check(group: Group) -> Group:
        if group.repro is None:
            return group
        files = [out_dir / group.repro] + ([p] if (p := _pt(out_dir, group)).is_file() else [])
        key = store.key([file_digest(f) for f in files], versions)
        hit = store.get_json(key)
        if hit is None:
            ran = _alone(files, executor, options, scratch, Ran)
            shows = (
                ran.returncode is None
                if group.kind == "hang"
                else (
                    ran.returncode is not None and ran.returncode < 0
                    if group.kind == "crash"
                    else ran.shows()
                )
            )
            hit = {"shows": shows, "output": _transcript(ran, group.repro, options.xla_device)}
            store.put_json(key, hit)
        return replace(group, reproduces_alone=hit["shows"], alone_output=hit["output"])

    try:
        with ThreadPoolExecutor(max(1, options.jobs)) as pool:
            checked = list(pool.map(check, groups))
    finally:
        executor.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return checked


def _alone(
    files: list[Path], executor: WarmExecutor, options: Options, scratch: Path, ran: Any
) -> Any:
    """The repro run as a maintainer runs it pasted from an issue: in a folder holding only it
    (and its .pt), with only PATH, HOME and XLA's device set, its own process; forked from a
    server that imported torch and torch_xla in that same environment (runner/processes/warm.py,
    as stages start: seconds a repro instead of an interpreter's start), cold with ``--cold``
    or where no server starts. The XLA runtime starts in the repro's process."""
    scratch.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=scratch))
    where = folder / "repro"
    where.mkdir()
    _copy(files, where)
    kept = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR") if k in os.environ}
    env = stage_env("xla", options.xla_device, base=kept)
    logs = [folder / "stdout.log", folder / "stderr.log"]
    how = Launch([options.python, SCRIPT], "alone", "xla", env, where, logs, ALONE_TIMEOUT)
    ended, _ = executor.start(how, threading.Event())
    out, err = (_read(log) for log in logs)
    timed_out = ended.status is Status.TIMEOUT
    return ran(None if timed_out else ended.returncode, out, err, ended.signal)


def _read(path: Path) -> str:
    try:
        return path.read_text("utf-8", "replace")
    except OSError:
        return ""


def _pt(out_dir: Path, group: Group) -> Path:
    return out_dir / f"repro_{group.id}.pt"


def _copy(files: list[Path], where: Path) -> None:
    """The repro as repro.py (alone runs that name), its .pt under its own name beside it."""
    shutil.copyfile(files[0], where / SCRIPT)
    for extra in files[1:]:
        shutil.copyfile(extra, where / extra.name)


def _transcript(ran: Any, name: str, device: str) -> str:
    return ran.transcript(device).replace("python repro.py", f"python {name}", 1)
