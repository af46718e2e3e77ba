"""What torch_xla saw in a stage: its devices, compilations, executions, transfers and the
operations that fell back to the CPU, told apart from the reads of a value back to Python
(``.item()``: :data:`HOST_READS`), which torch_xla counts among its fallbacks.

Two producers write it: every rendered script, at the end of an XLA stage (``xla_evidence()``
in templates/_protocol.py.j2, which asks torch_xla's metrics directly: a script is standalone,
so it keeps its own copy of the metric names), and ``reprokit wrap``, which reads the metrics
report torch_xla writes (``XLA_METRICS_FILE``). Both write the same JSON, the script's; this
record reads it, and :data:`METRICS` is the one list of metric names on reprokit's side
(tests/records/test_records.py checks that the template's copy agrees).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reprokit.records._json import from_json

# Each figure of the record and torch_xla's metrics that make it: SPMD executions are
# "replicated" ones, counted with the others.
METRICS: dict[str, tuple[str, ...]] = {
    "compile": ("CompileTime",),
    "execute": ("ExecuteTime", "ExecuteReplicatedTime"),
    "to_device": ("TransferToDeviceTime",),
    "from_device": ("TransferFromDeviceTime",),
}
CACHED = "CachedCompile"  # torch_xla's counter of compilations its cache gave
# Operations torch_xla runs through its CPU fallback (and so counts under ``aten::`` and lists
# among executed_fallback_ops()) that are no missing lowering but a read of a value the device
# has already computed: ``aten::_local_scalar_dense`` is ``.item()``, ``bool(t)``, ``int(t)``,
# a tensor in an ``if``, each one transfer from the device. ``.cpu()``, ``.tolist()`` and
# printing a tensor are counted under ``xla::`` (``_to_copy``), never as fallbacks, and
# ``aten::equal``, ``aten::nonzero`` stay fallbacks: their work itself runs on the CPU.
HOST_READS = frozenset({"aten::_local_scalar_dense"})


@dataclass(frozen=True)
class Timed:
    """How many times torch_xla did one thing, and the seconds it took in all."""

    count: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Timed:
        return from_json(cls, data)


@dataclass(frozen=True)
class XlaEvidence:
    """torch_xla's account of one stage, as result.json and summary.json hold it."""

    device_kind: str | None = None  # CPU, TPU, CUDA; None: not known (reprokit wrap)
    devices: int | None = None  # the runtime's global device count
    compile: Timed = field(default_factory=Timed)
    cached: int = 0  # compilations that came from torch_xla's cache
    execute: Timed = field(default_factory=Timed)
    to_device: Timed = field(default_factory=Timed)
    from_device: Timed = field(default_factory=Timed)
    fallbacks: tuple[str, ...] = ()  # aten operations that ran on the CPU instead, sorted
    fallback_counts: dict[str, int] = field(default_factory=dict)  # how often, when known
    host_reads: tuple[str, ...] = ()  # HOST_READS operations it ran (counts: fallback_counts)

    def __post_init__(self) -> None:
        """Host reads are kept apart from the fallbacks whoever wrote the record: a script's
        executed_fallback_ops() and older summaries list ``.item()`` among them."""
        reads = {name for name in self.fallbacks if name in HOST_READS} | set(self.host_reads)
        kept = tuple(name for name in self.fallbacks if name not in HOST_READS)
        object.__setattr__(self, "fallbacks", kept)
        object.__setattr__(self, "host_reads", tuple(sorted(reads)))

    @classmethod
    def from_metrics(
        cls,
        metric: Callable[[str], tuple[int, float]],
        *,
        cached: int = 0,
        fallbacks: Iterable[str] = (),
        fallback_counts: Mapping[str, int] | None = None,
        device_kind: str | None = None,
        devices: int | None = None,
    ) -> XlaEvidence:
        """From torch_xla's metrics: ``metric(name)`` gives a metric's samples and seconds
        (0, 0.0 when torch_xla has none of it); each figure adds up the METRICS it names."""

        def timed(names: tuple[str, ...]) -> Timed:
            found = [metric(name) for name in names]
            return Timed(sum(f[0] for f in found), round(sum(f[1] for f in found), 4))

        figures = {key: timed(names) for key, names in METRICS.items()}
        return cls(
            device_kind=device_kind,
            devices=devices,
            cached=cached,
            fallbacks=tuple(sorted(set(fallbacks))),
            fallback_counts=dict(fallback_counts or {}),
            **figures,
        )

    def to_json(self) -> dict[str, Any]:
        """The script's JSON (device_kind and devices left out when unknown, as wrap wrote)."""
        data: dict[str, Any] = {}
        if self.device_kind is not None or self.devices is not None:
            data |= {"device_kind": self.device_kind, "devices": self.devices}
        data |= {key: getattr(self, key).to_json() for key in METRICS}
        data |= {"cached": self.cached, "fallbacks": list(self.fallbacks)}
        if self.fallback_counts:
            data["fallback_counts"] = dict(self.fallback_counts)
        if self.host_reads:
            data["host_reads"] = list(self.host_reads)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> XlaEvidence:
        timed = {key: Timed.from_json for key in METRICS}
        return from_json(cls, data, fallbacks=tuple, host_reads=tuple, **timed)

    def host_read_count(self) -> int | None:
        """How many values the stage read back to Python (``.item()`` and the like), when
        torch_xla's counters say it (``reprokit wrap``); None when not known."""
        if not self.host_reads or any(n not in self.fallback_counts for n in self.host_reads):
            return None
        return sum(self.fallback_counts[name] for name in self.host_reads)

    def uncached(self) -> int | None:
        """How many of its compilations came from no cache, when every execution needed one
        (a loop then compiles anew each step), else None."""
        compiled, executed = self.compile.count, self.execute.count
        if compiled > 2 and compiled >= executed and not self.cached:
            return compiled
        return None
