"""Case files as users write them: every kind of bad input ends in exit 2 and one clear
message naming the file (and line); good ones expand into the right variants."""

from __future__ import annotations

import pytest
from conftest import TEST_TEMPLATES

from reprokit.errors import ReprokitError
from reprokit.generate.cases import CompareSettings, load_case
from reprokit.generate.templates import builtin_dir
from reprokit.generate.variants import load_variants, parse_sets, variants

GOOD = """
    [case]
    title = "echo"
    template = "echo"

    [params]
    message = "hello"
"""


def render_error(cli, path, *extra):
    """Run ``reprokit render`` on a bad case; return its message, checked to be clean."""
    result = cli("render", path, "--templates", TEST_TEMPLATES, *extra)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""  # no script printed
    assert result.stderr.startswith("error: ")
    return result.stderr


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[case\ntitle = 'x'\n", 1, "not valid TOML"),
        ("[case]\ntitle = 'x'\ntemplate = 'echo'\n[parms]\nmessage = 'm'\n", 4, "unknown table"),
        ("[case]\ntitle = 'x'\ntemplate = 'echo'\ncolour = 1\n", 4, "unknown key 'colour'"),
        ("[case]\ntitle = 3\ntemplate = 'echo'\n", 2, "wrong type"),
        ("[case]\ntitle = 'x'\n", 1, "lacks 'template'"),
        ("[case]\ntitle = 'x'\ntemplate = 'echo'\ntimeout = 0\n", 4, "timeout must be positive"),
        (
            "[case]\ntitle = 'x'\ntemplate = 'echo'\ntimeout = '9'\n",
            4,
            "timeout has the wrong type",
        ),
        ("[case]\ntitle = 'x'\ntemplate = 'nope'\n", 3, "unknown template 'nope'"),
        ("[case]\ntitle = 'x'\ntemplate = '../echo'\n", 3, "unknown template '../echo'"),
        ("[case]\ntitle = 'x'\ntemplate = 'echo'\n", None, "missing parameter 'message'"),
        (GOOD + "depth = 3\n", 7, "has no parameter 'depth'"),
        (GOOD + "count = 'two'\n", 7, "count must be int, not str"),
        (GOOD + "count = true\n", 7, "count must be int, not bool"),
        (GOOD + "count = 0\n", 7, "count must be at least 1"),
        (GOOD + "mode = 'c'\n", 7, "mode must be one of 'a', 'b'"),
        (GOOD + "[matrix]\ncount = 2\n", 8, "must be a non-empty list"),
        (GOOD + "[matrix]\ncount = [1, -4]\n", 8, "count must be at least 1"),
        (GOOD + "count = 2\n[matrix]\ncount = [1, 2]\n", 9, "both [params] and [matrix]"),
        (GOOD + "[compare]\nrtol = -1.0\n", 8, "must not be negative"),
        (GOOD + "[expect]\noutcome = 'works'\n", 8, "unknown outcome 'works'"),
        (GOOD + "[expect.tpu]\noutcome = 'works'\n", 8, "unknown outcome 'works'"),
        (GOOD + "[expect.tpu]\nresult = 'match'\n", 8, "unknown key 'result' in [expect.tpu]"),
        (GOOD + "[variables]\nXLA_USE_32BIT_LONG = 1\n", 8, "must be a string, not int"),
        (GOOD + "[variables]\nFLAG = true\n", 8, "must be a string, not bool"),
        (GOOD + "[variables]\nXLA = {a = '1'}\n", 8, "must be a string, not dict"),
        (GOOD + "[variables]\n'1BAD' = 'x'\n", 8, "'1BAD' is not a variable's name"),
        (GOOD + "[variables]\n'A-B' = 'x'\n", 8, "'A-B' is not a variable's name"),
        (GOOD + "[variables]\nPJRT_DEVICE = 'TPU'\n", 8, "PJRT_DEVICE is reprokit's to set"),
        (GOOD + "[variables]\nCPU_NUM_DEVICES = '8'\n", 8, "is reprokit's to set"),
        (GOOD + "[variables]\nXLA_SAVE_TENSORS_FMT = 'hlo'\n", 8, "is reprokit's to set"),
        (GOOD + "[variables]\nREPROKIT_CACHE = '/c'\n", 8, "is reprokit's to set"),
        (GOOD + "[variables]\nHF_TOKEN = 'hf_x'\n", 8, "HF_TOKEN looks like a secret"),
        ("variables = 'X=1'\n" + GOOD, 1, "variables must be a table"),
    ],
)
def test_bad_case_names_file_line_and_problem(cli, write_case, text, line, words):
    path = write_case(text)
    message = render_error(cli, path)
    where = f"{path}:{line}: " if line else f"{path}: "
    assert message.startswith(f"error: {where}"), message
    assert words in message


