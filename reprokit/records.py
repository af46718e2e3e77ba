"""Every record that crosses a module boundary or the disk, torch-free.

Frozen dataclasses that round-trip through JSON (``to_json`` / ``from_json``), so that the
CLI, the pytest plugin, the reports and the tests read the same things, and so that reading a
summary never imports torch. summary.json is replaced atomically: a reader (or an interrupted
run) never sees half a file. Each idea is decided here, once: whether a stage failed, which
tensor is the first to diverge, how a comparison reads as a table row.
"""

from __future__ import annotations

import enum
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

SUMMARY = "summary.json"


class Outcome(enum.StrEnum):
    """How a variant ended (DESIGN.md "Outcomes")."""

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


def _from_json(cls: type, data: Mapping[str, Any], **convert: Any) -> Any:
    """``cls(**data)`` for the fields ``cls`` has (newer files may hold more), converted."""
    known = {f.name for f in fields(cls)}
    values = {k: v for k, v in data.items() if k in known}
    for key, function in convert.items():
        if key in values and values[key] is not None:
            values[key] = function(values[key])
    return cls(**values)


@dataclass(frozen=True)
class Stage:
    """One node of a script's stage DAG, as ``--list-stages`` prints it."""

    name: str
    backend: str
    needs: tuple[str, ...] = ()
    reference: str | None = None
    devices: int | None = None  # XLA devices the stage needs (virtual ones on CPU)
    arbiter: str | None = None  # a float64 stage judging target against reference

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "needs": list(self.needs)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Stage:
        return _from_json(cls, data, needs=tuple)


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

    @property
    def failed(self) -> bool:
        return self.status.failed

    def ended(self) -> str:
        """How the stage ended, in words: 'exited with code 3', 'died by SIGABRT'..."""
        if self.status is Status.SKIPPED:
            return f"was skipped ({self.reason})"
        if self.status is Status.TIMEOUT:
            return f"timed out ({self.reason})" if self.reason else "timed out"
        if self.signal:
            return f"died by {self.signal}"
        return f"exited with code {self.returncode}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StageResult:
        return _from_json(cls, data, status=Status)


def _finite(value: Any) -> Any:
    """JSON has no inf or NaN: write them as strings so that summary.json stays valid."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _number(value: Any) -> Any:
    """Back from :func:`_finite`: "inf" and "nan" as floats."""
    return float(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class Worst:
    """One of the worst elements of a differing tensor."""

    index: tuple[int, ...]
    target: float
    reference: float

    def to_json(self) -> dict[str, Any]:
        return {"index": list(self.index), "target": _finite(self.target),
                "reference": _finite(self.reference)}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Worst:
        return cls(tuple(data["index"]), _number(data["target"]), _number(data["reference"]))


@dataclass(frozen=True)
class Comparison:
    """How one named tensor of ``target`` differs from the same name in ``reference``."""

    tensor: str
    reference: str
    target: str
    shape: tuple[int, ...] | None  # None: the name is on one side only
    dtype: str | None
    max_abs: float
    max_rel: float
    mismatched: int
    total: int
    allclose: bool
    rtol: float = 0.0
    atol: float = 0.0
    equal: bool = False  # bitwise, NaNs in the same places counting as equal
    nan: tuple[int, int] = (0, 0)  # NaN counts: reference, target
    inf: tuple[int, int] = (0, 0)
    worst: tuple[Worst, ...] = ()
    note: str = ""  # why there is nothing to compare element-wise (shape, dtype, missing)
    method: str = "allclose"  # or "fp64": judged by the error against a float64 arbiter
    errors: tuple[float, float] | None = None  # fp64: RMSE of reference, of target

    @property
    def one_side(self) -> str | None:
        """The stage that alone has this tensor, or None when both do."""
        if self.shape is not None:
            return None
        return self.target if self.note == f"only in {self.target}" else self.reference

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(shape=None if self.shape is None else list(self.shape),
                    nan=list(self.nan), inf=list(self.inf),
                    worst=[w.to_json() for w in self.worst])  # fmt: skip
        data["errors"] = None if self.errors is None else [_finite(e) for e in self.errors]
        return {k: _finite(v) for k, v in data.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        return _from_json(
            cls,
            data,
            shape=tuple,
            max_abs=_number,
            max_rel=_number,
            nan=tuple,
            inf=tuple,
            worst=lambda ws: tuple(map(Worst.from_json, ws)),
            errors=lambda es: tuple(map(_number, es)),
        )

    def cells(self) -> dict[str, str]:
        """The comparison as table cells: one spelling for the CLI, report.md and report.html."""
        shape = "x".join(map(str, self.shape)) if self.shape else "scalar"
        return {
            "tensor": self.tensor,
            "stages": f"{self.target} vs {self.reference}",
            "shape": shape if self.shape is not None else "-",
            "dtype": self.dtype or "-",
            "max_abs": f"{self.max_abs:.3g}",
            "max_rel": f"{self.max_rel:.3g}",
            "mismatched": f"{self.mismatched:,} / {self.total:,}",
            "verdict": "equal" if self.equal else "close" if self.allclose else "differ",
            "note": self.note,
        }

    def describe(self) -> str:
        """A few lines in pytest.approx's manner: what differs, by how much, where."""
        if self.note:
            return f"{self.tensor}: {self.note}"
        lines = [
            f"{self.tensor} {self.dtype} {list(self.shape or ())}: {self.mismatched} / "
            f"{self.total} mismatched (rtol={self.rtol:g}, atol={self.atol:g})",
            f"  max abs diff {self.max_abs:.3g}, max rel diff {self.max_rel:.3g}",
        ]
        if self.errors is not None:
            lines.append(
                f"  RMSE against float64: {self.target} {self.errors[1]:.3g}, "
                f"{self.reference} {self.errors[0]:.3g}"
            )
        lines += [  # the reference first, as in `reprokit diff A B`
            f"  {self.reference}{list(w.index)} = {w.reference!r}, "
            f"{self.target}{list(w.index)} = {w.target!r}"
            for w in self.worst
        ]
        return "\n".join(lines)


