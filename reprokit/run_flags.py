"""The run options as the adapters spell them, declared once: ``reprokit run`` derives its
typer parameters from :data:`RUN_OPTIONS` (``--NAME``) and the pytest plugin its
``--reprokit-NAME`` options, and both build their :class:`Options` with :func:`build_options`,
so that the two cannot drift apart.

An adapter module (the layer of reprokit/cli/ and reprokit/plugin.py), not the library's: the
library below takes plain keywords (:class:`reprokit.runner.options.Options`), as Polygraphy's
tools keep their argument groups in ``tools/args/``. Neither typer nor pytest is imported here:
each adapter turns a :class:`RunOption` into its own kind of parameter (reprokit/cli/app.py,
reprokit/plugin.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit.environment.uv import EnvSpec, parse_env
from reprokit.errors import ReprokitError
from reprokit.runner import backends
from reprokit.runner.options import TIMEOUT, Options

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class RunOption:
    """One option of a run: ``--NAME`` on the command line, ``--reprokit-NAME`` in pytest.

    ``kind`` is what a value is read as: ``bool`` a flag (no value), ``str``, ``float`` or
    ``Path``; ``repeated`` options are given once per value and arrive as a list.
    """

    name: str  # the keyword the value arrives as; its flag is the name with dashes
    kind: type
    default: Any
    help: str
    metavar: str | None = None  # how pytest's help names the value
    repeated: bool = False
    shown_default: str | None = None  # what help says when the default is computed
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def plugin_flag(self) -> str:
        return "--reprokit-" + self.name.replace("_", "-")

    @property
    def plugin_dest(self) -> str:
        """The name pytest's ``config.getoption`` knows it by."""
        return "reprokit_" + self.name


# fmt: off
RUN_OPTIONS = (
    RunOption("timeout", float, TIMEOUT, "seconds per stage", metavar="S"),
    RunOption("xla_device", str, None, "CPU, TPU or CUDA", metavar="D",
              shown_default="TPU if any, else CPU"),
    RunOption("dump_hlo", bool, False, "XLA stages save their graphs as HLO text"),
    RunOption("no_cache", bool, False, "run every stage, even those whose inputs did not change"),
    RunOption("cold", bool, False, "every stage a fresh Python (no warm-start server)"),
    RunOption("stages", str, None, "only these stages, and those they need: NAME[,NAME...]",
              metavar="NAMES"),
    RunOption("env", str, None, 'NAME="REQUIREMENTS": run in this uv environment (repeatable)',
              metavar="NAME=REQS", repeated=True),
    RunOption("executor", str, "local", "where stages run: local, or ray (a Ray cluster)",
              choices=EXECUTORS),
    RunOption("ray_address", str, None, "the Ray cluster (ray.init's address)", metavar="ADDR"),
    RunOption("shared_dir", Path, None, "a folder every Ray node sees: outputs travel there",
              metavar="DIR"),
    RunOption("templates", Path, None, "a folder of your own templates (wins)", metavar="DIR",
              repeated=True),
    RunOption("keep_tensors", bool, False, "keep every recorded operation's tensor (by "
              "default, once judged, only those around a divergence, and the outputs)"),
    RunOption("triage", bool, False, "run each captured program's mismatch again at highest "
              "matmul precision and in float32: did it go away? (docs/verdicts.md)"),
)
# fmt: on
BY_NAME = {option.name: option for option in RUN_OPTIONS}


def build_options(values: Mapping[str, Any], *, jobs: int = 1) -> Options:
    """The :class:`Options` of parsed run options, by name; those not given take their
    declared default (a command that offers a few of them passes only those)."""
    given = {o.name: values[o.name] if values.get(o.name) is not None else o.default
             for o in RUN_OPTIONS}  # fmt: skip
    executor = given["executor"]
    if executor not in EXECUTORS:
        raise ReprokitError(f"--executor {executor!r}: not one of {', '.join(EXECUTORS)}",
                            hint="--executor ray runs stages on a Ray cluster")  # fmt: skip
    shared_dir = given["shared_dir"]
    return Options(
        jobs=jobs,
        timeout=given["timeout"],
        xla_device=backends.xla_device(given["xla_device"]),
        templates=tuple(Path(folder) for folder in given["templates"] or ()),
        dump_hlo=given["dump_hlo"],
        cache=not given["no_cache"],
        warm=not given["cold"],
        executor=executor,
        ray_address=given["ray_address"],
        shared_dir=None if shared_dir is None else Path(shared_dir),
        stages=tuple(filter(None, (given["stages"] or "").split(","))),
        keep_tensors=given["keep_tensors"],
        triage=given["triage"],
    )


def environments(values: Mapping[str, Any]) -> list[EnvSpec] | None:
    """The environments ``--env`` names, each once per variant; None: the cases' own."""
    return [parse_env(text) for text in values.get("env") or ()] or None