def test_a_cases_variables_load_sorted_and_a_number_is_told_to_be_quoted(cli, write_case):
    case = load_case(
        write_case(GOOD + "[variables]\nXLA_USE_32BIT_LONG = '1'\nOMP_NUM_THREADS = '2'\n"),
        templates=[TEST_TEMPLATES],
    )
    assert case.variables == {"OMP_NUM_THREADS": "2", "XLA_USE_32BIT_LONG": "1"}
    assert list(case.variables) == ["OMP_NUM_THREADS", "XLA_USE_32BIT_LONG"]
    assert case.to_json()["variables"] == case.variables
    message = render_error(cli, write_case(GOOD + "[variables]\nXLA_USE_32BIT_LONG = 1\n"))
    assert 'Quote it: XLA_USE_32BIT_LONG = "1".' in message


def test_error_has_a_hint_after_a_blank_line(cli, write_case):
    message = render_error(cli, write_case(GOOD + "count = 'two'\n"))
    _, blank, hint = message.splitlines()[:3]
    assert blank == ""
    assert hint.startswith("int, default 1, at least 1")


def test_invalid_utf8_is_a_clear_error(cli, tmp_path):
    path = tmp_path / "binary.toml"
    path.write_bytes(b"[case]\ntitle = '\xff\xfe'\n")
    assert "cannot read the case file" in render_error(cli, path)


def test_unknown_case_name_and_missing_file(cli, tmp_path):
    assert "unknown case 'no_such_case'" in render_error(cli, "no_such_case")
    assert "no such case file" in render_error(cli, tmp_path / "absent.toml")


def test_set_errors(cli, write_case):
    path = write_case(GOOD)
    assert "--set depth: template 'echo' has no such parameter" in render_error(
        cli, path, "--set", "depth=2"
    )
    assert "--set count: count must be int" in render_error(cli, path, "--set", "count=many")
    assert "is not KEY=VALUE" in render_error(cli, path, "--set", "count")


def test_debug_shows_the_traceback(cli, write_case):
    result = cli(
        "--debug", "render", write_case(GOOD + "count = 0\n"), "--templates", TEST_TEMPLATES
    )
    assert isinstance(result.exception, ReprokitError)


def test_matrix_expands_into_labelled_variants(write_case):
    path = write_case(GOOD + "[matrix]\ncount = [1, 2]\nmode = ['a', 'b']\n")
    case = load_case(path, templates=[TEST_TEMPLATES])
    found = variants(case)
    assert [v.label for v in found] == ["case[1-a]", "case[1-b]", "case[2-a]", "case[2-b]"]
    assert found[3].params == {
        "message": "hello",
        "count": 2,
        "scale": 1.0,
        "flag": False,
        "shape": [2, 2],
        "mode": "b",
    }


def test_matrix_include_and_exclude_combine_as_github_actions_does(write_case):
    path = write_case(
        GOOD
        + "[matrix]\ncount = [1, 2]\nmode = ['a', 'b']\n"
        + "exclude = [{count = 2, mode = 'b'}]\n"
        + "include = [{count = 1, scale = 2.5}, {count = 4, mode = 'a', flag = true}]\n"
    )
    found = variants(load_case(path, templates=[TEST_TEMPLATES]))
    labels = ["case[1-a-2.5]", "case[1-b-2.5]", "case[2-a]", "case[4-a-True]"]
    assert [v.label for v in found] == labels  # 2x2, less one, an extra on two, one more
    assert (found[0].params["scale"], found[2].params["scale"]) == (2.5, 1.0)
    assert found[3].params["flag"] is True and found[3].params["count"] == 4
    pinned = load_variants([str(path)], sets={"mode": "b"}, templates=[TEST_TEMPLATES])
    assert [v.label for v in pinned] == ["case[1-2.5-mode=b]"]  # (2, b) excluded; 4 wants a


