"""Which of the dtypes asked for an OpInfo is swept in, in the worker (torch imported): those
its OpInfo declares for CPU, and beyond them those torch's CPU accepts. OpInfo leaves dtypes
out for reasons of its own tests (cumsum's list has no bool), and a user's program calls the
op in them all the same: ``mask.cumsum(-1)`` of a bool mask is where XLA keeps bool and
saturates (docs/examples/cumsum_bool_int32.md). ops.json says which dtypes were added.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

TRIED = 3  # OpInfo's samples in an undeclared dtype tried on CPU, at most: one run is enough


def swept(
    op: Any, asked: list[str], *, probe: bool = True, siblings: Sequence[Any] = ()
) -> tuple[list[str], list[str]]:
    """The dtypes of ``asked`` that ``op`` is swept in (in the order asked), and those of them
    that OpInfo does not declare for CPU but CPU runs (``probe`` False: none, for an op that
    is not run). A dtype one of ``siblings`` (the OpInfos of the same name: silu and its
    'complex' variant) declares is theirs to sweep: added here, it would sweep it twice."""
    declared = _declared(op)
    theirs = set().union(*(_declared(o) for o in siblings))
    added = [
        d for d in asked if probe and d not in declared | theirs and accepted(op, getattr(torch, d))
    ]
    return [d for d in asked if d in declared or d in added], added


def _declared(op: Any) -> set[str]:
    return {str(d).removeprefix("torch.") for d in op.supported_dtypes("cpu")}


def accepted(op: Any, dtype: torch.dtype) -> bool:
    """torch's CPU runs ``op`` on one of its first OpInfo samples made in ``dtype`` (a
    generator that cannot make one, or a CPU that raises on each, is a no)."""
    torch.manual_seed(0)
    try:
        made = list(itertools.islice(op.sample_inputs("cpu", dtype), TRIED))
    except Exception:
        return False
    with torch.no_grad():
        for sample in made:
            leaves = tree_leaves((sample.input, sample.args, sample.kwargs))
            if not any(isinstance(t, torch.Tensor) and t.dtype == dtype for t in leaves):
                continue  # a generator that ignores the dtype: not the op run in it
            try:
                op.op(sample.input, *sample.args, **sample.kwargs)
            except Exception:
                continue
            return True
    return False
