"""report.md as an issue: a run whose first problem diverges told as a maintainer reads a bug,
in the manner of the reports in docs/examples. A title naming the op, the dtype and the
symptom; what goes wrong with values (``XLA returns NaN where CPU and float64 give 1.0``) and a
table of the elements that differ most; every other independent divergence
(reprokit.comparison.roots); the short repro inline with its output, or the longer script
named in the bundle; expected behaviour as values. No run folder, stage or node name the reader
cannot see: stages are said as their backends, results as their ops and source lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reprokit.comparison.roots import compared, described, roots
from reprokit.records import Comparison, Outcome, Root, RunSummary, Triage, VariantResult
from reprokit.records.folder import REPRO_OUT
from reprokit.reports.evidence import plain, script, too_large
from reprokit.reports.known import known_line
from reprokit.reports.model import Cell, Issue, Script, Table, Text
from reprokit.reports.root_issues import found_with, root_issues
from reprokit.reports.symptom import floating, near, reference_dtype, symptom, value
from reprokit.reports.unfiled import known_failure, own_failure, unfiled

MAX_FOLDED = 300  # lines of a case's own script shown folded (a captured program's harness never)
MAX_OTHERS = 8  # other divergences listed
BACKENDS = {"cpu": "CPU", "xla": "XLA", "xla_spmd": "XLA (SPMD)", "cuda": "CUDA",
            "xla_multicore": "XLA (multi-core)", "torchax": "torchax"}  # fmt: skip


def issues(summary: RunSummary, run_dir: Path, shown: list[VariantResult]) -> tuple[Issue, ...]:
    """The issues of the run's one problem, when it is a mismatch of a captured program: one
    per root whose repro showed it alone (reprokit.reports.root_issues), else the one issue of
    its first root. A run of several problems keeps the report of each, as a sweep writes one
    report per model."""
    first = shown[0] if len(shown) == 1 else None
    if first is None:
        return ()
    steps = steps_line(first)  # a training run of several steps: the loss per step
    run = f"Seen in `{first.label}`; its scripts, logs and results are in the bundle."
    return tuple(replace(one, context=(*one.context, *([steps] if steps else []),
                                       *([run] if one.kind != "bug" else [])))
                 for one in _issues(summary, run_dir, first))  # fmt: skip


def _issues(summary: RunSummary, run_dir: Path, first: VariantResult) -> tuple[Issue, ...]:
    if first.outcome in (Outcome.ERROR, Outcome.CRASH):
        said = own_failure(first) or known_failure(first)  # never XLA's / known already
        return (said,) if said else ()
    if first.outcome is not Outcome.MISMATCH:
        return ()
    if summary.minimized is None and (found := root_issues(first, run_dir, known_line)):
        return found
    if summary.minimized is None and (said := unfiled(first, run_dir, known_line)):
        return (said,)  # no bug headline without a repro that shows it
    one = issue(summary, run_dir, first)
    return (one,) if one is not None else ()


_STEP = re.compile(r"^loss(?:\.step(\d+))?$")  # training_program.py.j2: loss, loss.step2...


def steps_line(variant: VariantResult) -> Text | None:
    """A training run of several steps: its optimizer, the first step whose loss differs from
    CPU's, and the loss per step on CPU and XLA (None for one step)."""
    metrics = {s.name: s.metrics for s in variant.stages}
    cpu, xla = metrics.get("cpu", {}), metrics.get("xla", {})
    steps = sorted((int(m.group(1) or 1), k) for k in cpu if (m := _STEP.match(k)))
    if len(steps) < 2:
        return None
    apart = {c.tensor for c in variant.comparisons if c.target == "xla" and not c.allclose}
    first = next((n for n, k in steps if k in apart), None)
    said = (f"the loss first differs from CPU's at step {first}" if first
            else "the loss agrees with CPU's at every step")  # fmt: skip
    per = "; ".join(f"step {n}: CPU {_loss(cpu.get(k))}, XLA {_loss(xla.get(k))}" for n, k in steps)
    optimizer = variant.variant.get("optimizer")
    by = f" with {optimizer}" if optimizer else ""
    return f"Over {len(steps)} training steps{by}, {said} ({per})."


def _loss(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, int | float) else "-"


