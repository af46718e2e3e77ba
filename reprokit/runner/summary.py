"""summary.json as variants finish: a reporter of the run, like the progress display.

:class:`SummaryWriter` hears what the scheduler tells every reporter; as each variant finishes
it rewrites summary.json atomically (the finished variants in the order they were given, and
the environment). The environment is captured twice: a quick capture at once, and the full
one (``torch.utils.collect_env`` takes seconds) beside the stages, which replaces it once done.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reprokit.environment.machine import describe_machine
from reprokit.infra.offload import Offload, here
from reprokit.infra.pause import pause
from reprokit.records import Environment, RunSummary, StageResult, VariantResult, write_summary
from reprokit.runner.options import Options


def now() -> str:
    """The time, as summary.json writes it."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class SummaryWriter:
    """Writes summary.json into ``run_dir``: the variants labelled ``labels`` as they finish,
    in that order, whatever order they finish in."""

    def __init__(
        self,
        run_dir: Path,
        labels: Iterable[str],
        argv: tuple[str, ...],
        options: Options,
        offload: Offload = here,
    ) -> None:
        self.run_dir, self.cached, self.offload = run_dir, options.cache, offload
        self.order = {label: index for index, label in enumerate(labels)}
        self.finished: dict[int, VariantResult] = {}
        self.serialized: dict[int, dict[str, Any]] = {}  # each variant's JSON, made once
        env = describe_machine(quick=True)
        self.summary = RunSummary(now(), argv=argv, env=env, xla_device=options.xla_device)
        # No XLA probe in the full capture: it could hold a TPU a stage needs. A daemon
        # thread: an interrupted run exits at once, not when collect_env is done.
        self.capture: cf.Future[Environment] = cf.Future()
        threading.Thread(target=self._capture, daemon=True, name="reprokit-env").start()

    def _capture(self) -> None:
        try:
            found = describe_machine(probe_xla=False, cached=self.cached, offload=self.offload)
            self.capture.set_result(found)
        except BaseException as exc:  # kept, and the short capture stays in summary.json
            self.capture.set_exception(exc)

    def stage_started(self, label: str, stage: str) -> None:
        """Nothing to write: summary.json holds finished variants only."""

    def stage_finished(self, label: str, result: StageResult) -> None:
        """Nothing to write: a variant's stages are written with its verdict."""

    def variant_finished(self, result: VariantResult) -> None:
        """Keep the verdict and rewrite summary.json with it."""
        index = self.order.setdefault(result.label, len(self.order))
        self.finished[index], self.serialized[index] = result, result.to_json()
        self.write()

    def write(self, *, interrupted: bool = False, wait_env: bool = False) -> RunSummary:
        """summary.json as it stands, and the summary; ``wait_env``: once the full capture of
        the environment is done (the run's last write), ``interrupted``: the run was stopped."""
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
