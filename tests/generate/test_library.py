"""The built-in case library, run for real on XLA:CPU: each variant ends as its case expects.

A cheap subset runs every time: one outcome of each kind (match, mismatch, error) on the cpu,
xla and xla_spmd backends. The whole library takes 5-10 minutes on two cores, through the pytest
plugin (``pytest cases/``: each variant an item that fails when it does not end as its case
expects; not in CI since round 6, docs/development.md), and tests/runner/processes/test_warm.py
runs it cold and warm; ``bench/library.py`` runs it and prints its outcome table.
"""

from __future__ import annotations

import json
import tomllib

import pytest

from reprokit.generate.templates import builtin_dir

CASES = builtin_dir("cases")
# (case, -k expression, first divergence): a variant each, ~15-40 s of stages apiece
CHEAP = [
    ("xm_save_vs_xser", "", None),  # match: xla and cpu stages, a table of flags
    ("matmul_numerics_low_precision", "bfloat16", {"matmul_xla": "act.0"}),  # mismatch
    ("optimizer_roundtrip_two_phase", "sgd", None),  # error: CheckpointManager.restore raises
    ("module_forward", "mlp", None),  # match: cpu, xla and xla_spmd, activations by hooks
]


def run_cases(cli, tmp_path, *args: str, jobs: str = "1") -> list[dict]:
    out = tmp_path / "run"
    result = cli("run", *args, "-n", jobs, "-o", out)  # -n 1 by default: pytest -n runs several
    variants = json.loads((out / "summary.json").read_text())["variants"]
    assert variants, result.output
    failed = [
        f"{v['label']}: {v['outcome']}, expected {v['expected']}"
        for v in variants
        if not v["passed"]
    ]
    assert not failed, "\n".join(failed)
    assert result.exit_code == 0, result.output
    return variants


@pytest.mark.parametrize(("case", "keyword", "divergence"), CHEAP, ids=[c[0] for c in CHEAP])
def test_cheap_cases_end_as_expected(cli, tmp_path, case, keyword, divergence):
    (variant,) = run_cases(cli, tmp_path, case, *(["-k", keyword] if keyword else []))
    assert variant["case"] == case
    if divergence is not None:  # the report names the first tensor that differs
        assert variant["first_divergence"] == divergence


def test_every_case_file_says_what_it_shows_and_links_an_issue():
    for path in sorted(CASES.glob("*.toml")):
        text = path.read_text()
        assert text.startswith("#"), path.name
        assert "https://github.com/pytorch/xla/issues/" in text, path.name
        assert tomllib.loads(text)["expect"]["outcome"], path.name
