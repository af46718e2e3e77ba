"""`reprokit sweep`: three small models x two dtypes captured and run into one run folder, one
table in the console, report.md and report.html, each model's report a click away; with
--minimize, the two models that share one divergence (a bool cumsum, which XLA returns as
bool) give one finding with their four variants as witnesses.

One sweep (tests/data/zoo/models.py, and a factory that does not exist: a refusal) runs once
for the module, with --minimize: every test reads its run folder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reprokit.cli import app
from reprokit.errors import ReprokitError
from reprokit.tools.model_sweep import OwnModel, load_models

MODELS = Path(__file__).parents[1] / "data" / "zoo" / "models.py"
NAMES = ("mlp", "masked_positions", "masked_embedding")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The sweep's run folder and what the command printed."""
    run_dir = tmp_path_factory.mktemp("sweep") / "run"
    listed = run_dir.parent / "models.toml"
    listed.write_text(f'[[model]]\nname = "{MODELS}:masked_embedding"\n')
    with pytest.MonkeyPatch.context() as patch:  # a results cache of its own
        patch.setenv("REPROKIT_CACHE", str(run_dir.parent / "cache"))
        done = CliRunner().invoke(app, [
            "sweep", f"{MODELS}:mlp", f"{MODELS}:masked_positions", str(listed),
            f"{MODELS}:not_there", "--dtypes", "float32,bfloat16", "--minimize",
            "--budget", "8", "-n", "2", "-o", str(run_dir),
        ])  # fmt: skip
    return run_dir, done


@pytest.mark.slow
def test_every_model_in_every_dtype_is_one_variant_of_one_run(swept):
    run_dir, done = swept
    assert done.exit_code == 1, done.output  # mismatches, and a refused model
    summary = json.loads((run_dir / "summary.json").read_text())
    outcomes = {v["label"]: v["outcome"] for v in summary["variants"]}
    assert outcomes == {
        f"{name}[dtype={dtype}]": "match" if name == "mlp" else "mismatch"
        for name in NAMES for dtype in ("float32", "bfloat16")
    }  # fmt: skip
    sweep = json.loads((run_dir / "sweep.json").read_text())
    assert [m["case"] for m in sweep["models"]] == [*NAMES, None]
    assert "defines no function 'not_there'" in sweep["models"][3]["refused"]


@pytest.mark.slow
def test_one_table_in_the_console_and_both_reports_with_each_models_report_linked(swept):
    run_dir, done = swept
    assert "Sweep: 4 models x 2 dtypes" in done.output
    assert re.search(r"masked_positions.*bfloat16.*mismatch.*node\.0000\.cumsum", done.output)
    body = (run_dir / "report.md").read_text()
    row = ("| `models.py:masked_embedding` | bfloat16 | **mismatch** | `node.0000.cumsum` | "
           "`aten.cumsum.default` |  | [report](models/masked_embedding/report.md) |")  # fmt: skip
    assert row in body
    assert "| `models.py:mlp` | float32 | match |" in body
    assert "| `models.py:not_there` | - | **refused** |" in body
    page = (run_dir / "report.html").read_text()
    assert "<a href='models/masked_embedding/report.html'>report</a>" in page
    own = (run_dir / "models" / "masked_embedding" / "report.md").read_text()
    assert "`masked_embedding[dtype=float32]`" in own and "masked_positions[" not in own
    assert "Sweep:" not in own  # its own variants only
    assert (run_dir / "models" / "mlp" / "report.html").is_file()


@pytest.mark.slow
def test_minimize_gives_one_finding_whose_witnesses_are_both_models(swept):
    run_dir, done = swept
    (finding,) = json.loads((run_dir / "sweep.json").read_text())["findings"]
    assert (finding["op"], finding["dtypes"], finding["kind"]) == (
        "aten.cumsum.default", "bool vs int64", "dtype")  # fmt: skip
    assert sorted(finding["witnesses"]) == sorted(
        f"{n}[dtype={d}]" for n in NAMES[1:] for d in ("float32", "bfloat16"))  # fmt: skip
    repro = run_dir / finding["minimized"] / "repro.py"
    assert "torch.ops.aten.cumsum.default(mask, -1)" in repro.read_text()  # the short repro
    assert finding["operations"][1] < finding["operations"][0]
    assert "Findings: 1 divergence, each with its witnesses" in done.output
    assert f"`{finding['minimized']}/repro.py`" in (run_dir / "report.md").read_text()


