"""The evidence a maintainer asks for, in the report: known bugs shown in detail (the error's
message, the divergence), what torch_xla saw in each XLA stage (a CPU fallback named), and a
bundle whose distributed checkpoint can be read back."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile

import cmarkgfm
import pytest
from conftest import DATA, TEST_TEMPLATES

import reprokit
from reprokit.records import Outcome


def run_cases(tmp_path, *names: str, template_dirs=(TEST_TEMPLATES,)):
    cases = tmp_path / "cases"
    cases.mkdir()
    for name in names:
        shutil.copy(DATA / "cases" / f"{name}.toml", cases / f"{name}.toml")
    variants = reprokit.load_cases([str(cases / f"{n}.toml") for n in names],
                                   templates=list(template_dirs))  # fmt: skip
    options = reprokit.Options(jobs=2, templates=tuple(template_dirs))
    return reprokit.run(variants, run_dir=tmp_path / "run", options=options, argv=["reprokit"])


def test_known_bugs_are_shown_in_detail(tmp_path):
    """A known mismatch and a known error, both as their cases expect: the report still shows
    each one's evidence, in pytorch/xla's bug template, and renders on GitHub."""
    summary = run_cases(tmp_path, "mismatch", "raise")
    assert {v.label: v.passed for v in summary.variants} == {"mismatch": True, "raise": True}
    reprokit.report(tmp_path / "run", formats="md")
    text = (tmp_path / "run" / "report.md").read_text()
    assert "### `mismatch`: mismatch (expected mismatch)" in text
    assert "First divergence in `second`: x is the first to differ" in text
    assert "### `raise`: error (expected error)" in text
    assert "It raised `RuntimeError: the second stage fails on purpose`" in text
    assert "as its case expects (a known problem)" in text
    assert "the case records the known outcome `error`" in text
    html = cmarkgfm.github_flavored_markdown_to_html(
        text, options=cmarkgfm.Options.CMARK_OPT_UNSAFE
    )
    assert "<h2>🐛 Bug</h2>" in html and "<h2>Expected behavior</h2>" in html
    assert "<summary>the last lines of its stderr</summary>" in html


def test_xla_stages_record_what_torch_xla_saw(tmp_path, write_case):
    """linalg.eigvals has no XLA lowering: torch_xla runs it on the CPU, and the report says so."""
    case = write_case('[case]\ntitle = "eig"\ntemplate = "fallback"\n')
    variants = reprokit.load_cases([str(case)], templates=[TEST_TEMPLATES])
    options = reprokit.Options(templates=(TEST_TEMPLATES,), dump_hlo=True)
    summary = reprokit.run(variants, run_dir=tmp_path / "run", options=options)
    (variant,) = summary.variants
    cpu, xla = variant.stages
    assert cpu.xla is None  # a CPU stage has nothing of torch_xla's to say
    assert xla.xla.fallbacks == ("aten::linalg_eig",)
    assert xla.xla.device_kind == "CPU" and xla.xla.devices == 1
    assert xla.xla.compile.count >= 1 and xla.xla.execute.count >= 1
    saved = json.loads(
        (tmp_path / "run" / "case" / "stages" / "eig_xla" / "result.json").read_text()
    )
    assert saved["xla"] == xla.xla.to_json()  # the script's JSON, as it wrote it
    # a match: no bug heading, and still what torch_xla saw, in one table of every XLA stage
    assert variant.outcome is Outcome.MATCH
    reprokit.report(tmp_path / "run", formats="md")
    text = (tmp_path / "run" / "report.md").read_text()
    assert text.startswith("## reprokit: 1 variant ran and behaved as expected\n")
    assert "- `case`: **eig**." in text  # what the case checks
    assert "- Reproducible on XLA backend [CPU]" in text
    assert "- XLA devices: 1 x CPU" in text
    assert re.search(r"\n\| `eig_xla` \| 1 x CPU \| .* \| `aten::linalg_eig` \|", text)


def test_the_bundle_keeps_a_readable_distributed_checkpoint(tmp_path, cli):
    summary = reprokit.run(reprokit.load_cases(["dcp_roundtrip"]), run_dir=tmp_path / "run")
    assert summary.variants[0].outcome is Outcome.MATCH
    reprokit.report(tmp_path / "run", formats="md")
    with zipfile.ZipFile(tmp_path / "run" / "bundle.zip") as bundle:
        assert any(name.endswith("/.metadata") for name in bundle.namelist())
        bundle.extractall(tmp_path / "unzipped")
    checkpoints = "dcp_roundtrip/stages/save/dcp"
    assert not (tmp_path / "unzipped" / ".reprokit.lock").exists()
    result = cli("diff", tmp_path / "run" / checkpoints, tmp_path / "unzipped" / checkpoints)
    assert result.exit_code == 0, result.output
    assert " 0 differ" in result.stdout


def test_the_standalone_script_dumps_hlo_too(tmp_path, write_case):
    case = write_case('[case]\ntitle = "eig"\ntemplate = "fallback"\n')
    (variant,) = reprokit.load_cases([str(case)], templates=[TEST_TEMPLATES])
    script = tmp_path / "repro.py"
    script.write_text(reprokit.render(variant, templates=[TEST_TEMPLATES]))
    command = [sys.executable, str(script), "--stage", "eig_xla", "--workdir", "w", "--dump-hlo"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (hlo,) = (tmp_path / "w" / "eig_xla").glob("graphs.hlo*")
    assert "HloModule" in hlo.read_text()


def test_a_bf16_match_that_differs_from_cpu_says_where_and_why_it_is_noise(tmp_path):
    """A captured transformer in bfloat16: XLA parts from CPU beyond allclose's tolerance from
    its first attention on, and float64 calls it noise. The report, which opens with what ran
    (nothing to file), says where and why, and shows the errors the verdict rests on."""
    run_dir = tmp_path / "run"
    summary = reprokit.run(reprokit.load_cases(["captured_transformer_bf16"]), run_dir=run_dir)
    assert summary.variants[0].outcome is Outcome.MATCH
    reprokit.report(run_dir, formats="md")
    text = (run_dir / "report.md").read_text()
    assert text.startswith("## reprokit: 1 variant ran and behaved as expected\n")
    assert "**Captured transformer encoder in bfloat16" in text  # what the case checks
    found = re.search(
        r"`xla` parts from `cpu` at `(node\.\d+\.\w+)` \((\d+) of (\d+) elements beyond "
        r"rtol=0\.016, atol=1e-05; \d+ of \d+ tensors so\), but judged against float64 it is "
        r"rounding noise: `xla`'s RMSE against float64 is ([\d.e-]+), `cpu`'s own ([\d.e-]+), "
        r"within the bound ([\d.e-]+)",
        text,
    )
    assert found, text[:3000]
    first = next(c for c in summary.variants[0].comparisons if c.mismatched)
    assert found.group(1) == first.tensor and int(found.group(2)) == first.mismatched
    assert float(found.group(4)) == pytest.approx(first.errors[1], rel=1e-2)
    assert "| RMSE vs float64: stage / reference | bound ³ | fp64 verdict |" in text
    assert "### What torch_xla saw" in text and "\n| `xla` | 1 x CPU" in text
