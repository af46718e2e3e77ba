"""What the trustworthy verdicts cost on a 6-layer nn.TransformerEncoder (d_model 512): the
faithful run (xla_faithful) and the isolated mode (xla_isolated) against today's single
instrumented run (xla), time and peak memory side by side.

    .venv/bin/python bench/trust.py [--batch 2] [--seq 32] [--layers 6]

The encoder of bench/capture.py (eval mode), captured with ``reprokit.capture``, rendered once
with ``isolate = true`` (``faithful`` is on by default); each XLA stage runs as its own process
(``python repro.py --stage S``) on XLA:CPU, one after the other, its wall time and peak
resident memory (the child's ``ru_maxrss``) printed with the ratio to the xla stage. The
isolated mode compiles one graph per operation, so its time grows with the operations' count.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from capture import encoder, rendered, stage  # bench/capture.py: the same encoder and measurement

from reprokit.tools.capture import capture

STAGES = ("xla", "xla_faithful", "xla_isolated")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reprokit-bench-") as tmp:
        model, inputs = encoder(args.layers, args.batch, args.seq)
        case = capture(model, inputs, name="encoder", out_dir=tmp)
        script = rendered(case, Path(tmp) / "run", isolate=True)
        start = time.perf_counter()
        measured = {name: stage(script, name) for name in STAGES}
        print(f"encoder: {args.layers} layers, batch {args.batch}, seq {args.seq}; "
              f"{time.perf_counter() - start:.1f} s in all")  # fmt: skip
        print(f"{'stage':<14}{'seconds':>9}{'x xla':>7}{'peak MiB':>10}{'x xla':>7}")
        base_s, base_m = measured["xla"]
        for name, (seconds, mib) in measured.items():
            print(f"{name:<14}{seconds:>9.1f}{seconds / base_s:>7.2f}{mib:>10.0f}"
                  f"{mib / base_m:>7.2f}")  # fmt: skip
        both = (base_s + measured["xla_faithful"][0]) / base_s
        print(f"XLA time of a captured case, xla and xla_faithful: {both:.2f}x xla alone")


if __name__ == "__main__":
    main()