def test_a_list_names_models_beside_it_with_their_configuration(tmp_path):
    (tmp_path / "list.toml").write_text(
        'dtypes = ["bfloat16"]\n[[model]]\nname = "hf:gpt2"\nconfig = {n_layer = 1}\n'
        'shape = [1, 8]\n[[model]]\nname = "mine.py:make"\n'
    )
    models, dtypes = load_models([str(tmp_path / "list.toml"), "timm:test_vit"])
    assert dtypes == ("bfloat16",)
    assert [(getattr(m, "zoo", None), m.config, m.shape) for m in models] == [
        ("hf", {"n_layer": 1}, (1, 8)), (None, {}, None), ("timm", {}, None)]  # fmt: skip
    assert models[1] == OwnModel(f"{tmp_path}/mine.py:make")  # relative to the list


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[[model]]\nname = "hf:gpt2"\nlayers = 2\n', "unknown keys in \\[\\[model\\]\\]: layers"),
        ("[[model]]\nconfig = {}\n", "need a name"),
        ('[[model]]\nname = "mine.py:make"\nshape = [1, 2]\n', "config and shape are a named"),
        ("[[model\n", "not TOML"),
    ],
)
def test_a_bad_list_is_refused_naming_its_file(tmp_path, text, said):
    (tmp_path / "list.toml").write_text(text)
    with pytest.raises(ReprokitError, match=said) as raised:
        load_models([str(tmp_path / "list.toml")])
    assert raised.value.path == tmp_path / "list.toml"


def _variant(note: str = "", nan: tuple[int, int] = (0, 0), dtype: str = "bool"):
    from reprokit.records import Comparison, Outcome, StageResult, Status, VariantResult

    compared = Comparison("node.0003.cumsum", "cpu", "xla", (6,), dtype, 0.0, 0.0, 0, 6, False,
                          note=note, nan=nan)  # fmt: skip
    xla = StageResult("xla", "xla", Status.OK,
                      described={"node.0003.cumsum": {"op": "aten.cumsum.default"}})  # fmt: skip
    return VariantResult("m", "m[dtype=bfloat16]", {"dtype": "bfloat16"}, Outcome.MISMATCH,
                         Outcome.MATCH, 1.0, stages=(xla,), comparisons=(compared,),
                         first_divergence={"xla": "node.0003.cumsum"})  # fmt: skip


@pytest.mark.parametrize(
    ("note", "nan", "dtype", "key"),
    [
        ("dtype torch.bool vs torch.int64", (0, 0), "bool",
         ("aten.cumsum.default", "bool vs int64", "dtype")),
        ("values equal; dtype int32 on XLA, int64 on CPU", (0, 0), "int32",
         ("aten.cumsum.default", "int32 vs int64", "dtype")),
        ("", (0, 2), "bfloat16", ("aten.cumsum.default", "bfloat16", "NaN")),
        ("", (0, 0), "bfloat16", ("aten.cumsum.default", "bfloat16", "values")),
    ],
)  # fmt: skip
def test_a_divergence_is_known_by_its_op_the_tensors_dtypes_and_what_differs(note, nan, dtype, key):
    from reprokit.reports.sweep import divergence

    found = divergence(_variant(note, nan, dtype))
    assert found is not None and found.key == key and found.tensor == "node.0003.cumsum"


def test_a_capture_that_kills_its_process_is_refused_and_the_others_go_on(tmp_path):
    """-n 2: the dying capture is named (each capture left then runs alone), not waited for."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REPROKIT_CACHE", str(tmp_path / "cache"))
        done = CliRunner().invoke(app, [
            "sweep", f"{MODELS}:dies", f"{MODELS}:mlp", "--dtypes", "float32", "-n", "2",
            "-o", str(tmp_path / "run"),
        ])  # fmt: skip
    assert done.exit_code == 1, done.output  # a model refused
    assert re.search(r"refused \S*:dies: its capture's process died", done.output), done.output
    assert re.search(r"captured \S*:mlp in", done.output), done.output
