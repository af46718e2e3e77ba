"""Hostile case files and --set values: whatever the input, `reprokit render` ends in exit 0
or 2 with a message naming the file, never a traceback, and writes nothing but its output."""

from __future__ import annotations

import string

import tomli_w
from conftest import TEST_TEMPLATES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TRICKS = [
    "../../etc/passwd",
    "/etc/passwd",
    "echo/../echo",
    "..",
    "",
    "ECHO",
    "echo\x00",
    "_protocol",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{% import os %}",
    "${HOME}",
    "é",
    "echo ",
]
JINJA = [
    "{{ self.__init__.__globals__ }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{% for x in ().__class__.__base__.__subclasses__() %}{% endfor %}",
    '"""',
    "\\",
    "\n",
]
keys = st.sampled_from(
    [
        "title",
        "template",
        "description",
        "tags",
        "message",
        "count",
        "scale",
        "flag",
        "shape",
        "mode",
        "rtol",
        "atol",
        "outcome",
        "colour",
        "x" * 300,
    ]
)
scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(max_size=40),
    st.sampled_from(TRICKS + JINJA),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=8)
tables = st.dictionaries(keys, values, max_size=6)
documents = st.dictionaries(
    st.sampled_from(["case", "params", "matrix", "compare", "expect", "extra"]), tables, max_size=5
).map(lambda d: {"case": {"title": "t", "template": "echo", **d.pop("case", {})}, **d})


def as_bytes(document: dict, mutation: tuple[int, bytes]) -> bytes:
    text = tomli_w.dumps(document).encode()
    where, junk = mutation
    return text[:where] + junk + text[where:] if junk else text


mutations = st.tuples(
    st.integers(0, 400),
    st.sampled_from(
        [b"", b"\x00", b"\xff\xfe", b"[", b"]]", b"=", b"\n[case]\n", b'"', b"\xc3", b"{{"]
    ),
)


def check(cli, tmp_path, data: bytes, *extra: str) -> None:
    case = tmp_path / "case.toml"
    case.write_bytes(data)
    before = {p for p in tmp_path.rglob("*")}
    output = tmp_path / "out.py"
    output.unlink(missing_ok=True)
    result = cli("render", case, "--templates", TEST_TEMPLATES, "-o", output, *extra)
    assert result.exit_code in (0, 2), (result.exit_code, result.exception, data)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert result.stderr.startswith("error: ")
        assert str(case) in result.stderr or "--set" in result.stderr, result.stderr
    created = {p for p in tmp_path.rglob("*")} - before
    assert created <= {output}  # nothing written but the script


FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(document=documents, mutation=mutations)
def test_hostile_case_files(cli, tmp_path, document, mutation):
    check(cli, tmp_path, as_bytes(document, mutation))


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_as_a_case_file(cli, tmp_path, data):
    check(cli, tmp_path, data)


@FUZZ
@given(
    key=st.sampled_from(["message", "count", "scale", "flag", "shape", "mode", "nope", "", "a b"]),
    value=st.one_of(
        st.text(alphabet=string.printable, max_size=60), st.sampled_from(TRICKS + JINJA)
    ),
)
def test_hostile_set_values(cli, tmp_path, key, value):
    good = b'[case]\ntitle = "t"\ntemplate = "echo"\n[params]\nmessage = "m"\n'
    check(cli, tmp_path, good, "--set", f"{key}={value}")
