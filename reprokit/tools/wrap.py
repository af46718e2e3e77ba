"""``reprokit wrap -- python train.py ARGS``: a user's own script as one stage of a run.

For code that is not a case: the script runs under torch_xla's debug settings (its debug
messages, IR and HLO with Python frames, metrics written at every step), as a stage does: its
own process group, the timeout, capped and redacted logs, the ending classified. The run
folder it leaves is an ordinary one, so ``reprokit report`` gives the same issue-ready report;
its exit code is the script's.

What torch_xla saw comes from the metrics file it writes at each step (``XLA_METRICS_FILE``):
its last report. A hook in the child's Python (reprokit/tools/_wrap_site/sitecustomize.py, on
its ``PYTHONPATH``; the script is not touched) adds at the script's exit what the file lacks:
the device kind and count, and a last report with what ran after the last step. The record
also keeps the script's last lines of output (its losses) and the run folder a copy of the
script, beside its stage, which the bundle holds and "To Reproduce" names.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import time
from dataclasses import replace
from pathlib import Path

from reprokit.environment.machine import describe_machine
from reprokit.errors import ReprokitError
from reprokit.infra.redact import redact_text
from reprokit.records import Outcome, RunSummary, Status, VariantResult, XlaEvidence, write_summary
from reprokit.records.folder import (
    HLO,
    WRAP_DEVICES,
    WRAP_METRICS,
    RunFolder,
    last_words,
    log_path,
    log_tail,
)
from reprokit.records.recompiles import COMPILES, HLO_DUMP, RECOMPILES
from reprokit.records.xla import CACHED
from reprokit.reports.evidence import WRAP_CASE, WRAP_SCRIPT
from reprokit.runner import backends
from reprokit.runner.options import Options
from reprokit.runner.processes.stage import run_command
from reprokit.runner.scheduler import now
from reprokit.tools.recompiles import record_recompiles, recording_env
from reprokit.tools.recompiles.read import graph_files
from reprokit.tools.recompiles.repro import add_repro

STAGE = "script"
DEBUG = {  # torch_xla's own debugging switches (its TROUBLESHOOTING guide)
    "PT_XLA_DEBUG_LEVEL": "1",  # messages on compilations, transfers, fallbacks
    "XLA_IR_DEBUG": "1",  # IR nodes carry the Python frame that made them
    "XLA_HLO_DEBUG": "1",  # and so do the HLO instructions
}
HOOK = Path(__file__).with_name("_wrap_site")  # its sitecustomize.py, first on PYTHONPATH
DEVICES = "REPROKIT_WRAP_DEVICES"  # the hook's file of the device kind and count
OUTPUT_LINES = 20  # of the script's stdout, in its record and the report
LINE_WIDTH = 400  # characters of one output line kept (a progress bar can be endless)


def wrap(
    command: list[str], *, run_dir: Path, options: Options, recompiles: bool = False,
    repro: bool = False,
) -> RunSummary:  # fmt: skip
    """Run ``command`` as the one stage of a run in ``run_dir``; the summary says how it ended.
    ``recompiles``: every graph it compiles recorded and each compile explained
    (reprokit.tools.recompiles), in the stage's RECOMPILES; ``repro``: and the fewest lines
    of the script that still compile again (tools/recompiles/repro.py)."""
    if not command:
        raise ReprokitError("nothing to run", hint="reprokit wrap -- python train.py ARGS")
    if recompiles and options.dump_hlo:  # both are torch_xla's one XLA_SAVE_TENSORS_FILE
        raise ReprokitError("--recompiles and --dump-hlo cannot be given together",
                            hint="torch_xla writes its graphs to one file, in one format: "
                            "run reprokit wrap twice, once with each")  # fmt: skip
    start, started = time.monotonic(), now()
    label = _label(command)
    variant_dir = RunFolder(Path(run_dir)).variant(label)
    stage_dir = variant_dir.stage(STAGE).path
    stage_dir.mkdir(parents=True, exist_ok=True)
    graphs = [path.name for path in graph_files(stage_dir)]
    for stale in (WRAP_METRICS, WRAP_DEVICES, RECOMPILES, COMPILES, *graphs):
        (stage_dir / stale).unlink(missing_ok=True)  # an earlier wrap into the same folder's
    shutil.rmtree(stage_dir / HLO_DUMP, ignore_errors=True)
    env = child_env(stage_dir, options)
    env |= recording_env(stage_dir, env) if recompiles else {}
    folder = variant_dir.path
    copied = copy_script(command, folder, Path.cwd())  # before it runs: as it ran
    try:
        result = run_command(
            command, folder=folder, name=STAGE, backend="xla", env=env, options=options,
            cwd=Path.cwd(),
        )  # fmt: skip
    except FileNotFoundError:
        raise ReprokitError(f"no such program: {command[0]!r}", hint="Give a command to run, "
                            "e.g. reprokit wrap -- python train.py") from None  # fmt: skip
    output = output_tail(log_path(folder, STAGE, "stdout"))
    if recompiles and record_recompiles(stage_dir) is not None and repro:
        found = script_of(command)
        add_repro(stage_dir, Path.cwd() / found if found else None, options)
    result = replace(last_words(result, folder), xla=read_evidence(stage_dir), stdout_tail=output)
    shown = redact_text(shlex.join(command))
    variant = VariantResult(
        case=WRAP_CASE,
        label=label,
        variant={"command": shown} | ({WRAP_SCRIPT: copied} if copied else {}),
        outcome=result.status.outcome or Outcome.MATCH,
        expected=Outcome.MATCH,
        seconds=round(time.monotonic() - start, 3),
        stages=(result,),
        reason=None if result.status is Status.OK else f"the script {result.ended()}",
        title=f"`{shown}` under torch_xla's debug settings",
    )
    flags = ("--recompiles",) * recompiles + ("--repro",) * (recompiles and repro)
    argv = ("reprokit", "wrap", *flags, "--", *map(redact_text, command))
    env = describe_machine(probe_xla=False, cached=True)  # collect_env as this boot saw it first
    summary = RunSummary(started, now(), argv, env, (variant,), xla_device=options.xla_device)
    write_summary(summary, run_dir)
    return summary


def child_env(stage_dir: Path, options: Options) -> dict[str, str]:
    """The script's environment: an XLA stage's, torch_xla's debug settings, its metrics
    file, and the hook that says at exit what torch_xla saw."""
    env = backends.stage_env("xla", options.xla_device) | DEBUG
    env["XLA_METRICS_FILE"] = str(stage_dir / WRAP_METRICS)
    env[DEVICES] = str(stage_dir / WRAP_DEVICES)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(HOOK), env.get("PYTHONPATH"))))
    if options.dump_hlo:
        env |= {
            "XLA_SAVE_TENSORS_FMT": "hlo",
            "XLA_SAVE_TENSORS_FILE": str(stage_dir / HLO),
        }
    return env


def exit_code(summary: RunSummary) -> int:
    """The script's own exit code (128 + the signal when one killed it, as shells do)."""
    stage = summary.variants[0].stages[0]
    if stage.returncode is None:
        return 1
    return 128 - stage.returncode if stage.returncode < 0 else stage.returncode


