"""The report's sentences on how far a captured program's verdict can be trusted
(docs/verdicts.md): the precision triage, the faithful run against the instrumented one,
and each operation's own error beside the accumulated one."""

from __future__ import annotations

from reprokit.records import Triage, VariantResult
from reprokit.reports.model import Text


def trust_lines(variant: VariantResult) -> tuple[Text, ...]:
    """What the variant's triage, faithful and isolated runs showed, a sentence each."""
    lines = []
    if variant.triage:
        lines.append(f"Triage: run again more precisely, the mismatch {Triage(variant.triage).said}"
                     f" (`triage = \"{variant.triage}\"`).")  # fmt: skip
    if variant.fusion_sensitive:
        lines.append(fusion_line(variant))
    for stage, own in variant.own_divergence.items():
        first = variant.first_divergence.get(stage)
        if own is None:
            lines.append(f"Each operation alone on CPU's inputs: none of `{stage}`'s has an error"
                         " of its own beyond the bound; what differs is inherited.")  # fmt: skip
        else:
            lines.append(
                f"Each operation alone on CPU's inputs: `{own}` is the first whose own error "
                f"is beyond the bound (the first accumulated: `{first}`)."
            )
    return tuple(lines)


def fusion_line(variant: VariantResult) -> Text:
    """Which outputs differ between the program as captured and the instrumented program."""
    shown = [f"`{c.tensor}` {c.mismatched:,} / {c.total:,} elements, max abs {c.max_abs:.3g}"
             for c in variant.fusion if not c.allclose]  # fmt: skip
    which = f": {'; '.join(shown)}" if shown else ""
    line = (
        "The divergence is sensitive to fusion: the program as captured (`xla_faithful`, one "
        "graph of its outputs) and with every operation recorded (`xla`) give other outputs"
        f"{which}. The outputs' verdict is the faithful run's."
    )
    if variant.fusion_nodes:
        names = ", ".join(f"`{name}`" for name in variant.fusion_nodes)
        line += (f" Recording {names} alone is enough to change them (`xla_narrowed`: delta "
                 "debugging over the recorded results).")  # fmt: skip
    return line
