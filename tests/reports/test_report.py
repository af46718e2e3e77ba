"""Reports as users see them: report.md fits one GitHub issue and renders with GitHub's own
cmark-gfm, report.html is one self-contained page, bundle.zip stays under 25 MB, and no secret
ever reaches any of them."""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import cmarkgfm
import pytest
import torch

from reprokit.comparison.tensors import compare_tensors
from reprokit.infra.redact import MARKER, redact_text
from reprokit.records import (
    Environment,
    Outcome,
    RunSummary,
    StageResult,
    Status,
    VariantResult,
    first_divergence,
    write_summary,
)
from reprokit.reports import write_reports
from reprokit.reports.markdown import GITHUB_BODY_LIMIT

HF_TOKEN = "hf_" + "Zq8" * 12
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def fake_variant(run_dir: Path, label: str, *, diverge_at: int | None, script_lines: int = 150):
    """A variant folder as `reprokit run` writes it, with real tensors and comparisons."""
    layers = {f"act.{i}": torch.full((4, 8), float(i)) for i in range(6)}
    spmd = {k: v.clone() for k, v in layers.items()}
    if diverge_at is not None:
        for i in range(diverge_at, 6):
            spmd[f"act.{i}"] += 1e-2 * (i + 1)
    folder = run_dir / label
    for stage, tensors in (("eval_cpu", layers), ("eval_spmd", spmd)):
        (folder / "stages" / stage).mkdir(parents=True)
        torch.save(tensors, folder / "stages" / stage / "tensors.pt")
        result = {"stage": stage, "seconds": 1.0, "metrics": {"loss": [1.0, 0.8, 0.7]}}
        (folder / "stages" / stage / "result.json").write_text(json.dumps(result))
        (folder / "stages" / stage / "stdout.log").write_text(f"token: {HF_TOKEN}\nstep 1\n")
    script = "\n".join(f"x_{i} = {i}  # line of the repro" for i in range(script_lines))
    (folder / "repro.py").write_text(script + "\n")
    comparisons = compare_tensors(layers, spmd, reference="eval_cpu", target="eval_spmd")
    first = first_divergence(comparisons)
    outcome = Outcome.MATCH if first is None else Outcome.MISMATCH
    stages = tuple(
        StageResult(s, b, Status.OK, 0, None, 1.0, metrics={"loss": [1.0, 0.8, 0.7]})
        for s, b in (("eval_cpu", "cpu"), ("eval_spmd", "xla_spmd"))
    )
    return VariantResult(
        case=label.split("[")[0],
        label=label,
        variant={"layers": 6},
        outcome=outcome,
        expected=Outcome.MATCH,
        seconds=2.0,
        stages=stages,
        comparisons=tuple(comparisons),
        first_divergence={"eval_spmd": first.tensor if first else None},
    )


def fake_run(run_dir: Path, variants: list[VariantResult]) -> Path:
    env = Environment(
        python="3.11",
        versions={"torch": "2.9.0"},
        variables={"PJRT_DEVICE": "CPU", "HF_TOKEN": MARKER},
    )
    write_summary(
        RunSummary(started="now", finished="later", env=env, variants=tuple(variants)), run_dir
    )
    return run_dir


@pytest.fixture
def small_run(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return fake_run(
        run_dir,
        [
            fake_variant(run_dir, "seed[default]", diverge_at=3),
            fake_variant(run_dir, "seed[highest]", diverge_at=None),
        ],
    )


def test_report_writes_md_html_json_and_bundle(cli, small_run):
    result = cli("report", small_run)
    assert result.exit_code == 0, result.output
    assert "1 of 2 variants behaved as expected" in result.stdout
    for name in ("report.md", "report.html", "report.json", "bundle.zip"):
        assert (small_run / name).is_file()


def test_markdown_renders_with_github_cmark_gfm(small_run):
    write_reports(small_run, formats="md")
    text = (small_run / "report.md").read_text()
    assert text.startswith("## 🐛 Bug\n\nseed: `seed[default]` ends in **mismatch**")
    assert "reprokit: 1 of 2 variants behaved as expected; 1 did not" in text
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [  # pytorch/xla's bug template
        "## 🐛 Bug",
        "## To Reproduce",
        "## Expected behavior",
        "## Environment",
        "## Additional context",
    ]
    expected = (
        "First divergence in `eval_spmd`: act.0 through act.2 agree; act.3 is the first to differ"
    )
    assert f"{expected} (32 / 32 mismatched, max abs 0.04)." in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "act." in line]
    # in the order the stage saved them, from two that agree, the first to differ in bold
    assert [row.split("|")[1].strip() for row in rows] == [
        "`act.1`", "`act.2`", "**`act.3`**", "`act.4`", "`act.5`"
    ]  # fmt: skip
    html = cmarkgfm.github_flavored_markdown_to_html(
        text, options=cmarkgfm.Options.CMARK_OPT_UNSAFE
    )
    assert "<table>" in html
    assert "<td><code>act.5</code></td>" in html
    assert "<details><summary>repro.py (150 lines)" in html
    assert '<pre lang="python"><code>x_0 = 0' in html


