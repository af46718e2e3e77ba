"""The runner: every variant's stages in fresh processes, in DAG order, many at once.

``run`` renders each variant into ``RUN_DIR/<label>/repro.py``, asks the script for its stage
DAG (``--list-stages``: the protocol is all it relies on), runs each stage as
``python repro.py --stage S`` with its backend's environment, compares the tensors of every
stage that names a reference, and writes summary.json as each variant finishes.

One thread (the caller's) schedules; a pool of ``jobs`` threads each drives one child process.
A stage starts as soon as the stages it needs are done and a slot is free, so independent
stages of one variant run side by side; a stage on an exclusive accelerator waits until no
other stage holds that device. A failing variant never stops the others. Ctrl-C, SIGTERM or
SIGHUP stops every child (its whole process group), keeps what finished, and raises
:class:`Interrupted` (``signals.py`` says how no second signal can cut that short).
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime
import enum
import functools
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import filelock

from reprokit.comparison.verdict import verdict
from reprokit.environment.machine import capture as capture_env
from reprokit.environment.uv import env_python
from reprokit.errors import ReprokitError
from reprokit.generate.render import render
from reprokit.generate.variants import Variant
from reprokit.infra.pause import pause
from reprokit.infra.redact import redact_text
from reprokit.infra.torch_import import import_module
from reprokit.records import (
    Environment,
    RunSummary,
    Stage,
    StageResult,
    Status,
    VariantResult,
    write_summary,
)
from reprokit.runner import backends, signals
from reprokit.runner.cache import CachingExecutor
from reprokit.runner.dag import blocked, needed
from reprokit.runner.options import Options
from reprokit.runner.stage import (
    Executor,
    StageJob,
    StagesUnlisted,
    with_devices,
)
from reprokit.runner.warm import make_executor


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


def run(
    variants: Iterable[Variant],
    *,
    run_dir: Path,
    options: Options | None = None,
    reporter: Reporter | None = None,
    argv: Iterable[str] = (),
    executor: Executor | None = None,
    announce: Callable[[str], None] | None = None,
) -> RunSummary:
    """Run ``variants`` into ``run_dir`` and return the summary (also in summary.json).

    Bad input (a template that does not render, a run folder in use) raises ReprokitError
    before anything runs. ``announce`` hears a line as an environment's build (minutes) starts
    and ends.
    """
    options = options or Options()
    run_dir = Path(run_dir).absolute()  # a stage forked by a warm server starts in "/"
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
    warm = None  # the executor made here, whose warm servers end with the run
    try:
        unique = {v.label: v for v in variants}  # a case named twice runs once
        states = [_prepare(i, v, run_dir, options, announce) for i, v in enumerate(unique.values())]
        argv = tuple(redact_text(arg) for arg in argv)  # a --set may carry a token
        executor = executor or (warm := make_executor(options))
        if options.cache:
            executor = CachingExecutor(executor, options, run_dir)
        summary = _Summary(run_dir, argv, options)
        return _Scheduler(states, options, executor, summary, reporter).run()
    finally:
        if warm is not None:
            warm.close()
        lock.release()


def now() -> str:
    """The time, as summary.json writes it."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class Phase(enum.Enum):
    """Where one variant is: each phase hands it to the next, in this order."""

    PENDING = "pending"  # rendered, waiting for a slot
    LISTING = "listing"  # its script is asked for the stage DAG
    RUNNING = "running"  # its stages run as they become ready
    JUDGING = "judging"  # every stage has a result: the verdict is computed


@dataclass
class _State:
    """One variant while it runs; changed by the scheduling thread only."""

    index: int
    variant: Variant
    folder: Path
    phase: Phase = Phase.PENDING
    stages: list[Stage] = field(default_factory=list)
    results: dict[str, StageResult] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    start: float = 0.0
    reason: str | None = None  # when its stage list could not be had
    python: str | None = None  # its environment's interpreter (--env); None: the run's

    @property
    def ended(self) -> bool:
        """Every stage has a result (ran, or was skipped)."""
        return self.phase is Phase.RUNNING and len(self.results) == len(self.stages)

    def ready(self) -> list[Stage]:
        """Stages whose needs all ended well, not yet started."""
        if self.phase is not Phase.RUNNING:
            return []
        done = self.results
        return [
            stage
            for stage in self.stages
            if stage.name not in done
            and stage.name not in self.running
            and all(n in done and done[n].status is Status.OK for n in stage.needs)
        ]

    def verdict(self, options: Options) -> VariantResult:
        seconds = time.monotonic() - self.start
        found = verdict(
            self.variant,
            self.stages,
            self.results,
            self.folder,
            seconds,
            self.reason,
            cached=options.cache,
            xla_device=options.xla_device,
        )
        pause("verdict-computed")
        return found


