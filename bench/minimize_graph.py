"""Graph minimizer: operations before and after, oracle runs, cache hits and wall time of
`reprokit minimize` on a captured program, side by side.

The program: a 6-layer transformer encoder (tests/data/minimize_graph/models.py:encoder6,
d_model 16, eval mode) captured with `reprokit capture`, a divergence injected in layer 4
(the test-only `perturb_node` on its feed-forward output projection, layers.3.linear2).
Searches, each with a cold cache, in one run: all strategies with -n 1 and -n 2, and the same
search without the truncation step (-n 1 and -n 2). Target: at most 60 oracle runs.

    python bench/minimize_graph.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from reprokit.generate.variants import load_variants
from reprokit.runner.options import Options
from reprokit.tools.capture import command
from reprokit.tools.minimize.candidate_cache import Cache
from reprokit.tools.minimize.graph import minimize_graph

MODELS = Path(__file__).parents[1] / "tests" / "data" / "minimize_graph" / "models.py"
INJECTED = "layers.3.linear2"  # layer 4 of 6


def injected_node(program: Path) -> str:
    """The template's name (node.NNNN.linear) of the operation INJECTED calls."""
    graph = torch.export.load(program).graph
    ops = [n for n in graph.nodes
           if n.op == "call_function" and isinstance(n.meta.get("val"), torch.Tensor)]  # fmt: skip
    for index, node in enumerate(ops):
        stack = list(node.meta.get("nn_module_stack", {}).values())
        if stack and stack[-1][0] == INJECTED:
            return f"node.{index:04d}.{node.target.__name__.split('.')[0]}"
    raise SystemExit(f"no operation of {INJECTED} in {program}")


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        case = command(f"{MODELS}:encoder6", out_dir=tmp / "captured")
        node = injected_node(tmp / "captured" / "encoder6.pt2")
        (variant,) = load_variants([str(case)], sets={"perturb_node": node})
        for label, jobs, truncate in (
            ("all strategies", 1, True),
            ("all strategies", 2, True),
            ("without truncation", 1, False),
            ("without truncation", 2, False),
        ):
            start = time.monotonic()
            found = minimize_graph(
                variant,
                out_dir=tmp / f"{label}-{jobs}",
                options=Options(jobs=jobs),
                budget=200,
                cache=Cache(tmp / f"cache-{label}-{jobs}"),
                truncate=truncate,
            )
            assert found.graph is not None
            seconds = time.monotonic() - start
            rows.append((label, jobs, found.graph.nodes, found.candidates, found.cache_hits,
                         seconds, found.target, found.stopped))  # fmt: skip
    print(f"injected: {node} ({INJECTED})")
    print(f"{'search':<22}{'-n':>3}{'nodes':>12}{'runs':>6}{'hits':>6}{'seconds':>9}  target")
    for label, jobs, nodes, runs, hits, seconds, target, stopped in rows:
        shown = f"{nodes[0]} -> {nodes[1]}"
        print(f"{label:<22}{jobs:>3}{shown:>12}{runs:>6}{hits:>6}{seconds:>9.1f}  "
              f"{target} ({stopped})")  # fmt: skip
    print(
        f"\nwall time -n 2 / -n 1: {rows[1][5] / rows[0][5]:.2f} (all strategies), "
        f"{rows[3][5] / rows[2][5]:.2f} (without truncation); runs without / with "
        f"truncation (-n 1): {rows[2][3]} / {rows[0][3]}"
    )


if __name__ == "__main__":
    main()