def test_html_is_self_contained_with_plots(small_run):
    write_reports(small_run, formats="html")
    page = (small_run / "report.html").read_text()
    assert page.count("<svg") >= 3  # loss curves, difference sizes, timings
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page)  # nothing fetched
    assert not re.search(r"url\(\s*[\"']?(https?:)?//", page)
    assert "<script" not in page


def test_report_of_a_folder_without_summary_is_exit_2(cli, tmp_path):
    result = cli("report", tmp_path)
    assert result.exit_code == 2
    assert "no summary.json here" in result.stderr
    (tmp_path / "summary.json").write_text("{not json")
    result = cli("report", tmp_path)
    assert result.exit_code == 2
    assert "summary.json is not readable" in result.stderr


@pytest.mark.slow
def test_500_failing_variants_fit_github_limits(tmp_path):
    run_dir = tmp_path / "big"
    run_dir.mkdir()
    one = fake_variant(run_dir, "big[0]", diverge_at=0, script_lines=400)
    variants = [one]
    for i in range(1, 500):  # same records, own folders: the report reads only records + scripts
        label = f"big[{i}]"
        (run_dir / label).mkdir()
        (run_dir / label / "repro.py").write_text((run_dir / "big[0]/repro.py").read_text())
        (run_dir / label / "stages.log").write_bytes(os.urandom(60_000))  # incompressible
        variants.append(VariantResult(**{**one.__dict__, "label": label}))
    fake_run(run_dir, variants)
    write_reports(run_dir)
    text = (run_dir / "report.md").read_text()
    assert len(text) <= GITHUB_BODY_LIMIT
    assert "Left out of this body to fit GitHub's limit" in text
    html = cmarkgfm.github_flavored_markdown_to_html(
        text, options=cmarkgfm.Options.CMARK_OPT_UNSAFE
    )
    assert "<table>" in html and "<details>" in html
    bundle = run_dir / "bundle.zip"
    assert bundle.stat().st_size <= 25 * 1000 * 1000
    names = zipfile.ZipFile(bundle).namelist()
    assert "summary.json" in names and "LEFT_OUT.txt" in names