def _prepare(
    index: int,
    variant: Variant,
    run_dir: Path,
    options: Options,
    announce: Callable[[str], None] | None = None,
) -> _State:
    """Render the script into its folder, with the files the case brings beside it, clearing
    what an earlier run left there; its environment built, unless cached already."""
    script = render(variant, templates=options.templates)
    python = str(env_python(variant.env, announce=announce)) if variant.env else None
    folder = run_dir / variant.label
    shutil.rmtree(folder / "stages", ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "repro.py").write_text(script, encoding="utf-8")
    variant.copy_files(folder)
    return _State(index, variant, folder, python=python)


class _Summary:
    """summary.json as variants finish: the finished ones in order, the environment."""

    def __init__(self, run_dir: Path, argv: tuple[str, ...], options: Options) -> None:
        self.run_dir, self.cached = run_dir, options.cache
        self.finished: dict[int, VariantResult] = {}
        self.serialized: dict[int, dict[str, Any]] = {}  # each variant's JSON, made once
        env = capture_env(quick=True)
        self.summary = RunSummary(now(), argv=argv, env=env, xla_device=options.xla_device)
        # The full capture (torch.utils.collect_env) takes seconds: it runs beside the stages
        # and replaces the short one once done. No XLA probe: it could hold a TPU a stage needs.
        # A daemon thread: an interrupted run exits at once, not when collect_env is done.
        self.capture: cf.Future[Environment] = cf.Future()
        threading.Thread(target=self._capture, daemon=True, name="reprokit-env").start()

    def _capture(self) -> None:
        try:
            self.capture.set_result(capture_env(probe_xla=False, cached=self.cached))
        except BaseException as exc:  # kept, and the short capture stays in summary.json
            self.capture.set_exception(exc)

    def add(self, index: int, result: VariantResult) -> None:
        self.finished[index], self.serialized[index] = result, result.to_json()
        self.write()

    def write(self, *, interrupted: bool = False, wait_env: bool = False) -> RunSummary:
        if wait_env:
            pause("waiting-env")
            cf.wait([self.capture])
        changes: dict[str, Any] = {"finished": now(), "interrupted": interrupted}
        if self.capture.done() and self.capture.exception() is None:
            changes["env"] = self.capture.result()
        order = sorted(self.finished)
        self.summary = self.summary.with_variants((self.finished[i] for i in order), **changes)
        final = wait_env or interrupted  # indented for people: once, at the end
        variants = [self.serialized[i] for i in order]
        write_summary(self.summary, self.run_dir, variants, compact=not final)
        return self.summary


