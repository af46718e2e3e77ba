"""``reprokit wrap``'s hook in the wrapped script's Python: at its exit, what torch_xla saw.

torch_xla's metrics file (``XLA_METRICS_FILE``) holds neither the device kind nor the device
count, and misses whatever ran after the script's last step. Only the script's own process can
ask torch_xla, and the script is the user's, not ours to edit. Python imports a module named
``sitecustomize`` from its path at every start (``site``), before the script runs: wrap puts
this folder first on the child's ``PYTHONPATH``, and this module registers one ``atexit``
handler, then steps aside (its folder leaves ``sys.path``; a ``sitecustomize`` it shadows, a
distribution's or a virtual environment's, is imported in its place). The alternatives fall
short: ``usercustomize`` is not imported in a virtual environment, ``.pth`` files only in
site-packages, ``PYTHONSTARTUP`` only by an interactive interpreter.

At exit the handler asks only when the script imported torch_xla and its runtime started:
asking a runtime that never started would start it, which on a TPU held by another process
can hang, and a script that never used XLA has nothing to say. It then writes
``REPROKIT_WRAP_DEVICES`` (JSON: ``torch_xla.runtime.device_type()`` and
``global_runtime_device_count()``) and appends torch_xla's final metrics report to
``XLA_METRICS_FILE``, as torch_xla does at each step. Handlers run last registered first, so
this one runs after torch_xla's own (``_prepare_to_exit``, which waits for the device and keeps
the runtime). Nothing is printed and nothing raised: the script's output and exit code stay its
own. A process killed, or ended by ``os._exit``, runs no handler: the metrics file of its last
step is then all there is.

Standard library only, and no import of reprokit: this runs inside the user's Python.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import importlib.util
import json
import os
import sys

DEVICES = "REPROKIT_WRAP_DEVICES"  # where the handler writes the device kind and count
HERE = os.path.dirname(os.path.abspath(__file__))


def _write(path: str, text: str, mode: str = "w") -> None:
    """Write (or append) ``text``; replaced whole when written, so a reader sees all or none."""
    if mode == "a":
        with open(path, "a", encoding="utf-8") as file:
            file.write(text)
        return
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as file:
        file.write(text)
    os.replace(partial, path)


def report_devices() -> None:
    """What torch_xla saw, when the script started its runtime; else nothing."""
    xla = sys.modules.get("torch_xla")
    started = getattr(getattr(xla, "_XLAC", None), "_xla_runtime_is_initialized", None)
    try:
        if started is None or not started():
            return
        import torch_xla.debug.metrics as met
        import torch_xla.runtime as xr

        if os.environ.get(DEVICES):
            seen = {"device_kind": xr.device_type(), "devices": xr.global_runtime_device_count()}
            _write(os.environ[DEVICES], json.dumps(seen))
        if os.environ.get("XLA_METRICS_FILE"):
            report = f"[MetricsData; at exit]\n{met.metrics_report()}"
            _write(os.environ["XLA_METRICS_FILE"], report, "a")
    except Exception:  # the script's ending is its own, whatever torch_xla does here
        pass


def _step_aside() -> None:
    """Leave ``sys.path`` as it would be without wrap, and import the ``sitecustomize`` this
    module shadows, if there is one."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


atexit.register(report_devices)
_step_aside()
