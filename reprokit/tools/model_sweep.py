"""``reprokit sweep``: models x dtypes x the matrix, captured and run into one run folder.

Each named model (reprokit.tools.capture.zoo) is captured into RUN_DIR/captured/NAME.toml (a model
that cannot be captured is recorded with its refusal and the sweep goes on); the cases' variants
in each dtype (``--set dtype=...``, so labels read ``resnet18[dtype=bfloat16]``) and each
environment run together through the one runner (``-n``, warm start, the results cache and
``--env`` apply as in ``reprokit run``). ``minimize=True`` then groups the divergences by what
they are (op, dtypes, kind: reprokit.reports.sweep.Divergence) and shrinks one witness of
each, the one with the fewest operations, to its short repro in RUN_DIR/findings/N-OP/: eight
decoders hitting one ``cumsum`` are one finding with eight witnesses. RUN_DIR/sweep.json
(reprokit.records.sweep) is what the report's sweep table is read from.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import tomllib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.generate.variants import Variant, load_variants
from reprokit.records import Outcome, RunSummary, StageResult, Status
from reprokit.records.folder import VariantFolder
from reprokit.records.sweep import CAPTURED, Finding, Sweep, SweptModel, case_file, write_sweep
from reprokit.reports.sweep import divergence
from reprokit.runner.options import Options
from reprokit.runner.processes.stage import run_command
from reprokit.runner.scheduler import Reporter, run
from reprokit.tools.capture import zoo

FINDINGS = "findings"  # RUN_DIR/findings/N-OP/: one witness of each divergence, minimized
DTYPES = ("float32", "bfloat16")
_UNSAFE = re.compile(r"[^\w.-]")  # in a folder's name


@dataclass(frozen=True)
class OwnModel:
    """A model of the user's own in a sweep: ``FILE.py:FUNCTION``, as ``reprokit capture``
    takes it."""

    spec: str
    config: dict[str, Any] = field(default_factory=dict)  # (a named model's; none here)
    shape: tuple[int, ...] | None = None

    @property
    def case_name(self) -> str:
        return self.spec.rpartition(":")[2]

    @property
    def qualified_name(self) -> str:
        """``models_build`` for ``path/models.py:build``: two files' functions of one name."""
        file, _, function = self.spec.rpartition(":")
        return f"{Path(file).stem}_{function}"


Model = zoo.Named | OwnModel


@dataclass(frozen=True)
class SweepResult:
    """The run's summary and the sweep's own record."""

    summary: RunSummary
    sweep: Sweep


def load_models(sources: Iterable[str]) -> tuple[list[Model], tuple[str, ...] | None]:
    """Models named on the command line (``torchvision:resnet18``, or ``FILE.py:FUNCTION``
    of your own) or listed in TOML files, and the dtypes a file names (None when none)::

        dtypes = ["float32", "bfloat16"]
        [[model]]
        name = "hf:gpt2"
        config = {n_layer = 1}
        shape = [1, 8]
    """
    models: list[Model] = []
    dtypes: tuple[str, ...] | None = None
    for source in sources:
        if zoo.is_named(source) or _is_own(source):
            models.append(_model(source))
            continue
        path = Path(source)
        if not path.is_file():
            raise ReprokitError(f"{source!r} is neither ZOO:MODEL nor a file", hint=_HINT)
        found, listed = _read_list(path)
        models += found
        dtypes = listed or dtypes
    if not models:
        raise ReprokitError("no models to sweep", hint=_HINT)
    return models, dtypes


_HINT = (
    "Name models (torchvision:resnet18 hf:gpt2 model.py:make_model) or a TOML file of "
    "[[model]] tables."
)


def _is_own(source: str) -> bool:
    return source.rpartition(":")[0].endswith(".py")


def _model(source: str, config: dict[str, Any] | None = None,
           shape: Sequence[int] | None = None) -> Model:  # fmt: skip
    if _is_own(source):
        if config or shape:
            raise ReprokitError(f"{source}: config and shape are a named model's",
                                hint="Your own factory makes its model and inputs.")  # fmt: skip
        return OwnModel(source)
    return zoo.parse(source, config, shape)