class _Scheduler:
    """Hands ready work to a pool of ``jobs`` threads until every variant has a verdict.

    Three kinds of work take a slot: listing a variant's stages, running a stage (through
    the executor), and a verdict (which loads and compares tensors).
    """

    def __init__(
        self,
        states: list[_State],
        options: Options,
        executor: Executor,
        summary: _Summary,
        reporter: Reporter | None,
    ) -> None:
        self.pending = list(states)
        self.active: list[_State] = []
        self.options, self.executor, self.summary = options, executor, summary
        self.reporter = reporter
        self.slots = max(1, options.jobs)
        self.stop = threading.Event()  # tells every child's driver to kill its group
        self.busy: set[str] = set()  # exclusive devices a running stage holds
        self.inflight: dict[cf.Future[Any], Callable[[cf.Future[Any]], None]] = {}
        self.pool = cf.ThreadPoolExecutor(self.slots, thread_name_prefix="reprokit")

    def run(self) -> RunSummary:
        try:
            with signals.raising():  # until the last write: the wait for the environment too
                self.summary.write()
                self._loop()
                summary = self.summary.write(wait_env=True)
                pause("run-done")
                return summary
        except KeyboardInterrupt:
            self._abandon()
            raise Interrupted(self.summary.write(interrupted=True)) from None
        except BaseException:
            self._abandon()
            raise
        finally:
            self.pool.shutdown(wait=True)

    def _loop(self) -> None:
        while True:
            while len(self.inflight) < self.slots and self._submit_next():
                pass
            if not self.inflight:
                return
            done, _ = cf.wait(self.inflight, timeout=0.5, return_when=cf.FIRST_COMPLETED)
            for future in done:  # forgotten only once handled: a signal meanwhile leaves
                self.inflight[future](future)  # it to _abandon, which hands it on again
                del self.inflight[future]

    def _abandon(self) -> None:
        """Stop every child (the threads driving them kill their groups), wait for them, and
        keep what finished: a verdict that came meanwhile, and the verdict of every variant
        whose stages had all ended by themselves before the stop."""
        self.stop.set()
        with signals.ignored():
            cf.wait(self.inflight)
            for future, then in list(self.inflight.items()):
                if future.exception() is None:
                    then(future)
            self.inflight.clear()
            for state in [s for s in self.active if s.ended]:
                if all(r.status is not Status.INTERRUPTED for r in state.results.values()):
                    self._judged(state, state.verdict(self.options))

    def _submit(self, call: Callable[[], Any], then: Callable[[cf.Future[Any]], None]) -> bool:
        self.inflight[self.pool.submit(call)] = then
        return True

    def _submit_next(self) -> bool:
        """Start one piece of work: a verdict, else a ready stage, else a variant's listing.

        Older variants go first, so that variants finish steadily rather than all at the end.
        """
        for state in self.active:
            if state.ended:
                state.phase = Phase.JUDGING
                self.active.remove(state)
                return self._submit(
                    functools.partial(state.verdict, self.options),
                    lambda f, s=state: self._judged(s, f.result()),
                )
        for state in self.active:
            for stage in state.ready():
                if self._device(stage) not in self.busy:
                    return self._start_stage(state, stage)
        if not self.pending:
            return False
        state = self.pending.pop(0)
        state.phase, state.start = Phase.LISTING, time.monotonic()
        self.active.append(state)
        return self._submit(
            lambda: self.executor.list_stages(state.folder, self.stop),
            lambda future: self._listed(state, future),
        )

    def _device(self, stage: Stage) -> str | None:
        if self.options.executor == "ray":  # Ray gives each task its own chips, node by node
            return None
        return backends.exclusive_device(stage.backend, self.options.xla_device)

    def _listed(self, state: _State, future: cf.Future[tuple[StageResult, list[Stage]]]) -> None:
        state.phase = Phase.RUNNING
        try:
            _, stages = future.result()
        except StagesUnlisted as exc:  # the verdict is an error, and says why
            state.reason = str(exc)
            state.stages = [Stage(exc.result.name, "cpu")]
            state.results = {exc.result.name: exc.result}
            return
        template = state.variant.template.path
        state.stages = with_devices(stages, state.variant.params, template)
        if any(stage.reference for stage in stages):
            _prewarm_compare()
        chosen = selected(stages, self.options.stages)
        unasked = "not in --stages"
        if not chosen:  # a typo, or a case without those stages: say which it has
            unasked = f"--stages names none of its stages ({', '.join(s.name for s in stages)})"
        here = self.options.executor == "local"  # on Ray, the executor skips what no node has
        for stage in stages:
            why = unasked if stage.name not in chosen else None
            if why := why or (here and backends.unavailable(stage.backend)) or None:
                state.results[stage.name] = StageResult(
                    stage.name, stage.backend, Status.SKIPPED, reason=why
                )
        state.results.update(blocked(state.stages, state.results))

    def _start_stage(self, state: _State, stage: Stage) -> bool:
        state.running.add(stage.name)
        device = self._device(stage)
        if device is not None:
            self.busy.add(device)
        if self.reporter:
            self.reporter.stage_started(state.variant.label, stage.name)

        def then(future: cf.Future[StageResult]) -> None:
            result = future.result()
            state.running.discard(stage.name)
            self.busy.discard(device or "")
            state.results[stage.name] = result
            state.results.update(blocked(state.stages, state.results))
            if self.reporter:
                self.reporter.stage_finished(state.variant.label, result)

        job = StageJob(state.folder, stage, state.variant.case.timeout, state.python)
        return self._submit(lambda: self.executor.run_stage(job, self.stop), then)

    def _judged(self, state: _State, result: VariantResult) -> None:
        pause("variant-judged")
        self.summary.add(state.index, result)
        if self.reporter:
            self.reporter.variant_finished(result)


def selected(stages: list[Stage], names: Iterable[str]) -> set[str]:
    """The stages ``--stages NAME,...`` runs: those named and every stage they need, however
    indirectly; all of them when none is named."""
    known = [stage.name for stage in stages]
    return needed(stages, [name for name in names if name in known] if names else known)


@functools.cache
def _prewarm_compare() -> None:
    """Import torch (for the comparisons) in the background while the first stages run.

    It takes seconds; done at the first verdict instead, it would add them to the run.
    """
    threading.Thread(
        target=import_module, args=("reprokit.comparison.tensors",), daemon=True
    ).start()
