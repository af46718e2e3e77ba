"""How one named tensor of a stage differs from its reference's, and what a list of them says:
the first divergence, in words, and the counts at the end of a diff."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from reprokit.records._json import finite, from_json, number


@dataclass(frozen=True)
class Worst:
    """One of the worst elements of a differing tensor."""

    index: tuple[int, ...]
    target: float
    reference: float
    fp64: float | None = None  # the float64 run's value there, under the fp64 method

    def to_json(self) -> dict[str, Any]:
        data = {"index": list(self.index), "target": finite(self.target),
                "reference": finite(self.reference)}  # fmt: skip
        return data if self.fp64 is None else data | {"fp64": finite(self.fp64)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Worst:
        fp64 = data.get("fp64")  # absent from runs before it was recorded
        return cls(tuple(data["index"]), number(data["target"]), number(data["reference"]),
                   None if fp64 is None else number(fp64))  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    """How one named tensor of ``target`` differs from the same name in ``reference``."""

    tensor: str
    reference: str
    target: str
    shape: tuple[int, ...] | None  # None: the name is on one side only
    dtype: str | None
    max_abs: float
    max_rel: float
    mismatched: int
    total: int
    allclose: bool
    rtol: float = 0.0
    atol: float = 0.0
    equal: bool = False  # bitwise, NaNs in the same places counting as equal
    nan: tuple[int, int] = (0, 0)  # NaN counts: reference, target
    inf: tuple[int, int] = (0, 0)
    worst: tuple[Worst, ...] = ()
    note: str = ""  # why there is nothing to compare element-wise (shape, dtype, missing)
    method: str = "allclose"  # or "fp64": judged by the error against a float64 arbiter
    errors: tuple[float, float] | None = None  # fp64: RMSE of reference, of target
    bound: float | None = None  # fp64: the most the target's RMSE may be (None: older runs)

    @property
    def one_side(self) -> str | None:
        """The stage that alone has this tensor, or None when both do."""
        if self.shape is not None:
            return None
        return self.target if self.note == f"only in {self.target}" else self.reference

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(shape=None if self.shape is None else list(self.shape),
                    nan=list(self.nan), inf=list(self.inf),
                    worst=[w.to_json() for w in self.worst])  # fmt: skip
        data["errors"] = None if self.errors is None else [finite(e) for e in self.errors]
        return {k: finite(v) for k, v in data.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        return from_json(
            cls,
            data,
            shape=tuple,
            max_abs=number,
            max_rel=number,
            nan=tuple,
            inf=tuple,
            worst=lambda ws: tuple(map(Worst.from_json, ws)),
            errors=lambda es: tuple(map(number, es)),
            bound=number,
        )

    def cells(self) -> dict[str, str]:
        """The comparison as table cells: one spelling for the CLI, report.md and report.html."""
        shape = "x".join(map(str, self.shape)) if self.shape else "scalar"
        return {
            "tensor": self.tensor,
            "stages": f"{self.target} vs {self.reference}",
            "shape": shape if self.shape is not None else "-",
            "dtype": self.dtype or "-",
            "max_abs": f"{self.max_abs:.3g}",
            "max_rel": f"{self.max_rel:.3g}",
            "mismatched": f"{self.mismatched:,} / {self.total:,}",
            "verdict": "equal" if self.equal else "close" if self.allclose else "differ",
            "note": self.note,
        }

    def describe(self) -> str:
        """A few lines in pytest.approx's manner: what differs, by how much, where."""
        if self.note:
            return f"{self.tensor}: {self.note}"
        lines = [
            f"{self.tensor} {self.dtype} {list(self.shape or ())}: {self.mismatched} / "
            f"{self.total} mismatched (rtol={self.rtol:g}, atol={self.atol:g})",
            f"  max abs diff {self.max_abs:.3g}, max rel diff {self.max_rel:.3g}",
        ]
        if self.errors is not None:
            lines.append(
                f"  RMSE against float64: {self.target} {self.errors[1]:.3g}, "
                f"{self.reference} {self.errors[0]:.3g}"
            )
        lines += [  # the reference first, as in `reprokit diff A B`
            f"  {self.reference}{list(w.index)} = {w.reference!r}, "
            f"{self.target}{list(w.index)} = {w.target!r}"
            for w in self.worst
        ]
        return "\n".join(lines)