def _read_list(path: Path) -> tuple[list[Model], tuple[str, ...] | None]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ReprokitError(f"not TOML: {exc}", path, hint=_HINT) from None
    tables = data.get("model", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) and "name" in t
                                               for t in tables):  # fmt: skip
        raise ReprokitError("[[model]] tables need a name", path, hint=_HINT)
    unknown = sorted({k for t in tables for k in t} - {"name", "config", "shape"})
    if unknown:
        raise ReprokitError(f"unknown keys in [[model]]: {', '.join(unknown)}", path,
                            hint="A model takes name, config and shape.")  # fmt: skip
    here = path.parent  # a factory's file, relative to the list
    try:
        models = [_model(_beside(t["name"], here), t.get("config"), t.get("shape"))
                  for t in tables]  # fmt: skip
    except ReprokitError as exc:  # said of the list that names it
        raise ReprokitError(exc.message, exc.path or path, exc.line, exc.hint) from None
    dtypes = data.get("dtypes")
    return models, tuple(dtypes) if dtypes else None


def _beside(source: str, folder: Path) -> str:
    """A factory's ``FILE.py`` relative to the list that names it."""
    file, _, function = source.rpartition(":")
    if not _is_own(source) or Path(file).is_absolute():
        return source
    return f"{folder / file}:{function}"


def sweep(
    models: Sequence[Model], *, run_dir: Path, dtypes: Sequence[str] = DTYPES,
    options: Options | None = None, sets: dict[str, Any] | None = None,
    envs: Iterable[Any] | None = None, minimize: bool = False, budget: int = 40,
    watch: Callable[[int], AbstractContextManager[Reporter]] | None = None,
    argv: Iterable[str] = (),
    announce: Callable[[str], None] | None = None,
) -> SweepResult:  # fmt: skip
    """Capture ``models``, run them in each of ``dtypes`` into ``run_dir``, and with
    ``minimize`` shrink one witness of each divergence; sweep.json written (module docstring).
    ``watch(count)`` gives the reporter that hears the variants run, once their count is
    known (after the captures); ``announce`` hears a line per capture and minimization."""
    options, say = options or Options(), announce or (lambda _line: None)
    run_dir = Path(run_dir).absolute()
    run_dir.mkdir(parents=True, exist_ok=True)  # sweep.json, even when every model is refused
    swept = _capture_all(models, run_dir / CAPTURED, say, options)
    record = Sweep(tuple(swept), tuple(dtypes), minimized=minimize)
    write_sweep(record, run_dir)  # the report can say which models were refused, even now
    cases = [str(run_dir / CAPTURED / case_file(m.case)) for m in swept if m.case]
    chosen = [v for dtype in dtypes for v in load_variants(
        cases, sets={**(sets or {}), "dtype": dtype}, envs=envs)] if cases else []  # fmt: skip
    with watch(len(chosen)) if watch else nullcontext() as reporter:  # a live display
        summary = run(chosen, run_dir=run_dir, options=options, reporter=reporter, argv=argv,
                      announce=say)  # fmt: skip
    if minimize:
        findings = _findings(summary, {v.label: v for v in chosen}, run_dir, options, budget, say)
        record = Sweep(record.models, record.dtypes, tuple(findings), minimized=True)
        write_sweep(record, run_dir)
    return SweepResult(summary, record)


def _capture_all(
    models: Sequence[Model], folder: Path, say: Callable[[str], None], options: Options
) -> list[SweptModel]:
    """Each model captured, or its refusal recorded, announced in the models' order."""
    swept = []
    named_as = zip(models, _case_names(models), strict=True)
    for named, (case, refused, seconds) in zip(models, _captured(named_as, folder, options),
                                               strict=True):  # fmt: skip
        said = f"captured {named.spec} in {seconds} s" if case else f"refused {named.spec}"
        say(said if case else f"{said}: {refused}")
        swept.append(SweptModel(named.spec, case, named.config, named.shape, seconds, refused))
    return swept


def _case_names(models: Sequence[Model]) -> list[str]:
    """Each model's case name; two models of one name kept apart."""
    names: list[str] = []
    for named in models:
        name = named.case_name
        if name in names and isinstance(named, OwnModel):  # two files' build(): by the file
            name = named.qualified_name
        while name in names:  # hf:gpt2 twice, with two configurations
            name = f"{named.case_name}_{len(names)}"
        names.append(name)
    return names


_Captured = tuple[str | None, str | None, float]  # the case's name or None, why not, seconds


