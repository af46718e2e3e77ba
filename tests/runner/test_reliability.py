"""Reliability and safety (issue 7): the fast part of bench/reliability.py, plus the findings.

The checks are tests/checks/reliability_*.py's, run here with small sizes; bench/reliability.py runs
them with thousands of inputs and dozens of interrupts, and prints the figures. What the other
test files already cover is not repeated: test_fuzz.py fuzzes `reprokit render`, test_run.py
and test_procs.py classify raise/abort/hang/grandchild and one interrupt, test_diff_cli.py
refuses pickles in `reprokit diff`. The regression tests at the end are bugs found here.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
import reliability_runs as runs
import reliability_safety as safety
from reliability_common import FAULT_TEMPLATES, Figure, orphans, table
from reliability_hostile import hostile_render, hostile_run

import reprokit.runner.scheduler as run_module
from reprokit.generate.variants import load_variants
from reprokit.infra.pause import POINTS
from reprokit.infra.redact import MARKER, is_secret_name, redact_text
from reprokit.records import read_summary
from reprokit.runner.options import Options
from reprokit.runner.scheduler import Interrupted, run


def assert_all_ok(figures: list[Figure]) -> None:
    assert all(f.ok for f in figures), "\n" + table(figures)


def test_hostile_values_aimed_at_the_template_render_safely(tmp_path):
    """NUL bytes, huge numbers, Jinja reaching for os.system: exit 0 or 2, nothing runs."""
    assert_all_ok(hostile_render(tmp_path, 60))


def test_hostile_case_files_through_reprokit_run(tmp_path):
    """A few, with short lists; long ones are a regression test of their own below."""
    assert_all_ok(hostile_run(tmp_path, 4, items=3))


def test_faults_are_classified_logs_capped_and_no_process_is_left(tmp_path):
    """segfault, exit 3, SIGKILL from outside, a flood, bad UTF-8, a deleted workdir, an evil
    tensors.pt, and the faults test_run.py knows, side by side in one run."""
    assert_all_ok(runs.faults(tmp_path, megabytes=16, timeout=5.0))


def test_interrupts_at_random_moments_leave_a_readable_run(tmp_path):
    figures = runs.interrupts(tmp_path, 2, random.Random(3))
    assert_all_ok(figures)


def test_untrusted_artifacts_never_run_and_links_never_reach_the_bundle(tmp_path):
    assert_all_ok(safety.artifacts(tmp_path))


@pytest.fixture(scope="module")
def secrets_run(tmp_path_factory):
    """One run of the secrets stage (it prints the whole corpus) and its figures."""
    folder = tmp_path_factory.mktemp("secrets")
    return folder, safety.secrets(folder)


OUR_OUTPUTS = [
    "secrets run exit",
    "leaked into report.md/html/json, bundle, summary, env",
    "leaked to the console of run/report",
]


def test_no_secret_reaches_reports_bundle_summary_env_or_console(secrets_run):
    _, figures = secrets_run
    assert len(safety.CORPUS) >= 30
    mine = [f for f in figures if f.name in OUR_OUTPUTS or "  leak in" in f.name]
    assert len(mine) >= len(OUR_OUTPUTS)
    assert_all_ok(mine)


def test_stage_logs_hold_no_secret(secrets_run):
    """Found here first: the logs were raw, and a report written later (in a shell without
    the variables) leaked the bare values of *_PASSWORD and the like into bundle.zip."""
    _, figures = secrets_run
    logs = [f for f in figures if "stage logs" in f.name or "later" in f.name]
    assert logs
    assert_all_ok(logs)


def test_a_suite_of_many_variants_loses_nothing(tmp_path):
    """The bench runs 20 and 200 and compares the harness's peak RSS; here 30, all present."""
    figures = runs.load(tmp_path, (30,))
    assert_all_ok([f for f in figures if "ratio" not in f.name])


@pytest.mark.parametrize(
    ("secret", "kept"),
    [
        ("AccountName=a;AccountKey=Zm9vYmFyYmF6cXV4Zm9vYmFy==;EndpointSuffix=x", "AccountKey="),
        ("https://a.blob.core.windows.net/c?sv=2022&sig=a1B2c3D4e5F6g7H8%3D&se=1", "&sig="),
        ("https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/XyXyXyXyXyXy", "hooks.slack.com"),
        ("rk_live_" + "51J9aBc" * 4, ""),
        ("sk_test_" + "51H8xYz" * 4, ""),
        ("SG." + "a" * 22 + "." + "B" * 43, ""),
        ("dop_v1_" + "0123456789abcdef" * 4, ""),
    ],
)
def test_new_secret_shapes_are_redacted(secret, kept):
    text = redact_text(f"x {secret} y", known=[])
    assert MARKER in text and kept in text
    assert text.startswith("x ") and text.endswith(" y")


def test_words_like_signal_and_key_are_not_redacted():
    line = "the signal is SIGKILL; sig=SIGTERM; key=value; webhook fired"
    assert redact_text(line, known=[]) == line


