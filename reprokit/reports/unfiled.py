"""report.md when a captured program differs and no root's repro shows it alone: never a bug
headline over a harness. Each root is judged once, in this order:

- **known**: the known-bugs file has it (its op, dtype and kind): the report says where, and
  the comment to add there, with or without a repro;
- **rounding**: a value difference whose error against float64 stays within a few times what
  CPU's own error allows (reprokit.comparison.roots.rounding), or one that every result reading
  it agrees on (harmless to the outputs): nothing to file, said in plain words with the ulps;
- else **no repro**: XLA differs and no standalone repro was found; the report says why (what
  each repro tried), and what to run next (``reprokit minimize``).

The page is the worst of its roots: no repro, then known, then rounding.

A run that ends in error or crash where torch_xla is not to blame is never an issue for
pytorch/xla either (``own_failure``): a stage's protocol failing to save its tensors (its error
says "reprokit's own failure"), or a captured program failing on CPU (no CPU kernel in the
dtype, a program CPU's eager kernels refuse, a ``--set dtype`` the model never ran in): no
reference. An XLA stage's error the known file names by its message is known
(``known_failure``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from reprokit.comparison.roots import ROUNDING, compared, described, roots, rounding
from reprokit.infra.known import match
from reprokit.records import Comparison, Root, StageResult, VariantResult
from reprokit.records.folder import RunFolder
from reprokit.records.issues import RootRepro, read_index
from reprokit.reports.evidence import plain
from reprokit.reports.hint import minimize_hint
from reprokit.reports.model import Cell, Issue, Table, Text
from reprokit.reports.root_issues import Known, found_with, short_op
from reprokit.reports.symptom import symptom

EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
KINDS = ("no repro", "known", "rounding")  # the worst first: what the page says


def unfiled(variant: VariantResult, run_dir: Path, known: Known) -> Issue | None:
    """The page of a differing captured program whose roots have no repro that shows them, or
    None when a root has (reprokit.reports.root_issues files those) or there are no roots."""
    folder = RunFolder(Path(run_dir)).variant(variant.label).path
    repros = read_index(folder)
    found = roots(variant)
    if not found or repros is None or any(r.shows for r in repros):
        return None
    judged = [_judged(variant, root, known) for root in found]
    kind = min((k for k, _ in judged), key=KINDS.index)
    rows = _table(variant, found, judged)
    if kind == "known":
        return _known(variant, found, judged, rows)
    if kind == "rounding":
        return _rounding(variant, found, rows)
    return _no_repro(variant, found, judged, repros, rows, run_dir)


OWN = "reprokit's own failure"  # how a stage's protocol says it (templates/_protocol.py.j2)


def known_failure(variant: VariantResult) -> Issue | None:
    """The page of a run whose XLA stage failed with an error the known file names (its
    ``detail``), or None."""
    for stage in (s for s in variant.stages if s.failed and s.backend.startswith("xla")):
        said = "\n".join((stage.error or "", *stage.stderr_tail))
        if (found := match("", kind="error", detail=said)) is None:
            continue
        where = found.line()
        if found.upstream and found.state != "closed":
            where += (f". Post this page there as a comment, not a new issue, opening with: "
                      f"“{found.comment()}”")  # fmt: skip
        text = f"Stage `{stage.name}` ({stage.backend}) {_ended(stage)}."
        return _failed(stage, f"Known: {found.title}", (text,), kind="known", known=where)
    return None


def own_failure(variant: VariantResult) -> Issue | None:
    """The page of a run that failed where torch_xla is not to blame (module docstring), or
    None."""
    failed = [s for s in variant.stages if s.failed]
    if own := next((s for s in failed if OWN in (s.error or "")), None):
        text = (f"Stage `{own.name}` ({own.backend}) {_ended(own)}. This is a failure of "
                "reprokit's own, not of torch_xla: the stage's tensors were computed, and "
                "reprokit failed to save them. Report it to reprokit with this page; bundle.zip "
                "holds the stage's log.")  # fmt: skip
        return _failed(own, f"{OWN}: stage `{own.name}` could not save its tensors", (text,))
    cpu = next((s for s in failed if s.backend == "cpu" and s.error), None)
    if cpu is None or not variant.captured:
        return None
    dtype = variant.variant.get("dtype", "")
    said = f"Stage `{cpu.name}` ({cpu.backend}) {_ended(cpu)}."
    if "not implemented for" in (cpu.error or ""):  # torch's CPU lacks the dtype's kernel
        text = (f"{said} torch has no CPU kernel in {dtype} for an operation of the program, so "
                f"there is nothing to compare XLA with in {dtype}: not a torch_xla bug. Run it "
                "in float32 (`--set dtype=float32`), where CPU is the reference.")  # fmt: skip
        return _failed(cpu, f"No CPU reference: torch's CPU cannot run this program in {dtype}",
                       (text,))  # fmt: skip
    text = (
        f"{said} The captured program fails on CPU as reprokit runs it, so there is no "
        "reference to compare XLA with: not a torch_xla bug. torch.export traces with fake "
        "tensors, so it captures programs that CPU's eager kernels refuse (two dtypes in "
        f"one matmul); check that the model runs eagerly on CPU in {dtype or 'its dtype'}."
    )
    return _failed(cpu, f"No CPU reference: the captured program fails on CPU (stage "
                   f"`{cpu.name}`)", (text, _dtype_advice(dtype)))  # fmt: skip


def _ended(stage: StageResult) -> str:
    return stage.ended().rstrip(".")


def _failed(stage: StageResult, title: Text, bug: tuple[Text, ...], kind: str = "own failure",
            known: Text | None = None) -> Issue:  # fmt: skip
    """A failed stage's page, its last words under it."""
    page = _page(title, bug, None, kind=kind, known=known)
    return replace(page, output="\n".join(stage.stderr_tail) or None)


