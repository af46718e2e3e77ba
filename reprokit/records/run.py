"""What a run produces: outcomes, stages and their results, each variant's verdict, and
summary.json (the minimizer's result, which it may hold, is in records/minimize.py)."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from reprokit.records._json import from_json, write_json
from reprokit.records.comparison import Comparison, Root, divergence_summary
from reprokit.records.environment import Environment, EnvSpec
from reprokit.records.minimize import MinimizeResult
from reprokit.records.xla import XlaEvidence

SUMMARY = "summary.json"
EXPORTED = "exported_program"  # the template of a program captured for inference (capture)
TRAINING = "training_program"  # and of a training step (capture --train)
PROGRAM = "program"  # both templates' parameter: the .pt2 the variant runs


def captured(params: Mapping[str, Any]) -> bool:
    """Whether a variant's ``params`` run a captured program (a ``program`` of either template):
    the one predicate, for a variant (generate) and its record (here)."""
    return bool(params.get(PROGRAM))


class Outcome(enum.StrEnum):
    """How a variant ended (docs/contract.md, "Outcomes")."""

    MATCH = "match"
    MISMATCH = "mismatch"
    ERROR = "error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"


class Status(enum.StrEnum):
    """How one stage (one child process) ended."""

    OK = "ok"
    ERROR = "error"  # exited non-zero
    CRASH = "crash"  # died by a signal (os.abort gives SIGABRT)
    TIMEOUT = "timeout"  # outlived its timeout; its group was killed
    SKIPPED = "skipped"  # never started: a stage it needs failed, or no backend here
    INTERRUPTED = "interrupted"  # stopped because the run was interrupted

    @property
    def failed(self) -> bool:
        """The one definition of a failed stage: it ran and did not end well by itself."""
        return self in (Status.ERROR, Status.CRASH, Status.TIMEOUT)

    @property
    def outcome(self) -> Outcome | None:
        """The variant outcome a failed stage gives."""
        return Outcome(self.value) if self.failed else None


@dataclass(frozen=True)
class Stage:
    """One node of a script's stage DAG, as ``--list-stages`` prints it."""

    name: str
    backend: str
    needs: tuple[str, ...] = ()
    reference: str | None = None
    devices: int | None = None  # XLA devices the stage needs (virtual ones on CPU)
    arbiter: str | None = None  # a float64 stage judging target against reference
    # a captured program's XLA variants of stage ``of`` (docs/verdicts.md): "faithful" (the
    # program as captured, outputs only: their verdict) or "isolated" (each operation alone)
    role: str | None = None
    of: str | None = None
    # NAME=REQUIREMENTS: the stage runs in that environment's python (environment/uv.py)
    env: str | None = None
    # runs only where the variant's other stages, judged first, do not match: it localises
    # what they found (a captured program's xla stage, recording every operation)
    on_mismatch: bool = False
    # runs with the others and, where they do not match, again with ``--localise``, its second
    # result replacing the first (a captured program's CPU stages: outputs, then every operation)
    again_on_mismatch: bool = False

    def to_json(self) -> dict[str, Any]:
        found = {**asdict(self), "needs": list(self.needs)}
        optional = ("env", "on_mismatch", "again_on_mismatch")
        unset = {k for k in optional if not found[k]}  # written only where set
        return {k: v for k, v in found.items() if k not in unset}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Stage:
        return from_json(cls, data, needs=tuple)


@dataclass(frozen=True)
class StageResult:
    """How one stage of one variant ended."""

    name: str
    backend: str
    status: Status
    returncode: int | None = None
    signal: str | None = None  # e.g. SIGABRT, when the stage died by a signal
    seconds: float = 0.0
    reason: str | None = None  # why it was skipped, or what else went wrong
    metrics: dict[str, Any] = field(default_factory=dict)  # from its result.json
    described: dict[str, dict[str, Any]] = field(default_factory=dict)  # its tensors: op, source
    xla: XlaEvidence | None = None  # what torch_xla saw: devices, compilations, fallbacks
    error: str | None = None  # a failed stage's exception, e.g. "AssertionError: ..."
    stderr_tail: tuple[str, ...] = ()  # a failed stage's last words
    stdout_tail: tuple[str, ...] = ()  # what a wrapped script printed last (reprokit wrap)
    reused: str | None = None  # the run folder whose result the results cache gave instead
    versions: dict[str, str | None] | None = None  # torch, torch_xla as the stage imported them
    host: str | None = None  # the machine it ran on, when not this one (a Ray node)
    started: str | None = None  # "warm" (forked) or "cold: why"; None: never started, or older
    localised: bool = False  # result.json: it recorded what localises (an again stage: once)

    def __post_init__(self) -> None:  # result.json's dict, as a stage's executor reads it
        if isinstance(self.xla, Mapping):
            object.__setattr__(self, "xla", XlaEvidence.from_json(self.xla))

    @property
    def failed(self) -> bool:
        return self.status.failed

    def ended(self) -> str:
        """How the stage ended, in words: 'exited with code 3', 'died by SIGABRT'..."""
        if self.status is Status.SKIPPED:
            return f"was skipped ({self.reason})"
        if self.status is Status.TIMEOUT:
            return f"timed out ({self.reason})" if self.reason else "timed out"
        why = f": {self.error}" if self.error else ""
        if self.signal:
            return f"died by {self.signal}{why}"
        return f"exited with code {self.returncode}{why}"

    def to_json(self) -> dict[str, Any]:
        xla = self.xla.to_json() if self.xla is not None else None
        found = asdict(self) | {"status": self.status.value, "stderr_tail": list(self.stderr_tail),
                                "stdout_tail": list(self.stdout_tail), "xla": xla}  # fmt: skip
        if not self.localised:  # written only where set (summaries before it stay as they were)
            del found["localised"]
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StageResult:
        tails = {"stderr_tail": tuple, "stdout_tail": tuple}
        return from_json(cls, data, status=Status, **tails)  # xla: __post_init__

    def uncached(self) -> int | None:
        """See :meth:`XlaEvidence.uncached`; None for a stage with no XLA evidence."""
        return self.xla.uncached() if self.xla is not None else None


