"""report.md of a ``reprokit ops`` folder, rendered from its ops.json: the groups first (one row
each: op, dtypes, pass, kind, the witness, its repro and whether it reproduces alone), the
causes shared by several groups named once, the precision findings apart (a half type's
rounding, not a bug), then the counts per op family, the skips by reason, subnormal flushing as
one class of the platform, and where CPU itself is far from float64."""

from __future__ import annotations

from pathlib import Path

from reprokit.records import Reports, RunSummary
from reprokit.records.ops import OPS, VERDICTS, Group, OpsSweep, read_ops
from reprokit.records.ops_releases import is_ops_releases_folder
from reprokit.records.report import REPORT_MD

REPORT = REPORT_MD
GROUP_ROWS = 400  # rows of the groups' table at most (a whole sweep's fit)


def is_ops_folder(folder: Path) -> bool:
    return (Path(folder) / OPS).is_file() or is_ops_releases_folder(folder)


def write_report(folder: Path, sweep: OpsSweep | None = None) -> Path:
    """DIR/report.md from ``sweep`` (read from DIR/ops.json when not given)."""
    sweep = sweep or read_ops(folder)
    path = Path(folder) / REPORT
    path.write_text(markdown(sweep), "utf-8")
    return path


def headline(sweep: OpsSweep) -> str:
    counts = sweep.counts()
    samples = sum(counts.values())
    ops = sum(1 for o in sweep.ops if o["counts"])
    alone = sum(1 for g in sweep.groups if g.reproduces_alone)
    stopped = " (interrupted: what finished)" if sweep.interrupted else ""
    causes = {g.cause for g in sweep.groups if g.cause}
    shared = sum(1 for g in sweep.groups if g.cause)
    caused = f" ({shared} of them from {_count(len(causes), 'cause')} below)" if causes else ""
    rounded = f"; {_count(len(sweep.precision), 'precision finding')} apart" * bool(sweep.precision)
    where = ", ".join(sweep.backends)
    if sweep.mesh:  # each sample against itself unsharded, not against CPU
        where = f"xla sharded on a {'x'.join(map(str, sweep.mesh))} mesh (against unsharded)"
    return (
        f"{len(sweep.groups)} groups of divergences on {where}{caused} in "
        f"{samples:,} samples of {ops} OpInfos{stopped}; {alone} reproduce alone{rounded}"
    )


def markdown(sweep: OpsSweep) -> str:
    lines = [f"# reprokit ops: {headline(sweep)}", ""]
    versions = ", ".join(f"{k} {v}" for k, v in sweep.versions.items())
    passes = (
        "forward" + (", backward" if sweep.grad else "") + (", in-place" if sweep.inplace else "")
    )
    what = f"dtypes {', '.join(sweep.dtypes)}; {passes}"
    lines += [
        f"{what}{'; edge values' if sweep.edge else ''}; {versions}; "
        f"{sweep.seconds:,.0f} s ({sweep.cached} tasks from the results cache).",
        "",
    ]
    spent = {
        k.removeprefix("sharded "): v for k, v in sweep.timings.items() if k.startswith("sharded ")
    }
    if spent:  # --mesh: what each spec cost the workers
        per = ", ".join(f"{spec} {seconds:,.0f} s" for spec, seconds in spent.items())
        lines += [f"Workers' time per spec (each sample's unsharded control included): {per}.", ""]
    if sweep.stale_graph:  # older files: none
        s = sweep.stale_graph
        lines += [
            f"Stale compiled graphs (a second call with other non-tensor arguments): "
            f"{s.get('ops_checked', 0)} ops checked with {s.get('probes', 0)} pairs made, "
            f"{s.get('candidates', 0)} candidates, {s.get('found', 0)} found.",
            "",
        ]
    lines += _groups(sweep.groups) + _causes(sweep.groups) + _classes(sweep.groups)
    lines += _precision(sweep.precision)
    lines += _families(sweep) + _skips(sweep) + _platform(sweep) + _lost(sweep)
    lines += _cpu_wrong(sweep)
    return "\n".join(lines).rstrip() + "\n"


