"""whose(): a short repro's difference labelled from evidence, on real XLA:CPU (a lowering bug,
a pass's rewrite), and the bisection's rules on stand-in scripts that answer to XLA_FLAGS as
XLA would (a pass that must not be disabled, two passes that interact)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from reprokit.runner.options import Options
from reprokit.tools.whose import CODEGEN_LABEL, LOWERING, UNKNOWN, Whose, whose

# The short-repro shape: XLA against CPU and float64, "XLA DIFFERS" and exit 1 when it shows.
MEAN = """
import torch
import torch_xla

x = torch.full((70000,), 0.5, dtype=torch.float16)
xla = torch.mean(x.to(torch_xla.device())).cpu()
cpu, f64 = torch.mean(x), torch.mean(x.double())
if not torch.allclose(xla.double(), f64, rtol=1e-3):
    print(f"mean: XLA DIFFERS: XLA {xla.item()}, CPU {cpu.item()}, float64 {f64.item()}")
    raise SystemExit(1)
print("mean: agrees")
"""

# XLA's algebraic simplifier folds log(exp(x)) into x: 1000 where CPU and float64 give inf.
LOG_EXP = """
import torch
import torch_xla

x = torch.tensor([1.0, 1000.0])
xla = torch.log(torch.exp(x.to(torch_xla.device()))).cpu()
cpu, f64 = torch.log(torch.exp(x)), torch.log(torch.exp(x.double()))
if not torch.equal(xla.double(), f64):
    print(f"log(exp(x)): XLA DIFFERS: XLA {xla.tolist()}, CPU {cpu.tolist()}, fp64 {f64.tolist()}")
    raise SystemExit(1)
print("log(exp(x)): agrees")
"""


def folder(tmp_path: Path, script: str) -> Path:
    (tmp_path / "repro").mkdir(parents=True)
    (tmp_path / "repro" / "repro.py").write_text(textwrap.dedent(script))
    return tmp_path / "repro"


def test_fp16_mean_count_is_torch_xlas_lowering(tmp_path):
    found = whose(folder(tmp_path, MEAN), Options(timeout=120), tmp_path / "scratch")
    assert found.label == LOWERING and found.where == "pytorch/xla"
    assert found.flags == "--xla_disable_all_hlo_passes=true" and found.runs == 3  # AVX too
    (hlo,) = found.hlo
    text = Path(hlo).read_text()  # the op's HLO as torch_xla emits it: the count in float16
    assert hlo.endswith(".before_optimizations.txt") and "f16[] convert(" in text
    assert "reduce(" in text and not (tmp_path / "scratch" / "dump").exists()


def test_log_of_exp_is_xlas_algebraic_simplifier(tmp_path):
    found = whose(folder(tmp_path, LOG_EXP), Options(timeout=120), tmp_path / "scratch")
    assert found.label == "XLA pass algsimp" and found.where == "openxla/xla"
    assert found.flags == "--xla_disable_hlo_passes=algsimp"
    assert "algsimp" in found.passes and found.runs <= 3 + 2 * len(found.passes).bit_length()
    (hlo,) = found.hlo  # the module before algsimp rewrote it: log(exp(x)) still there
    assert hlo.endswith(".before_algsimp.txt")
    assert "exponential(" in Path(hlo).read_text() and " log(" in Path(hlo).read_text()
    assert (
        found.command.startswith("run_hlo_module --platform=cpu")
        and Path(hlo).name in found.command
    )
    assert found.command.endswith("the same with --xla_disable_hlo_passes=algsimp")


# A stand-in for XLA under XLA_FLAGS: dumps a module after each of PASSES (as XLA names the
# files) when asked, crashes when a pass of REQUIRED is disabled, agrees once all of NEEDED are.
STAND_IN = """
import os, re, sys
from pathlib import Path

PASSES = ["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"]
NEEDED, REQUIRED, ALL_OFF_FAILS = {needed!r}, {required!r}, {all_off_fails!r}
flags = os.environ.get("XLA_FLAGS", "")
if {fma!r} and "--xla_cpu_max_isa=AVX" in flags:  # a result of the CPU's FMA
    raise SystemExit(print("agrees"))
HLO = "HloModule g\\nENTRY %g (p0: f32[2]) -> f32[2] {{\\n  ROOT %a = f32[2]{{0}} add(%p0, %p0)\\n"
if dump := re.search(r"--xla_dump_to=(\\S+)", flags):
    where = Path(dump[1])
    where.mkdir(parents=True)
    (where / "module_0000.g.1.before_optimizations.txt").write_text(HLO)
    (where / "module_0000.g.1.0000.pipe.after_pipeline-start.before_p1.txt").write_text(HLO)
    for i, (one, two) in enumerate(zip(PASSES, [*PASSES[1:], "pipeline-end"]), 1):
        (where / f"module_0000.g.1.{{i:04d}}.pipe.after_{{one}}.before_{{two}}.txt").write_text(HLO)
