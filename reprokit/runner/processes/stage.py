"""One stage, one process: ``python repro.py --stage S`` with its backend's environment.

This is the executor seam of the runner. The scheduler decides *what* runs *when*; an
executor runs one stage and returns its :class:`StageResult`, whatever happens to it (a crash,
a timeout, an interrupt are results, not exceptions). :class:`LocalExecutor` runs stages as
child processes of this machine; other executors (warm start, a cluster) keep its guarantees:
the stage in its own process group, its timeout, capped and redacted logs, the ending
classified.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from reprokit.infra.pause import pause
from reprokit.infra.redact import redact_file, secret_values
from reprokit.records import Stage, StageResult, Status
from reprokit.records.folder import (
    LIST_STAGES,
    SCRIPT,
    STAGES,
    VariantFolder,
    last_words,
    log_path,
)
from reprokit.runner import backends
from reprokit.runner.dag import parse_stages, read_stages
from reprokit.runner.options import Options
from reprokit.runner.processes.procs import Ended, run_process

WARM = "warm"  # StageResult.started of a stage forked from a warm server


def cold(why: str) -> str:
    """StageResult.started of a stage started in a fresh Python, and why it was."""
    return f"cold: {why}"


FRESH = cold("this executor starts every stage in a fresh Python")


@dataclass(frozen=True)
class StageJob:
    """One stage of one variant: the folder of its script, the stage, and the variant's DAG."""

    folder: Path  # holds repro.py; the stage writes under stages/<name>/
    stage: Stage
    timeout: float | None = None  # the case's own ([case] timeout), else the run's
    python: str | None = None  # the interpreter of the variant's environment; else the run's
    dag: tuple[Stage, ...] = ()  # every stage of the variant; () when not known
    # the variant's own (Variant.variables): under the run's environment, over the backend's
    variables: dict[str, str] = field(default_factory=dict)
    # run again (an again_on_mismatch stage, where the others did not match): ``--localise``
    localise: bool = False

    def env(self, xla_device: str) -> dict[str, str]:
        """The stage's environment: the variant's variables, the run's over them (its
        script's top lines only set what is not set: the same), the backend's over both.
        Given to the process, not only set by the script: a warm server imports torch with
        it (its identity includes it), before the script's top lines run."""
        base = {**self.variables, **os.environ}
        return backends.stage_env(
            self.stage.backend, xla_device, devices=self.stage.devices, base=base
        )


@dataclass(frozen=True)
class Capabilities:
    """What an executor does about where its stages run, so that the scheduler never asks
    which executor it has."""

    local_backends: bool = True  # stages run here: a backend missing here skips its stages
    exclusive_devices: bool = True  # a stage on an accelerator holds it alone: turns on it


LOCAL = Capabilities()  # this machine's: LocalExecutor, WarmExecutor


def capabilities_of(executor: object) -> Capabilities:
    """What ``executor`` says it can do; one written before executors said so runs here."""
    found = getattr(executor, "capabilities", LOCAL)
    return found if isinstance(found, Capabilities) else LOCAL


class Executor(Protocol):
    """Runs one stage to its end, and asks a script for its stages; called from the
    scheduler's worker threads. ``stop`` set: end the child now (an interrupt).
    ``capabilities``: what the scheduler leaves to it (an executor without one is local)."""

    capabilities: Capabilities

    def run_stage(self, job: StageJob, stop: threading.Event) -> StageResult: ...

    def list_stages(
        self, folder: Path, stop: threading.Event
    ) -> tuple[StageResult, list[Stage]]: ...

    def close(self) -> None:
        """End what it started (servers, a cluster connection); called once, when the run
        ends."""


class StagesUnlisted(Exception):
    """The script did not give a stage DAG; ``result`` is how ``--list-stages`` ended."""

    def __init__(self, result: StageResult, message: str) -> None:
        super().__init__(message)
        self.result = result


