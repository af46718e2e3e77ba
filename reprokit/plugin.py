"""The pytest plugin: ``pytest cases/`` runs every variant of every case file as a test item.

Registered by entry point (``pytest11``), so that any project with reprokit installed can keep
its reported bugs as regression checks. Each item goes through the same ``reprokit.run``
as ``reprokit run``, so outcomes agree; an item fails when its outcome is not the case's
expectation, with a few lines in pytest.approx's manner; it is skipped when its backend is
missing here. Items on an exclusive accelerator never run two at once: each holds the
device's lock (a file in the temporary folder, so across xdist workers and sessions) while it
runs, and they share an ``xdist_group`` too, so that ``--dist loadgroup`` sends them to one
worker rather than have workers wait on each other. The lock is what keeps the promise: the
grouping alone does not (pytest-xdist 3.8 under pytest 9.2 drops it, pytest-xdist#1386).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from reprokit.errors import ReprokitError
from reprokit.records import Outcome, VariantResult
from reprokit.run_flags import RUN_OPTIONS, RunOption, build_options, environments
from reprokit.runner import backends

if TYPE_CHECKING:
    from reprokit.generate.variants import Variant

_CASE_TABLE = re.compile(r"^\s*\[\s*case\s*\]", re.MULTILINE)
WORST = 3  # differing tensors shown in a failure


def pytest_addoption(parser: pytest.Parser) -> None:
    """The run options of ``reprokit run`` (declared once, run_flags.py) as
    ``--reprokit-NAME``, and where items keep their run folders."""
    group = parser.getgroup("reprokit", "reprokit case files (cases/*.toml)")
    for option in RUN_OPTIONS:
        group.addoption(option.plugin_flag, dest=option.plugin_dest, **_argparse(option))
    group.addoption(
        "--reprokit-run-dir",
        default=None,
        metavar="DIR",
        help="keep each item's run folder under DIR (default: pytest's temporary folder)",
    )


def _argparse(option: RunOption) -> dict[str, Any]:
    """How argparse (under pytest's parser) reads the option."""
    if option.kind is bool:
        return {"action": "store_true", "help": option.help}
    read: dict[str, Any] = {"metavar": option.metavar, "help": option.help}
    if option.repeated:
        return read | {"action": "append", "default": []}
    if option.choices:
        read["choices"] = option.choices
    return read | {"type": option.kind if option.kind is float else str, "default": option.default}


def _run_values(config: pytest.Config) -> dict[str, Any]:
    return {option.name: config.getoption(option.plugin_dest) for option in RUN_OPTIONS}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xdist_group(name): run in one pytest-xdist worker")
    if config.getoption("reprokit_executor", "local") == "ray":
        # One connection for the session: each item's executor finds Ray initialized and
        # uses it, rather than starting (seconds) and stopping a Ray of its own.
        from reprokit.runner.processes.ray_executor import RayExecutor

        try:
            session_ray = RayExecutor(build_options(_run_values(config)))
        except ReprokitError as exc:  # no Ray installed, no cluster there: one line, exit 4
            raise pytest.UsageError(str(exc)) from None
        config.add_cleanup(session_ray.close)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A ``.toml`` file with a ``[case]`` table is a case (pyproject.toml is not)."""
    if file_path.suffix != ".toml":
        return None
    try:
        text = file_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not _CASE_TABLE.search(text):
        return None
    return CaseFile.from_parent(parent, path=file_path)


class CaseFile(pytest.File):
    """One case file: one item per variant."""

    def collect(self):
        from reprokit.generate.cases import load_case
        from reprokit.generate.variants import variants

        values = _run_values(self.config)
        case = load_case(self.path, templates=tuple(map(Path, values["templates"])))
        group = _exclusive_group(self.config)
        for variant in variants(case, envs=environments(values)):
            item = CaseItem.from_parent(self, name=variant.label, variant=variant, group=group)
            if group:
                item.add_marker(pytest.mark.xdist_group(group))
            yield item

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style=None) -> Any:
        if isinstance(excinfo.value, ReprokitError):
            return str(excinfo.value)  # the case file's problem, not a traceback
        return super().repr_failure(excinfo)


class VariantFailed(Exception):
    """The variant's outcome was not the one its case expects."""

    def __init__(self, result: VariantResult, folder: Path) -> None:
        super().__init__(f"{result.label}: {result.outcome.value}, expected {result.expected}")
        self.result, self.folder = result, folder


class CaseItem(pytest.Item):
    """One variant, run through reprokit's runner into its own run folder."""

    def __init__(self, *, variant: Variant, group: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.variant = variant
        self.group = group  # the exclusive device it runs on, if any

    def runtest(self) -> None:
        import reprokit  # the runner: only once an item runs

        config = self.config
        jobs = 1 if hasattr(config, "workerinput") else os.cpu_count() or 1  # xdist: 1 each
        options = build_options(_run_values(config), jobs=jobs)
        run_dir = _run_dir(config, self.variant.label)
        try:
            with _holding(self.group):
                summary = reprokit.run(
                    [self.variant], run_dir=run_dir, options=options, argv=["pytest"]
                )
        except reprokit.Interrupted:
            raise KeyboardInterrupt from None
        (result,) = summary.variants
        self.user_properties.append(("outcome", result.outcome.value))
        self.user_properties.append(("run_dir", str(run_dir)))
        if result.outcome is Outcome.SKIPPED:
            pytest.skip(result.reason or "a backend is not available here")
        if not result.passed:
            raise VariantFailed(result, run_dir / result.label)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style=None) -> Any:
        if isinstance(excinfo.value, VariantFailed):
            return failure_message(excinfo.value.result, excinfo.value.folder)
        if isinstance(excinfo.value, ReprokitError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"reprokit case {self.variant.label}"


def failure_message(result: VariantResult, folder: Path) -> str:
    """Outcome vs expectation, then the worst tensors or the failing stage's last words."""
    lines = [f"outcome {result.outcome.value}, expected {result.expectation}"]
    if result.reason:
        lines[0] += f": {result.reason}"
    bad = [c for c in result.comparisons if not c.allclose]
    bad.sort(key=lambda c: (c.mismatched / max(c.total, 1), float(c.max_abs)), reverse=True)
    for comparison in bad[:WORST]:
        head = f"{comparison.target} vs {comparison.reference}: "
        lines += ["  " + line for line in (head + comparison.describe()).splitlines()]
    if len(bad) > WORST:
        lines.append(f"  ... and {len(bad) - WORST} more tensors outside tolerance")
    failed = result.failed_stage
    if failed is not None and failed.stderr_tail:
        lines.append(f"  {failed.name} stderr (last lines):")
        lines += [f"    {line}" for line in failed.stderr_tail[-6:]]
    elif failed is not None:
        lines.append(f"  {failed.name} printed nothing on stderr")
    lines.append(f"  run folder: {folder}")
    return "\n".join(lines)


def _run_dir(config: pytest.Config, label: str) -> Path:
    """Each item its own run folder, so that items never share a lock or a summary."""
    name = re.sub(r"[^\w.-]", "_", label)
    base = config.getoption("reprokit_run_dir")
    if base:
        return Path(base) / name
    factory = getattr(config, "_tmp_path_factory", None)  # pytest's own tmp_path machinery
    if factory is None:
        import tempfile

        return Path(tempfile.mkdtemp(prefix="reprokit-")) / name
    return factory.mktemp(name, numbered=True)


@contextlib.contextmanager
def _holding(group: str | None) -> Iterator[None]:
    """The exclusive device's lock while an item runs on it; nothing to hold for none."""
    if group is None:
        yield
        return
    import filelock

    with filelock.FileLock(Path(tempfile.gettempdir()) / f"{group}.lock"):
        yield


def _exclusive_group(config: pytest.Config) -> str | None:
    """The xdist group of every item when XLA runs on an accelerator, or a GPU is here."""
    device = backends.xla_device(config.getoption("reprokit_xla_device"))
    if device != "CPU":
        return f"reprokit-{device}"
    return "reprokit-CUDA" if backends.has_nvidia_gpu() else None