@pytest.mark.parametrize(
    "line",
    [
        "Captured LastTokenEmbedding: every operation on CPU, XLA vs float64",  # capture's title
        "Captured XLMRobertaForTokenClassification: every operation",
        "the last token embeddings of a decoder, basic operations and basic building blocks",
        "tokenizer: sentencepiece; author: Jane Doe",
        "tokenizer: gpt2; tokenizer_name=bert-base-uncased; tokenization: t5-small",
        "max_tokens=2048, num_tokens: 512, tokens: 4096",
    ],
)
def test_prose_and_model_names_are_not_redacted(line):
    """Found on a capture: its report's title had "every" redacted after LastTokenEmbedding."""
    assert redact_text(line, known=[]) == line


@pytest.mark.parametrize(
    ("line", "hidden"),
    [
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
        ("Authorization: token ghx1234567890", "ghx1234567890"),
        ("authToken: abcdefgh", "abcdefgh"),
        ("secretKey: a1b2c3d4", "a1b2c3d4"),  # the word inside a name: a value that looks made
        ("client_secrets: abcdefgh", "abcdefgh"),
        ("password: correcthorse", "correcthorse"),
        ("tokenizer_token=a1b2c3d4e5", "a1b2c3d4e5"),  # the word again, whole, after the prose
        ("tokens: ab12cd34ef", "ab12cd34ef"),  # a plural's value other than a count
        ("password: 123456", "123456"),  # digits alone are a count only after "tokens"
    ],
)
def test_secrets_after_those_words_still_are(line, hidden):
    assert hidden not in redact_text(line, known=[])


def test_connection_strings_and_webhooks_are_secret_names():
    assert is_secret_name("AZURE_STORAGE_CONNECTION_STRING")
    assert is_secret_name("SLACK_WEBHOOK_URL")
    assert not is_secret_name("PJRT_DEVICE")


def test_a_long_matrix_value_gives_a_short_folder_not_a_traceback(cli, tmp_path):
    """Found here first: the folder name was too long for the file system (OSError)."""
    case = tmp_path / "long.toml"
    long = "x" * 300  # a list parameter's value names the variant's folder
    case.write_text(f'[case]\ntitle = "t"\ntemplate = "faults"\n[matrix]\nsecrets = [["{long}"]]\n')
    result = cli("run", case, "--templates", FAULT_TEMPLATES, "-o", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    (folder,) = [p for p in (tmp_path / "run").iterdir() if p.is_dir()]
    assert len(folder.name) < 100 and (folder / "stages/first/tensors.pt").is_file()


def test_an_interrupt_during_a_verdict_keeps_the_variant(tmp_path, monkeypatch):
    """Found here first: _abandon waited for the verdicts in flight, then dropped them."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("run() handles SIGTERM only in the main thread")
    case = tmp_path / "two.toml"
    case.write_text('[case]\ntitle = "t"\ntemplate = "faults"\n[matrix]\ni = [0, 1]\n')
    variants = load_variants([str(case)], templates=[FAULT_TEMPLATES])
    abandoned = threading.Event()
    original_abandon, original_verdict = run_module._Scheduler._abandon, run_module._State.verdict

    def abandon(self):
        abandoned.set()
        original_abandon(self)

    def verdict(state, *args):
        result = original_verdict(state, *args)
        if state.index == 0:  # SIGTERM while this verdict is in flight, then hand it back
            os.kill(os.getpid(), signal.SIGTERM)
            abandoned.wait(60)
        return result

    monkeypatch.setattr(run_module._Scheduler, "_abandon", abandon)
    monkeypatch.setattr(run_module._State, "verdict", verdict)
    options = Options(jobs=1, templates=(FAULT_TEMPLATES,))
    with pytest.raises(Interrupted) as stopped:
        run(variants, run_dir=tmp_path / "run", options=options)
    saved = json.loads((tmp_path / "run/summary.json").read_text())
    assert [v["variant"]["i"] for v in saved["variants"]] == [0]
    assert [v.label for v in stopped.value.summary.variants] == ["two[0]"]


def test_a_parameter_named_like_a_context_variable_is_not_silently_replaced(cli, tmp_path):
    """Found here first: `compare` was silently replaced by the case's tolerances (a dict)."""
    template = tmp_path / "templates/shadow.py.j2"
    template.parent.mkdir()
    template.write_text(
        '{#- reprokit\ntitle = "shadow"\n[params]\n'
        'compare = {type = "bool", default = true, help = "a flag"}\n-#}\n'
        "FLAG = {{ compare }}\n"
    )
    case = tmp_path / "shadow.toml"
    case.write_text('[case]\ntitle = "t"\ntemplate = "shadow"\n[params]\ncompare = false\n')
    result = cli("render", case, "--templates", template.parent)
    # docs/templates.md ("Writing a template"): no parameter may be named `case` or `compare`
    assert result.exit_code == 2, result.output
    assert "parameter 'compare' has the name of a variable reprokit sets" in result.stderr
    assert "FLAG" not in result.stdout and "Traceback" not in result.output


def test_a_stage_that_deletes_its_workdir_fails_alone(tmp_path):
    """Found here: the logs redacted as each stage ends were gone with the workdir, and
    redact_file's FileNotFoundError ended the whole run in a traceback."""
    case = tmp_path / "rm.toml"
    case.write_text(
        '[case]\ntitle = "t"\ntemplate = "faults"\n[matrix]\nmode = ["rmworkdir", "ok"]\n'
    )
    variants = load_variants([str(case)], templates=[FAULT_TEMPLATES])
    summary = run(variants, run_dir=tmp_path / "run", options=Options(jobs=2))
    outcomes = {v.variant["mode"]: v.outcome.value for v in summary.variants}
    assert outcomes == {"rmworkdir": "error", "ok": "match"}


def test_a_file_that_pops_an_empty_pickle_stack_is_bad_input(cli, tmp_path):
    """Found here: torch's IndexError escaped `reprokit diff` (exit 1, no message)."""
    import torch

    torch.save({"w": torch.ones(2)}, tmp_path / "good.pt")
    (tmp_path / "bad.pt").write_bytes(b"Q" + bytes(range(256)) * 4)
    result = cli("diff", tmp_path / "good.pt", tmp_path / "bad.pt")
    assert result.exit_code == 2, (result.output, result.exception)
    assert "bad.pt" in result.stderr


def test_a_very_long_template_name_is_bad_input(cli, tmp_path):
    case = tmp_path / "long.toml"
    case.write_text(f'[case]\ntitle = "t"\ntemplate = "{"x" * 300}"\n')
    result = cli("render", case, "--templates", FAULT_TEMPLATES)
    assert result.exit_code == 2, (result.output, result.exception)
    assert str(case) in result.stderr


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=str)
def test_a_signal_at_each_test_point_exits_130_and_keeps_every_finished_variant(
    tmp_path, point, signum
):
    judged = runs.paused_interrupt(tmp_path, point, signum)
    assert judged["paused"], f"the run never reached {point}"
    assert judged["code"] == 130
    assert not judged["unreadable"] and judged["report"] == 0
    assert judged["lost"] == 0
    assert judged["orphans"] == []


