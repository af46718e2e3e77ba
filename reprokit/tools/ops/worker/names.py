"""The names a user has for an op, resolved to torch's OpInfos, in the worker (torch imported).
A model's report names an op as aten does (``aten.linalg_vector_norm.default``,
``torch.ops.aten.softplus``) or as Python calls it (``__rshift__``, ``Tensor.abs_``); OpInfo names
it otherwise (``linalg.vector_norm``, ``nn.functional.softplus``, ``bitwise_right_shift``)."""

from __future__ import annotations

import re
from typing import Any

import reprokit.tools.ops.worker.forms as forms

PREFIXES = ("torch.ops.", "torch.", "aten::", "aten.", "Tensor.", "nn.functional.", "special.")
DUNDER = re.compile(r"__(?P<name>\w+?)__")


def resolve(op_db: list, name: str) -> tuple[list[Any], str]:
    """The OpInfos ``name`` means, and how it was read ("" where it is an OpInfo's own name;
    "operator" for a dunder: its operator form is what it calls; "aten" for a torch or aten
    name); [] for a name none has."""
    exact = [o for o in op_db if name in (o.name, full_name(o))]
    if exact:
        return exact, ""
    for bare in _bare(name):
        dunder = DUNDER.fullmatch(bare)
        found = [o for o in op_db if dunder and _operator_named(o, dunder["name"])]
        if found:
            return found, "operator"
        for known_as in (_own, _aten, _short):  # the closest first: mean.dim is mean
            found = [o for o in op_db if bare in known_as(o)]
            if found:
                return found, "aten"
    return [], ""


def full_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _operator_named(op: Any, name: str) -> bool:
    """``op``'s operator is ``operator.<name>`` (``and`` is ``and_``; ``rrshift``, reflected,
    is ``rshift``; ``irshift`` the in-place one)."""
    names = {name, f"{name}_", name.removeprefix("r"), f"{name.removeprefix('r')}_"}
    fns = (forms.operator_of(op), forms.operator_of(op, inplace=True))
    return any(getattr(fn, "__name__", None) in names for fn in fns if fn is not None)


def _bare(name: str) -> list[str]:
    """``name`` without torch's and aten's prefixes, then without its overload
    (``linalg_vector_norm.default`` -> ``linalg_vector_norm``), then without a leading
    underscore (aten's ``_adaptive_avg_pool2d``) or a trailing one (``abs_``, in place)."""
    for prefix in PREFIXES:
        name = name.removeprefix(prefix)
    head, _, overload = name.rpartition(".")
    found = [name, head] if head and overload else [name]
    return found + [f.strip("_") for f in found if f.strip("_") != f]


def _own(op: Any) -> set[str]:
    return {op.name}


def _aten(op: Any) -> set[str]:
    return {getattr(op, "aten_name", None) or op.name}


def _short(op: Any) -> set[str]:
    """Its name's last part, and its aliases' (``nn.functional.softplus``: softplus)."""
    return {op.name.rpartition(".")[2]} | {
        a.name.rpartition(".")[2] for a in getattr(op, "aliases", ())
    }
