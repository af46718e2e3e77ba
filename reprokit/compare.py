"""Compare named tensors: per-tensor differences, mismatch counts, and the first divergence.

One module serves the runner (stage vs reference stage), the reports and ``reprokit diff``.
Tensors are compared one at a time so that memory stays near the size of the largest one.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.testing._comparison import default_tolerances  # torch.testing's per-dtype table

from reprokit.errors import ReprokitError

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
        return {k: _finite(v) for k, v in data.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        fields = dict(data)
        fields["nan"], fields["inf"] = tuple(fields["nan"]), tuple(fields["inf"])
        fields["max_abs"], fields["max_rel"] = float(fields["max_abs"]), float(fields["max_rel"])
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
            dtype=str(actual.dtype),
            max_abs=math.inf,
            max_rel=math.inf,
            mismatched=actual.numel(),
            total=max(actual.numel(), expected.numel()),
            allclose=False,
            note=note,
        )
    rtol, atol = _tolerances(actual, expected, rtol, atol)
    a, e = _as_float64(actual).flatten(), _as_float64(expected).flatten()
    both_nan = a.isnan() & e.isnan()
    diff = torch.where(both_nan, 0.0, (a - e).abs()).nan_to_num(math.inf)
    rel = torch.where(diff == 0, 0.0, diff / e.abs())
    close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    mismatched = int((~close).sum())
    worst = []
    if mismatched:
        order = torch.argsort(torch.where(close, -1.0, diff), descending=True)
        for flat in order[: min(WORST, mismatched)].tolist():
            index = torch.unravel_index(torch.tensor(flat), actual.shape) if actual.dim() else ()
            worst.append(
                {
                    "index": [int(i) for i in index],
                    "target": a[flat].item(),
                    "reference": e[flat].item(),
                }
            )
    same_dtype = actual.dtype == expected.dtype
    dtype_note = "" if same_dtype else f"dtype {actual.dtype} vs {expected.dtype}"
    return Comparison(
        **common,
        shape=list(actual.shape),
        dtype=str(actual.dtype).removeprefix("torch."),
        max_abs=diff.max().item() if diff.numel() else 0.0,
        max_rel=rel.max().item() if rel.numel() else 0.0,
        mismatched=mismatched,
        total=actual.numel(),
        allclose=mismatched == 0 and not dtype_note,
        rtol=rtol,
        atol=atol,
        equal=same_dtype and bool((diff == 0).all()),
        nan=(int(e.isnan().sum()), int(a.isnan().sum())),
        inf=(int(e.isinf().sum()), int(a.isinf().sum())),
        worst=worst,
        note=dtype_note,
    )


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


def load_tensors(path: Path | str) -> dict[str, torch.Tensor]:
    """A tensors.pt file as a flat dict of CPU tensors; never runs code from the file."""
    path = Path(path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ReprokitError(
            "refused to load: the file holds a pickle that could run code",
            path,
            hint=f"Only tensors and plain containers are loaded (weights_only). {str(exc)[:200]}",
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise ReprokitError(
            f"cannot read tensors: {exc}".splitlines()[0], path, hint="Is the file complete?"
        ) from None
    return flatten(data, source=path)


def flatten(data: Any, prefix: str = "", *, source: Path | str = "") -> dict[str, torch.Tensor]:
    """Nested dicts and lists of tensors as one dict with dotted names (``model.fc.weight``)."""
    if isinstance(data, torch.Tensor):
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
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key), source=source))
    return flat