@pytest.mark.parametrize(
    ("matrix", "words"),
    [
        ("exclude = [{count = 2, scale = 1.0}]", "exclude names 'scale', not a matrix axis"),
        ("include = [{depth = 3}]", "include: no parameter 'depth'"),
        ("include = [{count = 0}]", "include: count must be at least 1"),
        ("include = {count = 2}", "include must be a list of tables"),
    ],
)
def test_bad_matrix_include_or_exclude_is_a_clear_error(cli, write_case, matrix, words):
    message = render_error(cli, write_case(GOOD + f"[matrix]\ncount = [1, 2]\n{matrix}\n"))
    assert words in message


def test_set_overrides_params_and_pins_a_matrix_axis(write_case):
    path = write_case(GOOD + "[matrix]\ncount = [1, 2]\nmode = ['a', 'b']\n")
    sets = parse_sets(["mode=b", "scale=2.5", "shape=[3, 1]", "message=hi there"])
    found = load_variants([str(path)], sets=sets, templates=[TEST_TEMPLATES])
    sets_label = "mode=b-scale=2.5-shape=3x1-message=hi_there"  # each --set shows in the label
    assert [v.label for v in found] == [f"case[1-{sets_label}]", f"case[2-{sets_label}]"]
    assert found[0].changed == {
        "message": "hi there",
        "scale": 2.5,
        "shape": [3, 1],
        "mode": "b",
    }  # fmt: skip  (count = 1 and flag are at their defaults)
    assert found[0].params["mode"] == "b"
    assert found[0].params["scale"] == 2.5
    assert found[0].params["shape"] == [3, 1]
    assert found[0].params["message"] == "hi there"  # not TOML: taken as text


def test_set_value_with_injected_toml_stays_text():
    assert parse_sets(["message=1\nother = 2"]) == {"message": "1\nother = 2"}


def test_users_case_folder_wins_over_builtin(tmp_path, write_case):
    write_case(GOOD, name="xser_to_spmd")
    found = load_variants(["xser_to_spmd"], cases=[tmp_path], templates=[TEST_TEMPLATES])
    assert found[0].template.name == "echo"


def test_builtin_cases_load_and_validate():
    found = load_variants()
    files = {p.stem for p in builtin_dir("cases").glob("*.toml")}
    assert {v.case.name for v in found} == files  # every file loads, none is dropped
    by_case = {name: [v for v in found if v.case.name == name] for name in files}
    assert [v.label for v in by_case["module_forward"]] == [
        "module_forward[cnn]",
        "module_forward[mlp]",
    ]
    assert all(v.template.path.is_file() for v in found)


def test_an_unknown_name_suggests_the_closest(cli, write_case):
    result = cli("render", "xser_to_spdm")
    assert result.exit_code == 2
    assert "unknown case 'xser_to_spdm'; did you mean xser_to_spmd" in result.stderr
    assert "`reprokit list` shows them" in result.stderr
    result = cli("render", write_case('[case]\ntitle = "t"\ntemplate = "module_foward"\n'))
    assert result.exit_code == 2
    assert "unknown template 'module_foward'; did you mean module_forward?" in result.stderr
    result = cli("render", "zzz_nothing_like_it")
    assert "did you mean" not in result.stderr  # no suggestion when nothing is close


def test_compare_is_a_record_with_the_templates_defaults(write_case):
    """[compare] tolerances as floats (TOML gives integers too), None where the case says
    nothing (torch.testing's default for the dtype), and the method."""
    plain = load_case(write_case(GOOD), templates=[TEST_TEMPLATES])
    assert plain.compare == CompareSettings(None, None, "allclose")
    (only,) = variants(plain)
    assert only.compare == {"rtol": None, "atol": None, "method": "allclose"}  # templates see
    path = write_case(GOOD + "[compare]\natol = 1\nmethod = 'fp64'\n")
    judged = load_case(path, templates=[TEST_TEMPLATES])
    assert judged.compare == CompareSettings(atol=1.0, method="fp64")
    assert isinstance(judged.compare.atol, float)
    (variant,) = variants(judged)
    assert (variant.tolerances, variant.method) == ({"rtol": None, "atol": 1.0}, "fp64")
