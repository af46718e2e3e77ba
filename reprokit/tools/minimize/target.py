"""What a candidate must still show for the minimizer to keep it: the :class:`Target`.

"Same outcome" means the same :class:`Outcome`, and for a mismatch the same kind of root
(reprokit/comparison/roots.py: where a difference is born; its name with the numbers taken out:
``act.#``, ``node.#.layer_norm``): the one reaching an output, or the one asked for, so that a
harmless difference earlier in the graph does not take the search away from it; for
an error, crash or timeout the same failing stage: so that the search does not drift to
another bug. A captured program's search also asks for a failure message close to the
original's (numbers taken out, :data:`SIMILAR` by difflib): its candidates are small enough to
fail in new ways in the same stage.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from reprokit.comparison.roots import roots
from reprokit.errors import ReprokitError
from reprokit.records import Outcome, Root, VariantResult

SIMILAR = 0.6  # how close a candidate's error message must be to the original's (difflib)


@dataclass(frozen=True)
class Target:
    """The outcome to keep, its clue (the kind of the root kept, or the failing stage) and,
    when asked for, the failure's message."""

    outcome: Outcome
    clue: str | None
    message: str = ""  # empty: messages are not compared

    @classmethod
    def of(cls, result: VariantResult, *, with_message: bool = False, root: str = "") -> Target:
        """What ``result`` shows; ``with_message``: a failure's message too; ``root``: the
        root to keep (its name or op), else the first, one that reaches an output if any."""
        if result.outcome is Outcome.MISMATCH:
            names = [r.tensor for r in _roots(result) if not root or root in (r.tensor, r.op)]
            if root and not names:
                told = ", ".join(f"{r.tensor} ({r.op})" for r in _roots(result)) or "none"
                raise ReprokitError(
                    f"no root of the program is {root!r}: its roots are {told}",
                    hint="Name one of them with --root, or leave --root out.",
                )
            return cls(result.outcome, _numbers_out(names[0]) if names else None)
        failed = result.failed_stage
        if failed is None:
            return cls(result.outcome, None)
        said = failed.error or failed.signal or failed.status.value
        return cls(result.outcome, failed.name, _numbers_out(said) if with_message else "")

    def kept_by(self, result: VariantResult | None) -> bool:
        """Whether ``result`` (None: not run) still shows this."""
        if result is None:
            return False
        if self.clue and self.outcome is result.outcome is Outcome.MISMATCH:
            return self.clue in {_numbers_out(r.tensor) for r in _roots(result)}
        found = Target.of(result, with_message=bool(self.message))
        if (found.outcome, found.clue) != (self.outcome, self.clue):
            return False
        ratio = difflib.SequenceMatcher(None, found.message, self.message).ratio()
        return not self.message or ratio >= SIMILAR

    def describe(self) -> str:
        """``mismatch (act.#)``, ``error (xla: RuntimeError: ...)``: one line, for the summary
        and a TOML comment."""
        message = " ".join(self.message.split())
        said = f": {message[:117]}..." if len(message) > 120 else f": {message}" if message else ""
        return f"{self.outcome.value} ({self.clue}{said})" if self.clue else self.outcome.value

    def found(self, result: VariantResult) -> str | None:
        """The name in ``result`` of the root this target keeps."""
        found = (r.tensor for r in _roots(result) if _numbers_out(r.tensor) == self.clue)
        return next(found, None)


def _roots(result: VariantResult) -> tuple[Root, ...]:
    """The result's roots; a record without comparisons (the first divergence alone) has its
    first divergence as its one root."""
    return roots(result) or tuple(
        Root(tensor, target, tensor) for target, tensor in result.first_divergence.items() if tensor
    )


def _numbers_out(text: str) -> str:
    return re.sub(r"\d+", "#", text)
