"""An exported program's file (``.pt2``) read as data: what may be in it, and what is refused.

What a ``.pt2`` makes torch 2.9.0's ``torch.export.load`` run (read in torch/export/,
torch/export/pt2_archive/_package.py, torch/_export/serde/serialize.py; the first two and the
sympify one tried with crafted input, and they ran):
``data/sample_inputs/*.pt`` (``torch.load(weights_only=False)``); weights or constants marked
``use_pickle`` and the legacy ``data/weights|constants/<model>.pt`` (the same);
``data/constants/custom_obj_*`` (TorchScript's unpickler); ``data/aotinductor/`` (a shared
library is loaded); the pre-2.8 layout (``serialized_*.pt``), tried when the new one fails;
``expr_str`` of symbolic shapes (``sympy.sympify``, which is ``eval``); and ``guards_code``,
which ``ep.module()`` pastes into source and ``exec``s. Other tensors are raw bytes,
operators are looked up among registered ones, node names are sanitised by torch.fx. So
:func:`check_program` admits only a plain archive's members, an empty ``sample_inputs``, no
``use_pickle``, no expression and no guards (dynamic shapes are refused); the rendered script
repeats the check and calls ``module(check_guards=False)``.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError

# Everything a plain exported program consists of, below the archive's top folder.
_MEMBERS = re.compile(
    r"archive_format|archive_version|byteorder|\.data/(version|serialization_id)"
    r"|models/\w+\.json|data/weights/(weight_\d+|\w+_weights_config\.json)"
    r"|data/constants/(tensor_\d+|\w+_constants_config\.json)"
    r"|data/sample_inputs/\w+\.pt|extra/[\w.-]+"
)
_PT2_HINT = (
    "reprokit runs programs it can read as data, as `reprokit capture` writes them: "
    "torch.export.save with ep.example_inputs = None, static shapes, no pickles."
)


def check_program(path: Path | str) -> None:
    """Refuse a ``.pt2`` that ``torch.export.load`` would run code from (module docstring)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            for name in names:
                _check_member(path, name, names.count(name), archive.read(name))
    except (OSError, zipfile.BadZipFile) as exc:
        error = ReprokitError(f"not an exported program (.pt2): {exc}", path, hint=_PT2_HINT)
        raise error from None
    if not any(n.endswith("/archive_version") for n in names):
        raise ReprokitError("not an exported program: no archive_version", path, hint=_PT2_HINT)


def _check_member(path: Path, name: str, count: int, data: bytes) -> None:
    inner = name.partition("/")[2]  # below the archive's top folder
    if count > 1 or not _MEMBERS.fullmatch(inner):
        why = f"{name!r}, no part of a plain exported program (pickles, compiled code, old layouts)"
    elif inner.startswith("data/sample_inputs/") and data:
        why = "pickled example inputs, which torch.export.load unpickles with weights_only=False"
    elif inner.endswith(".json"):
        try:
            json.loads(data, object_pairs_hook=lambda pairs: _plain(path, inner, pairs))
        except ValueError as exc:
            raise ReprokitError(f"{inner} is not JSON: {exc}", path, hint=_PT2_HINT) from None
        return
    else:
        return
    raise ReprokitError(f"the archive holds {why}", path, hint=_PT2_HINT)


_RUNS = {
    "expr_str": "symbolic shapes (sympy.sympify evaluates them as Python)",
    "use_pickle": "pickled tensors (loaded with weights_only=False)",
    "guards_code": "guards (Python source that ep.module() executes)",
}


def _plain(path: Path, inner: str, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object of the archive, refused if it holds what would run when loaded."""
    for key, value in pairs:
        if key == "expr_str" or (key in ("use_pickle", "guards_code") and value):
            raise ReprokitError(
                f"{inner} holds {_RUNS[key]}",
                path,
                hint="reprokit runs programs with static shapes and unpickled weights: "
                "capture without dynamic_shapes or data-dependent sizes (.item(), nonzero).",
            )
    return dict(pairs)
