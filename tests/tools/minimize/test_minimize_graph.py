"""reprokit minimize on a captured program, for real on XLA:CPU: a fault deep in a transformer
stack shrinks to the few operations around it and both repros still diverge; an operation XLA
cannot run shrinks and still raises the same error; the budget holds; pytorch/xla#3658's fp16
LayerNorm, where nothing can be removed, gives a short repro.py that reproduces alone.

The models are tests/data/minimize_graph/models.py. Each oracle run is three stage processes,
so the programs are small and each test runs one search."""

from __future__ import annotations

import json
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest
from standalone import run_alone

from reprokit.generate.selection import load_variant
from reprokit.records import MinimizeResult, Outcome, StageResult, Status, VariantResult
from reprokit.records.minimize import GraphShrink, Step
from reprokit.reports.bundle import write_bundle
from reprokit.tools.capture import command
from reprokit.tools.minimize.graph import program, short
from reprokit.tools.minimize.graph.program import State
from reprokit.tools.minimize.target import Target

MODELS = Path(__file__).parents[2] / "data" / "minimize_graph" / "models.py"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path / "cache"))


def capture(tmp_path: Path, factory: str) -> Path:
    return command(f"{MODELS}:{factory}", out_dir=tmp_path / "captured")


def minimize(cli, out: Path, case: Path, *extra: str) -> dict:
    result = cli("minimize", case, "-o", out, *extra)
    assert result.exit_code == 0, result.output
    return json.loads((out / "summary.json").read_text())["run"]["minimized"]


def ops_in(script: Path) -> list[str]:
    """The aten calls of a minimal repro.py, one a line."""
    return [line.split("=")[0].strip() for line in script.read_text().splitlines()
            if " = torch.ops." in line]  # fmt: skip


@pytest.mark.slow
def test_perturbed_node_deep_in_a_stack_shrinks_to_a_few_operations(cli, tmp_path):
    case = capture(tmp_path, "encoder")
    # the second layer's feed-forward output projection: operation 66 of 70
    report = minimize(cli, tmp_path / "m", case, "--set", "perturb_node=node.0066.linear",
                      "-n", "2", "--budget", "30")  # fmt: skip
    graph = report["graph"]
    assert report["target"] == "mismatch (node.#.linear)" and report["stopped"] == "done"
    assert graph["nodes"][0] == 70 and 1 <= graph["nodes"][1] <= 5
    assert graph["weights"][1] < graph["weights"][0]
    assert report["candidates"] <= 30
    minimal = tomllib.loads((tmp_path / "m" / "minimal.toml").read_text())
    assert minimal["params"]["program"] == "minimal.pt2"
    perturbed = minimal["params"]["perturb_node"]  # the fault moved along with its node
    assert perturbed.endswith(".linear")
    calls = ops_in(tmp_path / "m" / "repro_stages.py")
    assert 1 <= len(calls) <= 5 and "linear_" in " ".join(calls)
    assert "# linear_" in (tmp_path / "m" / "repro_stages.py").read_text()  # the node named
    done = run_alone(tmp_path / "m", "repro_stages.py")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"xla: the first to differ is {perturbed}" in done.stdout
    assert ops_in(tmp_path / "m" / "repro.py") == calls  # the short repro: the same calls
    assert report["graph"]["short_inputs"] == "random"  # its weights: seeded draws
    pasted = run_alone(tmp_path / "m")
    assert pasted.returncode == 1 and "XLA DIFFERS" in pasted.stdout, pasted.stdout
    # the minimal case reproduces through the ordinary runner as well
    rerun = cli("run", tmp_path / "m" / "minimal.toml", "-o", tmp_path / "r")
    assert rerun.exit_code == 0, rerun.output  # expect mismatch, and it mismatches
    assert cli("report", tmp_path / "m", "--format", "md").exit_code == 0
    body = (tmp_path / "m" / "report.md").read_text()
    nodes = graph["nodes"]
    assert f"The repro is {nodes[1]} of the model's {nodes[0]} operations" in body
    assert "```python\n" in body and "XLA DIFFERS" in body  # pasted, with what it printed


