"""What a report says, built once from a run's records (reprokit.reports.build) and rendered
as report.md (reprokit.reports.markdown) and report.html (reprokit.reports.html).

The writers only lay this out; what the sentences say, which rows a table has and in which
order, what each figure plots: all of it is decided here, once, for both. Its values are
plain strings and numbers, so a report is rendered without the run folder or torch.

Sentences (``Text``) are plain words with Markdown's two inline marks, the only markup a
report needs: `name` spans for names (stages, tensors, variants, code) and **strong** for
what a reader must see first. Table cells carry those marks as fields instead (``Cell``),
because each writer escapes a cell its own way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Text = str  # one sentence or paragraph: plain words, `name` spans, **strong** spans


@dataclass(frozen=True)
class Cell:
    """One table cell."""

    text: str
    code: bool = False  # a name: a variant, tensor, stage, parameter, value
    tone: str = ""  # "bad": what a reader must see (bold, red); "good": as it should be
    link: str = ""  # a report beside this one, without its suffix: each format links its own


@dataclass(frozen=True)
class Names:
    """A cell listing names (each one a `name`), or saying ``empty`` when there are none."""

    items: tuple[str, ...]
    empty: str = "none"


Value = Cell | Names


@dataclass(frozen=True)
class Table:
    """A header, rows of cells, the columns to align right (numbers), and whether the first
    column names its row (a key / value table such as the environment)."""

    header: tuple[str, ...]
    rows: tuple[tuple[Value, ...], ...]
    numeric: tuple[bool, ...] = ()
    keyed: bool = False
    title: str = ""


@dataclass(frozen=True)
class Script:
    """A failing variant's standalone repro.py, to inline."""

    label: str
    text: str
    lines: int
    short: bool = False  # a minimized program's short repro (repro_stages.py beside it)


@dataclass(frozen=True)
class Recompiled:
    """``reprokit wrap --recompiles``: how many graphs it compiled, why each compiled again
    (a row per cause and line), every compile, and how many each step compiled (plotted)."""

    said: Text
    causes: Table
    compiles: Table
    per_step: tuple[int, ...]
    repro: Text = ""  # what the repro is (or why there is none)
    repro_text: str = ""  # the repro, to paste
    repro_output: str = ""  # its run alone: the command, its output, its exit code


@dataclass(frozen=True)
class Wrapped:
    """``reprokit wrap``: the user's script as it ran (its copy in the run folder, whose path
    there is its label), the last lines it printed (its losses, say), and with --recompiles
    why it compiled again."""

    command: str
    script: Script | None = None
    output: tuple[str, ...] = ()
    recompiles: Recompiled | None = None


@dataclass(frozen=True)
class FailedStage:
    """How a failed stage ended (its status, exit code or signal, its exception), and its
    stderr's last lines."""

    sentence: Text
    stderr_tail: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparisons:
    """Where a variant's stages leave their references: for each target stage, the rows from
    two that agree before its first differing tensor (in bold) on, in the order the stage
    saved them; ``compared`` counts every comparison of the variant, shown or not."""

    windows: tuple[Table, ...]  # one per target stage that differs, all with the same header
    compared: int
    footnote: Text = ""

    def rows(self, per_target: int | None = None) -> list[tuple[Value, ...]]:
        """The rows shown, at most ``per_target`` of each target's (all when None)."""
        return [row for table in self.windows for row in table.rows[:per_target]]


@dataclass(frozen=True)
class Evidence:
    """One variant that did not behave as expected, or shows a known problem, or a match that
    parts from its reference within float64's noise: why it ended so, where it diverges."""

    label: str
    heading: Text
    changed: Text | None = None  # its parameters not at the template's defaults
    reason: Text | None = None  # why it ended so, when no failed stage says it
    failed: tuple[FailedStage, ...] = ()
    reused: tuple[Text, ...] = ()  # stages the results cache gave, and from which run
    divergence: tuple[Text, ...] = ()  # first divergence per target, how it was judged
    comparisons: Comparisons | None = None  # None when every tensor agrees
    recompiled: tuple[Text, ...] = ()  # XLA stages that compiled anew at every execution
    script: Script | None = None
    too_large: tuple[Text, ...] = ()  # files beside its script too large to attach
    host_reads: tuple[Text, ...] = ()  # XLA stages that read values back (.item()): transfers
    wrapped: Wrapped | None = None  # reprokit wrap's variant: the script and its output


