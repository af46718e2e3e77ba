"""Compare named tensors: per-tensor differences, mismatch counts, and the first divergence.

One module serves the runner (stage vs reference stage), the reports and ``reprokit diff``.
Tensors are compared one at a time so that memory stays near the size of the largest one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.testing._comparison import default_tolerances  # torch.testing's per-dtype table

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

WORST = 3  # elements shown per mismatching tensor, pytest.approx style


@dataclass(frozen=True)
class Comparison:
    """How one named tensor of ``target`` differs from the same name in ``reference``."""

    tensor: str
    reference: str
    target: str
    shape: list[int] | None
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
    worst: list[dict[str, Any]] = field(default_factory=list)  # index, target, reference
    note: str = ""  # why there is nothing to compare element-wise (shape, dtype, missing)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["nan"], data["inf"] = list(self.nan), list(self.inf)
        data["worst"] = [{k: _finite(v) for k, v in w.items()} for w in self.worst]
        return {k: _finite(v) for k, v in data.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        fields = dict(data)
        fields["nan"], fields["inf"] = tuple(fields["nan"]), tuple(fields["inf"])
        fields["max_abs"], fields["max_rel"] = float(fields["max_abs"]), float(fields["max_rel"])
        fields["worst"] = [
            {k: float(v) if isinstance(v, str) else v for k, v in w.items()}
            for w in fields.get("worst", [])
        ]
        return cls(**fields)

    def describe(self) -> str:
        """A few lines in pytest.approx's manner: what differs, by how much, where."""
        if self.note:
            return f"{self.tensor}: {self.note}"
        lines = [
            f"{self.tensor} {self.dtype} {self.shape}: {self.mismatched} / {self.total} "
            f"mismatched (rtol={self.rtol:g}, atol={self.atol:g})",
            f"  max abs diff {self.max_abs:.3g}, max rel diff {self.max_rel:.3g}",
        ]
        lines += [f"  at {w['index']}: {w['target']!r} vs {w['reference']!r}" for w in self.worst]
        return "\n".join(lines)


def _finite(value: Any) -> Any:
    """JSON has no inf or NaN: write them as strings so that summary.json stays valid."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _tolerances(a: torch.Tensor, b: torch.Tensor, rtol: float | None, atol: float | None):
    default_rtol, default_atol = default_tolerances(a, b)
    return (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)


def compare_tensor(
    name: str,
    expected: torch.Tensor,
    actual: torch.Tensor,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    reference: str = "reference",
    target: str = "target",
) -> Comparison:
    """Compare one tensor pair; a shape or dtype mismatch is reported, never raised."""
    common = {"tensor": name, "reference": reference, "target": target}
    if actual.shape != expected.shape:
        note = f"shape {list(actual.shape)} vs {list(expected.shape)} in {reference}"
        return Comparison(
            **common,
            shape=list(actual.shape),
            dtype=str(actual.dtype).removeprefix("torch."),
            max_abs=math.inf,
            max_rel=math.inf,
            mismatched=actual.numel(),
            total=max(actual.numel(), expected.numel()),
            allclose=False,
            note=note,
        )
    rtol, atol = _tolerances(actual, expected, rtol, atol)
    same_dtype = actual.dtype == expected.dtype
    tally = _tally(actual, expected, rtol, atol)
    dtype_note = "" if same_dtype else f"dtype {actual.dtype} vs {expected.dtype}"
    return Comparison(
        **common,
        shape=list(actual.shape),
        dtype=str(actual.dtype).removeprefix("torch."),
        max_abs=tally.max_abs,
        max_rel=tally.max_rel,
        mismatched=tally.mismatched,
        total=actual.numel(),
        allclose=tally.mismatched == 0 and not dtype_note,
        rtol=rtol,
        atol=atol,
        equal=same_dtype and tally.all_zero,
        nan=(tally.nan[0], tally.nan[1]),
        inf=(tally.inf[0], tally.inf[1]),
        worst=[_worst_entry(w, actual.shape) for w in tally.top()],
        note=dtype_note,
    )


CHUNK = 1 << 20  # elements compared at once: the float64 temporaries stay near 50 MiB


@dataclass
class _Tally:
    """What the chunks of one tensor pair add up to."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    mismatched: int = 0
    all_zero: bool = True  # every difference is zero (bitwise equal, NaNs aside)
    nan: list[int] = field(default_factory=lambda: [0, 0])  # reference, target
    inf: list[int] = field(default_factory=lambda: [0, 0])
    worst: list[tuple[float, int, float, float]] = field(default_factory=list)

    def top(self) -> list[tuple[float, int, float, float]]:
        """The largest mismatches over all chunks (each chunk kept its own few)."""
        return sorted(self.worst, key=lambda w: (-w[0], w[1]))[: min(WORST, self.mismatched)]


