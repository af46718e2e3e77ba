"""The known bugs as data: known.toml in step with docs/examples, the matcher's precedence and
facts, the aten names a captured program's roots have, and a user's file (theirs first, a bad
one an error at its line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reprokit.errors import ReprokitError
from reprokit.infra import known
from reprokit.infra.known import Known, load, match, not_op_bugs

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"


def test_every_report_an_entry_names_exists():
    named = {k.report for k in load([]) if k.report}
    assert named and sorted(r for r in named if not (EXAMPLES / r).is_file()) == []


def test_every_report_of_docs_examples_is_an_entry_or_no_op_bug():
    named = {k.report for k in load([]) if k.report}
    assert not named & set(not_op_bugs())
    listed = named | set(not_op_bugs())
    reports = [p.name for p in EXAMPLES.glob("*.md") if p.name != "README.md"]  # the index
    assert sorted(r for r in reports if r not in listed) == []
    assert all((EXAMPLES / r).is_file() for r in not_op_bugs())


def test_each_entry_is_known_somewhere_and_says_when():
    for entry in load([]):
        assert entry.title and entry.condition and entry.where, entry.source
        assert (entry.state in ("open", "closed", "unknown")) == bool(entry.upstream), entry.source


@pytest.mark.parametrize(
    ("op", "facts", "report"),
    [  # what reprokit/reports asks for a captured program's roots: aten's names
        ("linalg_vector_norm", {"dtypes": ("float16",), "kind": "nan-inf", "grad": False},
         "fp16_vector_norm_overflow.md"),
        ("softplus", {"dtypes": ("float16",), "kind": "nan-inf"}, "fp16_softplus_overflow.md"),
        ("softplus", {"dtypes": ("float16",), "kind": "nan-inf", "grad": True},
         "fp16_softplus_overflow.md"),  # its gradient NaN too: the same bug
        ("softplus", {"dtypes": ("bfloat16",), "kind": "nan-inf"}, None),  # the report: not hit
        ("mean", {"dtypes": ("bfloat16",), "kind": "value"}, "fp16_mean_count.md"),
        ("mean", {"dtypes": ("float32",), "kind": "value"}, None),
        ("elu", {"dtypes": ("float32",), "kind": "value", "grad": True}, "elu_backward.md"),
        ("elu", {"dtypes": ("float32",), "kind": "value", "grad": False}, None),
        ("elu_backward", {"dtypes": ("float32",), "kind": "value", "grad": False},
         "elu_backward.md"),  # the backward op itself, as a training capture's root
        ("hardtanh_backward", {"kind": "value"}, "clip_grad_boundaries.md"),
        ("_embedding_bag", {"kind": "value", "grad": False}, ""),  # upstream only: no report
        ("amax", {"dtypes": ("float32",), "kind": "shape"}, "amax_default_dim.md"),
        ("upsample_bilinear2d", {"kind": "value", "grad": False}, "bilinear_upsample_8897.md"),
        ("upsample_bilinear2d", {"kind": "value", "grad": False,
         "kwargs": {"scale_factors": None}}, "bilinear_resize_source_column.md"),
    ],
)  # fmt: skip
def test_aten_names_match(op, facts, report):
    found = match(op, **facts)
    assert (found.report if found else None) == report
    assert found is None or found.report or found.upstream == "pytorch/xla#7588"


def test_a_fact_not_given_fits_no_entry_that_asks_for_it():
    assert match("softplus", kind="nan-inf") is None  # no dtype
    assert match("softplus", dtypes=("float16",)) is None  # no kind
    assert match("nn.functional.elu", kind="value") is None  # forward or gradient unknown
    assert match("sum", kind="value") is None  # its dim unknown


def test_a_sharding_bug_fits_only_a_sharded_divergence_and_a_plain_one_only_the_others():
    """--mesh judges a sharded result against itself unsharded: a plain bug shows on both."""
    conv = {"kind": "value"}
    assert match("nn.functional.conv2d", sharded=True, **conv).report == (
        "spmd_conv_spatial_partial_replication.md"
    )
    assert match("nn.functional.conv2d", **conv) is None  # unsharded: not the SPMD bug
    assert match("softplus", dtypes=("float16",), kind="nan-inf", grad=False, sharded=True) is None
    assert match("softplus", dtypes=("float16",), kind="nan-inf", grad=False) is not None


def entry(title: str, **fields) -> Known:
    return Known(title, report=f"{title}.md", **fields)


def test_detail_then_variant_then_op_then_file_order():
    entries = [
        entry("op", ops=("norm",), kinds=("error",)),
        entry("variant", ops=("norm (nuc)",), kinds=("error",)),
        entry("message", detail=("boom",)),
        entry("op again", ops=("norm",)),
    ]
    assert match("norm", kind="error", known=entries).title == "op"
    assert match("norm", variant="nuc", kind="error", known=entries).title == "variant"
    assert match("norm", variant="nuc", kind="error", detail="a boom", known=entries).title == (
        "message"
    )
    assert match("norm", variant="nuc", kind="value", known=entries).title == "op again"
    assert match("abs", kind="error", known=entries) is None


def test_the_lines_it_gives():
    issue = match("logsumexp", kind="error", detail="but tensor has no dimensions")
    assert issue.line() == (
        "Known: a dim argument of a 0-d tensor is out of range (Scalar tensor dimension) "
        "(pytorch/xla#1958, open)"
    )
    assert issue.comment("logsumexp of a 0-d tensor").startswith(
        "Still seen with torch_xla (logsumexp of a 0-d tensor): a dim argument"
    )
    report = match("lerp", dtypes=("float32",), kind="value", grad=False)
    line = "Known: torch.lerp(start, end, 1.0) is not end (0 for start=1e8, end=1) "
    assert report.comment() == report.line() == line + "(docs/examples/lerp_weight_one.md)"
    both = match("layer_norm", dtypes=("float16",), kind="value", grad=False)
    assert both.where == "docs/examples/fp16_layer_norm_3658.md / pytorch/xla#3658, open"


MINE = """\
[[bug]]
upstream = "pytorch/xla#9999"
title = "my softplus"
ops = ["softplus"]
condition = "always"
"""


def test_a_users_file_comes_first(tmp_path, monkeypatch):
    (tmp_path / "mine.toml").write_text(MINE)
    monkeypatch.setenv(known.ENV, str(tmp_path / "mine.toml"))
    found = match("softplus", dtypes=("float16",), kind="nan-inf")
    assert (found.title, found.state, found.source) == ("my softplus", "unknown",
                                                        f"{tmp_path / 'mine.toml'}:1")  # fmt: skip
    assert match("lerp", dtypes=("float32",), kind="value", grad=False).report  # still there


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (MINE + "dtypes = float16\n", 6, "not valid TOML"),
        (MINE.replace("ops = ", "op = "), 4, "unknown field 'op'"),
        (MINE + 'kind = ["nan"]\n', 6, "kind 'nan' is not one of value, nan-inf"),
        (MINE + "\n[[bug]]\ntitle = 'x'\nops = ['a']\n", 7, "names neither a report nor"),
        (MINE.replace("#9999", " 9999"), 2, "is not owner/repo#N"),
        (MINE + "grad = 1\n", 6, "grad must be true or false"),
        ("[[bug]]\nreport = 'r.md'\ntitle = 't'\n", 1, "an entry without ops must give a detail"),
        ("bugs = []\n", 1, "unknown key 'bugs'"),
    ],
)
def test_a_bad_file_is_one_error_at_its_line(tmp_path, text, line, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ReprokitError) as caught:
        load([path])
    assert (caught.value.path, caught.value.line) == (path, line)
    assert message in caught.value.message
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert "docs/known.md" in str(caught.value)


def test_a_missing_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(ReprokitError, match="cannot read the known-bugs file"):
        load([tmp_path / "absent.toml"])


def test_the_module_needs_no_torch():
    code = "import sys; sys.modules['torch'] = None; from reprokit.infra.known import match; "
    code += "print(match('softplus', dtypes=('float16',), kind='value').report)"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip() == "fp16_softplus_overflow.md", ran.stderr