def first_divergence(comparisons: Iterable[Comparison]) -> Comparison | None:
    """The first tensor outside tolerance, in the order the target stage saved them."""
    return next((c for c in comparisons if not c.allclose), None)


def divergence_summary(comparisons: Iterable[Comparison]) -> str:
    """First divergence in words: which tensors (in saved order: activations layer by layer)
    agree, and which is the first to differ, e.g. ``act.0 through act.2 agree; act.3 is the
    first to differ (512 / 512 mismatched, max abs 0.001)``. Names on one side are left out."""
    compared = [c for c in comparisons if c.shape is not None]
    first = first_divergence(compared)
    if first is None:
        if not compared:
            return "no tensor name in common"
        return f"all {len(compared)} tensors agree" if len(compared) > 1 else "the tensor agrees"
    before = compared[: compared.index(first)]
    if first.note:
        why = first.note
    else:
        why = f"{first.mismatched} / {first.total} mismatched, max abs {first.max_abs:.3g}"
    differs = f"{first.tensor} is the first to differ ({why})"
    if not before:
        return differs
    if len(before) == 1:
        return f"{before[0].tensor} agrees; {differs}"
    return f"{before[0].tensor} through {before[-1].tensor} agree; {differs}"


@dataclass(frozen=True)
class DiffSummary:
    """The counts at the end of a diff: each tensor counted once, so that they add up."""

    tensors: int
    equal: int  # bitwise equal
    close: int  # within tolerance, not equal
    differ: int  # outside tolerance
    only_in_reference: tuple[str, ...]
    only_in_target: tuple[str, ...]
    first_divergence: str | None
    divergence: str
    allclose: bool

    @classmethod
    def of(cls, comparisons: list[Comparison]) -> DiffSummary:
        compared = [c for c in comparisons if c.shape is not None]
        first = first_divergence(comparisons)
        return cls(
            tensors=len(comparisons),
            equal=sum(c.equal for c in compared),
            close=sum(c.allclose and not c.equal for c in compared),
            differ=sum(not c.allclose for c in compared),
            only_in_reference=tuple(c.tensor for c in comparisons if c.one_side == c.reference),
            only_in_target=tuple(c.tensor for c in comparisons if c.one_side == c.target),
            first_divergence=first.tensor if first else None,
            divergence=divergence_summary(comparisons),
            allclose=first is None,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {
            "only_in_reference": list(self.only_in_reference),
            "only_in_target": list(self.only_in_target),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DiffSummary:
        return _from_json(cls, data, only_in_reference=tuple, only_in_target=tuple)


MARKS = {True: "pass", False: "fail", None: "skip"}  # VariantResult.passed, in a word


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
    reason: str | None = None  # why it was skipped or failed, in a line
    title: str = ""  # the case's title and description, for the report
    description: str = ""

    @property
    def passed(self) -> bool | None:
        """Outcome as expected; None when skipped (neither passed nor failed)."""
        return None if self.outcome is Outcome.SKIPPED else self.outcome == self.expected

    @property
    def mark(self) -> str:
        return MARKS[self.passed]

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
        )
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VariantResult:
        return _from_json(
            cls,
            data,
            outcome=Outcome,
            expected=Outcome,
            stages=lambda items: tuple(map(StageResult.from_json, items)),
            comparisons=lambda items: tuple(map(Comparison.from_json, items)),
        )


@dataclass(frozen=True)
class Change:
    """One parameter the minimizer moved."""

    param: str
    before: Any
    after: Any


@dataclass(frozen=True)
class MinimizeResult:
    """What ``reprokit minimize`` found: the changes that keep the outcome, and the cost."""

    case: str
    target: str | None  # the outcome it kept, e.g. "mismatch (act.#)"
    changes: tuple[Change, ...]
    lines: tuple[int, int]  # script lines before, after
    candidates: int
    cache_hits: int
    seconds: float
    stopped: str  # done, budget or interrupted

    def describe(self) -> str:
        before = ", ".join(f"{c.param}={c.before!r}" for c in self.changes)
        after = ", ".join(f"{c.param}={c.after!r}" for c in self.changes)
        return (
            f"Minimized from `{before}` to `{after}` (script {self.lines[0]} -> "
            f"{self.lines[1]} lines, {self.candidates} candidate runs), still {self.target}."
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"changes": [asdict(c) for c in self.changes],
                               "lines": list(self.lines)}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MinimizeResult:
        return _from_json(cls, data, changes=lambda cs: tuple(Change(**c) for c in cs), lines=tuple)


@dataclass(frozen=True)
class Environment:
    """What a maintainer asks for first (reprokit.env captures it), secrets redacted."""

    python: str = "?"
    platform: str = "?"
    cpu_count: int | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    torch_xla_matches_torch: bool | None = None
    variables: dict[str, str] = field(default_factory=dict)
    xla: dict[str, Any] | None = None  # device kind and count, or why they are unknown
    pytorch: dict[str, str] = field(default_factory=dict)  # torch.utils.collect_env

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Environment:
        return _from_json(cls, data)

    def rows(self) -> list[tuple[str, str]]:
        """The few lines a maintainer reads first, for report tables."""
        rows = [("Python", self.python), ("Platform", self.platform)]
        rows += [(name, str(v)) for name, v in self.versions.items() if v]
        match = self.torch_xla_matches_torch
        if match is not None:
            rows.append(("torch / torch_xla match", "yes" if match else "NO"))
        xla = self.xla or {}
        if "device_kind" in xla:
            rows.append(("XLA devices", f"{xla['device_count']} x {xla['device_kind']}"))
            rows.append(("matmul precision", str(xla.get("matmul_precision"))))
        elif "error" in xla:
            rows.append(("XLA devices", xla["error"]))
        rows += list(self.variables.items())
        for key in ("os", "cpu_info", "nvidia_gpu_models", "is_cuda_available"):
            if key in self.pytorch:
                lines = self.pytorch[key].splitlines() or [""]
                rows.append((key, lines[0] if key != "cpu_info" else _cpu_model(lines)))
        return rows


def _cpu_model(lines: list[str]) -> str:
    return next((ln.split(":", 1)[1].strip() for ln in lines if "Model name" in ln), "?")


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

    def count(self, passed: bool | None) -> int:
        return sum(v.passed is passed for v in self.variants)

    def to_json(self) -> dict[str, Any]:
        run = {
            "started": self.started,
            "finished": self.finished,
            "argv": list(self.argv),
            "env": self.env.to_json(),
            "interrupted": self.interrupted,
        }
        if self.minimized is not None:
            run["minimized"] = self.minimized.to_json()
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
        )

    def with_variants(self, variants: Iterable[VariantResult], **changes: Any) -> RunSummary:
        return replace(self, variants=tuple(variants), **changes)


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as JSON atomically: a temporary file beside it, then os.replace."""
    text = json.dumps(data, indent=2, default=str) + "\n"
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def write_summary(summary: RunSummary, run_dir: Path) -> Path:
    """Write RUN_DIR/summary.json atomically."""
    return write_json(Path(run_dir) / SUMMARY, summary.to_json())


def read_summary(run_dir: Path) -> RunSummary:
    """RUN_DIR/summary.json as a :class:`RunSummary`."""
    return RunSummary.from_json(json.loads((Path(run_dir) / SUMMARY).read_text("utf-8")))