@dataclass(frozen=True)
class Root:
    """Where a difference is born (reprokit/comparison/roots.py): a recorded result of
    ``target`` that differs while every recorded result it reads agrees. summary.json lists
    every root of a variant; ``first_divergence`` stays, the first in graph order."""

    tensor: str  # its recorded name: node.0035.bwd.hardtanh_backward
    target: str  # the stage it differs in (XLA's)
    op: str  # aten.hardtanh_backward.default
    source: str = ""  # the user's line the operation comes from
    kind: str = "value"  # value, nan-inf, dtype or shape
    errors: tuple[float, float] | None = None  # RMSE against float64: reference's, target's
    bound: float | None = None  # the most the target's may be
    reaches: tuple[str, ...] | None = ()  # differing outputs it reaches (None: not known)
    also: tuple[str, ...] = ()  # other stages where the same result is a root (XLA SPMD)
    since: str = ""  # its repro's releases (records/since.py: reprokit bisect); "" not bisected

    def to_json(self) -> dict[str, Any]:
        data = asdict(self) | {"also": list(self.also)}
        data["reaches"] = None if self.reaches is None else list(self.reaches)
        data["errors"] = None if self.errors is None else [finite(e) for e in self.errors]
        return {k: finite(v) for k, v in data.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Root:
        return from_json(cls, data, errors=lambda es: tuple(map(number, es)), reaches=tuple,
                         also=tuple, bound=number)  # fmt: skip


def first_divergence(comparisons: Iterable[Comparison]) -> Comparison | None:
    """The first tensor outside tolerance, in the order the target stage saved them."""
    return next((c for c in comparisons if not c.allclose), None)


def divergence_summary(comparisons: Iterable[Comparison]) -> str:
    """First divergence in words: which tensors (in saved order: activations layer by layer)
    agree, and which is the first to differ, e.g. ``act.0 through act.2 agree; act.3 is the
    first to differ (512 / 512 mismatched, max abs 0.001)``. Names on one side are left out."""
    compared = [c for c in comparisons if c.shape is not None]
    first = first_divergence(compared)
    if first is None:
        if not compared:
            return "no tensor name in common"
        return f"all {len(compared)} tensors agree" if len(compared) > 1 else "the tensor agrees"
    before = compared[: compared.index(first)]
    if first.note:
        why = first.note
    else:
        why = f"{first.mismatched} / {first.total} mismatched, max abs {first.max_abs:.3g}"
    differs = f"{first.tensor} is the first to differ ({why})"
    if not before:
        return differs
    if len(before) == 1:
        return f"{before[0].tensor} agrees; {differs}"
    return f"{before[0].tensor} through {before[-1].tensor} agree; {differs}"


@dataclass(frozen=True)
class DiffSummary:
    """The counts at the end of a diff: each tensor counted once, so that they add up."""

    tensors: int
    equal: int  # bitwise equal
    close: int  # within tolerance, not equal
    differ: int  # outside tolerance
    only_in_reference: tuple[str, ...]
    only_in_target: tuple[str, ...]
    first_divergence: str | None
    divergence: str
    allclose: bool

    @classmethod
    def of(cls, comparisons: list[Comparison]) -> DiffSummary:
        compared = [c for c in comparisons if c.shape is not None]
        first = first_divergence(comparisons)
        return cls(
            tensors=len(comparisons),
            equal=sum(c.equal for c in compared),
            close=sum(c.allclose and not c.equal for c in compared),
            differ=sum(not c.allclose for c in compared),
            only_in_reference=tuple(c.tensor for c in comparisons if c.one_side == c.reference),
            only_in_target=tuple(c.tensor for c in comparisons if c.one_side == c.target),
            first_divergence=first.tensor if first else None,
            divergence=divergence_summary(comparisons),
            allclose=first is None,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {
            "only_in_reference": list(self.only_in_reference),
            "only_in_target": list(self.only_in_target),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DiffSummary:
        return from_json(cls, data, only_in_reference=tuple, only_in_target=tuple)
