"""The runner: every variant's stages in fresh processes, in DAG order, many at once.

``run`` prepares each variant (prepare.py: its script in ``RUN_DIR/<label>/repro.py``), asks
the executor for its stage DAG (``--list-stages``: the protocol is all it relies on), plans it
(plan.py: ``--stages``, backends missing here), has the executor run each stage as
``python repro.py --stage S`` with its backend's environment, judges every variant (comparing
the tensors of each stage that names a reference), and tells its reporters: summary.py's
writes summary.json as each variant finishes.

One thread (the caller's) schedules; a pool of ``jobs`` threads each drives one child process.
A stage starts as soon as the stages it needs are done and a slot is free, so independent
stages of one variant run side by side; a stage on an exclusive accelerator waits until no
other stage holds that device. A failing variant never stops the others. Ctrl-C, SIGTERM or
SIGHUP stops every child (its whole process group), keeps what finished, and raises
:class:`Interrupted` (``signals.py`` says how no second signal can cut that short).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import enum
import functools
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import filelock

from reprokit.comparison.retention import reduce_variant
from reprokit.comparison.verdict import verdict
from reprokit.errors import ReprokitError, ReprokitWarning
from reprokit.generate.variants import Variant
from reprokit.infra.offload import Offload, here
from reprokit.infra.pause import pause
from reprokit.infra.redact import redact_text
from reprokit.infra.torch_import import import_module
from reprokit.records import Outcome, RunSummary, Stage, StageResult, Status, VariantResult
from reprokit.records.folder import RUN_LOCK
from reprokit.runner import backends
from reprokit.runner.dag import blocked
from reprokit.runner.options import Options
from reprokit.runner.plan import plan
from reprokit.runner.prepare import Prepared, in_stage_env, prepare
from reprokit.runner.processes import signals
from reprokit.runner.processes.executors import make_executor
from reprokit.runner.processes.result_cache import CachingExecutor
from reprokit.runner.processes.stage import Executor, StageJob, StagesUnlisted, capabilities_of
from reprokit.runner.summary import SummaryWriter
from reprokit.runner.summary import now as now  # where tools/wrap.py has it from


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
    lock = _lock(run_dir)
    made = None  # the executor made here, whose warm servers end with the run
    try:
        unique = {v.label: v for v in variants}  # a case named twice runs once
        prepared = [prepare(v, run_dir, options, announce) for v in unique.values()]
        argv = tuple(redact_text(arg) for arg in argv)  # a --set may carry a token
        executor = executor or (made := make_executor(options))
        if options.cache:
            executor = CachingExecutor(executor, options, run_dir)
        stop = threading.Event()  # tells every child's driver to kill its group
        offload = _offload(executor, options, stop)
        summary = SummaryWriter(run_dir, unique, argv, options, offload)
        reporters = [summary, *([reporter] if reporter else [])]
        scheduler = _Scheduler(prepared, options, executor, reporters, stop, offload)
        return _drive(scheduler, summary)
    finally:
        if made is not None:
            made.close()
        lock.release()


def _lock(run_dir: Path) -> filelock.BaseFileLock:
    """The run folder, held by this run alone."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(run_dir / RUN_LOCK)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise ReprokitError(
            "another reprokit run is writing into this run folder",
            run_dir,
            hint="Wait for it to finish, or give this run its own folder with -o RUN_DIR.",
        ) from None
    return lock


def _drive(scheduler: _Scheduler, summary: SummaryWriter) -> RunSummary:
    """The run from its first summary.json to its last (which waits for the environment's
    capture); a signal meanwhile stops every child, keeps what finished and raises
    :class:`Interrupted`."""
    try:
        with signals.raising():  # until the last write: the wait for the environment too
            summary.write()
            scheduler.run()
            found = summary.write(wait_env=True)
            pause("run-done")
            return found
    except KeyboardInterrupt:
        scheduler._abandon()
        raise Interrupted(summary.write(interrupted=True)) from None
    except BaseException:
        scheduler._abandon()
        raise
    finally:
        scheduler.pool.shutdown(wait=True)


# why a variant that matched on its outputs may have been expected to mismatch
_OUTPUTS_ONLY = (
    "judged on its outputs, which match; an operation's difference that reaches no output "
    'shows only where every operation is recorded: nodes = "all" in the case\'s [params]'
)


