"""Capture: a user's model exported, written as a case, rendered and run for real on XLA:CPU.

The models are tests/data/capture/models.py. Each capture and each script run costs seconds
(torch.export, three stage processes), so the two models are captured once per worker and
every test renders and runs into its own tmp folder.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import torch

from reprokit.errors import ReprokitError, ReprokitWarning
from reprokit.generate.cases import load_case
from reprokit.generate.render import render
from reprokit.generate.variants import variants
from reprokit.tools.capture import command, load_factory
from reprokit.tools.capture.export import export
from reprokit.tools.capture.program_file import check_program

MODELS = Path(__file__).parents[1] / "data" / "capture" / "models.py"


def render_case(case: Path, out: Path, **params) -> Path:
    """The case's script in ``out`` with its program beside it, as the runner lays them out."""
    variant = variants(load_case(case), params)[0]
    out.mkdir(parents=True)
    variant.copy_files(out)
    (out / "repro.py").write_text(render(variant), encoding="utf-8")
    return out / "repro.py"


def run_script(script: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PJRT_DEVICE": "CPU", "HOME": str(script.parent)}
    return subprocess.run(
        [sys.executable, script.name], cwd=script.parent, env=env, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip


def import_script(script: Path):
    """The rendered script as a module, to call its functions in this process."""
    spec = importlib.util.spec_from_file_location(f"repro_{abs(hash(script))}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_differing(stdout: str) -> str | None:
    """The first tensor of the xla stage that the script's table shows with mismatched
    elements (rows: stage, tensor, max abs, max rel, mismatched/total, note)."""
    for line in stdout.splitlines():
        cells = line.split()
        if len(cells) >= 5 and cells[0] == "xla" and re.fullmatch(r"[1-9]\d*/\d+", cells[4]):
            return cells[1]
    return None


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> dict[str, Path]:
    """The CNN and the transformer captured once: name -> case file."""
    out = tmp_path_factory.mktemp("captured")
    return {name: command(f"{MODELS}:{name}", out_dir=out) for name in ("cnn", "transformer")}


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_captured_model_runs_and_every_node_agrees(captured, tmp_path, model):
    case = captured[model]
    spec = tomllib.loads(case.read_text())
    assert spec["case"]["template"] == "exported_program"
    assert spec["params"] == {"program": f"{model}.pt2"}
    assert spec["compare"] == {"method": "fp64"} and spec["expect"] == {"outcome": "match"}
    script = render_case(case, tmp_path / "run", dtype="float32", nodes="all")
    done = run_script(script)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    saved = list(torch.load(tmp_path / "run" / "repro_work" / "xla" / "tensors.pt"))
    assert re.fullmatch(r"node\.0000\.\w+", saved[0]) and saved[-1] == "output.0"
    assert [n for n in saved if n.startswith("node.")] == sorted(n for n in saved if "node." in n)
    lint = subprocess.run(  # the script passes the project's lint rules
        [sys.executable, "-m", "ruff", "check", "--config", "pyproject.toml", str(script)],
        cwd=Path(__file__).parents[2], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert lint.returncode == 0, lint.stdout


def test_run_alone_a_default_script_records_every_operation_but_in_xla_faithful(captured, tmp_path):
    """`python repro.py` passes --localise to every stage (nodes = auto): the CPU stages and the
    xla stage record every operation, xla_faithful stays the program as captured."""
    script = render_case(captured["cnn"], tmp_path / "run", dtype="float32")
    done = run_script(script)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    work = tmp_path / "run" / "repro_work"
    saved = {stage: list(torch.load(work / stage / "tensors.pt")) for stage in ("cpu", "xla")}
    assert saved["cpu"] == saved["xla"] and saved["cpu"][0].startswith("node.")
    assert list(torch.load(work / "xla_faithful" / "tensors.pt")) == ["output.0"]


def test_a_small_programs_cpu_stages_record_every_operation_at_once(captured, tmp_path):
    """With nodes = auto, a CPU stage of a program of few results (few_results) records every
    operation on its first run and says so (result.json "localised": true): no second run
    where the outputs differ. XLA's faithful stage stays the program as captured."""
    script = render_case(captured["cnn"], tmp_path / "run", dtype="float32")
    work = tmp_path / "work"
    for stage in ("ref_fp64", "xla_faithful"):
        done = subprocess.run(
            [sys.executable, script.name, "--stage", stage, "--workdir", str(work)],
            cwd=script.parent, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    ref = json.loads((work / "ref_fp64" / "result.json").read_text())
    faithful = json.loads((work / "xla_faithful" / "result.json").read_text())
    assert ref["localised"] is True and ref["tensors"]  # every operation, described
    assert next(iter(torch.load(work / "ref_fp64" / "tensors.pt"))).startswith("node.")
    assert faithful["localised"] is False
    assert list(torch.load(work / "xla_faithful" / "tensors.pt")) == ["output.0"]


def test_perturbed_node_is_the_first_to_differ(captured, tmp_path):
    plain = import_script(render_case(captured["transformer"], tmp_path / "plain"))
    _, _, names = plain.prepare(torch.device("cpu"), None, every=True)
    middle = [n for n in names if n.endswith(".layer_norm")][1]  # after the first layer
    nodes = plain.DESCRIBED
    assert nodes[middle]["module"] == "layers.0.norm2" and nodes[middle]["shape"] == [2, 6, 16]
    assert nodes[middle]["op"] == "aten.layer_norm.default"
    script = render_case(captured["transformer"], tmp_path / "run", perturb_node=middle)
    done = run_script(script)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert first_differing(done.stdout) == middle
    assert f"xla: the first to differ is {middle}" in done.stdout


def test_nodes_are_described_with_their_module_and_the_users_line(captured, tmp_path):
    script = import_script(render_case(captured["cnn"], tmp_path / "run"))
    _, _, names = script.prepare(torch.device("cpu"), torch.float64, every=True)
    assert names[-1] == "output.0" and all(n.startswith("node.") for n in names[:-1])
    nodes = script.DESCRIBED
    assert list(nodes) == names[:-1]
    conv = nodes[names[0]]
    mean = next(info for name, info in nodes.items() if name.endswith(".mean"))
    assert conv["module"] == "features.0" and conv["op"] == "aten.conv2d.default"
    assert conv["shape"] == [4, 8, 16, 16]  # the user's line, not torch's conv.py below it
    assert re.search(r"/models\.py:\d+: x = self\.features\(x\)$", conv["source"])
    assert mean["module"] == "" and mean["shape"] == [4, 8]
    assert re.search(
        r"models\.py:\d+: return self\.head\(x\.mean\(dim=\(2, 3\)\)\)$", mean["source"]
    )


def test_the_users_files_are_recorded_without_the_machines_folders(tmp_path, monkeypatch):
    # a model file outside the working folder and the home folder is named alone; one under
    # the home folder from ~; the program keeps no absolute path of either
    elsewhere, home = tmp_path / "nrmx", tmp_path / "home"
    for folder in (elsewhere, home / "project"):
        folder.mkdir(parents=True)
        shutil.copy(MODELS, folder / "models.py")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(Path(__file__).parent)
    for folder, shown in ((elsewhere, "models.py"), (home / "project", "~/project/models.py")):
        module, args, kwargs = load_factory(f"{folder / 'models.py'}:cnn")
        traces = [n.meta.get("stack_trace") or "" for n in export(module, args, kwargs).graph.nodes]
        assert any(f'File "{shown}", line' in trace for trace in traces)
        assert not any(str(tmp_path) in trace for trace in traces)


def test_random_inputs_leave_no_input_values(tmp_path):
    _, args, _ = load_factory(f"{MODELS}:cnn")
    kept = command(f"{MODELS}:cnn", name="kept", out_dir=tmp_path / "kept")
    record = json.loads(zipfile.ZipFile(kept.with_suffix(".pt2")).read("kept/extra/inputs.json"))
    values = torch.load(io.BytesIO(base64.b64decode(record["data"])), weights_only=True)
    assert torch.equal(values[0], args[0])  # captured inputs are kept, as data
    case = command(f"{MODELS}:cnn", name="rand", out_dir=tmp_path / "rand", random_inputs=True)
    record = json.loads(zipfile.ZipFile(case.with_suffix(".pt2")).read("rand/extra/inputs.json"))
    assert record == {"leaves": [{"shape": [4, 3, 16, 16], "dtype": "float32"}], "seed": 0}
    image = args[0].numpy().tobytes()
    for path in (tmp_path / "rand").rglob("*"):  # the pickled example inputs are gone too
        assert image[:64] not in path.read_bytes(), path
    with zipfile.ZipFile(case.with_suffix(".pt2")) as archive:
        assert archive.read("rand/data/sample_inputs/model.pt") == b""
    script = import_script(render_case(case, tmp_path / "run"))
    _, inputs = script.load_program()
    assert inputs[0].shape == args[0].shape and not torch.equal(inputs[0], args[0])


@pytest.mark.parametrize("kind", ["xser", "dcp"])
def test_state_dict_from_checkpoint_is_the_one_captured(tmp_path, kind, monkeypatch):
    model = load_factory(f"{MODELS}:cnn")[0]
    torch.manual_seed(1)
    trained = {
        k: v + torch.randn_like(v.float()).to(v.dtype) for k, v in model.state_dict().items()
    }
    if kind == "xser":
        monkeypatch.setenv("PJRT_DEVICE", "CPU")
        import torch_xla.utils.serialization as xser

        xser.save(trained, str(tmp_path / "model.xser"))
        checkpoint = tmp_path / "model.xser"
    else:
        import torch.distributed.checkpoint as dcp

        dcp.save(trained, checkpoint_id=str(tmp_path / "dcp"))
        checkpoint = tmp_path / "dcp"
    case = command(f"{MODELS}:cnn", out_dir=tmp_path / "case", state_dict=checkpoint)
    program = torch.export.load(case.with_suffix(".pt2"))
    assert program.state_dict.keys() == trained.keys()
    for name, tensor in program.state_dict.items():
        assert torch.equal(tensor, trained[name]), name


def test_state_dict_that_does_not_fit_is_refused(tmp_path):
    model = load_factory(f"{MODELS}:cnn")[0]
    state = dict(model.state_dict())
    state["extra.weight"] = state.pop("head.weight")
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(ReprokitError) as error:
        command(f"{MODELS}:cnn", out_dir=tmp_path / "out", state_dict=tmp_path / "bad.pt")
    assert "1 missing, 1 unexpected" in str(error.value)
    assert "head.weight" in str(error.value) and "extra.weight" in str(error.value)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("nothing.py:cnn", "no such file"),
        (f"{MODELS}", "is not FILE.py:FUNCTION"),
        (f"{MODELS}:absent", "defines no function 'absent'"),
        (f"{MODELS}:not_a_model", "not_a_model() returned (str, tuple), not (module, args)"),
        (f"{MODELS}:no_args", "no_args() returned (Linear, Tensor)"),
        (f"{MODELS}:broken", "broken() raised: ValueError: the factory itself fails"),
    ],
)
def test_bad_factory_is_a_clear_error(tmp_path, spec, expected):
    with pytest.raises(ReprokitError) as error:
        command(spec, out_dir=tmp_path)
    assert expected in str(error.value)
    if spec.endswith(":broken"):
        assert error.value.line is not None and error.value.path == MODELS
    assert not list(tmp_path.iterdir())


def test_data_dependent_control_flow_is_refused_in_one_line_at_the_users_line(tmp_path, capfd):
    with pytest.raises(ReprokitError) as error:
        command(f"{MODELS}:data_dependent", out_dir=tmp_path)
    assert Path(error.value.path).resolve() == MODELS and error.value.line == 60
    message = error.value.message
    assert message.startswith("torch.export cannot capture Branchy: control flow depends on")
    assert "`if x.sum() > 0:`" in message and "\n" not in message
    assert "torch.where" in error.value.hint
    printed = capfd.readouterr()
    assert "def forward" not in printed.err + printed.out  # torch's partial graph, not shown
    assert "Unable to find user code" not in printed.err
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_a_shape_that_depends_on_values_is_refused_at_the_users_line(tmp_path):
    with pytest.raises(ReprokitError) as error:
        command(f"{MODELS}:value_dependent_shape", out_dir=tmp_path)
    assert Path(error.value.path).resolve() == MODELS and error.value.line == 72
    text = str(error.value)
    assert "depends on tensor values (`return x[x > 0] * 2`)" in text
    assert "sympy" not in text and ".pt2" not in text  # no jargon, no temporary path
    assert not list(tmp_path.iterdir())


def test_a_program_that_draws_random_numbers_is_warned_about(recwarn):
    model, args, kwargs = load_factory(f"{MODELS}:transformer")
    export(model, args, kwargs)  # dropout=0.0: nothing is drawn
    assert not [w for w in recwarn if w.category is ReprokitWarning]
    model.layers[1].dropout1.p = 0.1
    with pytest.warns(ReprokitWarning, match=r"draws random numbers \(aten\.dropout\.default\)"):
        export(model, args, kwargs)
    export(model.eval(), args, kwargs)  # eval: dropout draws nothing
    assert not [w for w in recwarn if w.category is ReprokitWarning]


def hostile(source: Path, target: Path, change) -> Path:
    """A copy of the archive ``source`` with ``change(name, data)`` applied to each member
    (returning None drops it, a list of pairs adds members)."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            for name, data in change(info.filename, src.read(info.filename)) or []:
                dst.writestr(name, data)
    return target


def test_hostile_programs_are_refused_by_reprokit_and_by_the_script(captured, tmp_path):
    import pickle

    source = captured["cnn"].with_suffix(".pt2")
    marker = tmp_path / "ran"
    evil = pickle.dumps(_Evil(marker))

    def sample_pickle(name, data):
        return [(name, evil if name.endswith("sample_inputs/model.pt") else data)]

    def compiled(name, data):
        return [(name, data)] + ([("cnn/data/aotinductor/model/x.so", b"\x7fELF")]
                                 if name.endswith("archive_version") else [])  # fmt: skip

    def guards(name, data):
        text = data.replace(b'"guards_code": []', b'"guards_code": ["__import__(\'os\')"]')
        return [(name, text if name.endswith("model.json") else data)]

    def expression(name, data):
        text = data.replace(b'"guards_code": []', b'"guards_code": [], "x": {"expr_str": "1"}')
        return [(name, text if name.endswith("model.json") else data)]

    def use_pickle(name, data):
        text = data.replace(b'"use_pickle": false', b'"use_pickle": true', 1)
        return [(name, text if name.endswith("weights_config.json") else data)]

    script = import_script(render_case(captured["cnn"], tmp_path / "run"))
    for change in (sample_pickle, compiled, guards, expression, use_pickle):
        bad = hostile(source, tmp_path / f"{change.__name__}.pt2", change)
        with pytest.raises(ReprokitError) as error:
            check_program(bad)
        assert "torch.export.save" in error.value.hint or "capture" in error.value.hint
        with pytest.raises(SystemExit, match="refused"):
            script.check_archive(bad)
    assert not marker.exists()
    (tmp_path / "text.pt2").write_text("not a zip")
    with pytest.raises(ReprokitError, match="not an exported program"):
        check_program(tmp_path / "text.pt2")
    check_program(source)  # a capture passes


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_run_and_report_name_the_first_diverging_operation(captured, tmp_path):
    """Through `reprokit run` and `reprokit report`: the perturbed layer_norm is named with
    its op, module and shape, and report.html plots the errors against float64."""
    import reprokit

    (variant,) = variants(
        load_case(captured["transformer"]), {"perturb_node": "node.0033.layer_norm"}
    )
    summary = reprokit.run([variant], run_dir=tmp_path / "run", options=reprokit.Options(jobs=2))
    (result,) = summary.variants
    assert result.outcome.value == "mismatch" and result.first_divergence == {
        "xla": "node.0033.layer_norm"
    }
    judged = [c for c in result.comparisons if c.target == "xla"]
    assert all(c.method == "fp64" and c.errors is not None for c in judged)
    assert all(c.allclose for c in judged[:33])  # every earlier operation agrees
    reprokit.report(tmp_path / "run")
    body = (tmp_path / "run" / "report.md").read_text()
    assert body.startswith("# float32 `aten.layer_norm.default` on XLA returns ")
    assert "`aten.layer_norm.default` of 2x6x16 and 16 and 16 (result 2x6x16) in" in body
    assert "`layers.0.norm1`" in body and "Against the same program run in float64" in body
    page = (tmp_path / "run" / "report.html").read_text()
    assert "node.0033.layer_norm is the first to differ" in page  # the whole detail
    plots = page.split("<h2>Error against float64, operation by operation</h2>")[1]
    assert plots.startswith("<figure><svg")


def test_a_run_folder_links_the_program_and_a_new_capture_leaves_it(tmp_path):
    """The run folder holds no second copy of the program: a hard link to the case's. A new
    capture under the same name replaces the case's file, so the run folder keeps what ran."""
    from reprokit.runner.options import Options
    from reprokit.runner.prepare import prepare

    case = command(f"{MODELS}:cnn", out_dir=tmp_path / "cases")
    program = case.with_suffix(".pt2")
    (variant,) = variants(load_case(case), {})
    ran = prepare(variant, tmp_path / "run", Options()).folder / program.name
    assert ran.samefile(program) and not ran.is_symlink()
    before = ran.read_bytes()
    command(f"{MODELS}:transformer", name="cnn", out_dir=tmp_path / "cases")
    assert not ran.samefile(program) and ran.read_bytes() == before != program.read_bytes()
    prepare(variant, tmp_path / "run", Options())  # run again: the new program, linked
    assert ran.samefile(program)


def test_render_puts_the_program_beside_the_script(cli, tmp_path):
    result = cli("render", "captured_cnn_bf16", "-o", tmp_path / "repro.py")
    assert result.exit_code == 0, result.output
    assert "and captured_cnn_bf16.pt2 beside it" in result.stderr
    shipped = Path(__file__).parents[2] / "cases" / "captured_cnn_bf16.pt2"
    assert (tmp_path / "captured_cnn_bf16.pt2").read_bytes() == shipped.read_bytes()
    check_program(tmp_path / "captured_cnn_bf16.pt2")


def test_render_into_the_cases_own_folder_leaves_its_program_as_it_is(cli, tmp_path):
    """The program is already where the script will look for it (was: SameFileError)."""
    shipped = Path(__file__).parents[2] / "cases"
    for name in ("captured_cnn_bf16.toml", "captured_cnn_bf16.pt2"):
        shutil.copyfile(shipped / name, tmp_path / name)
    result = cli("render", tmp_path / "captured_cnn_bf16.toml", "-o", tmp_path / "repro.py")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and (tmp_path / "repro.py").is_file()
    program = (tmp_path / "captured_cnn_bf16.pt2").read_bytes()
    assert program == (shipped / "captured_cnn_bf16.pt2").read_bytes()


ONE_GRAPH = """
import sys, torch, torch_xla
sys.argv = ["repro.py"]
script = __import__("repro")
graph, inputs, names = script.prepare(torch_xla.device(), None, every=True)
tensors = script.run(graph, inputs, names, sync=torch_xla.sync)
torch.save({k: v.cpu() for k, v in tensors.items()}, "one_graph.pt")
"""


def test_xla_computes_the_recorded_results_block_by_block_with_one_graphs_values(
    captured, tmp_path
):
    """The xla stage runs the program in segments, each written as it comes, so that it
    holds one segment's results and not every operation's. Cut at every part of a block
    (SEGMENT's first bound 0), the second layer's parts are the first's graphs again (cached
    compilations), and every recorded result is bitwise the one-graph run's, in its order."""
    script = render_case(captured["transformer"], tmp_path / "run")
    text = script.read_text()
    assert "\nSEGMENT = 16 << 20, 128 << 20" in text
    script.write_text(text.replace("\nSEGMENT = 16 << 20,", "\nSEGMENT = 0,"))
    env = {"PATH": "/usr/bin:/bin", "PJRT_DEVICE": "CPU", "HOME": str(tmp_path)}
    for args in (["repro.py", "--stage", "xla"], ["-c", ONE_GRAPH]):
        done = subprocess.run([sys.executable, *args], cwd=script.parent, env=env,
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    stage = tmp_path / "run" / "repro_work" / "xla"
    evidence = json.loads((stage / "result.json").read_text())["xla"]
    assert evidence["execute"]["count"] > 4 and evidence["cached"] > 0
    assert evidence["compile"]["count"] < evidence["execute"]["count"]
    streamed = torch.load(stage / "tensors.pt", weights_only=True)
    one_graph = torch.load(script.parent / "one_graph.pt", weights_only=True)
    assert list(streamed) == list(one_graph) and len(streamed) > 60
    assert all(torch.equal(streamed[k], one_graph[k]) for k in one_graph)
    assert sorted(p.name for p in stage.iterdir()) == ["result.json", "tensors.pt"]


TENSORS = {
    "node.0000.add": torch.randn(3, 4),
    "node.0001.flag": torch.tensor(True),
    "node.0002.half": torch.randn(5, 2, dtype=torch.bfloat16),
    "node.0003.empty": torch.zeros(0, 3),
    "node.0004.index": torch.arange(7),
    "node.0005.strided": torch.randn(4, 6).t(),
    "output.0": torch.randn(2, 2000),
}


@pytest.mark.parametrize("skip_data", [True, False], ids=["skip_data", "torch<2.6"])
def test_tensors_given_one_by_one_are_saved_as_torch_save_does(
    captured, tmp_path, monkeypatch, skip_data
):
    """The harness's save: (name, tensor) pairs are written into the archive as they come,
    and only the small ones (the metrics) are kept; torch.load reads the file whole and
    memory-mapped, and a zip tool finds it sound. Before torch 2.6 (no skip_data) they are
    kept and saved whole."""
    script = import_script(render_case(captured["cnn"], tmp_path / "run"))
    if not skip_data:
        monkeypatch.delattr(torch.serialization, "skip_data")
    path = tmp_path / "tensors.pt"
    kept = script.save_tensors(iter(TENSORS.items()), path)
    assert list(kept) == (["node.0001.flag", "node.0004.index"] if skip_data else list(TENSORS))
    for mmap in (False, True):
        saved = torch.load(path, weights_only=True, mmap=mmap)
        assert list(saved) == list(TENSORS)
        assert all(saved[k].dtype == v.dtype and torch.equal(saved[k], v)
                   for k, v in TENSORS.items())  # fmt: skip
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None  # every record's CRC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "tensors.pt"]


def test_results_are_copied_on_one_thread_and_the_stage_computes_on_all(
    captured, tmp_path, monkeypatch
):
    """The harness copies each result to the host on one thread (after a parallel copy,
    OpenMP's threads spin and take a core from XLA's compiling and the writer), and gives
    the stage every thread back before it computes the next: a CPU stage's numbers, which
    may depend on the threads, are those of a run that saves nothing."""
    script = import_script(render_case(captured["cnn"], tmp_path / "run"))
    copies, computed, clone = [], [], torch.Tensor.clone

    def counted_clone(tensor, *args, **kwargs):
        copies.append(torch.get_num_threads())
        return clone(tensor, *args, **kwargs)

    def stage():
        for i in range(3):
            computed.append(torch.get_num_threads())
            yield f"node.{i:04d}.add", torch.randn(4, 6).t()  # strided: copied into its own

    monkeypatch.setattr(torch.Tensor, "clone", counted_clone)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        script.save_tensors(stage(), tmp_path / "tensors.pt")
    finally:
        torch.set_num_threads(threads)
    assert computed == [3, 3, 3] and copies == [1, 1, 1]


def test_a_stage_failing_half_way_leaves_no_tensors_file(captured, tmp_path):
    script = import_script(render_case(captured["cnn"], tmp_path / "run"))

    def failing():
        yield "node.0000.add", torch.randn(3)
        raise RuntimeError("the stage failed")

    with pytest.raises(RuntimeError, match="the stage failed"):
        script.save_tensors(failing(), tmp_path / "tensors.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
