"""What ``reprokit ops`` writes: DIR/ops.json, every OpInfo sample's verdict on each backend,
the skips with their reasons, and the divergences as groups (one per op, backend, kind and
pass, with the dtypes it shows in, its smallest witness and its repro). Torch-free: reports
read it without torch."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from reprokit.records._json import from_json, write_json

OPS = "ops.json"
REPROS = "repro_*"  # every group's repro and its tensors, in the sweep's folder
ALONE_RUNS = ".alone"  # in the sweep's folder: each repro's run alone
WORKERS_SCRATCH = ".workers"  # and the workers' job files and logs


def repro_name(group_id: str, suffix: str = ".py") -> str:
    """A group's repro (``suffix`` ".pt": its tensors), beside ops.json."""
    return f"repro_{group_id}{suffix}"


def hlo_name(group_id: str, when: str) -> str:
    """A sharded group's HLO ``when`` ("before", "after") XLA's SPMD partitioner, beside it."""
    return f"hlo_{group_id}.{when}_partitioning.txt"


# stale-graph: right alone, wrong right after a call with other non-tensor arguments (the
# witness's ``arg`` names them): the graph compiled for that call reused
# (tools/ops/harness/stale.py)
KINDS = ("value", "nan-inf", "dtype", "shape", "error", "crash", "hang", "stale-graph")


VERDICTS = ("match", "differs", "precision", "skip", "platform", "cpu_wrong")

# How a sample called its op beyond OpInfo's own call ("" for that): through the op's Python
# operator (``x >> y``), with a Python number as its second operand (``x >> 2``), or both;
# what each means in a title (tools/ops/worker/forms.py makes them)
FORMS = {
    "operator": "its operator",
    "number": "a Python-number operand",
    "operator, number": "its operator, a Python-number operand",
}


@dataclass(frozen=True)
class Sample:
    """One OpInfo sample judged on one backend: the record the op sweep's two sides share. The
    worker (tools/ops/worker/main.py, with torch) answers the fields from ``sample`` on, one
    JSON line; the harness (tools/ops/harness/, torch-free) stamps the task's fields and reads
    nothing else. ops.json keeps one per sample, without its source."""

    # The task (the harness's stamp): an op in a dtype on a backend, forward or backward,
    # OpInfo's samples or the edge values'
    op: str
    variant: str
    dtype: str
    backend: str
    grad: bool
    edge: bool
    # The worker's answer
    sample: int  # its index among the task's samples; -1: the task's own (not run, refused)
    verdict: str  # one of VERDICTS
    inplace: bool = False  # the op's in-place variant, forward
    kind: str = ""  # differs: one of KINDS
    detail: str = ""  # differs, cpu_wrong: the difference in one line
    reason: str = ""  # skip, platform: why
    note: str = ""  # match: how it was compared ("index ties: values compared")
    ties: bool = False  # match: an index result tied, its values compared
    described: dict[str, Any] = field(default_factory=dict)  # tensors, kwargs, numel, features
    leaf: int = 0  # the result judged (of a tuple, of the gradients)
    seconds: float = 0.0
    owner: str = ""  # "torch": CPU itself far from float64 there
    cause: str = ""  # the op whose divergence this is, named there ("mean" of a loss)
    code: dict[str, Any] | None = None  # its source for a repro (A, K, G, saved; or unwritable)
    # A stale-graph candidate (worker/pairs.py): ``stale`` says the earlier sample whose graph
    # explains XLA's answer (after) and the arguments that differ (args); ``pair`` both calls'
    # source. A probe (one argument changed on sample ``base``) is kept only as such a pair.
    stale: dict[str, Any] = field(default_factory=dict)
    pair: dict[str, Any] | None = None
    probe: bool = False
    base: int | None = None
    arg: str = ""  # confirmed (harness/stale.py): the arguments the reused graph ignores
    was: str = ""  # and the kind the sweep gave it first
    # precision (worker/precision.py): XLA's and CPU's sizes in ulps at the terms' magnitude,
    # XLA's at the result, the share of the bound used, the dtypes intermediates are kept in
    ulps: float = 0.0
    cpu_ulps: float = 0.0
    result_ulps: float = 0.0
    of_bound: float = 0.0
    intermediates: str = ""
    cpu_intermediates: str = ""
    terms: str = ""  # how the terms were taken (the Jacobian, or estimated from below)
    form: str = ""  # a call form OpInfo's samples leave out: one of FORMS
    shard: str = ""  # --mesh: how its tensor arguments were sharded (worker/sharding.py)
    mesh: list[int] = field(default_factory=list)  # and on which mesh of devices
    # --mesh, elementwise: "kept" (its result laid out as its input) or "input's -> result's"
    layout: str = ""

    @property
    def differs(self) -> bool:
        return self.verdict == "differs"

    def to_json(self) -> dict[str, Any]:
        """The task's fields and the verdict always, the others where they are not empty:
        the JSON line and the record of ops.json the sweep has always written."""
        kept = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _ALWAYS or value != _EMPTY[f.name]:
                kept[f.name] = value
        return kept

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sample:
        return from_json(cls, data)

    @classmethod
    def stamped(cls, task: Mapping[str, Any], answer: Mapping[str, Any]) -> Sample:
        """The worker's ``answer`` of one sample of ``task`` (op, variant, dtype, backend,
        grad, edge, inplace)."""
        return from_json(cls, {**answer, **task})


_ALWAYS = ("op", "variant", "dtype", "backend", "grad", "edge", "sample", "verdict")
_EMPTY = {
    f.name: f.default_factory() if f.default_factory is not MISSING else f.default
    for f in fields(Sample)
}