def _tally(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> _Tally:
    """Differences in float64, a chunk at a time, so that peak memory does not grow with the
    tensor; equal tensors of one dtype take a shortcut with the same result."""
    tally = _Tally()
    if actual.dtype == expected.dtype and torch.equal(actual, expected):  # so no NaN either
        if actual.is_floating_point() or actual.is_complex():
            count = int(actual.isinf().sum())
            tally.inf = [count, count]
        return tally
    a_flat, e_flat = actual.reshape(-1), expected.reshape(-1)
    for start in range(0, a_flat.numel(), CHUNK):
        a = _as_float64(a_flat[start : start + CHUNK])
        e = _as_float64(e_flat[start : start + CHUNK])
        _tally_chunk(tally, a, e, start, rtol, atol)
    return tally


def _tally_chunk(
    tally: _Tally, a: torch.Tensor, e: torch.Tensor, start: int, rtol: float, atol: float
) -> None:
    same = (a == e) | (a.isnan() & e.isnan())  # equal infinities and NaNs differ by nothing
    diff = torch.where(same, 0.0, (a - e).abs()).nan_to_num(math.inf, math.inf)
    rel = torch.where(diff == 0, 0.0, diff / e.abs()).nan_to_num(math.inf, math.inf)
    close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    mismatched = int((~close).sum())
    tally.max_abs = _nan_max(tally.max_abs, diff.max().item())
    tally.max_rel = _nan_max(tally.max_rel, rel.max().item())
    tally.mismatched += mismatched
    tally.all_zero = tally.all_zero and bool((diff == 0).all())
    tally.nan = [tally.nan[0] + int(e.isnan().sum()), tally.nan[1] + int(a.isnan().sum())]
    tally.inf = [tally.inf[0] + int(e.isinf().sum()), tally.inf[1] + int(a.isinf().sum())]
    if mismatched:
        key = torch.where(close, -1.0, diff)
        for i in _largest(key, min(WORST, mismatched)).tolist():
            tally.worst.append((key[i].item(), start + i, a[i].item(), e[i].item()))


def _largest(key: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest values, ties to the lowest index, so that the worst
    elements shown do not depend on how the tensor was cut into chunks."""
    kth = torch.topk(key, k).values[-1]
    above = (key > kth).nonzero().flatten()
    return torch.cat([above, (key == kth).nonzero().flatten()[: k - above.numel()]])


def _nan_max(x: float, y: float) -> float:
    """max() that keeps a NaN, as torch's max does."""
    return math.nan if math.isnan(x) or math.isnan(y) else max(x, y)


def _worst_entry(worst: tuple[float, int, float, float], shape: torch.Size) -> dict[str, Any]:
    _, flat, target, reference = worst
    index = torch.unravel_index(torch.tensor(flat), shape) if len(shape) else ()
    return {"index": [int(i) for i in index], "target": target, "reference": reference}


def _as_float64(t: torch.Tensor) -> torch.Tensor:
    """Differences are taken in float64 so that they are exact for every smaller dtype."""
    if t.is_complex():
        return t.abs().double()
    return t.double()


def compare_tensors(
    expected: Mapping[str, torch.Tensor],
    actual: Mapping[str, torch.Tensor],
    *,
    rtol: float | None = None,
    atol: float | None = None,
    reference: str = "reference",
    target: str = "target",
) -> list[Comparison]:
    """Every tensor of ``actual`` (in its order) against ``expected``; names on one side only
    are listed as not close, with a note."""
    names = list(actual) + [n for n in expected if n not in actual]
    results = []
    for name in names:
        if name not in expected or name not in actual:
            side = target if name in actual else reference
            results.append(_missing(name, side, reference, target))
            continue
        results.append(
            compare_tensor(
                name,
                expected[name],
                actual[name],
                rtol=rtol,
                atol=atol,
                reference=reference,
                target=target,
            )
        )
    return results


def _missing(name: str, side: str, reference: str, target: str) -> Comparison:
    return Comparison(
        tensor=name,
        reference=reference,
        target=target,
        shape=None,
        dtype=None,
        max_abs=math.inf,
        max_rel=math.inf,
        mismatched=0,
        total=0,
        allclose=False,
        note=f"only in {side}",
    )


def first_divergence(comparisons: Iterable[Comparison]) -> Comparison | None:
    """The first tensor outside tolerance, in the order the target stage saved them."""
    return next((c for c in comparisons if not c.allclose), None)


def divergence_summary(comparisons: Iterable[Comparison]) -> str:
    """First divergence in words: which tensors (in saved order: activations layer by layer)
    agree, and which is the first to differ, e.g. ``act.0-act.2 agree; act.3 is the first to
    differ (512 / 512 mismatched, max abs 0.001)``. Tensors only on one side are left out."""
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
    agree = before[0].tensor + (f"-{before[-1].tensor} agree" if len(before) > 1 else " agrees")
    return f"{agree}; {differs}"


def diff_checkpoints(
    reference: Path | str,
    target: Path | str,
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> list[Comparison]:
    """``reprokit diff``: every tensor of two checkpoints, of any format, one at a time."""
    from reprokit.checkpoints import open_checkpoint  # it builds on this module's flatten

    expected, actual = open_checkpoint(reference), open_checkpoint(target)
    return compare_tensors(
        expected,
        actual,
        rtol=rtol,
        atol=atol,
        reference=str(reference),
        target=str(target),
    )


def summarize(comparisons: list[Comparison]) -> dict[str, Any]:
    """Counts for the end of a diff: how many compared, close, differing, on one side only."""
    one_side = [c for c in comparisons if c.shape is None]
    first = first_divergence(comparisons)
    return {
        "tensors": len(comparisons),
        "close": sum(c.allclose for c in comparisons),
        "equal": sum(c.equal for c in comparisons),
        "differ": sum(not c.allclose for c in comparisons if c.shape is not None),
        "only_in_reference": [c.tensor for c in one_side if c.note == f"only in {c.reference}"],
        "only_in_target": [c.tensor for c in one_side if c.note == f"only in {c.target}"],
        "first_divergence": first.tensor if first else None,
        "divergence": divergence_summary(comparisons),
        "allclose": first is None,
    }


def load_tensors(path: Path | str) -> dict[str, torch.Tensor]:
    """A tensors.pt file as a flat dict of CPU tensors; never runs code from the file."""
    from reprokit.checkpoints import reading  # it imports this module: import it late

    path = Path(path)
    with reading(path):
        data = torch.load(path, map_location="cpu", weights_only=True)
    return flatten(data, source=path)


def flatten(
    data: Any, prefix: str = "", *, source: Path | str = "", leaf: type | None = None
) -> dict[str, torch.Tensor]:
    """Nested dicts and lists of tensors as one dict with dotted names (``model.fc.weight``).

    ``leaf`` names one more type kept as a value (a checkpoint's reference to a tensor file).
    """
    if isinstance(data, torch.Tensor) or (leaf is not None and isinstance(data, leaf)):
        return {prefix or "tensor": data}
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list | tuple)
        else None
    )
    if items is None:
        return {}  # numbers, strings and None carry no tensor to compare
    flat: dict[str, torch.Tensor] = {}
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        flat.update(flatten(value, name, source=source, leaf=leaf))
    return flat