MARKS = {True: "pass", False: "fail", None: "skip"}  # VariantResult.passed, in a word


class Triage(enum.StrEnum):
    """What a mismatch did when run again more precisely (tools/triage.py): a label of what
    was observed, not a verdict on whose bug it is."""

    HIGHEST = "highest"  # gone at matmul_precision = "highest"
    FLOAT32 = "float32"  # gone in float32 (it ran in a half type), at highest precision
    PERSISTS = "persists"  # still there in both: worth a closer look

    @property
    def said(self) -> str:
        """The label in words, as the console and the report say it."""
        return _TRIAGE_SAID[self]


_TRIAGE_SAID = {
    Triage.HIGHEST: "goes away at highest matmul precision",
    Triage.FLOAT32: "goes away in float32 (at highest matmul precision)",
    Triage.PERSISTS: "persists at highest matmul precision (and in float32, had it run in a "
    "half type)",
}


@dataclass(frozen=True)
class VariantResult:
    """One variant's verdict, its stages, and its comparisons."""

    case: str
    label: str  # the folder name under RUN_DIR: ``case`` or ``case[a-b]``
    variant: dict[str, Any]  # its params
    outcome: Outcome
    expected: Outcome
    seconds: float
    stages: tuple[StageResult, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    first_divergence: dict[str, str | None] = field(default_factory=dict)
    # where each difference is born, those reaching an output first (comparison/roots.py);
    # empty in a match and in runs written before roots were recorded
    roots: tuple[Root, ...] = ()
    reason: str | None = None  # why it was skipped or failed, in a line
    title: str = ""  # the case's title and description, for the report
    description: str = ""
    changed: dict[str, Any] = field(default_factory=dict)  # params not at the template's default
    expected_from: str | None = None  # the case's table that gave `expected`: [expect.tpu]...
    observed: str | None = None  # where that table says its outcome was seen ([expect] observed)
    env: EnvSpec | None = None  # the environment it ran in (--env, [envs])
    # what its script sets at its top: the case's [variables] (named in case_variables) and
    # the steering variables exported when it ran (environment.variables.carried)
    variables: dict[str, str] = field(default_factory=dict)
    case_variables: tuple[str, ...] = ()
    # Verdicts you can trust (docs/verdicts.md); None or empty: not checked (older runs too).
    # triage: a mismatch run again at highest matmul precision and in float32 ("highest",
    # "float32": it went away so; "persists"); expected_triage: the case's [expect] triage
    triage: str | None = None
    expected_triage: str | None = None
    # fusion_sensitive: the faithful run's outputs and the instrumented run's disagree;
    # own_divergence: per instrumented stage, the first operation whose own error (run
    # alone on CPU's inputs) is beyond the bound
    fusion_sensitive: bool | None = None
    fusion: tuple[Comparison, ...] = ()  # the faithful outputs against the instrumented ones
    fusion_nodes: tuple[str, ...] = ()  # narrow = true: the fewest recordings that change them
    own_divergence: dict[str, str | None] = field(default_factory=dict)
    # judged on the stages that ran first (a captured program's outputs): its on_mismatch
    # stages, which localise, were left out because those matched
    outputs_only: bool = False

    def __post_init__(self) -> None:  # the dict it was: {"name": ..., "requirements": [...]}
        if isinstance(self.env, Mapping):
            object.__setattr__(self, "env", EnvSpec.from_json(self.env))

    @property
    def captured(self) -> bool:
        return captured(self.variant)

    @property
    def base_label(self) -> str:
        """The label without its environment: ``case[a]@2.8`` -> ``case[a]``."""
        return self.label.removesuffix(f"@{self.env.name}") if self.env else self.label

    @property
    def passed(self) -> bool | None:
        """Outcome (and triage, when the case expects one) as expected; None when skipped
        (neither passed nor failed)."""
        if self.outcome is Outcome.SKIPPED:
            return None
        triaged = self.expected_triage is None or self.triage == self.expected_triage
        return self.outcome == self.expected and triaged

    @property
    def mark(self) -> str:
        return MARKS[self.passed]

    @property
    def expectation(self) -> str:
        """The expected outcome, with the case's table that gave it when one for the device
        the XLA stages ran on did: ``mismatch ([expect.tpu])``."""
        specific = self.expected_from not in (None, "[expect]")
        return f"{self.expected.value} ({self.expected_from})" if specific else self.expected.value

    @property
    def failed_stage(self) -> StageResult | None:
        """The first stage (in DAG order) that failed."""
        return next((s for s in self.stages if s.failed), None)

    def divergence(self, target: str) -> str:
        """Where ``target`` first leaves its reference, in words."""
        return divergence_summary(c for c in self.comparisons if c.target == target)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            outcome=self.outcome.value,
            expected=self.expected.value,
            passed=self.passed,
            stages=[s.to_json() for s in self.stages],
            comparisons=[c.to_json() for c in self.comparisons],
            roots=[r.to_json() for r in self.roots],
            fusion=[c.to_json() for c in self.fusion],
            fusion_nodes=list(self.fusion_nodes),
            env=self.env.to_json() if self.env is not None else None,
        )
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VariantResult:
        return from_json(
            cls,
            data,
            outcome=Outcome,
            expected=Outcome,
            stages=lambda items: tuple(map(StageResult.from_json, items)),
            comparisons=lambda items: tuple(map(Comparison.from_json, items)),
            roots=lambda items: tuple(map(Root.from_json, items)),
            fusion=lambda items: tuple(map(Comparison.from_json, items)),
            fusion_nodes=tuple,
            case_variables=tuple,
        )  # env: __post_init__


