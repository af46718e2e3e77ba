"""Whether a bug is already known: a root or an op sweep's group matched against the known
bugs reprokit ships and the user's own (the known-bugs file), said as an issue's line."""

from __future__ import annotations


def known_line(*, op: str, dtype: str, kind: str, grad: bool) -> str | None:
    """"Known: ..." with where it is known and the text to add there, or None when new."""
    return None
