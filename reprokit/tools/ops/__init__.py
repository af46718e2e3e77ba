"""``reprokit ops``: a differential sweep of torch's OpInfo database on XLA, every sample judged
against float64 relative to CPU's own error; each divergence one group with its smallest
witness and a repro that is run alone. docs/ops.md says what it covers and what it skips.

Two sides of a process boundary: the harness (harness.py, which drives the rest: pool.py and
cluster.py start and feed the workers, groups.py, stale.py, trigger.py and confirm.py read
their answers, releases.py runs it in several environments), torch-free; and the worker
(worker.py, run in a child: samples.py, forms.py and dtypes.py make the samples, judge.py,
reference.py, precision.py and explain.py judge them), which imports torch.
"""

from reprokit.tools.ops.harness import (
    ALL_DTYPES,
    DTYPES,
    OpsInterrupted,
    Progress,
    sweep_ops,
)

__all__ = ["ALL_DTYPES", "DTYPES", "OpsInterrupted", "Progress", "sweep_ops"]