def issue(summary: RunSummary, run_dir: Path, first: VariantResult) -> Issue | None:
    """The issue of one variant's first root, with its repro as the run or minimize wrote it."""
    found = [_Seen.of(first, root) for root in roots(first)]
    if not found:
        return None
    main, target, reference = found[0], *_sides(first, found[0].comparison)
    if not main.said.get("op"):  # a case's own tensors (act.3): the case's report says more
        return None
    return Issue(
        title=title(main, target, reference),
        bug=_bug(first, main, target, reference) + _whose(summary, first, main),
        witnesses=witnesses(main.comparison, target, reference),
        others=tuple(_other(r, *_sides(first, r.comparison)) for r in found[1 : MAX_OTHERS + 1]),
        **_repro(first, run_dir),
        expected=_expected(main.comparison, target, reference),
        context=_context(summary, first) + too_large(run_dir, first),
        not_run=_not_run(first),
        hlo=_hlo(summary, run_dir),
    )


@dataclass(frozen=True)
class _Seen:
    """A root with what the records say of it: its comparison, its stage's description."""

    root: Root
    comparison: Comparison
    said: Mapping[str, Any]

    @classmethod
    def of(cls, variant: VariantResult, root: Root) -> _Seen:
        said = described(variant, root.target).get(root.tensor, {})
        return cls(root, compared(variant, root), said)

    @property
    def op(self) -> str:
        return self.root.op

    @property
    def reaches(self) -> tuple[str, ...] | None:
        return self.root.reaches

    @property
    def also(self) -> tuple[str, ...]:
        return self.root.also


def _sides(variant: VariantResult, c: Comparison) -> tuple[str, str]:
    """The target's and the reference's backends, as a maintainer names them."""
    return _backend(variant, c.target), _backend(variant, c.reference)


def _backend(variant: VariantResult, name: str) -> str:
    stage = next((s for s in variant.stages if s.name == name), None)
    if name in BACKENDS:
        return BACKENDS[name]
    return BACKENDS.get(stage.backend, stage.backend) if stage is not None else name


def title(root: _Seen, target: str, reference: str) -> Text:
    c = root.comparison
    floating = c.dtype and c.dtype.startswith(("float", "bfloat")) and not reference_dtype(c)
    lead = f"{c.dtype} " if floating else ""
    return f"{lead}`{root.op}` on {target} {symptom(c, reference)}"


def _where(root: _Seen) -> str:
    """The operation, its shape and the user's line it comes from."""
    info, shape = root.said, root.comparison.shape
    reads = " and ".join(_shape(s) for s in info.get("reads", ()))
    text = f"`{root.op}`" + (f" of {reads}" if reads else "") + f" (result {_shape(shape)})"
    if module := info.get("module"):  # a Sequential's child is a number: said as such
        text += (
            f" in submodule `{module}`" if module.split(".")[-1].isdigit() else f" in `{module}`"
        )
    if info.get("source"):
        text += f", from `{plain(info['source'])}`"
    if info.get("library_source"):  # inside a library the user's line calls
        text += f", inside `{plain(info['library_source'])}`"
    return text


def _shape(shape) -> str:
    return "x".join(map(str, shape or ())) or "a scalar"


def _bug(variant: VariantResult, root: _Seen, target: str, reference: str) -> tuple[Text, ...]:
    c = root.comparison
    counts = [f"{c.mismatched:,} of {c.total:,} elements differ from {reference}'s"]
    if not c.mismatched and not reference_dtype(c):  # judged by its error against float64 alone
        counts = [f"each element is within rtol={c.rtol:g}, atol={c.atol:g} of {reference}'s, "
                  "but the whole is farther from float64"]  # fmt: skip
    for what, (theirs, ours) in (("NaN", c.nan), ("inf", c.inf)):
        if ours > theirs:
            on_reference = f"{theirs:,} on {reference}" if theirs else f"none on {reference}"
            counts.append(
                f"{ours:,} {'is' if ours == 1 else 'are'} {what} on {target} ({on_reference})"
            )
    text = f"On {target}, {_where(root)} {symptom(c, reference)}: {'; '.join(counts)}."
    if c.errors is not None and floating(c) and math.isfinite(c.errors[0]):
        e_ref, e_target = c.errors
        bound = f" (at most {c.bound:.3g} would be noise)" if _finite(c.bound) else ""
        text += (f" Against the same program run in float64, {target}'s error (RMSE) is "
                 f"{e_target:.3g} where {reference}'s own is {e_ref:.3g}{bound}.")  # fmt: skip
    lines = [text, *_trust(variant, root)]
    if root.also:
        others = ", ".join(_backend(variant, name) for name in root.also)
        lines.append(f"The same operation differs the same way on {others}.")
    if root.reaches:
        outputs = ", ".join(f"`{o}`" for o in root.reaches)
        lines.append(f"It reaches the program's output{'s' * (len(root.reaches) > 1)} {outputs}.")
    return tuple(lines)