class LocalExecutor:
    """Stages as child processes on this machine, as nox runs its sessions."""

    capabilities = LOCAL

    def __init__(self, options: Options) -> None:
        self.options = options
        self.secrets = secret_values()  # what a stage prints of them never reaches its logs

    def run_stage(self, job: StageJob, stop: threading.Event) -> StageResult:
        stage, folder = job.stage, job.folder
        own = VariantFolder(folder).stage(stage.name)
        own.path.mkdir(parents=True, exist_ok=True)
        command, env = self.command_of(job)
        result = self.spawn(command, folder, stage.name, stage.backend, env, stop, job.timeout)
        pause("stage-ended")
        written = own.read_result()
        if result.status is Status.INTERRUPTED and written is not None:
            # result.json is a stage's last act: stopped while Python shut down, it had finished
            reason = "stopped by the interrupt after it wrote its result.json"
            result = replace(result, status=Status.OK, reason=reason)
        if result.status is Status.OK:
            return replace(result, **_result_fields(written or {}))
        return last_words(result, folder)

    def command_of(self, job: StageJob) -> tuple[list[str], dict[str, str]]:
        """The stage's command line and environment."""
        stage, folder = job.stage, job.folder
        args = ["--stage", stage.name, "--workdir", STAGES]
        args += ["--xla-device", self.options.xla_device]
        if job.localise:
            args.append("--localise")
        env = job.env(self.options.xla_device)
        if job.python:  # another environment's python: none of this one's packages
            env.pop("PYTHONPATH", None)
        if self.options.dump_hlo and stage.backend.startswith("xla"):
            env |= {
                "XLA_SAVE_TENSORS_FMT": "hlo",  # torch_xla writes every graph it syncs
                "XLA_SAVE_TENSORS_FILE": str(VariantFolder(folder).stage(stage.name).hlo),
            }
        return self._script(args, job.python), env

    def list_stages(self, folder: Path, stop: threading.Event) -> tuple[StageResult, list[Stage]]:
        """The script's stage DAG: its STAGES literal, else what ``--list-stages`` prints;
        :class:`StagesUnlisted` says why there is none."""
        read = read_stages(VariantFolder(folder).read_script())
        if read is not None:
            return StageResult(LIST_STAGES, "cpu", Status.OK, 0, seconds=0.0), read
        env = backends.stage_env("cpu", self.options.xla_device)
        result = self.spawn(self._script([LIST_STAGES]), folder, LIST_STAGES, "cpu", env, stop)
        if result.status is not Status.OK:
            result = last_words(result, folder)
            raise StagesUnlisted(result, f"{LIST_STAGES} {result.ended()}")
        text = log_path(folder, LIST_STAGES, "stdout").read_text("utf-8", "replace")
        try:
            stages = parse_stages(text)
        except ValueError as exc:
            failed = replace(result, status=Status.ERROR)
            raise StagesUnlisted(failed, f"{LIST_STAGES} gave no stage DAG: {exc}") from None
        return result, stages

    def close(self) -> None:
        """Nothing to end: each child ended with its stage."""

    def _script(self, args: list[str], python: str | None = None) -> list[str]:
        return [python or self.options.python, SCRIPT, *args]

    def spawn(
        self,
        command: list[str],
        folder: Path,
        name: str,
        backend: str,
        env: dict[str, str],
        stop: threading.Event,
        timeout: float | None = None,
        cwd: Path | None = None,
    ) -> StageResult:
        """``command`` (in ``folder`` unless ``cwd``) as stage ``name``: its own process group,
        the timeout, logs capped and redacted beside the stage's outputs, the ending named."""
        logs = [log_path(folder, name, stream) for stream in ("stdout", "stderr")]
        options = self.options
        limit = (
            f"--timeout {options.timeout:g}" if timeout is None else f"[case] timeout {timeout:g}"
        )
        timeout = options.timeout if timeout is None else timeout
        how = Launch(command, name, backend, env, cwd or folder, logs, timeout)
        ended, started = self.start(how, stop)
        for log in logs:
            redact_file(log, self.secrets)
        notes = []
        if ended.status is Status.TIMEOUT:
            notes.append(f"killed after {limit} s")
        if ended.cut:
            notes.append(f"middle of {', '.join(ended.cut)} cut (cap {options.log_cap} bytes)")
        return StageResult(
            name,
            backend,
            ended.status,
            ended.returncode,
            ended.signal,
            ended.seconds,
            "; ".join(notes) or None,
            started=started,
        )

    def start(self, how: Launch, stop: threading.Event) -> tuple[Ended, str]:
        """Start the child and drive it to its end; how it started (:data:`WARM`, or
        :func:`cold` and why), as its record says.

        Here a fresh process; :class:`reprokit.runner.processes.warm.WarmExecutor` forks it from a
        server that has imported torch already."""
        ended = run_process(
            how.command,
            stdout=how.logs[0],
            stderr=how.logs[1],
            env=how.env,
            cwd=how.cwd,
            timeout=how.timeout,
            stop=stop,
            log_cap=self.options.log_cap,
            grace=self.options.grace,
        )
        return ended, FRESH


@dataclass(frozen=True)
class Launch:
    """One child to start: what :meth:`LocalExecutor.start` needs to know."""

    command: list[str]
    name: str  # the stage, or LIST_STAGES
    backend: str
    env: dict[str, str]
    cwd: Path
    logs: list[Path]  # stdout.log, stderr.log
    timeout: float


# A record's field: its name in result.json.
FIELDS = {"metrics": "metrics", "described": "tensors", "xla": "xla", "versions": "versions"}


def _result_fields(data: dict[str, Any]) -> dict[str, Any]:
    """What of a stage's result.json its record keeps: the metrics, the descriptions of its
    tensors (``"tensors": {name: {"op": ..., "source": ...}}``), what torch_xla saw, and
    whether it recorded what localises (``"localised": true``)."""
    found = {key: data.get(name) for key, name in FIELDS.items()}
    kept = {k: v for k, v in found.items() if isinstance(v, dict)}
    return kept | ({"localised": True} if data.get("localised") is True else {})


# The one way to start a child that runs a stage's kind of work outside a run's DAG (a user's
# script under ``reprokit wrap``, a short repro run alone, a script asked for its stages by
# ``reprokit merge``): the same process group, timeout, TERM/KILL, capped and redacted logs and
# ending classified as a stage of ``reprokit run``, never a bare ``subprocess``.


def run_command(
    command: list[str],
    *,
    folder: Path,
    name: str,
    backend: str,
    env: dict[str, str],
    options: Options,
    cwd: Path | None = None,
    stop: threading.Event | None = None,
    executor: LocalExecutor | None = None,
) -> StageResult:
    """``command`` run as stage ``name`` of the variant folder ``folder`` (its logs under
    ``stages/<name>/``), in ``cwd`` (else ``folder``): a stage's guarantees, fresh, or forked
    by ``executor`` (a WarmExecutor) where one is given."""
    VariantFolder(folder).stage(name).path.mkdir(parents=True, exist_ok=True)
    executor = executor or LocalExecutor(options)
    return executor.spawn(command, folder, name, backend, env, stop or threading.Event(), cwd=cwd)


def stage_dag(folder: Path, options: Options | None = None) -> list[Stage]:
    """The stage DAG of the script in the variant folder ``folder``: its STAGES literal, else
    what ``--list-stages`` prints, run here; :class:`StagesUnlisted` says why there is none."""
    executor = LocalExecutor(options or Options(cache=False, warm=False))
    return executor.list_stages(folder, threading.Event())[1]