@dataclass(frozen=True)
class EnvironmentSection:
    """The backend and versions as the stages saw them, then the machine (or each machine of a
    merged run) and the environments variants ran in (--env)."""

    facts: tuple[Text, ...]
    machine: Table  # this run's machine, key / value
    machines: Table | None = None  # a merged run: each machine side by side
    envs: Table | None = None  # each variant's outcome in each environment


@dataclass(frozen=True)
class Minimized:
    """What ``reprokit minimize`` found, and for a captured program what it removed."""

    sentence: Text
    table: Table | None = None
    oracle: Text = ""  # the candidate runs each strategy cost


@dataclass(frozen=True)
class LossCurves:
    """A variant's loss series, per stage (backend) and metric, and the losses its stages
    recorded once (an evaluation after training: one value per backend), drawn as points."""

    label: str
    series: tuple[tuple[str, tuple[float, ...]], ...]
    points: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class DifferenceSizes:
    """A variant's largest absolute difference per tensor, in saved order, and whether each
    is within tolerance; None where the tensors are exactly equal (no difference to draw)."""

    label: str
    bars: tuple[tuple[str, float | None, bool], ...]


@dataclass(frozen=True)
class ErrorCurves:
    """fp64: each compared tensor's RMSE against float64, the reference's and the target's,
    in execution order, and the first that differs."""

    label: str
    reference: str
    target: str
    tensors: tuple[str, ...]
    reference_errors: tuple[float, ...]
    target_errors: tuple[float, ...]
    first: str | None = None
    first_index: int | None = None


@dataclass(frozen=True)
class Figures:
    """What report.html draws: at most MAX_FIGURES of each kind."""

    loss: tuple[LossCurves, ...] = ()
    errors: tuple[ErrorCurves, ...] = ()
    differences: tuple[DifferenceSizes, ...] = ()
    timings: tuple[tuple[str, float], ...] = ()  # (variant stage, seconds)


@dataclass(frozen=True)
class Issue:
    """report.md as the issue a maintainer reads: the bug in their words, with its values
    (reprokit.reports.issue); a run with a divergence has one, told from its first problem's
    root, the others listed."""

    title: Text  # the op, the dtype, the symptom
    bug: tuple[Text, ...]  # what goes wrong, where in the user's code, how far from float64
    witnesses: Table | None  # the elements that differ most: reference, target, float64
    others: tuple[Text, ...]  # the other independent divergences, one line each
    repro: Script | None  # short enough to paste: inline
    output: str | None  # what the inline repro printed, run alone
    elsewhere: Text | None  # the longer script, in the bundle: how to run it
    expected: tuple[Text, ...]  # as values
    context: tuple[Text, ...]  # how it was found; what it was reduced from
    not_run: Text | None  # the backends this run could not try (a TPU, a GPU)
    hlo: tuple[Script, ...] = ()  # the HLO that shows whose it is (reprokit.tools.whose)
    name: str = ""  # a root issue's file name under issues/ (reprokit.reports.root_issues)
    known: Text | None = None  # where the bug is already known, and the comment to add there
    # "bug": an issue to file; else what the run's differences are when no repro shows them
    # (reprokit.reports.unfiled): "known", "rounding" (nothing to file) or "no repro"
    kind: str = "bug"


@dataclass(frozen=True)
class Report:
    """A whole report: a run folder's summary, said once for every format."""

    headline: Text  # how many variants behaved as expected, and which did not
    bug: Text | None  # what goes wrong, from the first problem; None when nothing does
    command: str | None  # the reprokit command that reruns the run
    evidence: tuple[Evidence, ...]  # the problems, most important first
    expected: tuple[Text, ...]  # what each variant was expected to do, and within what
    environment: EnvironmentSection
    results: Table  # every variant, those not as expected first
    reused_rows: tuple[int, ...] = ()  # the results rows whose variant reused stages
    minimized: Minimized | None = None
    figures: Figures = field(default_factory=Figures)
    opening: Text = "🐛 Bug"  # the first heading: the bug, or what ran and what it found
    checks: tuple[Text, ...] = ()  # what each case checks: its title and description
    noted: tuple[Evidence, ...] = ()  # matches that part from their reference within noise
    xla: Table | None = None  # what torch_xla saw: one row per XLA stage of every variant
    sweep: tuple[Table, ...] = ()  # reprokit sweep: a row per model and dtype; its findings
    issue: Issue | None = None  # report.md as an issue: a run whose first problem diverges
    issues: tuple[Issue, ...] = ()  # every root issue of it, the first too: one file each