def _dtype_advice(dtype: str) -> str:
    if dtype in ("", "float32"):
        return "Run it again with `reprokit run`; if it fails again, report it to reprokit."
    return (f"The program runs in {dtype} (`--set dtype={dtype}`), which casts what was "
            f"captured: casts the model makes itself in {dtype} (a `.float()` before "
            "`view_as_complex`) were no-ops at capture and are not in the program. Capture the "
            f"model in {dtype} (the model and its inputs `.to(torch.{dtype})` before `reprokit "
            "capture`) so that they are kept.")  # fmt: skip


def _judged(variant: VariantResult, root: Root, known: Known) -> tuple[str, Text | None]:
    """A root's kind, and its known line when the known file has it."""
    op, dtype = short_op(root.op), compared(variant, root).dtype or ""
    gradient = bool(described(variant, root.target).get(root.tensor, {}).get("forward"))
    said = known(op=op, dtype=dtype, kind=root.kind, grad=gradient)
    if said is not None:
        return "known", said[0]
    if rounding(root) or root.reaches == ():
        return "rounding", None
    return "no repro", None


def _dtypes(variant: VariantResult, found: list[Root] | tuple[Root, ...]) -> str:
    return ", ".join(dict.fromkeys(d for r in found if (d := compared(variant, r).dtype)))


def _ops(found) -> str:
    return ", ".join(f"`{op}`" for op in dict.fromkeys(short_op(r.op) for r in found))


def _rounding(variant: VariantResult, found, rows: Table) -> Issue:
    dtypes = _dtypes(variant, found)
    text = (f"Every difference between XLA and CPU in this run is {dtypes} rounding: at each "
            f"operation where they part ({_ops(found)}), XLA's error against the same program "
            f"run in float64 is within {ROUNDING:g} times what CPU's own error allows, or no "
            "result that reads it differs. A kernel that rounds or accumulates in another "
            "order gives that; it is not a bug to file with pytorch/xla.")  # fmt: skip
    advice = ("If the model needs more than the dtype's precision there, compute that part in "
              "float32 (`x.float()`); `reprokit run ... --set dtype=float32` checks that XLA "
              "agrees in float32.")  # fmt: skip
    return _page(f"Nothing to file: XLA's differences from CPU here are {dtypes} rounding",
                 (text, advice), rows, kind="rounding")  # fmt: skip


def _known(variant: VariantResult, found, judged, rows: Table) -> Issue:
    lines = tuple(dict.fromkeys(line for _, line in judged if line))
    mine = [r for r, (k, _) in zip(found, judged, strict=True) if k == "known"]
    first = mine[0]
    also = [r for r in mine if short_op(r.op) != short_op(first.op)]
    text = (f"`{first.op}` on XLA {symptom(compared(variant, first), 'CPU')}"
            + (f" (and at {_ops(also)})" if also else "")
            + ": the known bug above.")  # fmt: skip
    rest = tuple(f"Also: {line}" for line in lines[1:])
    others = [r for r, (k, _) in zip(found, judged, strict=True) if k != "known"]
    if others:
        rest += (f"The other differences ({_ops(others)}) are rounding or reach no output.",)
    title = f"Known: `{short_op(first.op)}` in {_dtypes(variant, [first])} on XLA"
    return _page(title, (text, *rest), rows, kind="known", known=lines[0])


