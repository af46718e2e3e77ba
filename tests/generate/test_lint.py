"""Rendered scripts are for humans and pass the project's own lint: every variant of every
built-in case, checked with ruff under pyproject.toml's rules (line length 100 included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reprokit.generate.cases import load_variants
from reprokit.generate.render import render

CONFIG = Path(__file__).parents[2] / "pyproject.toml"


def test_every_builtin_variant_passes_ruff(tmp_path):
    variants = load_variants()
    for variant in variants:
        name = variant.label.replace("[", "_").replace("]", "")
        (tmp_path / f"{name}.py").write_text(render(variant), encoding="utf-8")
    command = [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(CONFIG)]
    done = subprocess.run([*command, "--output-format", "concise", str(tmp_path)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]
    assert len(list(tmp_path.glob("*.py"))) == len(variants) > 20