@pytest.mark.slow
def test_an_operation_xla_cannot_run_shrinks_and_still_raises(cli, tmp_path):
    case = capture(tmp_path, "fake_quant")
    report = minimize(cli, tmp_path / "m", case, "--budget", "25")
    assert report["target"].startswith("error (xla: RuntimeError: ")
    assert "Float#_e#m#fnuz" in report["target"]
    graph = report["graph"]
    assert graph["nodes"][1] < graph["nodes"][0] and graph["nodes"][1] <= 2
    assert ".to.dtype(" in (tmp_path / "m" / "repro.py").read_text()
    assert ".to.dtype(" in (tmp_path / "m" / "repro_stages.py").read_text()
    rerun = cli("run", tmp_path / "m" / "minimal.toml", "-o", tmp_path / "r")
    assert rerun.exit_code == 0, rerun.output  # expect error, and it errors
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    xla = next(s for s in summary["variants"][0]["stages"] if s["name"] == "xla")
    assert "Type not supported: Float8_e5m2fnuz" in xla["error"]
    done = run_alone(tmp_path / "m")  # the short repro raises the same error
    assert done.returncode == 1 and "Float8_e5m2fnuz" in done.stderr, done.stderr[-2000:]


def test_budget_stops_with_the_best_so_far(cli, tmp_path):
    case = capture(tmp_path, "fake_quant")
    report = minimize(cli, tmp_path / "m", case, "--budget", "3")
    assert report["candidates"] == 3 and report["stopped"] == "budget"
    assert report["graph"]["nodes"][1] < report["graph"]["nodes"][0]  # two tries, one kept
    for name in ("minimal.pt2", "minimal.toml", "repro.py", "repro_stages.py", "summary.json"):
        assert (tmp_path / "m" / name).is_file()


@pytest.mark.slow
def test_fp16_layer_norm_nothing_removed_a_short_repro_that_reproduces_alone(cli, tmp_path):
    """pytorch/xla#3658 (fp16 LayerNorm: XLA's error against float64 ~100x CPU's on XLA:CPU,
    torch_xla 2.9): one operation, so nothing can be removed, and the output says so; the
    short repro.py, alone in an empty folder, exits 1 in at most 40 lines; in float32 (no
    divergence) the same repro exits 0; the bundle holds no candidates."""
    case = capture(tmp_path, "fp16_layer_norm")
    out = tmp_path / "m"
    result = cli("minimize", case, "-o", out, "--budget", "8")
    assert result.exit_code == 0, result.output
    assert "Nothing could be removed: its 1 operation is needed" in result.output
    assert "from 1 to 1" not in result.output
    found = MinimizeResult.from_json(
        json.loads((out / "summary.json").read_text())["run"]["minimized"]
    )
    assert found.graph.removed_nothing and found.graph.short_inputs == "random"
    script = (out / "repro.py").read_text()
    assert len(script.splitlines()) <= 40 and "stage" not in script.lower()
    assert "torch.randn([2, 6, 16], generator=g)" in script and not (out / "inputs.pt").exists()
    done = run_alone(out)
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert "layer_norm: XLA DIFFERS, error against float64: XLA" in done.stdout
    assert float32_repro(out).returncode == 0
    assert cli("report", out, "--format", "md").exit_code == 0
    body = (out / "report.md").read_text()  # no candidate's program named
    assert "g-" not in body and "pt2" not in body
    assert f"```python\n{script}```" in body  # the short repro pasted as it is, and its output
    assert "$ PJRT_DEVICE=CPU python repro.py\nlayer_norm: XLA DIFFERS" in body
    with zipfile.ZipFile(out / "bundle.zip") as bundle:
        names = bundle.namelist()
    assert {"repro.py", "repro_stages.py", "minimal.toml", "minimal.pt2", "summary.json"} <= set(
        names
    )
    assert not [n for n in names if n.startswith(("candidates/", "programs/"))], names
    assert (out / "candidates").is_dir()  # they are still there, only not bundled


