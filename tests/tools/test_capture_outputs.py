"""Capture, continued: outputs of any tree named and loadable where only torch is imported,
casts that keep what a program means, dtype-only differences, a library's line, refusals.

The models are tests/data/capture/models.py. One run (`reprokit run`) judges a tiny Hugging Face
Llama in its default form and a bool cumsum inside a library, shared by the tests below it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from test_capture import import_script, render_case

from reprokit.errors import ReprokitError
from reprokit.generate.cases import load_case
from reprokit.generate.variants import variants
from reprokit.tools.capture import command, load_factory

MODELS = Path(__file__).parents[1] / "data" / "capture" / "models.py"
SHIPPED = Path(__file__).parents[2] / "cases"


def test_a_dataclass_output_is_named_and_runs_where_only_torch_is_imported(tmp_path):
    """A ModelOutput in miniature: its leaves are named by their path, and a stage of the
    script, a fresh process that never imports models.py, loads and runs it."""
    case = command(f"{MODELS}:structured", out_dir=tmp_path / "case")
    with zipfile.ZipFile(case.with_suffix(".pt2")) as archive:
        names = json.loads(archive.read("structured/extra/outputs.json"))["names"]
    assert names == ["output.logits", "output.hidden_states.0", "output.hidden_states.1"]
    script = render_case(case, tmp_path / "run")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-I", script.name, "--stage", "cpu", "--workdir", "work"],
        cwd=script.parent, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    saved = torch.load(script.parent / "work" / "cpu" / "tensors.pt", weights_only=True)
    assert list(saved)[-3:] == names
    model, (x,), _ = load_factory(f"{MODELS}:structured")
    expected = model(x)
    assert torch.equal(saved["output.logits"], expected.logits)
    assert torch.equal(saved["output.hidden_states.1"], expected.hidden_states[1])


def test_a_capture_without_names_keeps_numbered_outputs(tmp_path):
    """Archives captured before outputs were named (the shipped bf16 CNN) run as they did."""
    with zipfile.ZipFile(SHIPPED / "captured_cnn_bf16.pt2") as archive:
        assert not [n for n in archive.namelist() if n.endswith("outputs.json")]
    script = import_script(render_case(SHIPPED / "captured_cnn_bf16.toml", tmp_path / "run"))
    _, _, names = script.prepare(torch.device("cpu"), None, every=True)
    assert names[-1] == "output.0" and not any(n.startswith("output.") for n in names[:-1])


def test_the_load_back_check_runs_in_a_fresh_interpreter(tmp_path):
    """A custom operator the model's file registers loads in the capturing process, not where
    the script runs: refused at capture, with the operator named, nothing written."""
    with pytest.raises(ReprokitError) as error:
        command(f"{MODELS}:custom_op", out_dir=tmp_path)
    message = error.value.message
    assert message.startswith("the exported program does not load back in a fresh interpreter")
    assert "reprokit_test.twice" in message and "\n" not in message
    assert not list(tmp_path.iterdir())


def test_a_kv_cache_in_the_output_is_refused_with_use_cache_false(tmp_path):
    pytest.importorskip("transformers")
    with pytest.raises(ReprokitError) as error:
        command(f"{MODELS}:gpt2_with_cache", out_dir=tmp_path)
    assert "holds a KV cache (transformers.cache_utils.DynamicCache)" in error.value.message
    assert "use_cache=False" in error.value.hint and "\n" not in error.value.message


def test_a_refusal_inside_a_library_names_the_users_line_and_the_librarys(tmp_path, capfd):
    pytest.importorskip("torchvision")
    with pytest.raises(ReprokitError) as error:
        command(f"{MODELS}:nms_of_kept_boxes", out_dir=tmp_path)
    assert Path(error.value.path).resolve() == MODELS  # the user's line, where the call is
    message = error.value.message
    assert "(`return torchvision.ops.batched_nms(kept, kept_scores, classes, 0.5)`)" in message
    assert ", inside torchvision/ops/boxes.py:" in message and "\n" not in message
    printed = capfd.readouterr()
    assert "def forward" not in printed.out + printed.err  # torch's graph dump, not shown


def test_a_bf16_models_own_upcasts_survive_a_dtype_cast(tmp_path):
    """`h.float()` in a bf16 model stays float32 under --set dtype=bfloat16 or float16 (the
    program's own dtype is what changes); in the float64 reference everything is float64."""
    case = command(f"{MODELS}:bf16_upcast", out_dir=tmp_path / "case")
    script = import_script(render_case(case, tmp_path / "run", dtype="bfloat16"))
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        tensors = script.run(*script.prepare(torch.device("cpu"), dtype, every=True))
        powers = [t for name, t in tensors.items() if name.endswith(".pow")]
        assert powers and powers[0].dtype == (torch.float64 if dtype == torch.float64 else
                                              torch.float32), dtype  # fmt: skip
        assert tensors["output.0"].dtype == dtype


def test_export_assertions_survive_the_float64_cast(tmp_path):
    """`torch.ones(n).to(x.dtype)`: torch.export keeps the no-op cast as a dtype assertion and
    the mask carries no dtype; the float64 reference makes the mask float64 and still runs
    (was: "Tensor dtype mismatch! Expected: Double, Got: float", DeBERTa-v2's ref_fp64)."""
    case = command(f"{MODELS}:default_dtype_mask", out_dir=tmp_path / "case")
    program = torch.export.load(case.with_suffix(".pt2"))
    assertion = torch.ops.aten._assert_tensor_metadata.default
    assert any(n.target is assertion for n in program.graph.nodes)
    script = import_script(render_case(case, tmp_path / "run"))
    tensors = script.run(*script.prepare(torch.device("cpu"), torch.float64, every=True))
    assert {t.dtype for t in tensors.values()} == {torch.float64}


MASKLIB = '''"""A library's masking code, in a folder named site-packages as installed ones are."""


def positions(mask):
    return mask.cumsum(-1)
'''


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """A tiny Llama in its default form (a ModelOutput) and a bool cumsum inside a library,
    captured, run in one run folder and reported: (summary, report.md)."""
    pytest.importorskip("transformers")
    import reprokit

    root = tmp_path_factory.mktemp("judged")
    (root / "site-packages").mkdir()
    (root / "site-packages" / "masklib.py").write_text(MASKLIB)
    sys.path.insert(0, str(root / "site-packages"))
    try:
        cases = [command(f"{MODELS}:{name}", out_dir=root / "cases")
                 for name in ("llama", "cumsum_in_a_library")]  # fmt: skip
    finally:
        sys.path.remove(str(root / "site-packages"))
    # the cumsum's dtype differs, its values after it agree: seen where every op is recorded
    sets = {case: {"nodes": "all"} if "cumsum" in case.name else {} for case in cases}
    found = [v for case in cases for v in variants(load_case(case), sets[case])]
    summary = reprokit.run(found, run_dir=root / "run", options=reprokit.Options(jobs=2))
    reprokit.report(root / "run")
    return {v.case: v for v in summary.variants}, (root / "run" / "report.md").read_text()


def test_a_hugging_face_model_in_its_default_form_is_captured_and_judged(judged):
    results, _ = judged
    llama = results["llama"]
    assert llama.outcome.value == "match", llama.reason
    assert llama.outputs_only  # judged on the program as captured: nothing recorded on XLA
    (logits,) = [c for c in llama.comparisons
                 if c.target == "xla_faithful" and c.tensor == "output.logits"]  # fmt: skip
    assert logits.method == "fp64" and logits.shape == (1, 8, 64) and logits.allclose


def test_a_dtype_only_difference_is_named_and_its_library_line_shown(judged):
    """XLA's cumsum of a bool tensor is bool (CPU: int64): flagged, in words, with the user's
    line and the line inside the library where the cumsum is."""
    results, report = judged
    cumsum = results["cumsum_in_a_library"]
    assert cumsum.outcome.value == "mismatch"
    first = cumsum.first_divergence["xla"]
    assert first.endswith(".cumsum")
    found = next(c for c in cumsum.comparisons if c.target == "xla" and c.tensor == first)
    assert found.note == "values equal; dtype bool on xla, int64 on cpu" and found.max_abs == 0
    outputs = [c for c in cumsum.comparisons if c.target == "xla" and c.tensor == "output.0"]
    assert outputs[0].allclose  # the values that follow agree
    assert (
        "`aten.cumsum.default` on XLA returns bool where CPU returns int64 (the values equal)"
        in (report)
    )
    assert "models.py:" in report and "positions = masklib.positions(mask)" in report
    assert "site-packages/masklib.py:5: return mask.cumsum(-1)" in report
