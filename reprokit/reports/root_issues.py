"""One issue per independent difference of a captured program, each with its own repro inline.

``reprokit report`` first has every root of the run written as a repro and run alone
(reprokit.tools.root_repro); this builds the issues from those records, in a maintainer's
words: the op and dtype in the title, the values the repro printed (so that the issue and its
repro say the same), the user's line, the repro and its output, what would be right, and
whether the bug is already known. A forward op and its gradient are one issue. Nothing of
the tool's own: no stage, variant or node names, one "Found with reprokit" line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from reprokit.comparison.roots import compared, described, roots, rounding
from reprokit.records import Root, VariantResult
from reprokit.records.folder import RunFolder
from reprokit.records.issues import RootRepro, Seen, read_index
from reprokit.reports.evidence import plain
from reprokit.reports.model import Cell, Issue, Script, Table, Text
from reprokit.reports.since import since_line

# What a known bug's entry says, given the op, the dtype, the kind, forward or gradient, and
# whether that belongs in the issue (reprokit.reports.known.known_line)
Known = Callable[..., tuple[Text, bool] | None]
KINDS = ("shape", "dtype", "nan-inf", "value")  # the worst first
GRADIENT = " gradient"  # the repro's name of a result's gradient: "softplus gradient"


def root_issues(
    variant: VariantResult, run_dir: Path, known: Known | None = None
) -> tuple[Issue, ...]:
    """The variant's root issues, the worst first: one for each root repro that showed the
    difference run alone (none when the run has no such records)."""
    folder = RunFolder(Path(run_dir)).variant(variant.label).path
    shown = [r for r in read_index(folder) or () if r.shows]
    found = {r.tensor: r for r in roots(variant)}
    issues = []
    for repro in shown:
        mine = [found[t] for t in repro.roots if t in found]
        if mine:
            issues.append(_issue(variant, folder, repro, mine, known))
    if len(issues) < 2:
        return tuple(issues)
    apart = "; ".join(i.title for i in issues[1:])
    also = f"The same model shows {len(issues) - 1} more difference{'s' * (len(issues) > 2)}, " \
        f"filed apart: {apart}."  # fmt: skip
    return (replace(issues[0], context=(also, *issues[0].context)), *issues[1:])


def _issue(
    variant: VariantResult, folder: Path, repro: RootRepro, mine: list[Root], known: Known | None
) -> Issue:
    seen = [s for s in repro.seen() if s.differs]
    op = short_op(repro.op)
    dtype = _dtype(repro, variant, mine[0])
    forward = any(not s.name.endswith(GRADIENT) for s in seen)
    grad = None if forward and len(seen) > 1 else not forward
    kind = min((r.kind for r in mine), key=lambda k: KINDS.index(k) if k in KINDS else 9)
    if kind == "value" and any(_nonfinite(v) for s in seen for row in s.rows for v in row[1:]):
        kind = "nan-inf"  # as the op sweep says it: -inf on CPU where XLA is finite too
    said = known(op=op, dtype=dtype, kind=kind, grad=grad) if known else None
    text = repro.script(folder).read_text("utf-8")
    return Issue(
        title=_title(op, dtype, seen),
        bug=(_bug(variant, op, dtype, seen, mine),),
        witnesses=_witnesses(seen),
        others=(),
        repro=Script(variant.label, text, repro.lines, short=True),
        output=repro.output,
        elsewhere=None,
        expected=(_expected(seen),),
        context=(*([said[0]] if said and not said[1] else []), *since_line(mine), found_with()),
        not_run=None,
        name=repro.slug,
        known=said[0] if said and said[1] else None,
    )


def short_op(op: str) -> str:
    """aten.softplus.default -> softplus; node names and other ops kept as they are."""
    parts = op.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "aten" else op


def _dtype(repro: RootRepro, variant: VariantResult, root: Root) -> str:
    """The op's floating input dtype (the repro's), else its result's."""
    if floating := [d for d in repro.dtypes if d.startswith(("float", "bfloat"))]:
        return floating[0]
    return compared(variant, root).dtype or ""