def _captured(named_as: Iterable[tuple[Model, str]], folder: Path, options: Options
              ) -> Iterator[_Captured]:  # fmt: skip
    """Each model's capture in order, ``options.jobs`` at a time, each ``reprokit capture`` in a
    process of its own (torch.export is Python: threads in one process would take turns), run
    as a stage is (runner/processes: its own group, its logs in ``captured/stages/``, the
    stage timeout). A capture that kills its process (a crash in torch.export or the model's
    code) is refused as such and the others go on; leaving early (an interrupt) stops the
    captures still running."""
    tasks = list(named_as)
    stop = threading.Event()
    pool = ThreadPoolExecutor(max(1, min(options.jobs, len(tasks))))  # threads only wait
    try:
        futures = [pool.submit(_capture_one, task, folder, options, stop) for task in tasks]
        yield from (future.result() for future in futures)
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)


def _capture_one(task: tuple[Model, str], folder: Path, options: Options,
                 stop: threading.Event) -> _Captured:  # fmt: skip
    """``reprokit capture`` of the model as ``name`` into ``folder``: its case's name, or why
    it was refused (its one-line error, with its hint: what to do)."""
    named, name = task
    command = [sys.executable, "-m", "reprokit", "capture", named.spec, "--name", name,
               "-o", str(folder), *_named_options(named)]  # fmt: skip
    ended = run_command(command, folder=folder, name=f"capture-{name}", backend="cpu",
                        env=dict(os.environ), options=options, cwd=Path.cwd(),
                        stop=stop)  # fmt: skip
    if ended.status is Status.OK:
        return name, None, round(ended.seconds, 2)
    log = VariantFolder(folder).stage(ended.name).log("stderr")
    return None, _refusal(ended, log.read_text("utf-8", "replace")), round(ended.seconds, 2)


def _named_options(named: Model) -> list[str]:
    """A named model's configuration and input shape as ``reprokit capture`` takes them."""
    if isinstance(named, OwnModel):
        return []
    given = [f"--config={key}={json.dumps(value)}" for key, value in named.config.items()]
    return given + ([f"--shape={','.join(map(str, named.shape))}"] if named.shape else [])


def _refusal(ended: StageResult, stderr: str) -> str:
    """Why a capture was refused, in one line: its error and hint as the command printed them,
    the last line of a traceback, or how its process died."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    said = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    if said:  # the message and its hint, wrapped by the console: one line again
        return " ".join(" ".join(lines[said[-1] :]).removeprefix("error: ").split())
    if "Traceback" in stderr and ended.signal is None:
        return lines[-1][:300]
    how = f"died of {ended.signal}" if ended.signal else f"died (exit code {ended.returncode})"
    how = "was killed at the timeout" if ended.status is Status.TIMEOUT else how
    return (f"its capture's process {how}, with no message (a crash in torch.export or the "
            "model's own code): `reprokit capture` it alone to see it")  # fmt: skip


def _findings(
    summary: RunSummary, variants: dict[str, Variant], run_dir: Path, options: Options,
    budget: int, say: Callable[[str], None],
) -> list[Finding]:  # fmt: skip
    """The divergences grouped by what they are; one witness of each minimized."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for v in summary.variants:
        found = divergence(v) if v.outcome is Outcome.MISMATCH else None
        if found is not None:
            groups.setdefault(found.key, []).append(v.label)
    from reprokit.tools.minimize import minimize as shrink  # imports torch's friends: late

    findings = []
    for number, ((op, dtypes, kind), labels) in enumerate(groups.items(), start=1):
        sizes = {label: _operations(summary, label) for label in labels}
        witness = min(labels, key=lambda label: sizes[label])  # the cheapest to shrink
        folder = f"{FINDINGS}/{number}-{_UNSAFE.sub('_', op)[:40]}"
        count = f"{len(labels)} witness{'es' if len(labels) > 1 else ''}"
        say(f"minimizing {witness}: {op} ({count})")
        found = shrink(variants[witness], out_dir=run_dir / folder, options=options,
                       budget=budget)  # fmt: skip
        nodes = found.graph.nodes if found.graph is not None else None
        findings.append(Finding(op, dtypes, kind, tuple(labels), folder, nodes, found.target))
    return findings


def _operations(summary: RunSummary, label: str) -> int:
    """How many operations a variant's program saved (its stage's described tensors)."""
    variant = next(v for v in summary.variants if v.label == label)
    return max((len(s.described) for s in variant.stages), default=0)
