"""JSON for the records: every field read back by name, inf and NaN kept, files replaced
atomically (a reader, or an interrupted run, never sees half a file)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from reprokit.infra.pause import pause


def from_json(cls: type, data: Mapping[str, Any], **convert: Any) -> Any:
    """``cls(**data)`` for the fields ``cls`` has (newer files may hold more), converted."""
    known = {f.name for f in fields(cls)}
    values = {k: v for k, v in data.items() if k in known}
    for key, function in convert.items():
        if key in values and values[key] is not None:
            values[key] = function(values[key])
    return cls(**values)


def finite(value: Any) -> Any:
    """JSON has no inf or NaN: write them as strings so that summary.json stays valid."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def number(value: Any) -> Any:
    """Back from :func:`_finite`: "inf" and "nan" as floats."""
    return float(value) if isinstance(value, str) else value


def write_json(path: Path, data: Any, *, compact: bool = False) -> Path:
    """Write ``data`` as JSON atomically: a temporary file beside it, then os.replace.
    ``compact``: on one line, which json's C encoder writes several times faster."""
    text = json.dumps(data, indent=None if compact else 2, default=str) + "\n"
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        pause(f"replacing-{path.name}")
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


class MappingReading:
    """Read a record as the dict it replaced, by its JSON keys: ``result.xla["devices"]``,
    ``variant.env.get("name")``. For code written against those dicts (StageResult.xla,
    VariantResult.env) while it moves to the fields; new code reads the fields."""

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.to_json()

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)
