"""Minimizer speed: runs, cache hits and wall time of `reprokit minimize`, side by side.

The case: an MLP of 8 layers, width 512, 20 train steps, a divergence injected at layer 3
(the test-only parameter of tests/data/minimize/layers.py.j2). Searches, in one run:
delta debugging with -n 1 and -n 2 (cold caches), -n 2 again (warm cache), and the same
search done one parameter at a time (-n 1) for comparison. Target: the minimal case
(layers 4, width 1, steps 1, sgd) within 40 candidate runs.

    python bench/minimize.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from reprokit.generate.variants import load_variants
from reprokit.runner.options import Options
from reprokit.tools.minimize.candidate_cache import Cache
from reprokit.tools.minimize.params import Params, bisect_param, minimize, param_search, simplest
from reprokit.tools.minimize.search import Runner, Search

DATA = Path(__file__).parents[1] / "tests" / "data" / "minimize"
SETS = {"layers": 8, "width": 512, "steps": 20, "inject_layer": 3}


def one_at_a_time(search: Search[Params], declared: dict) -> None:
    """The brute-force way: each parameter alone, to its simplest value or bisected."""
    for name, param in declared.items():
        value = simplest(param)
        if value is None or search.best[name] == value:
            continue
        if search.first("parameters", [{**search.best, name: value}]) is None:
            if param.type in ("int", "float"):
                bisect_param(search, name, param)


def main() -> None:
    (variant,) = load_variants([str(DATA / "diverge.toml")], sets=SETS, templates=[DATA])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for label, jobs, cache in (
            ("delta debugging", 1, "a"),
            ("delta debugging", 2, "b"),
            ("delta debugging, warm cache", 2, "b"),
        ):
            start = time.monotonic()
            report = minimize(
                variant,
                out_dir=tmp / f"{label}-{jobs}",
                budget=100,
                options=Options(jobs=jobs, cache=False),
                cache=Cache(tmp / cache),
            )
            after = {c.param: c.after for c in report.changes}
            rows.append(
                (
                    label,
                    jobs,
                    report.candidates,
                    report.cache_hits,
                    time.monotonic() - start,
                    after,
                )
            )
        runner = Runner(Options(jobs=1, cache=False), tmp / "naive", 100, Cache(tmp / "c"))
        start = time.monotonic()
        search = param_search(variant, runner)
        one_at_a_time(search, variant.template.params)
        after = {k: v for k, v in search.best.items() if variant.params[k] != v}
        rows.append(
            (
                "one parameter at a time",
                1,
                runner.runs,
                runner.hits,
                time.monotonic() - start,
                after,
            )
        )
    print(f"{'search':<30}{'-n':>3}{'runs':>6}{'hits':>6}{'seconds':>9}  minimal")
    for label, jobs, runs, hits, seconds, after in rows:
        print(f"{label:<30}{jobs:>3}{runs:>6}{hits:>6}{seconds:>9.1f}  {after}")
    dd1, dd2, naive = rows[0][4], rows[1][4], rows[3][4]
    print(
        f"\nwall time -n 2 / -n 1: {dd2 / dd1:.2f}; one-at-a-time / delta debugging (-n 1): "
        f"{naive / dd1:.2f} (runs {rows[3][2]} vs {rows[0][2]})"
    )


if __name__ == "__main__":
    main()