@dataclass(frozen=True)
class Machine:
    """One run folder that ``reprokit merge`` took stage results from: the machine it ran
    on, and which of the merged stages are its."""

    run: str  # the run folder, as given to merge
    env: Environment
    stages: tuple[str, ...]  # the stages it gave, by name (of any variant)
    xla_device: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"env": self.env.to_json(), "stages": list(self.stages)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Machine:
        return from_json(cls, data, env=Environment.from_json, stages=tuple)


@dataclass(frozen=True)
class RunSummary:
    """The whole run: what summary.json holds."""

    started: str
    finished: str | None = None
    argv: tuple[str, ...] = ()
    env: Environment = field(default_factory=Environment)
    variants: tuple[VariantResult, ...] = ()
    interrupted: bool = False
    minimized: MinimizeResult | None = None  # a folder `reprokit minimize` wrote
    xla_device: str | None = None  # the XLA device kind the run asked for (--xla-device)
    machines: tuple[Machine, ...] = ()  # a merged run: the runs (machines) it was merged from

    def count(self, passed: bool | None) -> int:
        return sum(v.passed is passed for v in self.variants)

    def to_json(self) -> dict[str, Any]:
        run = {
            "started": self.started,
            "finished": self.finished,
            "argv": list(self.argv),
            "env": self.env.to_json(),
            "interrupted": self.interrupted,
            "xla_device": self.xla_device,
        }
        if self.minimized is not None:
            run["minimized"] = self.minimized.to_json()
        if self.machines:
            run["machines"] = [m.to_json() for m in self.machines]
        return {"run": run, "variants": [v.to_json() for v in self.variants]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        run = data["run"]
        return cls(
            started=run["started"],
            finished=run["finished"],
            argv=tuple(run["argv"]),
            env=Environment.from_json(run["env"]),
            variants=tuple(map(VariantResult.from_json, data["variants"])),
            interrupted=run.get("interrupted", False),
            minimized=run.get("minimized") and MinimizeResult.from_json(run["minimized"]),
            xla_device=run.get("xla_device"),
            machines=tuple(map(Machine.from_json, run.get("machines", ()))),
        )

    def with_variants(self, variants: Iterable[VariantResult], **changes: Any) -> RunSummary:
        return replace(self, variants=tuple(variants), **changes)


def write_summary(
    summary: RunSummary,
    run_dir: Path,
    variants: list[dict[str, Any]] | None = None,
    *,
    compact: bool = False,
) -> Path:
    """Write RUN_DIR/summary.json atomically. A run rewrites it as each variant ends: it gives
    the variants' JSON made once (``variants``; made anew each time, they cost the square of
    their number, seconds for a suite), and writes it ``compact`` until the last write."""
    if variants is None:
        data = summary.to_json()
    else:
        data = replace(summary, variants=()).to_json() | {"variants": variants}
    return write_json(Path(run_dir) / SUMMARY, data, compact=compact)


def read_summary(run_dir: Path) -> RunSummary:
    """RUN_DIR/summary.json as a :class:`RunSummary`."""
    return RunSummary.from_json(json.loads((Path(run_dir) / SUMMARY).read_text("utf-8")))
