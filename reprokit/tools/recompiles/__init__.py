"""``reprokit wrap --recompiles``: why a script's step compiled again (docs/recompiles.md).

read.py reads torch_xla's own record of the graphs it synced and compiled; explain.py says,
for each compile after the first, what differs from the nearest earlier one."""

from __future__ import annotations

from pathlib import Path

from reprokit.records._json import write_json
from reprokit.records.recompiles import COMPILES, GRAPHS, RECOMPILES, Recompiles
from reprokit.tools.recompiles.explain import explain
from reprokit.tools.recompiles.read import graph_files, read_analysis, read_syncs


# torch_xla's switches that make it write what read.py reads (its TROUBLESHOOTING guide).
def recording_env(stage_dir: Path) -> dict[str, str]:
    """The wrapped script's environment for recording its graphs into ``stage_dir``."""
    return {
        "XLA_IR_DEBUG": "1",  # each IR node carries the Python line that made it
        "XLA_SAVE_TENSORS_FILE": str(stage_dir / GRAPHS),
        "XLA_SAVE_TENSORS_FMT": "text",
        "PT_XLA_DEBUG_LEVEL": "1",  # its compilation analysis, at each compile
        "PT_XLA_DEBUG_FILE": str(stage_dir / COMPILES),
    }


def record_recompiles(stage_dir: Path) -> Recompiles | None:
    """Read what torch_xla wrote into ``stage_dir``, explain every compile, and write
    recompiles.json beside; None when the script synced no graph (it never used XLA)."""
    files = graph_files(stage_dir)
    if not files:
        return None
    syncs = read_syncs(files[0], read_analysis(stage_dir))  # the first device's process
    steps = sum(sync.step_end for sync in syncs)
    found = Recompiles(len(syncs), steps, tuple(explain(syncs)), tuple(p.name for p in files))
    write_json(stage_dir / RECOMPILES, found.to_json())
    return found
