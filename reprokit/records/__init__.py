"""Every record that crosses a module boundary or the disk, torch-free.

Frozen dataclasses that round-trip through JSON (``to_json`` / ``from_json``), so that the
CLI, the pytest plugin, the reports and the tests read the same things, and so that reading a
summary never imports torch. Each idea is decided here, once: whether a stage failed, which
tensor is the first to diverge, how a comparison reads as a table row.
"""

from reprokit.records._json import write_json
from reprokit.records.comparison import (
    Comparison,
    DiffSummary,
    Root,
    Worst,
    divergence_summary,
    first_divergence,
)
from reprokit.records.environment import Environment, EnvSpec
from reprokit.records.minimize import Change, GraphShrink, MinimizeResult, Step, Whose
from reprokit.records.report import Reports
from reprokit.records.run import (
    MARKS,
    SUMMARY,
    Machine,
    Outcome,
    RunSummary,
    Stage,
    StageResult,
    Status,
    Triage,
    VariantResult,
    read_summary,
    write_summary,
)
from reprokit.records.xla import METRICS, Timed, XlaEvidence

__all__ = [
    "MARKS",
    "METRICS",
    "SUMMARY",
    "Change",
    "Comparison",
    "DiffSummary",
    "EnvSpec",
    "Environment",
    "GraphShrink",
    "Machine",
    "MinimizeResult",
    "Outcome",
    "Reports",
    "Root",
    "RunSummary",
    "Stage",
    "StageResult",
    "Status",
    "Step",
    "Timed",
    "Triage",
    "VariantResult",
    "Whose",
    "Worst",
    "XlaEvidence",
    "divergence_summary",
    "first_divergence",
    "read_summary",
    "write_json",
    "write_summary",
]