def test_no_secret_reaches_report_or_bundle(small_run, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    (small_run / "seed[default]/stages/eval_cpu/stderr.log").write_text(
        f"aws {AWS_SECRET}\nAuthorization: Bearer abcdef123456789\n"
    )
    write_reports(small_run)
    texts = [(small_run / n).read_text() for n in ("report.md", "report.html", "report.json")]
    with zipfile.ZipFile(small_run / "bundle.zip") as bundle:
        texts += [bundle.read(n).decode() for n in bundle.namelist() if not n.endswith(".pt")]
    for text in texts:
        assert HF_TOKEN not in text and AWS_SECRET not in text and "abcdef123456789" not in text
    assert any(f"token: {MARKER}" in t for t in texts)  # the line is kept, the value hidden


@pytest.mark.parametrize(
    "secret",
    [
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_" + "a1B2" * 9,
        "github_pat_" + "x" * 40,
        HF_TOKEN,
        "xoxb-123456789012-abcdefghij",
        "AIza" + "Sy" * 17 + "A",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    ],
)
def test_secret_shapes_are_redacted_in_text(secret):
    text = redact_text(f"before {secret} after", known=[])
    assert secret not in text
    assert text.startswith("before ") and text.endswith(" after")


@pytest.mark.parametrize(
    ("line", "hidden"),
    [
        ("https://alice:s3cretpw@example.com/repo", "s3cretpw"),
        ("DB_PASSWORD=hunter22", "hunter22"),
        ('{"api_key": "k-1234567890"}', "k-1234567890"),
        ("Authorization: Bearer abc.def.ghi12345", "abc.def.ghi12345"),
    ],
)
def test_secret_values_by_name_are_redacted(line, hidden):
    assert hidden not in redact_text(line, known=[])


def test_env_command_redacts_secret_variables(cli, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("XLA_AUTH_SECRET", "xla-value-1234")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    result = cli("env", "--json")
    assert result.exit_code == 0
    assert HF_TOKEN not in result.stdout and "xla-value-1234" not in result.stdout
    data = json.loads(result.stdout)
    assert data["variables"]["PJRT_DEVICE"] == "CPU"
    assert data["variables"]["XLA_AUTH_SECRET"] == MARKER
    assert data["torch_xla_matches_torch"] is True
    assert data["xla"]["device_kind"] == "CPU"


CHROMIUM = shutil.which("chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.mark.skipif(
    not CHROMIUM and not os.environ.get("REPROKIT_REQUIRE_BROWSER"),
    reason="Debian's chromium is not installed (.ci/run installs it and requires this test)",
)
def test_html_loads_in_headless_chromium_without_errors(small_run, tmp_path):
    from playwright.sync_api import sync_playwright

    write_reports(small_run, formats="html")
    errors, requests = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto((small_run / "report.html").as_uri())
        assert page.locator("figure svg").count() >= 3
        assert "1 of 2 variants behaved as expected" in page.inner_text("body")
        page.screenshot(path=tmp_path / "report.png", full_page=True)
        browser.close()
    assert errors == []
    assert all(url.startswith("file://") for url in requests)  # self-contained
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_a_program_too_large_to_attach_is_named_with_what_to_do(small_run):
    with (small_run / "seed[default]" / "model.pt2").open("wb") as file:
        file.truncate(26_000_000)  # sparse: 26 MB on paper, nothing on disk
    write_reports(small_run, formats="md")
    text = (small_run / "report.md").read_text()
    assert "`seed[default]/model.pt2` (26 MB) is over GitHub's 25 MB attachment limit" in text
    assert "--random-inputs" in text
    with zipfile.ZipFile(small_run / "bundle.zip") as bundle:
        assert "seed[default]/model.pt2" not in bundle.namelist()
        assert "seed[default]/model.pt2" in bundle.read("LEFT_OUT.txt").decode()


def test_a_set_value_shows_in_the_label_and_the_report(cli, tmp_path):
    """Two runs of one case with another value of a parameter keep apart, and say how."""
    data = Path(__file__).parents[1] / "data"
    common = ["--cases", data / "cases", "--templates", data / "templates"]
    for megabytes in (2, 3):
        run_dir = tmp_path / f"run{megabytes}"
        ran = cli("run", "mismatch", "--set", f"megabytes={megabytes}", "-o", run_dir, *common)
        assert ran.exit_code == 0, ran.output
        assert (run_dir / f"mismatch[megabytes={megabytes}]" / "repro.py").exists()
        assert cli("report", run_dir, "--format", "md").exit_code == 0
        report = (run_dir / "report.md").read_text()
        changed = f"`mode = 'mismatch'`, `megabytes = {megabytes}`."
        assert f"Parameters not at the template's defaults: {changed}" in report


def test_the_expectation_for_the_device_applies_and_the_report_says_which(cli, tmp_path):
    data = Path(__file__).parents[1] / "data"
    case = tmp_path / "differs.toml"
    case.write_text(
        '[case]\ntitle = "t"\ntemplate = "faulty"\n[params]\nmode = "mismatch"\n'
        '[expect]\noutcome = "match"\nobserved = "nowhere yet"\n'
        '[expect.tpu]\noutcome = "mismatch"\nobserved = "a TPU v5e, torch_xla 2.9.0"\n'
    )
    common = [case, "--templates", data / "templates"]  # its stages are CPU ones: they run here
    on_cpu = cli("run", *common, "-o", tmp_path / "cpu", "--xla-device", "CPU")
    assert on_cpu.exit_code == 1 and "(expected match)" in on_cpu.output
    on_tpu = cli("run", *common, "-o", tmp_path / "tpu", "--xla-device", "TPU")
    assert on_tpu.exit_code == 0 and "(expected mismatch ([expect.tpu]))" in on_tpu.output
    assert cli("report", tmp_path / "tpu", "--format", "md").exit_code == 0
    report = (tmp_path / "tpu/report.md").read_text()
    assert "(the case's [expect.tpu]; observed: a TPU v5e, torch_xla 2.9.0)" in report
    assert "| mismatch | mismatch ([expect.tpu]) | yes |" in report


def test_a_report_of_many_variants_leaves_no_figure_open(tmp_path):
    """A sweep's reports drew every figure through pyplot and kept it: matplotlib warned
    "More than 20 figures have been opened" and memory grew with each report."""
    import warnings

    import matplotlib.pyplot as plt

    run_dir = tmp_path / "many"
    run_dir.mkdir()
    fake_run(run_dir, [fake_variant(run_dir, f"m[{i}]", diverge_at=2) for i in range(25)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's warning fails the test
        write_reports(run_dir, formats="html")
    assert plt.get_fignums() == []
    assert (run_dir / "report.html").read_text().count("<svg") >= 12