def _whose(summary: RunSummary, variant: VariantResult, root: _Seen) -> tuple[Text, ...]:
    """Whose bug it is, from evidence (docs/whose.md): ``torch`` where CPU itself is off
    float64 in the minimized repro (in a whole program, CPU's distance to a float64 run of the
    whole is carried error, not its kernel's), ``precision`` where the triage took it away,
    else what the minimization found with XLA's passes disabled."""
    graph = summary.minimized.graph if summary.minimized else None
    if graph is not None and (off := _cpu_off(root.comparison)):
        return (f"**Whose:** torch. {off}: torch's CPU kernel is off float64 as well; file with "
                "pytorch/pytorch.",)  # fmt: skip
    if variant.triage in (Triage.HIGHEST, Triage.FLOAT32):
        return (f"**Whose:** precision. The mismatch {Triage(variant.triage).said}: a matter of "
                "the precision XLA computes in, not of a wrong kernel.",)  # fmt: skip
    found = graph.whose if graph is not None else None
    if found is None:
        return ()
    run = (f" In XLA's own tools: `{found.command}` (with the repro's input values: "
           "`--input_literals_file`).") if found.command else ""  # fmt: skip
    return (f"**Whose:** {found.label}. {found.evidence}{run}",)


def _hlo(summary: RunSummary, run_dir: Path) -> tuple[Script, ...]:
    """The HLO text the label rests on (a short module: the op's lowering, or the module
    before the blamed pass), as the minimization kept it."""
    graph = summary.minimized.graph if summary.minimized else None
    paths = [Path(run_dir) / p for p in (graph.whose.hlo if graph and graph.whose else ())]
    texts = [(p.name, p.read_text(encoding="utf-8", errors="replace")) for p in paths
             if p.is_file()]  # fmt: skip
    return tuple(Script(name, text, text.count("\n")) for name, text in texts)


def _cpu_off(c: Comparison) -> str:
    """CPU far from float64 at a witness element (not by rounding: 1%, or not finite where
    float64 is), said with the values; "" when it is not."""
    for w in c.worst if floating(c) else ():
        if w.fp64 is None or not math.isfinite(w.fp64):
            continue
        if not near(w.reference, w.fp64):
            dtype = reference_dtype(c) or c.dtype
            return (f"CPU gives {value(w.reference, dtype)} where float64 gives "
                    f"{value(w.fp64, 'float64')} at `{list(w.index)}`")  # fmt: skip
    return ""


def _trust(variant: VariantResult, root: _Seen) -> list[Text]:
    """How far the verdict can be trusted (docs/verdicts.md), in a maintainer's words: what a
    more precise run showed. Whether fusion changes the outputs and each operation's own error
    are the tool's evidence, kept in the run's report, not the issue's."""
    if variant.triage:
        return [f"Run again more precisely, the mismatch {Triage(variant.triage).said}."]
    return []


def witnesses(c: Comparison, target: str, reference: str) -> Table | None:
    """The elements that differ most, on each side and in float64, each in its dtype."""
    if not c.worst:
        return None
    theirs = reference_dtype(c) or c.dtype
    fp64 = floating(c) and any(w.fp64 is not None for w in c.worst)
    header = ("element", f"{reference} ({theirs})", f"{target} ({c.dtype})")
    rows = tuple(
        (Cell(str(list(w.index)), code=True), Cell(value(w.reference, theirs)),
         Cell(value(w.target, c.dtype), tone="bad"))
        + ((Cell(value(w.fp64, "float64")),) if fp64 else ())
        for w in c.worst
    )  # fmt: skip
    header += ("float64",) if fp64 else ()
    return Table(header, rows, (False, *(True,) * (len(header) - 1)))