def _no_repro(variant: VariantResult, found, judged, repros: list[RootRepro], rows: Table,
              run_dir: Path) -> Issue:  # fmt: skip
    mine = [r for r, (k, _) in zip(found, judged, strict=True) if k == "no repro"]
    tensors = {m.tensor for m in mine}
    tried = [r for r in repros if set(r.roots) & tensors]
    why = "; ".join(dict.fromkeys(f"`{short_op(r.op)}`: {r.why_not or _exit(r)}" for r in tried))
    text = (f"XLA parts from CPU at {_ops(mine)} ({_dtypes(variant, mine)}) by more than "
            "rounding, but no standalone repro with made inputs shows it"
            + (f" ({why})." if why else ".")
            + " The run's harness replays the whole captured program; it is the evidence, "
            "not a repro to file.")  # fmt: skip
    step = f"To get one: `{minimize_hint(run_dir, variant.label)}`."
    title = f"No standalone repro found: XLA differs from CPU at {_ops(mine[:1])}"
    return _page(title, (text, step), rows, kind="no repro")


def _exit(repro: RootRepro) -> str:
    if repro.returncode == 0:
        return "its repro agreed with CPU alone (exit 0)"
    return f"its repro exited {repro.returncode} alone"


def _page(title: Text, bug: tuple[Text, ...], rows: Table | None, *, kind: str,
          known: Text | None = None) -> Issue:  # fmt: skip
    return Issue(title=title, bug=bug, witnesses=rows, others=(), repro=None, output=None,
                 elsewhere=None, expected=(), context=(found_with(),), not_run=None,
                 known=known, kind=kind)  # fmt: skip


def _table(variant: VariantResult, found, judged) -> Table:
    """One row per root: the op, where, the errors, the worst element and its ulps, the
    judgement."""
    rows = []
    for root, (kind, _) in zip(found, judged, strict=True):
        c = compared(variant, root)
        info = described(variant, root.target).get(root.tensor, {})
        where = plain(info.get("source", "")) or root.tensor
        if info.get("library_source"):  # the op sits in a library the user's line calls
            where += f"; inside {plain(info['library_source'])}"
        rows.append((Cell(short_op(root.op), code=True), Cell(where, code=True),
                     Cell(c.dtype or "-"), Cell(_errors(c)), Cell(_ulps(c)),
                     Cell(kind)))  # fmt: skip
    return Table(("op", "in the model", "dtype", "RMSE against float64: XLA, CPU (bound)",
                  "worst element: CPU, XLA, float64 (ulps apart)", "judged"), tuple(rows),
                 (False, False, False, True, True, False))  # fmt: skip


def _errors(c: Comparison) -> str:
    if c.errors is None:
        return "-"
    bound = f" ({c.bound:.3g})" if c.bound is not None and math.isfinite(c.bound) else ""
    return f"{c.errors[1]:.3g}, {c.errors[0]:.3g}{bound}"


def _ulps(c: Comparison) -> str:
    """The worst element as CPU, XLA and float64 give it, and XLA's distance from CPU in ulps
    of the dtype at float64's value."""
    if not c.worst:
        return "-"
    w = c.worst[0]
    values = f"{w.reference:.6g}, {w.target:.6g}" + (
        f", {w.fp64:.6g}" if w.fp64 is not None else ""
    )
    ulps = ulps_apart(w.reference, w.target, c.dtype or "")
    return values + (f" ({ulps:.1f})" if ulps is not None else "")


def ulps_apart(a: float, b: float, dtype: str) -> float | None:
    """|a - b| in units in the last place of ``dtype`` at the larger magnitude, or None when
    not finite or not a floating dtype."""
    eps = EPS.get(dtype)
    if eps is None or not (math.isfinite(a) and math.isfinite(b)):
        return None
    scale = max(abs(a), abs(b))
    ulp = eps * 2.0 ** math.floor(math.log2(scale)) if scale > 0 else eps
    return abs(a - b) / ulp