class Phase(enum.Enum):
    """Where one variant is: each phase hands it to the next, in this order."""

    PENDING = "pending"  # rendered, waiting for a slot
    LISTING = "listing"  # its script is asked for the stage DAG
    RUNNING = "running"  # its stages run as they become ready
    JUDGING = "judging"  # every stage has a result: the verdict is computed


@dataclass
class _State:
    """One variant while it runs; changed by the scheduling thread only."""

    index: int  # its place among the run's variants
    prepared: Prepared
    phase: Phase = Phase.PENDING
    stages: list[Stage] = field(default_factory=list)
    results: dict[str, StageResult] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    start: float = 0.0
    reason: str | None = None  # when its stage list could not be had
    compares: bool = False  # some stage of its plan names a reference: tensors to compare
    # its on_mismatch stages: None while the others are not yet judged, then whether they run
    # (False: the others match, and those stages are left out of the variant)
    localise: bool | None = None
    matched: VariantResult | None = None  # the match the others were judged, left out of those
    again: set[str] = field(default_factory=set)  # again_on_mismatch stages run a second time

    @property
    def variant(self) -> Variant:
        return self.prepared.variant

    @property
    def folder(self) -> Path:
        return self.prepared.folder

    @property
    def ended(self) -> bool:
        """Every stage has a result (ran, or was skipped), and none waits to run again."""
        return (self.phase is Phase.RUNNING and len(self.results) == len(self.stages)
                and (self.localise is not None or not self.judges_first))  # fmt: skip

    @property
    def judges_first(self) -> bool:
        """Some stage waits for the others' verdict: to run, or to run again."""
        return any(s.on_mismatch or s.again_on_mismatch for s in self.stages)

    def ready(self) -> list[Stage]:
        """Stages whose needs all ended well, not yet started (an on_mismatch stage only once
        the others were judged not to match, and then first: it localises, the longest)."""
        if self.phase is not Phase.RUNNING:
            return []
        done = self.results
        ready = [
            stage
            for stage in self.stages
            if stage.name not in done
            and stage.name not in self.running
            and (not stage.on_mismatch or self.localise)
            and all(n in done and done[n].status is Status.OK for n in stage.needs)
        ]
        return sorted(ready, key=lambda stage: not stage.on_mismatch)

    @property
    def to_judge_first(self) -> bool:
        """Every stage but the on_mismatch ones has a result, and some wait for the verdict
        of the others: on_mismatch ones to run, again_on_mismatch ones to run again."""
        waiting = [s for s in self.stages if s.name not in self.results]
        return (self.phase is Phase.RUNNING and self.localise is None and self.judges_first
                and not self.running and all(s.on_mismatch for s in waiting))  # fmt: skip

    def judged_first(self, options: Options, offload: Offload) -> VariantResult:
        """The stages that ran, judged alone: short of a match, an on_mismatch stage then
        runs to localise it; a match is the variant's verdict."""
        ran = [s for s in self.stages if not s.on_mismatch]
        return verdict(
            self.variant, ran, self.results, self.folder, 0.0, self.reason,
            cached=options.cache, xla_device=options.xla_device, offload=offload,
        )  # fmt: skip

    def job(self, stage: Stage) -> StageJob:
        """What the executor needs to run ``stage``: the variant's whole DAG too."""
        prepared = self.prepared
        variant = prepared.variant
        dag, variables = tuple(self.stages), variant.variables
        return StageJob(
            prepared.folder, stage, variant.case.timeout, prepared.python, dag, variables,
            localise=stage.name in self.again,
        )  # fmt: skip

    def verdict(self, options: Options, offload: Offload) -> VariantResult:
        seconds = time.monotonic() - self.start
        if self.matched is not None:  # judged already, on the stages that ran: the outputs
            why = None if self.matched.expected is Outcome.MATCH else _OUTPUTS_ONLY  # hidden?
            found = replace(self.matched, seconds=round(seconds, 3), outputs_only=True,
                            reason=self.matched.reason or why)  # fmt: skip
        else:
            found = verdict(
                self.variant,
                self.stages,
                self.results,
                self.folder,
                seconds,
                self.reason,
                cached=options.cache,
                xla_device=options.xla_device,
                offload=offload,
            )
        if not options.keep_tensors:  # summary.json has the comparisons: the rest may go
            reduce_variant(self.folder, found, cached=options.cache, offload=offload)
        pause("verdict-computed")
        return found


