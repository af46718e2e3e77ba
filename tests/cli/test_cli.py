"""The CLI as users call it: listing, rendering to a file or stdout, and packaging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

from conftest import TEST_TEMPLATES
from reliability_common import FAULT_TEMPLATES

ROOT = Path(__file__).parents[2]


def test_list_shows_cases_and_templates(cli):
    result = cli("list")
    assert result.exit_code == 0
    rows = [line.split("│") for line in result.stdout.splitlines() if "│" in line]
    cells = [[cell.strip() for cell in row] for row in rows]
    # case, template, variants, expect: each case on its row
    assert ["xser_to_spmd", "xser_to_spmd", "1", "match"] in [row[1:5] for row in cells]
    assert ["module_forward", "module_forward", "2", "match"] in [row[1:5] for row in cells]
    templates = result.stdout.split("┃ template")[2]
    assert "│ matmul_numerics " in templates and "│ xser_to_spmd " in templates


def list_in_80_columns(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "80"}
    command = [sys.executable, "-m", "reprokit", "list", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout


def test_list_cuts_no_name_short_in_80_columns():
    shown = list_in_80_columns()
    assert max(map(len, shown.splitlines())) <= 80
    names = {p.stem for p in (ROOT / "cases").glob("*.toml")}
    names |= {p.name.removesuffix(".py.j2") for p in (ROOT / "templates").glob("[!_]*.py.j2")}
    assert all(f"│ {name} " in shown for name in names)
    assert "…" not in shown


def test_list_name_shows_one_template_or_case_in_full():
    template = list_in_80_columns("exported_program")
    assert template.startswith("exported_program: A program captured with torch.export")
    row = "│ dtype                      │ str  │ 'captured' │ 'captured', 'float32',"
    assert row in template and "│ floating dtype to run in" in template  # its help
    case = list_in_80_columns("matmul_numerics_low_precision")
    assert "in the case" in case and "'bfloat16'" in case.split("│ dtype")[1].splitlines()[0]
    assert "(default)" in case.split("│ seed")[1].splitlines()[0]


def test_list_of_an_unknown_name_suggests_the_closest(cli):
    result = cli("list", "xser_to_spm")
    assert result.exit_code == 2
    assert "no template or case named 'xser_to_spm'; did you mean xser_to_spmd" in result.stderr


def test_list_json_includes_parameter_declarations(cli, tmp_path):
    result = cli("list", "--json", "--templates", TEST_TEMPLATES)
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    cases = {case["name"]: case for case in data["cases"]}
    assert cases["xser_to_spmd"]["expect"] == "match"
    templates = {t["name"]: t for t in data["templates"]}
    layers = next(p for p in templates["xser_to_spmd"]["params"] if p["name"] == "layers")
    assert layers == {
        "name": "layers",
        "type": "int",
        "default": 2,
        "required": False,
        "min": 1,
        "choices": None,
        "help": "hidden layers of the MLP",
    }
    message = next(p for p in templates["echo"]["params"] if p["name"] == "message")
    assert message["required"] is True


def test_list_does_not_import_torch():
    code = "import sys; from reprokit.cli import app; from typer.testing import CliRunner; "
    code += "CliRunner().invoke(app, ['list']); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False"


def test_a_run_imports_neither_packaging_nor_pydantic(write_case, tmp_path):
    """What every command's start costs: packaging only for a case that names environments
    (30 ms), pydantic never (typer 0.29 coerces through it: 80 ms)."""
    case = write_case('[case]\ntitle = "t"\ntemplate = "echo"\n[params]\nmessage = "m"\n')
    code = "import sys; sys.modules['packaging'] = sys.modules['pydantic'] = None; "
    code += "from reprokit.cli import main; main()"
    command = [sys.executable, "-c", code, "run", str(case), "--templates", str(TEST_TEMPLATES)]
    env = dict(os.environ, REPROKIT_CACHE=str(tmp_path / "cache"))
    done = subprocess.run([*command, "-o", str(tmp_path / "run")], capture_output=True, env=env)
    assert done.returncode == 0, done.stderr.decode()


def test_render_to_file_and_stdout_agree(cli, tmp_path):
    target = tmp_path / "r.py"
    to_file = cli("render", "xser_to_spmd", "--set", "layers=3", "-o", target)
    assert to_file.exit_code == 0
    assert "wrote" in to_file.stderr
    to_stdout = cli("render", "xser_to_spmd", "--set", "layers=3")
    assert to_stdout.stdout == target.read_text()
    assert "LAYERS, HIDDEN = 3, 32" in to_stdout.stdout


def test_render_into_a_new_folder_makes_it_and_into_a_folder_says_so(cli, tmp_path):
    made = cli("render", "xser_to_spmd", "-o", tmp_path / "new" / "repro.py")
    assert made.exit_code == 0 and (tmp_path / "new" / "repro.py").is_file()
    folder = cli("render", "xser_to_spmd", "-o", tmp_path / "new")
    assert folder.exit_code == 2 and "is a folder" in folder.stderr
    assert "Traceback" not in folder.output


def test_render_of_a_matrix_asks_which_variant(cli, write_case):
    path = write_case(
        '[case]\ntitle = "t"\ntemplate = "echo"\n[params]\nmessage = "m"\n'
        "[matrix]\ncount = [1, 2]\n"
    )
    result = cli("render", path, "--templates", TEST_TEMPLATES)
    assert result.exit_code == 2
    assert "2 variants: case[1], case[2]" in result.stderr
    assert "--set (count)" in result.stderr
    pinned = cli("render", path, "--templates", TEST_TEMPLATES, "--set", "count=2")
    assert pinned.exit_code == 0
    assert "COUNT" in pinned.stdout


def test_python_dash_m_runs_the_cli():
    result = subprocess.run(
        [sys.executable, "-m", "reprokit", "render", "xser_to_spmd"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0
    assert "def eval_spmd" in result.stdout


def test_wheel_carries_builtin_templates_and_cases(tmp_path):
    """Installed from a wheel (no checkout around), the built-in cases still render."""
    root = __import__("pathlib").Path(__file__).parents[2]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path, root],
        check=True,
    )
    (wheel,) = tmp_path.glob("reprokit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "reprokit/_builtin/templates/xser_to_spmd.py.j2" in names
    assert "reprokit/_builtin/cases/xser_to_spmd.toml" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    result = subprocess.run(
        [sys.executable, "-m", "reprokit", "render", "xser_to_spmd"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site)},
    )
    assert result.returncode == 0, result.stderr
    assert "def train_multicore" in result.stdout


def test_help_shows_the_defaults_and_exit_codes(cli):
    result = cli("run", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())  # the table wraps lines
    assert "[default: (runs/<time>)]" in text and "[default: (TPU if any, else CPU)]" in text
    assert "2: bad input" in text and "130: interrupted" in text


def test_help_shows_flags_as_flags(cli):
    text = " ".join(cli("--help").stdout.split())
    assert "--debug show tracebacks" in text  # not "--debug <bool> show tracebacks"
    text = " ".join(cli("run", "--help").stdout.split())
    assert "--no-cache run every stage" in text and "-n <str> stages at once" in text


TWO_ENVS = """
[case]
title = "t"
template = "echo"
[params]
message = "m"
[envs]
old = "torch==2.8.0"
new = "torch==2.9.0"
"""


def test_render_of_a_case_in_two_environments_renders_its_one_script(cli, write_case):
    """The script is the same in every environment: render has nothing to ask."""
    path = write_case(TWO_ENVS)
    result = cli("render", path, "--templates", TEST_TEMPLATES)
    assert result.exit_code == 0, result.stderr
    assert "COUNT" in result.stdout


def test_minimize_of_a_case_in_two_environments_says_how_to_pick_one(cli, write_case, tmp_path):
    path = write_case(TWO_ENVS)
    result = cli("minimize", path, "--templates", TEST_TEMPLATES, "-o", tmp_path / "m")
    assert result.exit_code == 2
    assert "2 variants: case@old, case@new" in result.stderr
    assert "Keep one environment in the case's [envs] (old, new)." in result.stderr
    assert "--set" not in result.stderr  # no matrix to pin
    assert not (tmp_path / "m").exists()


def test_importing_the_cli_changes_no_other_typer_app():
    """How reprokit's help shows flags is its commands' own: another typer app's help reads the
    same before and after reprokit.cli is imported, whatever typer prints for its flags."""
    other = textwrap.dedent("""
        import typer
        from typer.testing import CliRunner

        app = typer.Typer()

        @app.command()
        def main(debug: bool = typer.Option(False, "--debug"), n: int = 1) -> None: ...

        def shown() -> str:
            return CliRunner().invoke(app, ["--help"], terminal_width=100).stdout

        before = shown()
        import reprokit.cli
        assert "--debug" in before and shown() == before, (before, shown())
    """)
    done = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_run_says_when_it_builds_an_environment(cli, tmp_path):
    """Building one takes minutes: the run says so (the scheduler builds, the CLI listens)."""
    import importlib.util
    import shutil

    import pytest
    from conftest import DATA

    if importlib.util.find_spec("uv") is None and shutil.which("uv") is None:
        pytest.skip("uv is not installed (pip install 'reprokit[envs]')")
    common = ["--cases", DATA / "cases", "--templates", TEST_TEMPLATES, "--cold"]
    result = cli("run", "ok", "--env", "six=six==1.17.0", "-o", tmp_path / "run", *common)
    assert result.exit_code == 0, result.output
    assert "building environment six (six==1.17.0) with uv..." in result.stderr
    assert "environment six built in " in result.stderr


def test_a_warm_run_compares_and_captures_without_torch_in_the_harness(write_case, tmp_path):
    """The harness's torch work (comparisons, collect_env) is forked from the warm server
    that has torch: the run needs no torch of its own; cold, it does."""
    case = write_case('[case]\ntitle = "t"\ntemplate = "faults"\n[params]\ncompared = true\n')
    code = "import sys; sys.modules['torch'] = None; from reprokit.cli import main; main()"
    command = [sys.executable, "-c", code, "run", str(case), "--templates", str(FAULT_TEMPLATES)]
    env = dict(os.environ, REPROKIT_CACHE=str(tmp_path / "cache"))
    warm = subprocess.run([*command, "-o", str(tmp_path / "warm")], capture_output=True, env=env)
    assert warm.returncode == 0, warm.stderr.decode()
    summary = json.loads((tmp_path / "warm" / "summary.json").read_text())
    (variant,) = summary["variants"]
    assert variant["comparisons"] and variant["outcome"] == "match"
    assert summary["run"]["env"]["pytorch"].get("torch_version")  # collect_env ran elsewhere
    cold = [*command, "--cold", "--no-cache", "-o", str(tmp_path / "cold")]
    assert subprocess.run(cold, capture_output=True, env=env).returncode != 0


def test_ops_timeout_is_sample_timeout_and_the_old_name_warns():
    """One meaning per option: --timeout is seconds per stage; ops' per-sample limit is
    --sample-timeout, and ops' --timeout (its name before) still works, with a warning."""
    import pytest
    import typer

    from reprokit.cli import app
    from reprokit.cli.ops import _sample_timeout
    from reprokit.errors import ReprokitWarning

    command = typer.main.get_command(app).commands["ops"]  # type: ignore[attr-defined]
    shown = {f for p in command.params if not getattr(p, "hidden", False) for f in p.opts}
    assert "--sample-timeout" in shown and "--timeout" not in shown
    assert _sample_timeout(30.0, None) == 30.0
    with pytest.warns(ReprokitWarning, match="--sample-timeout"):
        assert _sample_timeout(30.0, 5.0) == 5.0
