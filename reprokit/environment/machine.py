"""The environment a maintainer asks for first, secrets redacted.

torch.utils.collect_env gives the PyTorch side (it is what the PyTorch issue template asks
for); this adds what torch_xla users are asked next: torch_xla/libtpu/jax versions and whether
torch and torch_xla match, the XLA/PJRT/TPU variables, the XLA device kind and count, and the
default matmul precision. The XLA runtime is read in a child process, so that the caller
never initialises one (an initialised runtime would break a later xmp.spawn).

TorchTPU (``torch_tpu``) is reported without being imported: whether it is installed (package
metadata), whether it loads itself on ``import torch`` (its ``torch.backends`` entry point),
and whether a TPU is attached (/dev/accel*, /dev/vfio, PCI devices of Google's vendor id).
Importing it, or torch with it installed, initialises the TPU runtime: without a TPU that
waits on the metadata server or aborts the process. So every ``import torch`` of this module
(collect_env, the XLA probe) is made with TORCH_DEVICE_BACKEND_AUTOLOAD=0 while torch_tpu is
installed.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import json
import os
import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from reprokit.environment.variables import shown
from reprokit.infra.caching import Store
from reprokit.infra.offload import Offload, here
from reprokit.infra.probe import ask
from reprokit.infra.redact import redact_env
from reprokit.infra.torch_import import import_module
from reprokit.records import Environment

PACKAGES = ("torch", "torch_xla", "torch_tpu", "libtpu", "libtpu-nightly", "jax", "jaxlib",
            "torchax", "numpy")  # fmt: skip
COLLECT = "reprokit.environment.machine:collect_env"  # the offloaded work (it imports torch)
AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"  # torch's switch for its backends' entry points
GOOGLE_PCI_VENDOR = "0x1ae0"
TPU_PCI_DEVICES = {
    "0x005e": "TPU v4",
    "0x0062": "TPU v5p",
    "0x0063": "TPU v5e",
    "0x006f": "TPU v6e",
    "0x0076": "TPU v7",
}  # as torch_tpu's hardware.py names them
_PROBE = """
import json, torch_xla, torch_xla.runtime as xr, torch_xla.backends as xb
print(json.dumps({"device_kind": xr.device_type(), "device_count": xr.global_runtime_device_count(),
                  "matmul_precision": xb.get_mat_mul_precision()}))
"""


def versions() -> dict[str, str | None]:
    """Installed versions, read from package metadata (nothing is imported). Read again only
    when an install or uninstall has changed a folder of sys.path (its mtime): a run asks for
    them 6 times, a scan of sys.path for each of 9 packages."""
    return dict(_versions(tuple(_mtime(entry) for entry in sys.path)))


@functools.lru_cache(maxsize=1)
def _versions(_path: tuple[tuple[str, int], ...]) -> tuple[tuple[str, str | None], ...]:
    found = []
    for name in PACKAGES:
        try:
            found.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            found.append((name, None))
    return tuple(found)


def _mtime(entry: str) -> tuple[str, int]:
    try:
        return entry, os.stat(entry or ".").st_mtime_ns
    except OSError:
        return entry, 0


def torch_xla_matches(found: dict[str, str | None]) -> bool | None:
    """torch_xla is built against one torch release: major.minor must agree."""
    torch, xla = found.get("torch"), found.get("torch_xla")
    if not torch or not xla:
        return None
    return torch.split("+")[0].split(".")[:2] == xla.split("+")[0].split(".")[:2]


def torch_tpu(pci: Path = Path("/sys/bus/pci/devices"), dev: Path = Path("/dev")) -> dict[str, Any]:
    """TorchTPU installed (its version, where) and whether it loads itself on ``import
    torch``; the TPU chips attached: all without importing torch_tpu or libtpu."""
    spec = importlib.util.find_spec("torch_tpu")  # a top-level name: found, not imported
    try:
        version: str | None = metadata.version("torch_tpu")
    except metadata.PackageNotFoundError:
        version = None
    autoloads = _autoloads_torch_tpu()
    chips = [TPU_PCI_DEVICES.get(device, f"Google PCI device {device}")
             for device in _google_pci_devices(pci)]  # fmt: skip
    return {
        "installed": version or ("(no metadata)" if spec else None),
        "path": str(Path(spec.origin).parent) if spec and spec.origin else None,
        "autoloads": autoloads,
        "tpu_chips": chips,
        "accel": sorted(glob.glob(str(dev / "accel*"))),
        "vfio": (dev / "vfio").exists(),
    }


def _autoloads_torch_tpu() -> bool:
    """Whether torch_tpu registered itself to be imported by ``import torch`` (torch >= 2.5
    imports every ``torch.backends`` entry point unless TORCH_DEVICE_BACKEND_AUTOLOAD=0)."""
    found = metadata.entry_points(group="torch.backends")
    return any(ep.value.split(".")[0].split(":")[0] == "torch_tpu" for ep in found)


def _google_pci_devices(pci: Path) -> list[str]:
    """The device ids of PCI devices of Google's vendor id (TPU chips), read from sysfs."""
    found = []
    for device in sorted(pci.glob("*")) if pci.is_dir() else []:
        try:
            if (device / "vendor").read_text().strip() == GOOGLE_PCI_VENDOR:
                found.append((device / "device").read_text().strip())
        except OSError:
            continue
    return found


