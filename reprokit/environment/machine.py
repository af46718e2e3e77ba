"""The environment a maintainer asks for first, secrets redacted.

torch.utils.collect_env gives the PyTorch side (it is what the PyTorch issue template asks
for); this adds what torch_xla users are asked next: torch_xla/libtpu/jax versions and whether
torch and torch_xla match, the XLA/PJRT/TPU variables, the XLA device kind and count, and the
default matmul precision. The XLA runtime is read in a child process, so that the caller
never initialises one (an initialised runtime would break a later xmp.spawn).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from reprokit.environment.variables import shown
from reprokit.infra.caching import Store
from reprokit.infra.redact import redact_env
from reprokit.infra.torch_import import import_module
from reprokit.records import Environment

PACKAGES = ("torch", "torch_xla", "libtpu", "libtpu-nightly", "jax", "jaxlib", "numpy")
_PROBE = """
import json, torch_xla, torch_xla.runtime as xr, torch_xla.backends as xb
print(json.dumps({"device_kind": xr.device_type(), "device_count": xr.global_runtime_device_count(),
                  "matmul_precision": xb.get_mat_mul_precision()}))
"""


def versions() -> dict[str, str | None]:
    """Installed versions, read from package metadata (nothing is imported)."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def torch_xla_matches(found: dict[str, str | None]) -> bool | None:
    """torch_xla is built against one torch release: major.minor must agree."""
    torch, xla = found.get("torch"), found.get("torch_xla")
    if not torch or not xla:
        return None
    return torch.split("+")[0].split(".")[:2] == xla.split("+")[0].split(".")[:2]


def xla_runtime(timeout: float = 120) -> dict[str, Any]:
    """Device kind, count and matmul precision, from a child process."""
    environ = {**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU")}
    try:
        child = subprocess.run(
            [sys.executable, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environ,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the XLA probe did not answer within {timeout:g} s"}
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"torch_xla did not start: {last}"}
    return json.loads(child.stdout.strip().splitlines()[-1])


def pytorch_env(*, cached: bool = False) -> dict[str, Any]:
    """torch.utils.collect_env's fields, or why they are missing.

    ``cached``: kept once per boot of this machine and installation (collect_env takes
    seconds: it imports torch and asks pip, nvidia-smi and lscpu; none of that changes
    until a reboot or another install)."""
    if not cached:
        return _collect_env()
    boot = Path("/proc/sys/kernel/random/boot_id")
    booted = boot.read_text() if boot.exists() else ""
    store = Store("environments")
    key = store.key(sys.executable, versions(), platform.node(), booted)
    if isinstance(found := store.get_json(key), dict):
        return found
    found = _collect_env()
    if "error" not in found:
        store.put_json(key, found)
    return found


def _collect_env() -> dict[str, Any]:
    try:
        collect_env = import_module("torch.utils.collect_env")
    except ImportError:
        return {"error": "torch is not installed"}
    info = collect_env.get_env_info()._asdict()
    return {key: value for key, value in info.items() if value not in (None, "", "N/A")}


def describe_machine(
    *, probe_xla: bool = True, quick: bool = False, cached: bool = False
) -> Environment:
    """Everything above, secrets redacted. ``quick``: only what costs no import or child
    process (versions from metadata, variables), for the first summary.json of a run;
    ``cached``: collect_env's part as this boot captured it first (:func:`pytorch_env`)."""
    found = versions()
    variables = shown(os.environ)
    return Environment(
        python=sys.version.split()[0],
        platform=platform.platform(),
        cpu_count=os.cpu_count(),
        versions=found,
        torch_xla_matches_torch=torch_xla_matches(found),
        variables=redact_env(variables),
        xla=xla_runtime() if probe_xla and not quick and found["torch_xla"] else None,
        pytorch={}
        if quick
        else redact_env({k: str(v) for k, v in pytorch_env(cached=cached).items()}),
    )
