"""reprokit minimize on a captured program, for real on XLA:CPU: a fault deep in a transformer
stack shrinks to the few operations around it and the standalone repro.py still diverges; an
operation XLA cannot run shrinks and still raises the same error; the budget holds.

The models are tests/data/minimize_graph/models.py. Each oracle run is three stage processes,
so the programs are small and each test runs one search."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from reprokit.records import MinimizeResult, Outcome, StageResult, Status, VariantResult
from reprokit.records.minimize import GraphShrink, Step
from reprokit.tools.capture import command
from reprokit.tools.minimize.target import Target

MODELS = Path(__file__).parent / "data" / "minimize_graph" / "models.py"


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


def run_alone(folder: Path) -> subprocess.CompletedProcess:
    """repro.py copied alone (with inputs.pt, if any) into a fresh folder, without reprokit."""
    alone = folder.parent / "alone"
    alone.mkdir()
    for name in ("repro.py", "inputs.pt"):
        if (folder / name).is_file():
            (alone / name).write_bytes((folder / name).read_bytes())
    env = {"PATH": "/usr/bin:/bin", "PJRT_DEVICE": "CPU", "HOME": str(alone)}
    return subprocess.run(
        [sys.executable, "-I", "repro.py"], cwd=alone, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


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
    calls = ops_in(tmp_path / "m" / "repro.py")
    assert 1 <= len(calls) <= 5 and "linear_" in " ".join(calls)
    assert "# linear_" in (tmp_path / "m" / "repro.py").read_text()  # the original node named
    done = run_alone(tmp_path / "m")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"xla: the first to differ is {perturbed}" in done.stdout
    # the minimal case reproduces through the ordinary runner as well
    rerun = cli("run", tmp_path / "m" / "minimal.toml", "-o", tmp_path / "r")
    assert rerun.exit_code == 0, rerun.output  # expect mismatch, and it mismatches
    assert cli("report", tmp_path / "m", "--format", "md").exit_code == 0
    body = (tmp_path / "m" / "report.md").read_text()
    assert "Minimized the captured program from" in body
    assert f"| operations | {graph['nodes'][0]} | {graph['nodes'][1]} |" in body


def test_an_operation_xla_cannot_run_shrinks_and_still_raises(cli, tmp_path):
    case = capture(tmp_path, "fake_quant")
    report = minimize(cli, tmp_path / "m", case, "--budget", "25")
    assert report["target"].startswith("error (xla: RuntimeError: ")
    assert "Float#_e#m#fnuz" in report["target"]
    graph = report["graph"]
    assert graph["nodes"][1] < graph["nodes"][0] and graph["nodes"][1] <= 2
    assert ".to.dtype(" in (tmp_path / "m" / "repro.py").read_text()
    rerun = cli("run", tmp_path / "m" / "minimal.toml", "-o", tmp_path / "r")
    assert rerun.exit_code == 0, rerun.output  # expect error, and it errors
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    xla = next(s for s in summary["variants"][0]["stages"] if s["name"] == "xla")
    assert "Type not supported: Float8_e5m2fnuz" in xla["error"]
    done = run_alone(tmp_path / "m")
    assert done.returncode == 2 and "Float8_e5m2fnuz" in done.stderr


def test_budget_stops_with_the_best_so_far(cli, tmp_path):
    case = capture(tmp_path, "fake_quant")
    report = minimize(cli, tmp_path / "m", case, "--budget", "3")
    assert report["candidates"] == 3 and report["stopped"] == "budget"
    assert report["graph"]["nodes"][1] < report["graph"]["nodes"][0]  # two tries, one kept
    for name in ("minimal.pt2", "minimal.toml", "repro.py", "summary.json"):
        assert (tmp_path / "m" / name).is_file()


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