@contextmanager
def _no_torch_tpu_autoload() -> Iterator[None]:
    """``import torch`` inside leaves torch_tpu (and the TPU runtime) alone, where it is
    installed; the caller's own setting comes back after (its stages keep it)."""
    if not _autoloads_torch_tpu():
        yield
        return
    before = os.environ.get(AUTOLOAD)
    os.environ[AUTOLOAD] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(AUTOLOAD, None)
        else:
            os.environ[AUTOLOAD] = before


def xla_runtime(timeout: float = 120) -> dict[str, Any]:
    """Device kind, count and matmul precision, from a child process."""
    environ = {**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU")}
    if _autoloads_torch_tpu():  # torch_xla imports torch: not torch_tpu's TPU runtime too
        environ[AUTOLOAD] = "0"
    child = ask([sys.executable, "-c", _PROBE], timeout=timeout, env=environ)
    if child.returncode is None:
        return {"error": f"the XLA probe did not answer within {timeout:g} s"}
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"torch_xla did not start: {last}"}
    return json.loads(child.stdout.strip().splitlines()[-1])


def pytorch_env(*, cached: bool = False, offload: Offload = here) -> dict[str, Any]:
    """torch.utils.collect_env's fields, or why they are missing.

    ``cached``: kept once per boot of this machine and installation (collect_env takes
    seconds: it imports torch and asks pip, nvidia-smi and lscpu; none of that changes
    until a reboot or another install). ``offload``: where it runs (infra/offload.py)."""
    if not cached:
        return offload(COLLECT, None)
    boot = Path("/proc/sys/kernel/random/boot_id")
    booted = boot.read_text() if boot.exists() else ""
    store = Store("environments")
    key = store.key(sys.executable, versions(), platform.node(), booted)
    if isinstance(found := store.get_json(key), dict):
        return found
    found = offload(COLLECT, None)
    if "error" not in found:
        store.put_json(key, found)
    return found


def collect_env(_: None = None) -> dict[str, Any]:
    """collect_env's fields (an offloaded work: it imports torch)."""
    try:
        with _no_torch_tpu_autoload():
            collect_env = import_module("torch.utils.collect_env")
    except ImportError:
        return {"error": "torch is not installed"}
    with _pip_list_from_metadata(collect_env):
        info = collect_env.get_env_info()._asdict()
    return {key: value for key, value in info.items() if value not in (None, "", "N/A")}


PIP_LIST = ["-mpip", "list", "--format=freeze"]  # what collect_env runs with sys.executable


def pip_freeze() -> str:
    """What ``python -mpip list --format=freeze`` prints (stripped, as collect_env reads it),
    read from the installed packages' metadata on this interpreter's path: each distribution
    once (the first found, as pip sees it), by the name its metadata spells, sorted as pip
    sorts them."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and (key := name.lower().replace("_", "-")) not in found:
            found[key] = f"{name}=={dist.version}"
    return "\n".join(found[key] for key in sorted(found))


@contextmanager
def _pip_list_from_metadata(collect_env: Any) -> Iterator[None]:
    """collect_env's ``python -mpip list --format=freeze`` answered by :func:`pip_freeze`
    here: the same lines (collect_env filters them itself) without starting pip (1.0 s of
    the capture's 1.1 s) or another interpreter (0.2 s of CPU, on a core the stages share).
    Its other commands, or a collect_env that asks pip otherwise, run as they are."""
    asking = getattr(collect_env, "get_pip_packages", None)
    if asking is None:
        yield
        return

    def answered(run_lambda: Any, *args: Any, **kwargs: Any) -> Any:
        def run(command: Any) -> Any:
            if isinstance(command, list) and command[1:] == PIP_LIST:
                return 0, pip_freeze(), ""  # run_lambda's (returncode, stdout, stderr)
            return run_lambda(command)

        return asking(run, *args, **kwargs)

    collect_env.get_pip_packages = answered
    try:
        yield
    finally:
        collect_env.get_pip_packages = asking


def describe_machine(
    *, probe_xla: bool = True, quick: bool = False, cached: bool = False, offload: Offload = here
) -> Environment:
    """Everything above, secrets redacted. ``quick``: only what costs no import, child
    process or scan of every installed package's entry points (versions from metadata,
    variables), for the first summary.json of a run;
    ``cached``: collect_env's part as this boot captured it first (:func:`pytorch_env`), done
    where ``offload`` says."""
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
        torch_tpu=None if quick else torch_tpu(),  # entry points: 25 ms, a re-run's tenth
        pytorch={}
        if quick
        else redact_env(
            {k: str(v) for k, v in pytorch_env(cached=cached, offload=offload).items()}
        ),
    )
