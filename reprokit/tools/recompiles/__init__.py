"""``reprokit wrap --recompiles``: why a script's step compiled again (docs/recompiles.md).

read.py reads torch_xla's own record of the graphs it synced and compiled, hlo.py XLA's dump
of the programs it compiled; explain.py says, for each compile after the first of its place,
what differs from the nearest earlier one; repro.py cuts the script down to a repro of one."""

from __future__ import annotations

from pathlib import Path

from reprokit.records._json import write_json
from reprokit.records.recompiles import COMPILES, GRAPHS, HLO_DUMP, RECOMPILES, Recompiles
from reprokit.tools.recompiles.explain import explain
from reprokit.tools.recompiles.hlo import dump_flags, hlo_of
from reprokit.tools.recompiles.read import graph_files, read_analysis, read_syncs


def recording_env(stage_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """What recording the graphs into ``stage_dir`` adds to the script's ``env`` (its own
    XLA_FLAGS kept, the dump's appended): torch_xla's and XLA's own debugging switches (its
    TROUBLESHOOTING guide), which make them write what read.py and hlo.py read."""
    stage_dir = stage_dir.resolve()  # the script may change its folder: torch_xla's paths
    flags = " ".join(filter(None, (env.get("XLA_FLAGS"), dump_flags(stage_dir))))
    return {
        "XLA_FLAGS": flags,
        "XLA_HLO_DEBUG": "1",  # each HLO instruction carries the Python line too
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
    programs = hlo_of(stage_dir, sum(sync.compiled for sync in syncs))
    read = tuple(p.name for p in files) + ((HLO_DUMP,) if programs else ())
    found = Recompiles(len(syncs), steps, tuple(explain(syncs, programs)), read)
    write_json(stage_dir / RECOMPILES, found.to_json())
    return found