def _title(op: str, dtype: str, seen: list[Seen]) -> Text:
    """float16 `softplus` on XLA returns inf where CPU and float64 give 3.85547, and a NaN
    gradient where CPU's is 1."""
    lead = f"{dtype} " if dtype.startswith(("float", "bfloat")) else ""
    first, *rest = seen
    if first.name.endswith(GRADIENT):  # the forward agrees
        return f"{lead}gradient of `{op}` on XLA is {_gradient(first)}"
    text = f"{lead}`{first.name}` on XLA {_symptom(first)}"
    for other in rest[:1]:
        text += f", and a gradient of {_gradient(other)}" if other.name.endswith(GRADIENT) \
            else f", and `{other.name}` {_symptom(other)}"  # fmt: skip
    return text


def _gradient(seen: Seen) -> str:
    """NaN where CPU's is 1 (and float64's, where it is not near CPU's)."""
    if not seen.rows:
        return "other values than CPU's"
    _, cpu, fp64, xla = (number(v) for v in seen.rows[0])
    return f"{xla} where CPU's is {cpu}" + ("" if _near(cpu, fp64) else f" and float64's {fp64}")


def _symptom(seen: Seen) -> str:
    """returns inf where CPU and float64 give 3.85547 (from the repro's first row); another
    dtype or shape as the repro said it."""
    if not seen.rows:
        said = seen.counts.replace("torch.", "")
        return said if said.startswith("returns") else "differs from CPU"
    _, cpu, fp64, xla = (number(v) for v in seen.rows[0])
    if _near(cpu, fp64):
        return f"returns {xla} where CPU and float64 give {cpu}"
    return f"returns {xla} where CPU gives {cpu} and float64 {fp64}"


def number(printed: str) -> str:
    """A value as the repro printed it, NaN spelled as a maintainer reads it."""
    return {"nan": "NaN", "-nan": "NaN"}.get(printed, printed)


def _nonfinite(printed: str) -> bool:
    return printed.lstrip("-") in ("inf", "nan")


def _near(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a == b
    return x == y or abs(x - y) <= 1e-2 * max(1.0, abs(y))


def _bug(variant: VariantResult, op: str, dtype: str, seen: list[Seen], mine: list[Root]) -> Text:
    told = described(variant, mine[0].target)
    said = {r.tensor: told.get(r.tensor, {}) for r in mine}
    info = next((i for i in said.values() if not i.get("forward")), said[mine[0].tensor])
    info = told.get(info.get("forward", ""), info)  # a gradient's root: its forward's inputs
    shapes = " and ".join("x".join(map(str, s)) or "a scalar" for s in info.get("reads", ()))
    of = f" of {dtype + ' ' if dtype else ''}{shapes}" if shapes else ""
    parts = [f"its gradient, by autograd, is {_gradient(s)} ({s.counts})"
             if s.name.endswith(GRADIENT) else f"`{s.name}` {_symptom(s)}"
             + (f" ({s.counts})" if s.rows else "")
             for s in seen]  # fmt: skip
    text = f"On XLA, `torch.ops.aten.{op}`{of}: " + "; ".join(parts) + "."
    if source := info.get("source"):
        text += f" In the model this is `{plain(source)}`"
        reached = sorted({o for r in mine if not rounding(r) for o in (r.reaches or ())})
        text += f"; it reaches {', '.join(f'`{o}`' for o in reached)}." if reached else "."
    return text


def _witnesses(seen: list[Seen]) -> Table | None:
    rows = tuple(
        (Cell(s.name, code=True), Cell(index, code=True), Cell(number(cpu)),
         Cell(number(fp64)), Cell(number(xla), tone="bad"))
        for s in seen for index, cpu, fp64, xla in s.rows
    )  # fmt: skip
    if not rows:
        return None
    return Table(("result", "element", "CPU", "float64", "XLA"), rows,
                 (False, False, True, True, True))  # fmt: skip


def _expected(seen: list[Seen]) -> Text:
    wants = [f"{s.name} {s.rows[0][2]} at `{s.rows[0][0]}`" for s in seen if s.rows]
    return ("XLA returns what CPU and float64 return, within the dtype's rounding"
            + (f": {'; '.join(wants)}." if wants else "."))  # fmt: skip


def found_with() -> Text:
    """The one line of the tool an issue carries."""
    try:
        return f"Found with reprokit {version('reprokit')}."
    except PackageNotFoundError:
        return "Found with reprokit."
