"""Named models: `reprokit capture ZOO:MODEL` builds one model of each zoo (random weights,
tiny configuration, inputs of its family) and captures it; a zoo that is not installed, an
unknown name and a shape of the wrong family are refused in one line.

Each capture costs seconds (building the model, torch.export): the small ones are used, at
32 px. The Hugging Face model in its default form (a ModelOutput) runs in its stages only
with outputs flattened at capture (issue 26, the pytree half).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from reprokit.errors import ReprokitError
from reprokit.tools.capture import zoo

ROOT = Path(__file__).parents[2]


def inputs_of(pt2: Path) -> list[dict]:
    """The leaves inputs.json describes (shape, dtype), in the program's order."""
    with zipfile.ZipFile(pt2) as archive:
        name = next(n for n in archive.namelist() if n.endswith("extra/inputs.json"))
        return json.loads(archive.read(name))["leaves"]


@pytest.mark.parametrize(
    ("spec", "options", "case", "leaves"),
    [
        ("torchvision:squeezenet1_1", ["--shape", "1,3,32,32"], "squeezenet1_1",
         [{"shape": [1, 3, 32, 32], "dtype": "float32"}]),
        ("timm:test_convnext", ["--shape", "1x3x32x32"], "test_convnext",
         [{"shape": [1, 3, 32, 32], "dtype": "float32"}]),
        ("hf:LlamaForCausalLM", ["--config", "num_hidden_layers=1"], "LlamaForCausalLM",
         [{"shape": [1, 16], "dtype": "int64"}, {"shape": [1, 16], "dtype": "int64"}]),
    ],
)  # fmt: skip
def test_a_named_model_of_each_zoo_is_captured_with_inputs_of_its_family(
    cli, tmp_path, spec, options, case, leaves
):
    done = cli("capture", spec, *options, "-o", tmp_path)
    assert done.exit_code == 0, done.output
    written = tomllib.loads((tmp_path / f"{case}.toml").read_text())
    assert written["params"] == {"program": f"{case}.pt2"}
    assert written["case"]["template"] == "exported_program"
    assert inputs_of(tmp_path / f"{case}.pt2") == leaves  # images; token ids and their mask


def test_hf_tiny_configuration_uses_each_configurations_own_names():
    import transformers

    gpt2 = zoo._tiny_config(transformers.GPT2Config, {"n_layer": 1})
    assert (gpt2.n_embd, gpt2.n_head, gpt2.n_layer, gpt2.vocab_size) == (32, 2, 1, 256)
    assert gpt2.use_cache is False  # a KV cache is no tensor output
    assert gpt2.eos_token_id < gpt2.vocab_size  # 50256 moved inside the tiny vocabulary
    t5 = zoo._tiny_config(transformers.T5Config, {})
    assert (t5.d_model, t5.num_layers, t5.num_heads) == (32, 2, 2)


def test_hf_tiny_sizes_per_stage_keep_the_stages():
    """Swin holds num_heads per stage: a list of the tiny size, not an int its validation
    refuses (bench/fileable.py's hf:swin was refused with a StrictDataclassFieldValidationError,
    reprokit's own failure)."""
    import transformers

    swin = zoo._tiny_config(transformers.SwinConfig, {})
    assert tuple(swin.num_heads) == (2, 2, 2, 2)


def test_hf_model_type_names_its_model_and_an_encoder_decoder_gets_decoder_ids():
    module, args, kwargs = zoo.build(zoo.parse("hf:t5", shape=(2, 8)))
    assert type(module).__name__ == "T5Model" and args == ()
    assert {k: tuple(v.shape) for k, v in kwargs.items()} == {
        "input_ids": (2, 8), "attention_mask": (2, 8), "decoder_input_ids": (2, 4),
    }  # fmt: skip
    assert int(kwargs["input_ids"].max()) < module.config.vocab_size


@pytest.mark.parametrize(
    ("spec", "shape", "said"),
    [
        ("torchvision:resnet_nine", None, "torchvision has no model 'resnet_nine'"),
        ("hf:NoSuchModel", None, "transformers has no model class or model type"),
        ("timm:no_such_net", None, "timm has no model 'no_such_net'"),
        ("torchvision:squeezenet1_1", (1, 16), "is not an image batch"),
    ],
)
def test_unknown_models_and_shapes_of_another_family_are_refused(spec, shape, said):
    with pytest.raises(ReprokitError, match=said):
        zoo.build(zoo.parse(spec, shape=shape))


def test_a_missing_zoo_package_is_refused_with_the_extra_to_install(tmp_path):
    """timm made unimportable in a fresh interpreter, as it is where it is not installed."""
    blocked = "import sys; sys.modules['timm'] = None; from reprokit.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", blocked, "capture", "timm:convnext_atto", "-o", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "timm models need the package timm, which is not installed" in done.stderr
    assert "pip install 'reprokit[zoo]'" in done.stderr and "Traceback" not in done.stderr
    assert not list(tmp_path.iterdir())


def test_hf_model_in_its_default_form_is_captured_and_judged(cli, tmp_path):
    """A ModelOutput, as Hugging Face models return by default: captured, then every stage
    runs in a script that imports only torch (needs the outputs flattened at capture)."""
    done = cli("capture", "hf:LlamaForCausalLM", "--config", "num_hidden_layers=1",
               "-o", tmp_path / "cases")  # fmt: skip
    assert done.exit_code == 0, done.output
    ran = cli("run", tmp_path / "cases" / "LlamaForCausalLM.toml", "-o", tmp_path / "run")
    assert ran.exit_code == 0, ran.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    (variant,) = summary["variants"]
    assert variant["outcome"] == "match"
    assert any(c["tensor"].startswith("output") for c in variant["comparisons"])