off = set(",".join(re.findall(r"--xla_disable_hlo_passes=(\\S+)", flags)).split(","))
if "--xla_disable_all_hlo_passes=true" in flags:
    if ALL_OFF_FAILS:
        sys.exit("F0000 layout assignment is required")
    off = set(PASSES)
elif off & REQUIRED:
    sys.exit(f"F0000 {{sorted(off & REQUIRED)}} must run")  # exit 1, no "XLA DIFFERS": a crash
if NEEDED and NEEDED <= off:
    print("agrees")
    raise SystemExit(0)
print("op: XLA DIFFERS")
raise SystemExit(1)
"""


def stand_in(tmp_path: Path, needed=(), required=(), all_off_fails=False, fma=False) -> Whose:
    script = STAND_IN.format(
        needed=set(needed), required=set(required), all_off_fails=all_off_fails, fma=fma
    )
    return whose(folder(tmp_path, script), Options(timeout=60), tmp_path / "scratch")


def test_a_bisection_names_the_one_pass_in_about_log2_runs(tmp_path):
    found = stand_in(tmp_path, needed={"p7"})
    assert found.label == "XLA pass p7" and found.flags == "--xla_disable_hlo_passes=p7"
    assert found.passes == ("p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8")
    assert found.runs == 3 + 5  # the base, AVX, all off; 8 to 4, 4 to 2: 2 runs each, then 1
    assert Path(found.hlo[0]).name == "g.1.before_p7.txt"


def test_a_result_that_moves_with_the_cpus_instructions_is_xla_cpus_code_generation(tmp_path):
    found = stand_in(tmp_path, needed={"p7"}, fma=True)  # gone without FMA: no pass bisected
    assert found.label == CODEGEN_LABEL and found.where == "openxla/xla"
    assert found.flags == "--xla_cpu_max_isa=AVX" and found.runs == 2 and not found.passes
    assert "depends on the CPU's instructions (this machine: " in found.evidence


def test_a_crash_with_passes_disabled_is_not_gone(tmp_path):
    found = stand_in(tmp_path, needed={"p3"}, required={"p2"})  # p3's half holds p2
    assert found.label == UNKNOWN
    assert "disabling p1, p2, p3, p4: exit 1: F0000 ['p2'] must run" in found.evidence
    assert "disabling p5, p6, p7, p8: exit 1, XLA DIFFERS" in found.evidence


def test_passes_that_interact_are_unknown(tmp_path):
    found = stand_in(tmp_path, needed={"p2", "p6"})
    assert found.label == UNKNOWN and "no single one of the 8 passes" in found.evidence
    assert found.runs == 5 and found.where == ""


def test_passes_xla_cannot_run_without_are_found_and_kept(tmp_path):
    found = stand_in(tmp_path / "a", needed={"p5"}, required={"p2"}, all_off_fails=True)
    assert found.label == "XLA pass p5" and "(`p2` kept: XLA:CPU needs it)" in found.evidence
    assert "p2" not in found.passes and found.flags == "--xla_disable_hlo_passes=p5"
    lowering = stand_in(tmp_path / "b", required={"p2"}, all_off_fails=True)
    assert lowering.label == UNKNOWN and "layout assignment is required" in lowering.evidence
    assert "torch_xla's lowering, unless `p2` is at fault" in lowering.evidence
    assert lowering.flags == "--xla_disable_hlo_passes=p1,p3,p4,p5,p6,p7,p8" and lowering.hlo


def test_a_repro_that_does_not_show_is_unknown(tmp_path):
    quiet = whose(folder(tmp_path, "print('agrees')\n"), Options(), tmp_path / "s")
    assert quiet.label == UNKNOWN and quiet.runs == 1 and "exit 0" in quiet.evidence


def test_the_record_round_trips_through_json_and_imports_no_torch(tmp_path):
    record = Whose("XLA pass algsimp", "why", "--xla_disable_hlo_passes=algsimp", ("a.txt",),
                   3, 11.0, ("algsimp", "copy-insertion"), "run_hlo_module ...")  # fmt: skip
    assert Whose.from_json(record.to_json()) == record
    block = "import sys; sys.modules['torch'] = None; import reprokit.tools.whose"
    assert subprocess.run([sys.executable, "-c", block], check=False).returncode == 0
