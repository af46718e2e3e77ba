"""What ``reprokit minimize`` found: the changes it kept, and for a captured program the graph
search's steps; summary.json holds it as ``run.minimized``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from reprokit.records._json import from_json

# What `reprokit minimize -o OUT` writes beside OUT/summary.json
MINIMAL_CASE = "minimal.toml"  # the smallest case that still fails
MINIMAL_PROGRAM = "minimal.pt2"  # a captured program's smallest graph
PROGRAMS = "programs"  # minimize's folder of the programs it built
CANDIDATES = "candidates"  # and of each batch of candidates it ran
GRADIENT = "gradient"  # and of the gradient check's runs
REPRO_STAGES = "repro_stages.py"  # that graph's repro, stage by stage (repro.py is the short one)
REPRO_STAGES_INPUTS = "repro_stages.inputs.pt"  # its inputs, apart from the short repro's
SHORT_INPUTS = "inputs.pt"  # the short repro's, only where neither literals nor draws do


@dataclass(frozen=True)
class Change:
    """One parameter the minimizer moved."""

    param: str
    before: Any
    after: Any


@dataclass(frozen=True)
class Step:
    """One strategy of the graph minimizer: its candidate runs and the operations it removed."""

    strategy: str
    candidates: int
    removed: int


WHERE = {  # whose label -> the repository to file with
    "XLA:CPU code generation": "openxla/xla",
    "torch_xla lowering": "pytorch/xla",
    "XLA pass": "openxla/xla",
    "torch": "pytorch/pytorch",
}


@dataclass(frozen=True)
class Whose:
    """Whose a short repro's difference is (reprokit.tools.whose, docs/whose.md), with the
    evidence a maintainer reads."""

    label: str  # "XLA:CPU code generation", "torch_xla lowering", "XLA pass NAME" or "unknown"
    evidence: str  # one or two sentences
    flags: str = ""  # the XLA_FLAGS that show it
    hlo: tuple[str, ...] = ()  # the HLO text to attach
    runs: int = 0  # runs of the repro it took
    seconds: float = 0.0
    passes: tuple[str, ...] = ()  # the passes bisected (those that changed the module)
    command: str = ""  # the pass's difference in run_hlo_module form, for "XLA pass"

    @property
    def where(self) -> str:
        """The repository to file with: pytorch/xla, openxla/xla, or "" when unknown."""
        return WHERE.get("XLA pass" if self.label.startswith("XLA pass") else self.label, "")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Whose:
        return from_json(cls, data, hlo=tuple, passes=tuple)


@dataclass(frozen=True)
class GraphShrink:
    """What the graph minimizer removed from a captured program, each figure before -> after:
    operations (the tensor results the program computes), inputs (the captured ones and the
    recorded values that replace removed operations) and weights (parameters, buffers,
    constants)."""

    nodes: tuple[int, int]
    inputs: tuple[int, int]
    weights: tuple[int, int]
    steps: tuple[Step, ...] = ()
    program: str = "minimal.pt2"  # the minimal program, beside summary.json
    # how the short repro.py writes its inputs: "literals", "random" (seeded draws, checked to
    # show the outcome), "stored (why)" (it reads inputs.pt beside it); "" in older records
    short_inputs: str = ""
    # a training capture's backward operations written as torch.autograd computes them
    by_autograd: bool = False
    # the program's other independent divergences, which this minimization did not keep: each
    # its op, source line and the outputs it reaches (comparison/roots.py), in words
    others: tuple[str, ...] = ()
    # the root this minimization kept (its recorded name in the whole program), and the
    # folders (beside summary.json) where each other root reaching an output was minimized
    root: str = ""
    elsewhere: tuple[str, ...] = ()
    whose: Whose | None = None  # whose the short repro's difference is (None: not examined)

    @property
    def removed_nothing(self) -> bool:
        """No operation, input or weight could be removed."""
        return (self.nodes[0], self.inputs[0], self.weights[0]) == (
            self.nodes[1], self.inputs[1], self.weights[1])  # fmt: skip

    def rows(self) -> list[tuple[str, str, str]]:
        """The table of what was removed: what, before, after."""
        named = (("operations", self.nodes), ("inputs", self.inputs), ("weights", self.weights))
        return [(what, str(pair[0]), str(pair[1])) for what, pair in named]

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {
            "nodes": list(self.nodes),
            "inputs": list(self.inputs),
            "weights": list(self.weights),
            "steps": [asdict(s) for s in self.steps],
            "others": list(self.others),
            "elsewhere": list(self.elsewhere),
            "whose": self.whose.to_json() if self.whose else None,
            "removed_nothing": self.removed_nothing,  # derived: for readers of summary.json
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GraphShrink:
        return from_json(
            cls,
            data,
            nodes=tuple,
            inputs=tuple,
            weights=tuple,
            steps=lambda items: tuple(Step(**s) for s in items),
            others=tuple,
            elsewhere=tuple,
            whose=Whose.from_json,
        )


@dataclass(frozen=True)
class MinimizeResult:
    """What ``reprokit minimize`` found: the changes that keep the outcome, and the cost."""

    case: str
    target: str | None  # the outcome it kept, e.g. "mismatch (act.#)"
    changes: tuple[Change, ...]
    lines: tuple[int, int]  # script lines before, after
    candidates: int
    cache_hits: int
    seconds: float
    stopped: str  # done, budget or interrupted
    graph: GraphShrink | None = None  # a captured program's graph, when it was minimized

    def describe(self) -> str:
        before = ", ".join(f"{c.param}={c.before!r}" for c in self.changes)
        after = ", ".join(f"{c.param}={c.after!r}" for c in self.changes)
        if self.graph is not None:
            nodes = self.graph.nodes
            moved = f"; parameters `{before}` to `{after}`" if self.changes else ""
            shrunk = f"Minimized the captured program from {nodes[0]} to {nodes[1]} operations"
            if self.graph.removed_nothing:
                many = "s are all" if nodes[0] != 1 else " is"
                shrunk = f"Nothing could be removed: its {nodes[0]} operation{many} needed"
            return (
                f"{shrunk}"
                f"{moved} (script {self.lines[1]} lines, {self.candidate_runs}, "
                f"{self.cache_hits} cache hits, {self.seconds} s, {self.stopped}), "
                f"still {self.target}."
            )
        if not self.changes:
            return (
                f"Nothing could be changed: every parameter is needed ({self.candidate_runs}), "
                f"still {self.target}."
            )
        return (
            f"Minimized from `{before}` to `{after}` (script {self.lines[0]} -> "
            f"{self.lines[1]} lines, {self.candidate_runs}), still {self.target}."
        )

    @property
    def candidate_runs(self) -> str:
        return f"{self.candidates} candidate run{'s' * (self.candidates != 1)}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self) | {"changes": [asdict(c) for c in self.changes],
                               "lines": list(self.lines)}  # fmt: skip
        data["graph"] = self.graph.to_json() if self.graph is not None else None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MinimizeResult:
        return from_json(
            cls,
            data,
            changes=lambda cs: tuple(Change(**c) for c in cs),
            lines=tuple,
            graph=GraphShrink.from_json,
        )
