"""``reprokit ops``: a differential sweep of torch's OpInfo database on XLA, every sample judged
against float64 relative to CPU's own error; each divergence one group with its smallest
witness and a repro that is run alone. docs/ops.md says what it covers and what it skips.

Two sides of a process boundary, one subpackage each, and what passes between them:

- harness/ (torch-free, in reprokit's process): sweep.py drives the rest; pool.py and
  cluster.py start and feed the workers; groups.py, stale.py and confirm.py read their
  answers; repro.py writes a group's repro; releases.py runs the sweep in several environments.
- worker/ (torch imported, in a child forked from the warm server): main.py is the child;
  samples.py, forms.py and dtypes.py make the samples; judge.py, reference.py, precision.py
  and explain.py judge them; pairs.py and features.py make the stale-graph and trigger samples.
- Between them: records/ops.py's :class:`~reprokit.records.ops.Sample`, one judged sample as
  the worker answers it and the harness reads it; and trigger.py, pure, which the harness
  learns a trigger with and the worker chooses a trigger's new samples by.
"""

from reprokit.tools.ops.harness.sweep import (
    ALL_DTYPES,
    DTYPES,
    OpsInterrupted,
    Progress,
    sweep_ops,
)

__all__ = ["ALL_DTYPES", "DTYPES", "OpsInterrupted", "Progress", "sweep_ops"]
