"""The environment variables that matter, named once: which ones each part of reprokit looks at.

They are several sets because they answer several questions, and the answers differ on
purpose:

- :data:`XLA_VARIABLES`: what the environment capture *shows* a maintainer (summary.json,
  report.md): torch_xla's, PJRT's, the TPU runtime's. Narrow, as a report is read by people.
- :data:`STEERING`: what can change a stage's *result*, so the results cache keys on it:
  XLA_VARIABLES' families and more (torch, CUDA, NCCL, the thread pools, the hash seed,
  reprokit's own). Wide: a variable left out would reuse a result it should not.
- :data:`RUNTIME_READ`: what torch_xla reads only when its runtime starts, in the stage, and
  not at import; the warm start server may differ in these from the stage it forks (and
  must, for the device count), so they are left out of a server's identity.
- :data:`NODE_OWN`: the STEERING variables that a Ray node sets for its own devices
  (CUDA_VISIBLE_DEVICES, TPU_VISIBLE_CHIPS): the driver's values do not travel to a task.
- :data:`RAY_SETS`: what Ray sets in every task (OMP_NUM_THREADS=1 for a task of one CPU):
  a stage gets the driver's value, or none, as it would here.
- :data:`HARNESS_OWNED`: what the harness (and each script's stage protocol) sets per stage
  itself: the backend's device, the virtual device count, --dump-hlo's graphs. A case may not
  set them, and a run's exported values are not carried into its scripts.

:func:`carried` is what a run carries into its scripts (their top lines, "To Reproduce"):
the STEERING variables set when it ran, less reprokit's own, secrets and HARNESS_OWNED.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from collections.abc import Mapping

from reprokit.infra.redact import is_secret_name, redact_text, secret_values

XLA_VARIABLES = re.compile(r"^(PJRT_|XLA_|TPU_|PT_XLA_|CPU_NUM_DEVICES$|XRT_|LIBTPU_)")
STEERING = re.compile(r"^(PJRT_|XLA_|TPU_|PT_XLA_|LIBTPU|CPU_NUM_DEVICES$|TORCH|CUDA|NCCL_|OMP_|"
                      r"MKL_|KMP_|PYTHONHASHSEED$|REPROKIT_)")  # fmt: skip
RUNTIME_READ = frozenset(
    {"CPU_NUM_DEVICES", "XLA_FLAGS", "XLA_SAVE_TENSORS_FMT", "XLA_SAVE_TENSORS_FILE"}
)
NODE_OWN = re.compile(r"VISIBLE|^TPU_")
RAY_SETS = ("OMP_NUM_THREADS",)
HARNESS_OWNED = frozenset(
    {"PJRT_DEVICE", "CPU_NUM_DEVICES", "XLA_SAVE_TENSORS_FMT", "XLA_SAVE_TENSORS_FILE"}
)


def shown(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that the environment capture shows, sorted by name."""
    return {k: v for k, v in sorted(environ.items()) if XLA_VARIABLES.match(k)}


def steering(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The variables of ``environ`` that can change a stage's result, sorted by name."""
    return sorted((k, v) for k, v in environ.items() if STEERING.match(k))


def carried(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that a run carries into its scripts, sorted by name: the
    STEERING ones, less reprokit's own (REPROKIT_*: the harness's settings, not the stage's),
    HARNESS_OWNED (set per stage), secret names, and values holding a secret's shape (a
    script is meant to be shared; one that needs a secret takes it from its environment)."""
    known = secret_values(environ)
    found = {
        k: v
        for k, v in steering(environ)
        if not k.startswith("REPROKIT_")
        and k not in HARNESS_OWNED
        and not is_secret_name(k)
        and redact_text(v, known) == v
    }
    return _less_torch_xlas_own(found)


# What torch and torch_xla set in the process that uses them (torch_xla/__init__.py,
# experimental/plugins.py, torch/_inductor/runtime/cache_dir_utils.py, which torch.export
# reaches): once a harness has imported them, these are in its environment although nobody
# exported them, and every stage sets them the same way itself.
TORCH_XLA_FLAGS = ("--xla_cpu_enable_fast_math=false",)


def _torch_sets() -> dict[str, str]:
    user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
    inductor = os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")
    return {"PJRT_DYNAMIC_PLUGINS": "1", "TORCHINDUCTOR_CACHE_DIR": inductor}


def _less_torch_xlas_own(found: dict[str, str]) -> dict[str, str]:
    own = _torch_sets()
    kept = {k: v for k, v in found.items() if own.get(k) != v}
    if "XLA_FLAGS" in kept:
        flags = [f for f in kept["XLA_FLAGS"].split() if f not in TORCH_XLA_FLAGS]
        if flags:
            kept["XLA_FLAGS"] = " ".join(flags)
        else:
            del kept["XLA_FLAGS"]
    return kept