def read_metrics(path: Path) -> XlaEvidence | None:
    """torch_xla's last metrics report, as a stage of a case records it (no device count;
    how often each operation fell back, which a stage does not say). Its ``aten::`` counters
    are the operations that ran through the CPU fallback; the record keeps the reads of a
    value back to Python among them (``.item()``) apart."""
    try:
        text = path.read_text("utf-8", "replace")
    except OSError:
        return None
    last = text.rsplit("[MetricsData", 1)[-1]

    def metric(name: str) -> tuple[int, float]:
        found = re.search(rf"Metric: {name}\n  TotalSamples: (\d+)\n  Accumulator: (\S+)", last)
        return (int(found[1]), _seconds(found[2])) if found else (0, 0.0)

    counted = re.findall(r"Counter: (\S+)\n  Value: (\d+)", last)
    counters = {name: int(value) for name, value in counted}
    fallbacks = {name: n for name, n in counters.items() if name.startswith("aten::")}
    return XlaEvidence.from_metrics(
        metric, cached=counters.get(CACHED, 0), fallbacks=fallbacks, fallback_counts=fallbacks
    )


def read_evidence(stage_dir: Path) -> XlaEvidence | None:
    """What torch_xla saw: its metrics, and the devices the hook wrote; None when the script
    never started torch_xla's runtime (neither file is there)."""
    xla = read_metrics(stage_dir / WRAP_METRICS)
    try:
        seen = json.loads((stage_dir / WRAP_DEVICES).read_text("utf-8"))
        kind, count = str(seen["device_kind"]), int(seen["devices"])
    except (OSError, ValueError, KeyError, TypeError):
        return xla
    return replace(xla or XlaEvidence(), device_kind=kind, devices=count)


def output_tail(log: Path, lines: int = OUTPUT_LINES, size: int = 65536) -> tuple[str, ...]:
    """The last ``lines`` lines of the script's (capped, redacted) stdout, each at most
    LINE_WIDTH characters."""
    return tuple(line[:LINE_WIDTH] for line in log_tail(log, size)[-lines:])


def copy_script(command: list[str], folder: Path, cwd: Path) -> str | None:
    """Copy the Python file ``command`` runs into the variant's folder, redacted; its name
    there, or None when the command runs no file of its own (``python -m``, a binary)."""
    found = script_of(command)
    path = cwd / found if found else None
    if path is None or not path.is_file():
        return None
    text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    copy = folder / path.name
    copy.write_bytes(redact_text(text).encode("utf-8", errors="surrogateescape"))
    return copy.name


def script_of(command: list[str]) -> str | None:
    """The file of ``FILE.py ARGS`` or ``python [OPTIONS] FILE ARGS``, else None."""
    if command[0].endswith(".py"):
        return command[0]
    if not re.fullmatch(r"python[\d.]*", Path(command[0]).name):
        return None
    args = iter(command[1:])
    for arg in args:
        if arg.startswith(("-c", "-m")) or arg == "-":  # code or a module, not a file
            return None
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            next(args, None)  # the option's value
        elif not arg.startswith("-"):
            return arg
    return None


def _seconds(text: str) -> float:
    """torch_xla's durations, e.g. ``03s252ms344.333us``, in seconds."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|ns|d|h|m|s)", text)
    return round(sum(float(number) * units[unit] for number, unit in parts), 4)


def _label(command: list[str]) -> str:
    """The folder name: the script's name (``train`` for ``python train.py``)."""
    scripts = [part for part in command if part.endswith(".py")]
    name = Path(scripts[0] if scripts else command[0]).stem
    return re.sub(r"[^\w.-]", "_", name) or "script"
