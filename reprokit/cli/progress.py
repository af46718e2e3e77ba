"""What ``reprokit run`` shows while it runs: a live display on a terminal, plain lines in CI.

Both print one line per finished variant; on a terminal a rich progress bar below them shows
variants done / total, the stages running now, the time so far, and the failures so far.
The runner calls these from its scheduling thread only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

if TYPE_CHECKING:
    from rich.console import Console

    from reprokit.records import RunSummary, StageResult, VariantResult

_MARK = {"pass": "[green]PASS[/]", "fail": "[bold red]FAIL[/]", "skip": "[yellow]SKIP[/]"}


def variant_line(result: VariantResult) -> str:
    """``PASS  case[a]  match (expected match)  12.3 s``, and why, when it did not match."""
    why = f"  {escape(result.reason)}" if result.reason else ""
    reused = sum(bool(s.reused) for s in result.stages)
    cached = f" ({reused} of {len(result.stages)} stages reused)" if reused else ""
    return (
        f"{_MARK[result.mark]}  {escape(result.label)}  {result.outcome.value} "
        f"(expected {escape(result.expectation)})  {result.seconds:.1f} s{cached}{why}"
    )


def closing_line(summary: RunSummary, run_dir: Path, seconds: float) -> str:
    passed, failed, skipped = (summary.count(p) for p in (True, False, None))
    verdict = "[bold red]interrupted[/]: " if summary.interrupted else ""
    reused = sum(bool(s.reused) for v in summary.variants for s in v.stages)
    cached = f"{reused} stages reused from earlier runs (--no-cache runs them); " if reused else ""
    return (
        f"{verdict}{passed} passed, {failed} failed, {skipped} skipped in {seconds:.1f} s; "
        f"{cached}run folder: {escape(str(run_dir))}"
    )


class Lines:
    """One plain line per finished variant (when the output is not a terminal)."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def stage_started(self, label: str, stage: str) -> None:
        pass

    def stage_finished(self, label: str, result: StageResult) -> None:
        pass

    def variant_finished(self, result: VariantResult) -> None:
        self.console.print(variant_line(result), highlight=False)


class Live(Lines):
    """The per-variant lines, plus a live bar: done / total, stages running, failures."""

    def __init__(self, console: Console, total: int) -> None:
        super().__init__(console, total)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=console,
        )
        self.task = self.progress.add_task("starting", total=total, failed=0)
        self.running: dict[str, str] = {}  # "label/stage" -> label
        self.failed = 0

    def __enter__(self) -> Live:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def _show(self) -> None:
        now = list(self.running)
        text = ", ".join(now[:3]) + (f" +{len(now) - 3}" if len(now) > 3 else "")
        self.progress.update(self.task, description=escape(text or "waiting"), failed=self.failed)

    def stage_started(self, label: str, stage: str) -> None:
        self.running[f"{label}/{stage}"] = label
        self._show()

    def stage_finished(self, label: str, result: StageResult) -> None:
        self.running.pop(f"{label}/{result.name}", None)
        self._show()

    def variant_finished(self, result: VariantResult) -> None:
        self.progress.console.print(variant_line(result), highlight=False)
        self.failed += result.passed is False
        self.progress.advance(self.task)
        self._show()


def reporter(console: Console, total: int) -> Lines:
    """The live display on a terminal, plain lines otherwise."""
    return (Live if console.is_terminal else Lines)(console, total)
