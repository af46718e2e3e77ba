"""The variables a script sets at its top: where they go (before anything is imported, in
every template's script), how they are written (setdefault, literals), and when not at all."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from conftest import TEST_TEMPLATES

from reprokit.generate.cases import load_case
from reprokit.generate.render import render
from reprokit.generate.variables import FROM_CASE, FROM_RUN, variables_header, with_variables
from reprokit.generate.variants import variants

CASE = """
    [case]
    title = "environ"
    template = "{template}"
    {params}
    [variables]
    RK_VALUE = "7"
    XLA_USE_32BIT_LONG = "1"
"""


def test_no_variables_no_header_and_the_script_unchanged():
    script = '"""doc"""\nimport torch\n'
    assert variables_header({}) == ""
    assert with_variables(script, {}) == script


def test_the_header_says_where_each_variable_came_from():
    header = variables_header({"A": "1", "B": "2"}, case=["A"])
    lines = header.splitlines()
    assert lines[0] == "import os"
    assert lines.index(FROM_CASE) < lines.index('os.environ.setdefault("A", "1")')
    assert lines.index(FROM_RUN) < lines.index('os.environ.setdefault("B", "2")')
    assert lines.index(FROM_CASE) < lines.index(FROM_RUN)
    assert FROM_CASE not in variables_header({"B": "2"})


def test_after_the_docstring_and_future_imports_before_the_first_import():
    script = (
        '#!/usr/bin/env python\n"""doc\nstring"""\n\n'
        "from __future__ import annotations\n\n# why\nimport torch\n"
    )
    found = with_variables(script, {"A": "1"})
    assert found.index("from __future__") < found.index("setdefault") < found.index("import torch")
    assert found.startswith('#!/usr/bin/env python\n"""doc\nstring"""\n')
    compile(found, "repro.py", "exec")  # __future__ still first


def test_before_a_decorated_first_statement():
    script = "@staticmethod\ndef f():\n    pass\n"
    found = with_variables(script, {"A": "1"})
    assert found.index("setdefault") < found.index("@staticmethod")


def test_a_value_can_never_become_code(tmp_path):
    value = '"); import sys; sys.exit(3) #\n\\'
    script = with_variables("import os\nprint(repr(os.environ['EVIL']))\n", {"EVIL": value})
    path = tmp_path / "s.py"
    path.write_text(script)
    env = {"PATH": os.environ["PATH"]}
    done = subprocess.run([sys.executable, path], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr(value)


def test_a_protocol_template_sets_them_before_torch_is_imported(write_case):
    case = load_case(write_case(CASE.format(template="echo", params='[params]\nmessage = "m"')),
                     templates=[TEST_TEMPLATES])  # fmt: skip
    (variant,) = variants(case)
    script = render(variant, templates=[TEST_TEMPLATES])
    set_at = script.index('os.environ.setdefault("XLA_USE_32BIT_LONG", "1")')
    assert set_at < script.index("\nimport torch\n")
    assert script.index("# Made by reprokit") < set_at  # the comments that open it stay first


def test_a_hand_written_template_without_the_macros_gets_them_too(write_case, tmp_path):
    """The rendered script run alone in a clean environment (env -i) still sees the value."""
    case = load_case(write_case(CASE.format(template="environ", params="")),
                     templates=[TEST_TEMPLATES])  # fmt: skip
    (variant,) = variants(case)
    script = render(variant, templates=[TEST_TEMPLATES])
    assert script.index('os.environ.setdefault("RK_VALUE", "7")') < script.index("import torch")
    (tmp_path / "repro.py").write_text(script)
    command = ["env", "-i", f"PATH={os.environ['PATH']}", sys.executable, "repro.py"]
    done = subprocess.run([*command, "--stage", "first", "--workdir", "w"], cwd=tmp_path,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"seen": [7.0]' in (tmp_path / "w" / "first" / "result.json").read_text()
    done = subprocess.run([*command[:3], "RK_VALUE=8", *command[3:], "--stage", "first",
                           "--workdir", "w"], cwd=tmp_path, check=True)  # fmt: skip
    assert '"seen": [8.0]' in (tmp_path / "w" / "first" / "result.json").read_text()  # theirs


def test_a_long_value_is_split_at_its_spaces_within_the_columns_and_reads_back_whole():
    flags = " ".join(f"--xla_flag_number_{i}=true" for i in range(12))
    long_word = "x" * 150  # cannot be split: let be, told to the linter
    script = with_variables("import os\nV = os.environ\n", {"XLA_FLAGS": flags, "W": long_word})
    assert all(len(line) <= 100 or line.endswith("# noqa: E501") for line in script.splitlines())
    assert script.count("# noqa: E501") == 1
    seen: dict = {}
    exec(compile(script.replace("import os\n", "", 1), "s", "exec"), {"os": FakeOs(seen)})
    assert seen == {"XLA_FLAGS": flags, "W": long_word}


class FakeOs:
    """os as the header sees it, with an environment of its own."""

    def __init__(self, environ: dict) -> None:
        self.environ = environ


def test_a_builtin_script_with_both_kinds_stays_ruff_clean(write_case, tmp_path):
    case = load_case(write_case(CASE.format(template="module_forward", params="")))
    flags = " ".join(f"--xla_flag_number_{i}=true" for i in range(12))
    (variant,) = variants(case)
    variant = replace(variant, exported={"XLA_FLAGS": flags, "OMP_NUM_THREADS": "2"})
    script = render(variant)
    assert script.index(FROM_CASE) < script.index(FROM_RUN) < script.index("\nimport torch\n")
    path = tmp_path / "repro.py"
    path.write_text(script)
    config = Path(__file__).parents[2] / "pyproject.toml"  # the project's rules
    ruff = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", config, path],
        capture_output=True,
        text=True,
    )
    assert ruff.returncode == 0, ruff.stdout