def float32_repro(out: Path) -> subprocess.CompletedProcess:
    """The short repro of the same minimal program in float32, where XLA agrees."""
    minimal = load_variant(str(out / "minimal.toml")).with_params({"dtype": "float32"})
    original = program.load(out / "minimal.pt2")
    whole = State(original.ops(), original.outputs())
    inputs = short.plan(short.values_read(original, whole), random=True)
    folder = out.parent / "float32"
    folder.mkdir()
    text = short.short_repro(original, whole, minimal, inputs, None)
    assert "DTYPE = torch.float32" in text
    short.write(folder, text, {})
    return run_alone(folder)


def stage_failed(error: str) -> VariantResult:
    stages = (StageResult("cpu", "cpu", Status.OK),
              StageResult("xla", "xla", Status.ERROR, returncode=1, error=error))  # fmt: skip
    return VariantResult("c", "c", {}, Outcome.ERROR, Outcome.MATCH, 1.0, stages=stages)


def test_a_failure_is_kept_only_with_a_close_message():
    said = "RuntimeError: Type not supported: Float8_e5m2fnuz at 12"
    target = Target.of(stage_failed(said), with_message=True)
    assert target.kept_by(stage_failed("RuntimeError: Type not supported: Float8_e5m2fnuz at 3"))
    assert not target.kept_by(stage_failed("SystemExit: perturb_node 'x' is none of a, b"))
    assert not target.kept_by(None)


def test_the_graph_record_round_trips_and_old_records_still_read():
    graph = GraphShrink((70, 1), (1, 1), (24, 2), (Step("blocks", 2, 66),))
    found = MinimizeResult("c", "mismatch", (), (320, 60), 5, 1, 9.5, "done", graph=graph)
    assert MinimizeResult.from_json(json.loads(json.dumps(found.to_json()))) == found
    old = {k: v for k, v in found.to_json().items() if k != "graph"}
    assert MinimizeResult.from_json(old).graph is None
    assert "from 70 to 1 operations" in found.describe()


def test_nothing_removed_is_said_plainly_and_old_records_still_read():
    graph = GraphShrink((11, 11), (2, 2), (4, 4), short_inputs="random")
    found = MinimizeResult("c", "mismatch (node.#.conv)", (), (300, 38), 3, 0, 9.5, "done", graph)
    assert found.graph.removed_nothing and "from 11 to 11" not in found.describe()
    assert found.describe().startswith("Nothing could be removed: its 11 operations are all needed")
    assert not GraphShrink((11, 1), (2, 2), (4, 4)).removed_nothing
    assert graph.to_json()["removed_nothing"] is True  # summary.json says so too
    assert GraphShrink.from_json(json.loads(json.dumps(graph.to_json()))) == graph
    old = {k: v for k, v in graph.to_json().items() if k != "short_inputs"}
    assert GraphShrink.from_json(old).short_inputs == ""
    params = MinimizeResult("c", "mismatch (act.#)", (), (300, 300), 5, 0, 9.5, "done")
    assert params.describe().startswith("Nothing could be changed")


def test_a_minimize_folders_bundle_leaves_out_the_candidates(tmp_path):
    for name in ("minimal.toml", "minimal.pt2", "repro.py", "repro_stages.py", "summary.json",
                 "candidates/batch-001/summary.json", "candidates/batch-001/g-1/repro.py",
                 "programs/g-1.pt2", "minimal/repro.py"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    with zipfile.ZipFile(write_bundle(tmp_path, tmp_path / "bundle.zip")) as bundle:
        names = set(bundle.namelist())
    assert names == {"minimal.toml", "minimal.pt2", "repro.py", "repro_stages.py",
                     "summary.json", "minimal/repro.py"}  # fmt: skip
    (tmp_path / "minimal.toml").unlink()  # a run folder: a case may name a folder candidates/
    with zipfile.ZipFile(write_bundle(tmp_path, tmp_path / "bundle.zip")) as bundle:
        assert "programs/g-1.pt2" in bundle.namelist()