def _other(root: _Seen, target: str, reference: str) -> Text:
    c = root.comparison
    line = f"{_where(root)}: {target} {symptom(c, reference)}"
    line += f" at `{list(c.worst[0].index)}`" if c.worst else ""
    if root.reaches:
        return line + f"; it reaches {', '.join(f'`{o}`' for o in root.reaches)}."
    if root.reaches is None:
        return line + "."
    return line + "; every result that reads it agrees: harmless to the outputs."


def _repro(variant: VariantResult, run_dir: Path) -> dict:
    """The script: a minimize folder's short repro with what it printed run alone (pasted when
    short, else folded), a case's own script folded, else named in the bundle (a captured
    program's harness: hundreds of lines no maintainer reads)."""
    found = script(run_dir, variant)
    none = {"repro": None, "output": None, "elsewhere": None}
    if found is None:
        return none
    if found.short:
        output = Path(run_dir) / variant.label / REPRO_OUT
        said = output.read_text(encoding="utf-8") if output.is_file() else None
        return none | {"repro": found, "output": said}
    if not variant.captured and found.lines <= MAX_FOLDED:
        return none | {"repro": found}
    what = "the captured program's every operation" if variant.captured else "it"
    return none | {"elsewhere": (
        f"`{variant.label}/repro.py` in the attached `bundle.zip` ({found.lines} lines; torch "
        f"and torch_xla) runs {what} on each backend and compares them: "
        "`PJRT_DEVICE=CPU python repro.py` in that folder.")}  # fmt: skip


def _expected(c: Comparison, target: str, reference: str) -> tuple[Text, ...]:
    if (other := reference_dtype(c)) and c.worst:
        w = c.worst[0]
        return (f"{target} returns {other}, as {reference} does: "
                f"{value(w.reference, other)} at `{list(w.index)}`.",)  # fmt: skip
    if other:
        return (f"{target} returns {other}, as {reference} does.",)
    if not c.worst:
        return (f"{target} agrees with {reference} within rtol={c.rtol:g}, atol={c.atol:g}.",)
    w = c.worst[0]
    at = f"`{list(w.index)}`"
    want = value(w.reference, c.dtype)
    if w.fp64 is not None and near(w.reference, w.fp64) and not math.isfinite(w.fp64):
        return (f"{target} returns {want} at {at}, as {reference} and float64 do.",)
    if w.fp64 is not None and _finite(c.bound):
        return (f"{target} returns about {value(w.fp64, 'float64')} at {at}, as {reference} "
                f"({want}) and float64 do, and its error against float64 stays within "
                f"{c.bound:.3g}, as {reference}'s.",)  # fmt: skip
    return (f"{target} returns {want} at {at}, as {reference} does "
            f"(within rtol={c.rtol:g}, atol={c.atol:g}).",)  # fmt: skip


def _finite(number: float | None) -> bool:
    return number is not None and math.isfinite(number)


def _context(summary: RunSummary, first: VariantResult) -> tuple[Text, ...]:
    lines = [found_with()]
    graph = summary.minimized.graph if summary.minimized is not None else None
    if graph is not None and graph.short_inputs == "random":
        lines.append("The table above holds the model's own inputs' results; the repro draws "
                     "seeded random inputs of the same shapes, spreads and dtypes, so the "
                     "elements it prints differ.")  # fmt: skip
    if graph is not None and graph.nodes[0] != graph.nodes[1]:
        lines.append(f"The repro is {graph.nodes[1]} of the model's {graph.nodes[0]} operations, "
                     "with the inputs it reads.")  # fmt: skip
    if graph is not None and graph.others:
        lines.append("The model differs independently elsewhere too, not in this repro: "
                     f"{'; '.join(graph.others)}.")  # fmt: skip
    return tuple(lines)


def _not_run(variant: VariantResult) -> Text | None:
    """The accelerators this run did not try, when XLA ran only on the CPU."""
    kinds = {s.xla.device_kind for s in variant.stages if s.xla and s.xla.device_kind}
    if kinds - {"CPU"}:
        return None
    gpu = any(s.backend == "cuda" for s in variant.stages)
    missing = "a TPU" if gpu else "a TPU or a GPU"
    return f"Not run on {missing}: XLA here is XLA:CPU (`PJRT_DEVICE=CPU`)."
