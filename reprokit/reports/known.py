"""Whether a bug is already known, said as an issue says it: a captured program's root matched
against the known bugs reprokit ships and the user's own (reprokit.infra.known)."""

from __future__ import annotations

from reprokit.infra.known import match


def known_line(*, op: str, dtype: str, kind: str, grad: bool | None) -> tuple[str, bool] | None:
    """``Known: ...`` with where, and the text to add there as a comment instead of a new issue,
    and whether it leads the issue (known upstream: the issue is a comment there) or is a line
    of its context (written up by reprokit, not filed: the issue is its first report);
    None when no entry fits. A forward and its gradient together (``grad`` None) are known as
    the forward's entry, else the gradient's."""
    dtypes = (dtype,) if dtype else ()
    tried = (False, True, None) if grad is None else (grad, None)
    found = next((k for g in tried if (k := match(op, dtypes=dtypes, kind=kind, grad=g))), None)
    if found is None:
        return None
    seen = f"`{op}` in {dtype}" if dtype else f"`{op}`"
    if found.upstream and found.state == "closed":
        return (f"Known: {found.title} ({found.upstream}, closed). Check that your torch_xla "
                "release has the fix before filing it again."), True  # fmt: skip
    if found.upstream:
        opening = found.comment(seen)
        said = (f"Known: {found.title} ({found.upstream}, {found.state}). Post this report "
                f"there as a comment, not a new issue, opening with: “{opening}”")  # fmt: skip
        return said, True
    return (f"Known: {found.title}; written up in reprokit's {found.where}, not found among "
            "pytorch/xla's issues when it was: this is its first report there."), False  # fmt: skip
