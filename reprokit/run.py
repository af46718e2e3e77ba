"""The runner: every variant's stages in fresh processes, in DAG order, many at once.

``run`` renders each variant into ``RUN_DIR/<label>/repro.py``, asks the script for its stage
DAG (``--list-stages``: the protocol is all it relies on), runs each stage as
``python repro.py --stage S`` with its backend's environment, compares the tensors of every
stage that names a reference, and writes summary.json as each variant finishes.

One thread (the caller's) schedules; a pool of ``jobs`` threads each drives one child process.
A stage starts as soon as the stages it needs are done and a slot is free, so independent
stages of one variant run side by side; a stage on an exclusive accelerator waits until no
other stage holds that device. A failing variant never stops the others. Ctrl-C or SIGTERM
stops every child (its whole process group), keeps what finished, and raises
:class:`Interrupted`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import datetime
import functools
import importlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import filelock

from reprokit import backends
from reprokit.cases import Variant
from reprokit.dag import Stage, blocked, parse_stages
from reprokit.env import capture as capture_env
from reprokit.errors import ReprokitError
from reprokit.procs import GRACE, LOG_CAP, Status, run_process
from reprokit.records import RunSummary, StageResult, VariantResult, run_env, write_summary
from reprokit.redact import redact_file, redact_text, secret_values
from reprokit.render import render
from reprokit.verdict import verdict

TIMEOUT = 600.0  # seconds a stage may run by default


class Interrupted(Exception):
    """The run was stopped by SIGINT or SIGTERM; ``summary`` holds what finished."""

    def __init__(self, summary: RunSummary) -> None:
        super().__init__("interrupted")
        self.summary = summary


class Reporter(Protocol):
    """Told what happens, in the scheduling thread; the CLI shows progress with it."""

    def stage_started(self, label: str, stage: str) -> None: ...
    def stage_finished(self, label: str, result: StageResult) -> None: ...
    def variant_finished(self, result: VariantResult) -> None: ...


@dataclass(frozen=True)
class Options:
    """How to run: the knobs shared by the CLI, the pytest plugin and the benchmarks."""

    jobs: int = 1
    timeout: float = TIMEOUT
    xla_device: str = "CPU"
    templates: tuple[Path, ...] = ()
    log_cap: int = LOG_CAP
    grace: float = GRACE
    python: str = sys.executable


def jobs(value: str) -> int:
    """``-n``: a number of parallel slots, or ``auto`` for one per CPU."""
    if value == "auto":
        return os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise ReprokitError(f"-n {value!r} is neither a positive number nor auto", hint="-n 4")
    return int(value)


def default_run_dir() -> Path:
    return Path("runs") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def run(
    variants: Iterable[Variant],
    *,
    run_dir: Path,
    options: Options | None = None,
    reporter: Reporter | None = None,
    argv: Iterable[str] = (),
) -> RunSummary:
    """Run ``variants`` into ``run_dir`` and return the summary (also in summary.json).

    Bad input (a template that does not render, a run folder in use) raises ReprokitError
    before anything runs.
    """
    options = options or Options()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(run_dir / ".reprokit.lock")
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise ReprokitError(
            "another reprokit run is writing into this run folder",
            run_dir,
            hint="Wait for it to finish, or give this run its own folder with -o RUN_DIR.",
        ) from None
    try:
        unique = {v.label: v for v in variants}  # a case named twice runs once
        states = [_prepare(i, v, run_dir, options) for i, v in enumerate(unique.values())]
        argv = tuple(redact_text(arg) for arg in argv)  # a --set may carry a token
        return _Scheduler(states, run_dir, options, reporter).run(argv)
    finally:
        lock.release()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@dataclass
class _State:
    """One variant while it runs; changed by the scheduling thread only."""

    index: int
    variant: Variant
    folder: Path
    phase: str = "pending"  # pending, listing, running, verdict
    stages: list[Stage] = field(default_factory=list)
    results: dict[str, StageResult] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    start: float = 0.0
    reason: str | None = None  # when its stage list could not be had

    @property
    def ended(self) -> bool:
        """Every stage has a result (ran, or was skipped)."""
        return self.phase == "running" and len(self.results) == len(self.stages)


def _prepare(index: int, variant: Variant, run_dir: Path, options: Options) -> _State:
    """Render the script into its folder, clearing what an earlier run left there."""
    script = render(variant, templates=options.templates)
    folder = run_dir / variant.label
    shutil.rmtree(folder / "stages", ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "repro.py").write_text(script, encoding="utf-8")
    return _State(index, variant, folder)


def _verdict(state: _State) -> VariantResult:
    seconds = time.monotonic() - state.start
    return verdict(state.variant, state.stages, state.results, state.folder, seconds, state.reason)


class _Terminated(Exception):
    """SIGTERM or SIGHUP, turned into an exception in the scheduling thread."""


class _Scheduler:
    """Hands ready work to a pool of ``jobs`` threads until every variant has a verdict."""

    def __init__(
        self, states: list[_State], run_dir: Path, options: Options, reporter: Reporter | None
    ) -> None:
        self.pending = list(states)
        self.active: list[_State] = []
        self.run_dir, self.options, self.reporter = run_dir, options, reporter
        self.slots = max(1, options.jobs)
        self.stop = threading.Event()  # tells every child's driver to kill its group
        self.busy: set[str] = set()  # exclusive devices a running stage holds
        self.inflight: dict[cf.Future[Any], Callable[[Any], None]] = {}
        self.pool = cf.ThreadPoolExecutor(self.slots, thread_name_prefix="reprokit")
        self.finished: dict[int, VariantResult] = {}
        self.summary = RunSummary(started=_now(), env=run_env())
        # The full capture (torch.utils.collect_env) takes seconds: it runs beside the stages
        # and replaces the short one once done. No XLA probe: it could hold a TPU a stage needs.
        self.capture = cf.ThreadPoolExecutor(1).submit(capture_env, probe_xla=False)
        self.secrets = secret_values()  # what a stage prints of them never reaches its logs

    def run(self, argv: tuple[str, ...]) -> RunSummary:
        self.summary = replace(self.summary, argv=argv)
        try:
            with _signals_raise():
                self._write()
                self._loop()
        except (KeyboardInterrupt, _Terminated):
            self._abandon()
            raise Interrupted(self._write(interrupted=True)) from None
        except BaseException:
            self._abandon()
            raise
        finally:
            self.pool.shutdown(wait=True)
        cf.wait([self.capture])
        return self._write()

    def _loop(self) -> None:
        while True:
            while len(self.inflight) < self.slots and self._submit_next():
                pass
            if not self.inflight:
                return
            done, _ = cf.wait(self.inflight, timeout=0.5, return_when=cf.FIRST_COMPLETED)
            for future in done:
                self.inflight.pop(future)(future.result())

    def _abandon(self) -> None:
        """Stop every child (the threads driving them kill their groups) and wait for them."""
        self.stop.set()
        with _sigint_ignored():
            cf.wait(self.inflight)
            for future, then in list(self.inflight.items()):
                if future.exception() is None:  # a verdict that finished meanwhile is kept
                    then(future.result())
            self.inflight.clear()

    def _write(self, *, interrupted: bool = False) -> RunSummary:
        variants = tuple(self.finished[i] for i in sorted(self.finished))
        self.summary = replace(
            self.summary, variants=variants, finished=_now(), interrupted=interrupted
        )
        if self.capture.done() and self.capture.exception() is None:
            self.summary = replace(self.summary, env=self.capture.result())
        write_summary(self.summary, self.run_dir)
        return self.summary

    def _submit(self, call: Callable[[], Any], then: Callable[[Any], None]) -> bool:
        self.inflight[self.pool.submit(call)] = then
        return True

    def _submit_next(self) -> bool:
        """Start one piece of work: a verdict, else a ready stage, else a variant's listing.

        Older variants go first, so that variants finish steadily rather than all at the end.
        """
        for state in self.active:
            if state.ended:
                state.phase = "verdict"
                self.active.remove(state)
                return self._submit(
                    lambda s=state: _verdict(s), lambda got, s=state: self._finished(s.index, got)
                )
        for state in self.active:
            if (stage := self._ready(state)) is not None:
                return self._start_stage(state, stage)
        if not self.pending:
            return False
        state = self.pending.pop(0)
        state.phase, state.start = "listing", time.monotonic()
        self.active.append(state)
        return self._submit(lambda: self._list(state), lambda got: self._listed(state, *got))

    def _ready(self, state: _State) -> Stage | None:
        if state.phase != "running":
            return None
        done = state.results
        for stage in state.stages:
            if stage.name in done or stage.name in state.running:
                continue
            if all(n in done and done[n].status is Status.OK for n in stage.needs):
                if self._device(stage) not in self.busy:
                    return stage
        return None

    def _device(self, stage: Stage) -> str | None:
        return backends.exclusive_device(stage.backend, self.options.xla_device)

    def _start_stage(self, state: _State, stage: Stage) -> bool:
        state.running.add(stage.name)
        device = self._device(stage)
        if device is not None:
            self.busy.add(device)
        if self.reporter:
            self.reporter.stage_started(state.variant.label, stage.name)

        def then(result: StageResult) -> None:
            state.running.discard(stage.name)
            self.busy.discard(device or "")
            state.results[stage.name] = result
            state.results.update(blocked(state.stages, state.results))
            if self.reporter:
                self.reporter.stage_finished(state.variant.label, result)

        return self._submit(lambda: self._run_stage(state, stage), then)

    def _list(self, state: _State) -> tuple[StageResult, list[Stage] | str]:
        """Ask the script for its stages (in a pool thread); a string says what went wrong."""
        result = self._spawn(state, "--list-stages", ["--list-stages"], "cpu", "list-stages.")
        if result.status is not Status.OK:
            return result, f"--list-stages {result.ended()}"
        text = (state.folder / "list-stages.stdout.log").read_text("utf-8", "replace")
        try:
            stages = parse_stages(text)
        except ValueError as exc:
            return replace(result, status=Status.ERROR), f"--list-stages gave no stage DAG: {exc}"
        for stage in stages:  # a probe may take seconds (CUDA): here, not in the scheduler
            backends.unavailable(stage.backend)
        return result, stages

    def _listed(self, state: _State, result: StageResult, stages: list[Stage] | str) -> None:
        state.phase = "running"
        if isinstance(stages, str):  # the verdict is an error, and says why
            state.reason = stages
            state.stages, state.results = [Stage(result.name, "cpu")], {result.name: result}
            return
        state.stages = stages
        if any(stage.reference for stage in stages):
            _prewarm_compare()
        for stage in stages:
            if why := backends.unavailable(stage.backend):
                state.results[stage.name] = StageResult(
                    stage.name, stage.backend, Status.SKIPPED, reason=why
                )
        state.results.update(blocked(state.stages, state.results))

    def _run_stage(self, state: _State, stage: Stage) -> StageResult:
        (state.folder / "stages" / stage.name).mkdir(parents=True, exist_ok=True)
        args = ["--stage", stage.name, "--workdir", "stages"]
        args += ["--xla-device", self.options.xla_device]
        return self._spawn(state, stage.name, args, stage.backend, f"stages/{stage.name}/")

    def _spawn(
        self, state: _State, name: str, args: list[str], backend: str, logs: str
    ) -> StageResult:
        """One child in the variant's folder: ``python repro.py ARGS``, logs at ``logs*``."""
        spmd = state.variant.params.get("spmd_devices")
        env = backends.stage_env(
            backend,
            self.options.xla_device,
            spmd_devices=spmd if isinstance(spmd, int) else backends.SPMD_DEVICES,
        )
        ended = run_process(
            [self.options.python, "repro.py", *args],
            stdout=state.folder / f"{logs}stdout.log",
            stderr=state.folder / f"{logs}stderr.log",
            env=env,
            cwd=state.folder,
            timeout=self.options.timeout,
            stop=self.stop,
            log_cap=self.options.log_cap,
            grace=self.options.grace,
        )
        for log in ("stdout.log", "stderr.log"):
            redact_file(state.folder / f"{logs}{log}", self.secrets)
        notes = [f"killed after --timeout {self.options.timeout:g} s"]
        notes = notes if ended.status is Status.TIMEOUT else []
        if ended.cut:
            notes.append(f"middle of {', '.join(ended.cut)} cut (cap {self.options.log_cap} bytes)")
        return StageResult(
            name,
            backend,
            ended.status,
            ended.returncode,
            ended.signal,
            ended.seconds,
            "; ".join(notes) or None,
        )

    def _finished(self, index: int, result: VariantResult) -> None:
        self.finished[index] = result
        self._write()
        if self.reporter:
            self.reporter.variant_finished(result)


@functools.cache
def _prewarm_compare() -> None:
    """Import torch (for the comparisons) in the background while the first stages run.

    It takes seconds; done at the first verdict instead, it would add them to the run.
    """
    threading.Thread(
        target=importlib.import_module, args=("reprokit.compare",), daemon=True
    ).start()


_STOPPING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM, and SIGHUP (a closed terminal), stop the run like Ctrl-C does.

    The children lead their own sessions, so no signal of ours reaches them: without this,
    a closed terminal would leave them running. Only the main thread may set handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise _Terminated

    with _handlers(_STOPPING, handler):
        yield


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """A second Ctrl-C must not cut the cleanup short and leave children behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _handlers((signal.SIGINT, *_STOPPING), signal.SIG_IGN):
        yield


@contextlib.contextmanager
def _handlers(signals: tuple[int, ...], handler: Any) -> Iterator[None]:
    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