@dataclass(frozen=True)
class _Listed:
    """A variant's stage DAG, and why each backend the executor cannot run here is missing."""

    stages: list[Stage]
    unavailable: dict[str, str]


class _Scheduler:
    """Hands ready work to a pool of ``jobs`` threads until every variant has a verdict.

    Three kinds of work take a slot: listing a variant's stages, running a stage (through
    the executor), and a verdict (which loads and compares tensors). What happens is told to
    the reporters (summary.json's writer is one).
    """

    def __init__(
        self,
        prepared: Sequence[Prepared],
        options: Options,
        executor: Executor,
        reporters: Sequence[Reporter],
        stop: threading.Event,
        offload: Offload,
    ) -> None:
        self.pending = [_State(i, p) for i, p in enumerate(prepared)]
        self.active: list[_State] = []
        self.options, self.executor, self.reporters = options, executor, tuple(reporters)
        self.can = capabilities_of(executor)
        self.slots = max(1, options.jobs)
        self.stop, self.offload = stop, offload
        self.busy: set[str] = set()  # exclusive devices a running stage holds
        self.inflight: dict[cf.Future[Any], Callable[[cf.Future[Any]], None]] = {}
        self.pool = cf.ThreadPoolExecutor(self.slots, thread_name_prefix="reprokit")

    def run(self) -> None:
        """Until every variant has a verdict (the caller abandons the run on an exception)."""
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
                    self._judged(state, state.verdict(self.options, self.offload))

    def _submit(self, call: Callable[[], Any], then: Callable[[cf.Future[Any]], None]) -> bool:
        self.inflight[self.pool.submit(call)] = then
        return True

    def _submit_next(self) -> bool:
        """Start one piece of work: a verdict, else a ready stage, else a variant's listing,
        else a stage that would wait for a warm server another stage is starting.

        Older variants go first, so that variants finish steadily rather than all at the end.
        """
        for state in self.active:
            if state.ended:
                state.phase = Phase.JUDGING
                self.active.remove(state)
                return self._submit(
                    functools.partial(state.verdict, self.options, self.offload),
                    lambda f, s=state: self._judged(s, f.result()),
                )
        for state in self.active:
            if state.to_judge_first:
                state.localise = False  # not None: submitted once
                return self._submit(
                    functools.partial(state.judged_first, self.options, self.offload),
                    lambda f, s=state: self._localised(s, f.result()),
                )
        deferred = None  # a stage that would wait for its warm server: other work first
        for state in self.active:
            for stage in state.ready():
                if self._device(stage) in self.busy:
                    continue
                if not self._waits(state, stage):
                    return self._start_stage(state, stage)
                deferred = deferred or (state, stage)
        if not self.pending:
            return deferred is not None and self._start_stage(*deferred)
        state = self.pending.pop(0)
        state.phase, state.start = Phase.LISTING, time.monotonic()
        self.active.append(state)
        return self._submit(lambda: self._list(state), lambda f: self._listed(state, f))

    def _waits(self, state: _State, stage: Stage) -> bool:
        """Whether the stage would spend its slot waiting for the executor (a warm server
        that another stage is starting: seconds of imports on one core). With ``-n 2``, the
        other slot then runs the stages that need no such server, of the next variants if
        need be, rather than both waiting on the one import."""
        waits = getattr(self.executor, "waits", None)  # an executor may have no such wait
        return bool(waits and waits(state.job(stage)))

    def _device(self, stage: Stage) -> str | None:
        """The accelerator the stage holds alone, if its executor gives such turns."""
        if not self.can.exclusive_devices:  # Ray gives each task its own chips, node by node
            return None
        return backends.exclusive_device(stage.backend, self.options.xla_device)

    def _list(self, state: _State) -> _Listed:
        """In a worker thread: the variant's stages, and which of their backends are missing
        here (a probe may take seconds: CUDA), where the executor runs them here."""
        _, stages = self.executor.list_stages(state.folder, self.stop)
        kinds = {stage.backend for stage in stages} if self.can.local_backends else set()
        missing = {kind: why for kind in sorted(kinds) if (why := backends.unavailable(kind))}
        return _Listed(stages, missing)

    def _listed(self, state: _State, future: cf.Future[_Listed]) -> None:
        state.phase = Phase.RUNNING
        try:
            listed = future.result()
        except StagesUnlisted as exc:  # the verdict is an error, and says why
            state.reason = str(exc)
            state.stages = [Stage(exc.result.name, "cpu")]
            state.results = {exc.result.name: exc.result}
            return
        variant = state.variant
        found = plan(
            listed.stages,
            asked=self.options.stages,
            unavailable=listed.unavailable,
            params=variant.params,
            template=str(variant.template.path),
        )
        for note in found.notes:
            warnings.warn(note, ReprokitWarning, stacklevel=2)
        state.stages = list(found.stages)
        state.results = {skip.stage.name: skip.result() for skip in found.skipped}
        state.compares = found.compares
        if state.compares and not self.options.cache:  # nothing reused: its tensors are new
            self._prewarm_compare()

    def _localised(self, state: _State, found: VariantResult) -> None:
        """The others judged: an on_mismatch stage runs where they do not match, and is left
        out of the variant where they do (their verdict is the variant's)."""
        state.localise = found.outcome is not Outcome.MATCH
        if not state.localise:
            state.stages = [s for s in state.stages if not s.on_mismatch]
            state.matched = found
            return
        for stage in state.stages:  # those that ran well run again, localising: ready once more
            ran = state.results.get(stage.name)  # (unless it recorded what localises already)
            if stage.again_on_mismatch and ran and ran.status is Status.OK and not ran.localised:
                state.again.add(stage.name)
                del state.results[stage.name]

    def _start_stage(self, state: _State, stage: Stage) -> bool:
        state.running.add(stage.name)
        device = self._device(stage)
        if device is not None:
            self.busy.add(device)
        for reporter in self.reporters:
            reporter.stage_started(state.variant.label, stage.name)

        def then(future: cf.Future[StageResult]) -> None:
            result = future.result()
            state.running.discard(stage.name)
            self.busy.discard(device or "")
            state.results[stage.name] = result
            state.results.update(blocked(state.stages, state.results))
            if state.compares and result.reused is None:  # it ran: new tensors to compare
                self._prewarm_compare()
            for reporter in self.reporters:
                reporter.stage_finished(state.variant.label, result)

        job = state.job(stage)
        return self._submit(lambda: self._run_stage(job), then)

    def _run_stage(self, job: StageJob) -> StageResult:
        """The stage run by the executor, in its own environment where it names one."""
        try:
            job = in_stage_env(job)
        except ReprokitError as exc:  # uv could not make it: the stage failed, the run goes on
            return StageResult(job.stage.name, job.stage.backend, Status.ERROR, reason=str(exc))
        return self.executor.run_stage(job, self.stop)

    def _prewarm_compare(self) -> None:
        """torch for the comparisons, unless they are done elsewhere (a warm server's fork)."""
        if self.offload is here:
            _prewarm_compare()

    def _judged(self, state: _State, result: VariantResult) -> None:
        pause("variant-judged")
        for reporter in self.reporters:  # summary.json's writer first
            reporter.variant_finished(result)


def _offload(executor: Executor, options: Options, stop: threading.Event) -> Offload:
    """Where the run's work that needs torch is done (infra/offload.py): in a fork of a warm
    server where the run starts its stages warm, so that the harness needs no torch."""
    elsewhere = getattr(executor, "offload", None) if options.warm else None
    if elsewhere is None:
        return here
    return lambda work, data: elsewhere(work, data, stop)


@functools.cache
def _prewarm_compare() -> None:
    """Import torch (for the comparisons) in the background while the other stages run.

    It takes seconds; done at the first verdict instead, it would add them to the run. Not
    before a stage really ran: a re-run whose stages all come from the results cache has
    its comparisons cached too (verdict.py), and torch's import (a second of CPU, 550 MB)
    would be most of its time.
    """
    threading.Thread(target=_import_behind_the_stages, daemon=True).start()


def _import_behind_the_stages() -> None:
    """The comparisons' import at a lower CPU priority (this thread only, on Linux): at a
    run's start it would take a core from the warm servers' own imports of torch and
    torch_xla, which every stage waits for, while the first verdict is seconds away."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux: as it is
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    import_module("reprokit.comparison.tensors")