@dataclass(frozen=True)
class Group:
    """One divergence: an op's results on one backend that differ from CPU's and float64's in
    one way (``kind``), forward or backward, in ``dtypes``; its smallest sample (``witness``)
    and the repro made of it (``repro``, relative to DIR; None where the sample has no source,
    ``why_no_repro`` says why)."""

    id: str  # the repro's name: repro_<id>.py
    op: str  # the OpInfo name: nn.functional.softplus
    variant: str  # OpInfo's variant_test_name, "" for none
    backend: str
    dtypes: tuple[str, ...]
    kind: str  # one of KINDS
    grad: bool
    witness: dict[str, Any]  # dtype, edge, sample (its index), described, detail
    samples: int  # how many samples show it
    repro: str | None = None
    reproduces_alone: bool | None = None  # the repro run alone showed it (None: not run)
    alone_output: str = ""  # what the repro printed, run alone
    why_no_repro: str = ""
    owner: str = ""  # "torch": CPU itself far from float64 there
    known: str = ""  # the report of docs/examples it matches
    inplace: bool = False  # the op's in-place variant (``x.abs_()``), forward
    # What separates its op's differing samples from its agreeing ones: condition, rule,
    # differs [meet, of], agrees [do not meet, of], and on new samples made to meet and break
    # it: new, confirmed, refuted, tested (tools/ops/trigger.py); {} in older files
    trigger: dict[str, Any] = field(default_factory=dict)
    since: str = ""  # its repro's releases (records/since.py: reprokit bisect); "" not bisected
    # The op whose own divergence this is, named once there: "mean" where a loss's terms agree
    # and its reduction by mean (float16's sum overflowing) makes the difference; "" none
    cause: str = ""
    form: str = ""  # the call form its samples used: one of FORMS, "" for OpInfo's own call
    shard: str = ""  # --mesh: the sharding its witness differs under, against unsharded XLA
    shards: tuple[str, ...] = ()  # --mesh: every sharding its samples differ under
    spared: tuple[str, ...] = ()  # --mesh: the shardings its op's samples all match under
    hlo: tuple[str, ...] = ()  # --mesh: its repro's HLO before and after SPMD partitioning

    @property
    def passed(self) -> str:
        """Which pass: forward, backward or in-place, and the call form where there is one
        ("forward, operator, number": ``x >> 2``)."""
        passed = "in-place" if self.inplace else "backward" if self.grad else "forward"
        if self.shard:
            spared = f" (not {', '.join(self.spared)})" if self.spared else ""
            passed += f", sharded {'; '.join(self.shards or (self.shard,))}{spared}"
        return f"{passed}, {self.form}" if self.form else passed

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {k: list(getattr(self, k)) for k in _LISTS}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Group:
        return from_json(cls, data, **dict.fromkeys(_LISTS, tuple))


_LISTS = ("dtypes", "shards", "spared", "hlo")  # a Group's tuples, lists in JSON


@dataclass(frozen=True)
class OpsSweep:
    """One sweep: what was asked, what ran, and what it found."""

    argv: list[str]
    versions: dict[str, str]
    backends: tuple[str, ...]
    dtypes: tuple[str, ...]
    grad: bool
    edge: bool
    seconds: float
    inplace: bool = False  # the in-place variants swept too
    mesh: tuple[int, ...] = ()  # --mesh: each sample sharded on it, against itself unsharded
    interrupted: bool = False
    ops: list[dict[str, Any]] = field(default_factory=list)  # op, variant, dtypes, counts, skip
    skips: dict[str, int] = field(default_factory=dict)  # reason -> samples
    platform: dict[str, Any] = field(default_factory=dict)  # subnormal flushing: count, ops
    cpu_wrong: list[dict[str, Any]] = field(default_factory=list)  # torch's own kernel off
    # --mesh: elementwise ops whose result lost its input's sharding (harness/sharded.py)
    lost_shardings: list[dict[str, Any]] = field(default_factory=list)
    groups: tuple[Group, ...] = ()
    records: list[Sample] = field(default_factory=list)  # every sample's verdict
    tasks: int = 0  # ops x dtypes x passes x sample sets (OpInfo's, the edge values')
    cached: int = 0  # of them, those whose samples came from the results cache
    timings: dict[str, float] = field(default_factory=dict)  # seconds: samples, repros alone
    # Pairs of calls checked for a reused compiled graph: ops_checked, probes, candidates,
    # rechecked, found (tools/ops/harness/stale.py); {} in files older than the check
    stale_graph: dict[str, int] = field(default_factory=dict)
    # Differences a half type's rounding explains, apart from the groups: one per op and pass,
    # with dtypes, samples, size in ulps, the dtype kept for intermediates and a witness
    # (tools/ops/worker/precision.py); [] in older files
    precision: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(replace(self, groups=(), records=[]))  # those two are written below
        data |= {"backends": list(self.backends), "dtypes": list(self.dtypes)}
        records = [r.to_json() for r in self.records]
        return data | {"groups": [g.to_json() for g in self.groups], "records": records}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OpsSweep:
        groups = tuple(Group.from_json(g) for g in data.get("groups", ()))
        records = [Sample.from_json(r) for r in data.get("records", ())]
        sweep = from_json(cls, data, backends=tuple, dtypes=tuple, mesh=tuple)
        return replace(sweep, groups=groups, records=records)

    def counts(self) -> dict[str, int]:
        """Samples by verdict."""
        found: dict[str, int] = {}
        for record in self.records:
            found[record.verdict] = found.get(record.verdict, 0) + 1
        return found


def write_ops(folder: Path, sweep: OpsSweep) -> Path:
    return write_json(Path(folder) / OPS, sweep.to_json(), compact=True)


def read_ops(folder: Path) -> OpsSweep:
    return OpsSweep.from_json(json.loads((Path(folder) / OPS).read_text("utf-8")))