def _op(op: str, variant: str) -> str:
    """An op as a table's first cell names it: `nn.functional.conv2d` (variant)."""
    return f"`{op}`" + (f" ({variant})" if variant else "")


def _groups(groups: tuple[Group, ...]) -> list[str]:
    if not groups:
        return ["## Groups", "", "No divergence.", ""]
    lines = [
        "## Groups",
        "",
        "| op | dtypes | pass | kind | trigger | witness | repro | alone | known |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for g in groups[:GROUP_ROWS]:
        op = _op(g.op, g.variant)
        op += " [torch]" if g.owner == "torch" else ""
        op += f" (cause: `{g.cause}`)" if g.cause else ""
        w = g.witness
        shapes = ", ".join((w.get("described") or {}).get("tensors", []))
        edge = "edge " if w.get("edge") else ""
        detail = _cell(w.get("detail") or "")
        witness = f"{edge}sample {w.get('sample')}: {shapes}; {detail}"
        repro = f"`{g.repro}`" if g.repro else _cell(g.why_no_repro or "none")
        repro += f" (XLA's SPMD partitioner: {', '.join(f'`{n}`' for n in g.hlo)})" if g.hlo else ""
        alone = {True: "yes", False: "no", None: "-"}[g.reproduces_alone]
        passed = g.passed
        lines.append(
            f"| {op} | {', '.join(g.dtypes)} | {passed} | {g.kind} | {_cell(said(g.trigger))} | "
            f"{witness} | "
            f"{repro} | {alone} | {g.known} |"
        )
    if len(groups) > GROUP_ROWS:
        lines.append(f"\n{len(groups) - GROUP_ROWS} more groups in ops.json.")
    return [*lines, ""]


CAUSES = {  # what a cause (records.ops.Group.cause) is, in a maintainer's words
    "mean": "the loss's terms agree with CPU's; its mean, XLA's own `mean` of them, differs "
    "(a float16 sum of the terms past 65,504 is inf)",
    "sum": "the loss's terms agree with CPU's; their sum, XLA's own `sum` of them, differs",
}


def _causes(groups: tuple[Group, ...]) -> list[str]:
    """One line per op that causes several groups' divergences, with the groups it causes."""
    by_cause: dict[str, list[Group]] = {}
    for g in groups:
        if g.cause:
            by_cause.setdefault(g.cause, []).append(g)
    if not by_cause:
        return []
    lines = ["## Causes shared by several ops (each named once, at the op that causes it)", ""]
    for cause, found in sorted(by_cause.items()):
        ops = ", ".join(f"`{g.op}` ({', '.join(g.dtypes)}, {g.kind})" for g in found)
        lines.append(f"- `{cause}`: {CAUSES.get(cause, '')}. In {ops}.")
    return [*lines, ""]


def _classes(groups: tuple[Group, ...]) -> list[str]:
    """One line per trigger that several ops' groups share, confirmed by new samples in each
    (``dim = []`` in var, std, amax...): one cause, one report, every op it hits, and the
    known reports it is filed as."""
    by_condition: dict[str, list[Group]] = {}
    for g in groups:
        t = g.trigger or {}
        if t.get("condition") and t.get("confirmed") and not t.get("refuted"):
            by_condition.setdefault(t["condition"], []).append(g)
    shared = {c: found for c, found in by_condition.items() if len({g.op for g in found}) > 1}
    if not shared:
        return []
    lines = ["## One condition, several ops (one cause: file it once, listing them)", ""]
    for condition, found in sorted(shared.items(), key=lambda item: -len(item[1])):
        ops = ", ".join(f"`{g.op}` ({g.passed}, {g.kind})" for g in found)
        known = sorted({g.known for g in found if g.known})
        said_known = f" Known: {', '.join(known)}." if known else " Not known."
        lines.append(f"- when {condition}: {ops}.{said_known}")
    return [*lines, ""]


def _precision(found: list[dict]) -> list[str]:
    """The precision findings: not bugs, listed apart with their size and intermediates."""
    if not found:
        return []
    lines = [
        "## Precision (a half type's rounding, not bugs)",
        "",
        "Within eps(dtype) of the terms' magnitude and right in float32 on XLA "
        "(docs/ops.md). Size: the largest difference from float64, in ulps of the dtype at "
        "the terms' magnitude (at the result itself in brackets).",
        "",
        "| op | dtypes | pass | samples (beyond: a group's) | ulps, XLA (result) / CPU | "
        "XLA's intermediates in | witness |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in found:
        op = _op(p["op"], p["variant"])
        passed = "in-place" if p.get("inplace") else "backward" if p["grad"] else "forward"
        size = f"{p['ulps']:g} ({p['result_ulps']:g}) / {p['cpu_ulps']:g}"
        counts = f"{p['samples']}" + (f" ({p['differs']})" if p.get("differs") else "")
        inside = ", ".join(f"{d}: {i}" for d, i in p["intermediates"].items())
        w = p["witness"]
        witness = f"{w['dtype']} {'edge ' if w.get('edge') else ''}sample {w['sample']}: "
        witness += ", ".join(w.get("tensors") or []) + f"; {w.get('detail') or ''}"
        lines.append(
            f"| {op} | {', '.join(p['dtypes'])} | {passed} | {counts} | {size} | "
            f"{inside} | {_cell(witness)} |"
        )
    return [*lines, ""]


def said(trigger: dict) -> str:
    """A group's trigger in words, with its evidence: "differs whenever an input holds NaN (6
    of 6), agrees otherwise (12 of 12); 8 new samples confirm"; or why it is not known."""
    if not trigger:
        return ""
    d, a = trigger.get("differs", [0, 0]), trigger.get("agrees", [0, 0])
    if trigger.get("condition") is None:
        if trigger.get("why") == "no sample of the op agrees":
            return f"not known: every sample of the op that ran differs ({d[1]})"
        return f"not known: {trigger.get('why', '')}"
    exact = d[0] == d[1] and a[0] == a[1]
    text = (
        f"differs {'whenever' if exact else 'mostly where'} {trigger['condition']} "
        f"({d[0]} of {d[1]}), agrees otherwise ({a[0]} of {a[1]})"
    )
    right, wrong = trigger.get("confirmed", 0), trigger.get("refuted", 0)
    if wrong:  # never stated as the cause: the sweep's own new samples refute it
        return (
            f"not known: no condition the new samples bear out (the best on the sweep's samples, "
            f"{trigger['condition']}, {d[0]} of {d[1]} and {a[0]} of {a[1]}, is contradicted by "
            f"{wrong} of {right + wrong} new samples)"
        )
    if right:
        return f"{text}; {right} new sample{'s' * (right > 1)} confirm{'s' * (right == 1)}"
    return f"{text}; not checked on new samples"


def family(op: str) -> str:
    """An op's family, for the counts: its namespace (nn.functional, linalg, special, fft),
    else the first word of its name."""
    for prefix in ("nn.functional.", "linalg.", "special.", "fft.", "masked.", "_refs."):
        if op.startswith(prefix):
            return prefix.rstrip(".")
    return "torch"


def _families(sweep: OpsSweep) -> list[str]:
    table: dict[str, dict[str, int]] = {}
    for record in sweep.records:
        row = table.setdefault(family(record.op), {})
        row[record.verdict] = row.get(record.verdict, 0) + 1
    kinds: dict[str, dict[str, int]] = {}
    for g in sweep.groups:
        row = kinds.setdefault(family(g.op), {})
        row[g.kind] = row.get(g.kind, 0) + 1
    verdicts = VERDICTS
    lines = [
        "## Per op family",
        "",
        "| family | " + " | ".join(verdicts) + " | groups by kind |",
        "| --- |" + " --- |" * (len(verdicts) + 1),
    ]
    for name in sorted(table):
        row = table[name]
        by_kind = ", ".join(f"{k} {n}" for k, n in sorted(kinds.get(name, {}).items()))
        lines.append(
            f"| {name} | " + " | ".join(f"{row.get(v, 0):,}" for v in verdicts) + f" | {by_kind} |"
        )
    return [*lines, ""]


def _skips(sweep: OpsSweep) -> list[str]:
    if not sweep.skips:
        return []
    lines = ["## Not compared, by reason", "", "| reason | count |", "| --- | --- |"]
    lines += [f"| {_cell(reason)} | {count:,} |" for reason, count in sweep.skips.items()]
    return [*lines, ""]


def _platform(sweep: OpsSweep) -> list[str]:
    flushed = sweep.platform.get("subnormal flushing")
    if not flushed:
        return []
    ops = ", ".join(f"`{o}`" for o in flushed["ops"][:60])
    more = f" and {len(flushed['ops']) - 60} more" if len(flushed["ops"]) > 60 else ""
    samples, count = _count(flushed["samples"], "sample"), _count(len(flushed["ops"]), "op")
    return [
        "## Subnormal flushing (the platform, once)",
        "",
        f"XLA:CPU flushes subnormal inputs and results to zero: {samples} differ only so, in "
        f"{count}: {ops}{more}.",
        "",
    ]


UNEVEN = "spmd_uneven_output_replicated"  # its report in docs/examples, checked by hand


def _lost(sweep: OpsSweep) -> list[str]:
    """--mesh: elementwise results not laid out as their inputs (memory, not values). A padded
    split lost is XLA's rule (a graph's only output not evenly partitioned is replicated, by
    design), counted once; an even split lost is a finding, listed."""
    if not sweep.lost_shardings:
        return []
    padded = [e for e in sweep.lost_shardings if e["padded"]["lost"]]
    even = [e for e in sweep.lost_shardings if e["even"]["lost"]]
    lines = ["## Results that lost their input's sharding (memory, not values)", ""]
    if padded:
        lost, checked = (sum(e["padded"][k] for e in padded) for k in ("lost", "checked"))
        lines += [
            f"Padded splits: {lost:,} of {checked:,} elementwise results of "
            f"{_count(len(padded), 'op')} came back replicated. XLA replicates a graph's only "
            "output whose sharding does not divide it evenly, by design; a graph of several "
            f"outputs (a training step's) keeps it (reprokit's report {UNEVEN}).",
            "",
        ]
    if not even:
        return [*lines, "No evenly split result lost its sharding.", ""]
    lines += [
        "Evenly split results that lost their input's sharding:",
        "",
        "| op | evenly split: lost of checked | padded: lost of checked | witness |",
        "| --- | --- | --- | --- |",
    ]
    for e in even:
        op = _op(e["op"], e["variant"])
        w = e["witness"]
        witness = f"sample {w['sample']}: {', '.join(w['tensors'])}, {w['shard']}: {w['lost']}"
        lines.append(
            f"| {op} | {e['even']['lost']} of {e['even']['checked']} | {e['padded']['lost']} of "
            f"{e['padded']['checked']} | {_cell(witness)} |"
        )
    return [*lines, ""]


def _cpu_wrong(sweep: OpsSweep) -> list[str]:
    if not sweep.cpu_wrong:
        return []
    lines = [
        "## Where CPU is the one far from float64 (torch's kernel, not XLA's)",
        "",
        "| op | dtype | pass | samples | example |",
        "| --- | --- | --- | --- | --- |",
    ]
    for e in sweep.cpu_wrong:
        op = _op(e["op"], e["variant"])
        passed = "backward" if e["grad"] else "forward"
        lines.append(f"| {op} | {e['dtype']} | {passed} | {e['samples']} | {_cell(e['detail'])} |")
    return [*lines, ""]


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def _cell(text: str) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 240 else text[:237] + "..."


def reports(folder: Path, out_dir: Path | None = None) -> Reports:
    """What ``reprokit report DIR`` gives for an ops folder: its report.md (in ``out_dir``)."""
    if not (Path(folder) / OPS).is_file():  # a sweep in several releases: their table
        from reprokit.reports.ops_releases import reports as across

        return across(folder, out_dir)
    sweep = read_ops(folder)
    target = Path(out_dir or folder)
    target.mkdir(parents=True, exist_ok=True)
    path = target / REPORT
    path.write_text(markdown(sweep), "utf-8")
    summary = RunSummary(started="", argv=tuple(sweep.argv), interrupted=sweep.interrupted)
    return Reports(summary, (path,), title=headline(sweep))
