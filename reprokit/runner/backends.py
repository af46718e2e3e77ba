"""Backends (docs/contract.md, "Backends"): each stage's environment, device, and availability here.

The harness sets a stage's environment itself, because a hand-written template may not; our
own scripts set it too, so that they also run without reprokit. Nothing here imports torch:
whether CUDA works is asked of a child process, once, and only when a stage needs it.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import sys
from collections.abc import Mapping

from reprokit.errors import ReprokitError
from reprokit.infra.probe import ask

BACKENDS = ("cpu", "xla", "xla_spmd", "xla_multicore", "cuda")
XLA_DEVICES = ("CPU", "TPU", "CUDA")
SPMD_DEVICES = 4  # virtual CPU devices for xla_spmd when the variant does not say


# Which accelerators are here is decided in this module, for all of reprokit's own code (the
# scheduler, the results cache, the pytest plugin's xdist group). The rendered scripts decide
# it again in main() of templates/_protocol.py.j2 (libtpu and /dev/accel0 or /dev/vfio: the
# same answer): a script is standalone, it cannot import reprokit, so that copy stays.


def has_tpu() -> bool:
    """A TPU is attached (/dev/accel*, or /dev/vfio on newer TPU VMs) and libtpu installed."""
    attached = bool(glob.glob("/dev/accel*")) or os.path.exists("/dev/vfio")
    return attached and importlib.util.find_spec("libtpu") is not None


def has_nvidia_gpu() -> bool:
    """An NVIDIA GPU device node is here (whether torch can use it: :func:`unavailable`)."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def default_xla_device() -> str:
    """TPU where libtpu is installed and a TPU is attached, else CPU (as the scripts decide)."""
    return "TPU" if has_tpu() else "CPU"


def stage_env(
    backend: str,
    xla_device: str,
    *,
    devices: int | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one stage's process: ours, plus what its backend needs.

    The one place the harness sets a backend's variables; the scripts set the same ones
    themselves (the protocol macro), so that they also run without reprokit.
    """
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"  # what a killed stage printed last is in its log
    if backend.startswith("xla"):
        env["PJRT_DEVICE"] = xla_device
    if xla_device == "CPU" and backend == "xla_spmd":
        env["CPU_NUM_DEVICES"] = str(devices or SPMD_DEVICES)
    elif xla_device == "CPU" and backend == "xla_multicore":
        env["CPU_NUM_DEVICES"] = "1"  # xmp.spawn aborts with more than one CPU device
    return env


def exclusive_device(backend: str, xla_device: str) -> str | None:
    """The accelerator a stage holds alone (one stage at a time on it), or None for CPU."""
    if backend == "cuda":
        return "CUDA"
    if backend.startswith("xla") and xla_device != "CPU":
        return xla_device
    return None


def unavailable(backend: str) -> str | None:
    """Why ``backend`` cannot run here, or None when it can."""
    if backend == "cuda":
        return _cuda_missing()
    return None


@functools.cache
def _cuda_missing() -> str | None:
    if not has_nvidia_gpu():
        return "no NVIDIA GPU here: no /dev/nvidia* device"
    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"
    done = ask([sys.executable, "-c", probe], timeout=120)
    if done.returncode is None:
        return "torch.cuda.is_available() did not answer within 120 s"
    return None if done.ok else "torch.cuda.is_available() is False here"


def xla_device(value: str | None) -> str:
    """``--xla-device``: CPU, TPU or CUDA (any case); the default device when not given."""
    if value is None:
        return default_xla_device()
    if value.upper() not in XLA_DEVICES:
        raise ReprokitError(
            f"--xla-device {value!r} is not a device kind", hint=f"Use {', '.join(XLA_DEVICES)}."
        )
    return value.upper()