def test_no_stage_outlives_a_sigkilled_run(tmp_path):
    """The OOM killer, or kill -9: the watchdog kills the stages' groups, grandchild too."""
    pids = tmp_path / "pids"
    pids.mkdir()
    case = tmp_path / "killed.toml"
    case.write_text(
        f'[case]\ntitle = "t"\ntemplate = "faults"\n[params]\npids = "{pids}"\n'
        '[matrix]\nmode = ["grandchild", "hang"]\n'
    )
    command = [sys.executable, "-m", "reprokit", "run", str(case), "-n", "2"]
    command += ["-o", str(tmp_path / "run"), "--templates", str(FAULT_TEMPLATES)]
    harness = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list(pids.glob("*grandchild"))) < 1 or len(list(pids.glob("*.second.*"))) < 2:
        assert time.monotonic() < deadline and harness.poll() is None
        time.sleep(0.05)
    harness.kill()
    harness.wait()
    deadline = time.monotonic() + 5
    while orphans(pids, tmp_path / "run") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert orphans(pids, tmp_path / "run") == []


@pytest.mark.parametrize("tool", ["minimize", "pytest"])
def test_minimize_and_the_plugin_stop_on_a_signal_and_leave_no_stage(tmp_path, tool):
    """The same guarantees as `reprokit run`: a readable folder, no process left behind."""
    pids, marker, out = tmp_path / "pids", tmp_path / "paused", tmp_path / "out"
    pids.mkdir()
    case = tmp_path / "hangs.toml"
    case.write_text(
        f'[case]\ntitle = "t"\ntemplate = "faults"\n[params]\npids = "{pids}"\nmode = "hang"\n'
    )
    if tool == "minimize":
        command = ["-m", "reprokit", "minimize", str(case), "-o", str(out)]
        command += ["--templates", str(FAULT_TEMPLATES)]
    else:
        (tmp_path / "pytest.ini").write_text("[pytest]\n")
        command = ["-m", "pytest", "-p", "no:cacheprovider", f"--rootdir={tmp_path}", str(case)]
        command += [f"--reprokit-templates={FAULT_TEMPLATES}", f"--reprokit-run-dir={out}"]
    env = dict(os.environ, REPROKIT_PAUSE=f"stage-started:{marker}")
    child = subprocess.Popen(
        [sys.executable, *command], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    assert runs._held(marker, child)
    child.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    marker.unlink()
    output = child.communicate(timeout=120)[0]
    assert child.returncode == (130 if tool == "minimize" else 2), output
    if tool == "minimize":
        assert read_summary(out).minimized.stopped == "interrupted"
    else:
        (summary,) = out.rglob("summary.json")
        assert read_summary(summary.parent).interrupted
    assert orphans(pids, out) == []
