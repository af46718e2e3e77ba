"""Whose bug a short repro shows: XLA:CPU's code generation, the HLO torch_xla emits, or one of
XLA's compiler passes.

The repro is run alone (``alone.run_alone``: ``python -I repro.py`` in a folder of its own)
under ``XLA_FLAGS``. First with XLA:CPU kept to AVX (``--xla_cpu_max_isa=AVX``: no FMA, no
AVX2): a difference that goes away moves with the CPU's instructions (bilinear resizing's source
column: one fusion computes its index with a fused multiply-add, another without, and an exact
tie lands on either side), XLA:CPU's, not the lowering's. With every pass disabled
(``--xla_disable_all_hlo_passes=true``) XLA:CPU runs the HLO as torch_xla built it: a difference
that survives is torch_xla's lowering. One that goes away is a pass's: the passes that changed
the module (the file names of a ``--xla_dump_hlo_pass_re=.*`` dump: XLA dumps after a pass only
when it changed the module) are bisected with ``--xla_disable_hlo_passes`` down to the one whose
disabling alone takes it away. Only exit 0 without "XLA DIFFERS" counts as gone: a repro that
crashes without a pass (some are required on CPU) fails, and the label is then "unknown", saying
which. Torch-free.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.records import Whose
from reprokit.records.folder import SCRIPT, XLA_DUMP
from reprokit.records.minimize import SHORT_INPUTS
from reprokit.runner.options import Options

if TYPE_CHECKING:  # minimize.graph's package imports torch: alone.py is imported when run
    from reprokit.runner.processes.alone import Ran

LOWERING = "torch_xla lowering"
UNKNOWN = "unknown"
PASS = "XLA pass "  # + the pass's name
ALL_OFF = "--xla_disable_all_hlo_passes=true"
DUMP = "--xla_dump_to={} --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=.*"
FILES = (SCRIPT, SHORT_INPUTS)  # what a short repro's folder holds that it reads
# module_0000.SyncTensorsGraph.5.0005.simplification.after_algsimp.before_simplify-sorts.txt
STEP = re.compile(r"^(module_\d+\..+?)\.(\d{4})\.(.+)\.txt$")
AFTER = re.compile(r"^([^.]+)\.after_([^.]+)\.before_[^.]+$")
BEFORE = ".before_optimizations.txt"
PLUMBING = {"parameter", "tuple", "get-tuple-element", "constant", "copy", "bitcast"}

# XLA:CPU's own code generation: the instructions it may use. AVX is the newest set without
# FMA and AVX2; a result that changes with it moves with the CPU, whatever the HLO says
CODEGEN = "--xla_cpu_max_isa=AVX"
CODEGEN_LABEL = "XLA:CPU code generation"
FEATURES = ("fma", "avx2", "avx512f", "avx512_bf16", "amx_tile")  # what such a result reads

SHOWS, GONE, FAILS = "shows", "gone", "fails"
NEEDED_MAX = 3  # passes XLA:CPU may need, found at about log2(passes) + 1 runs each


def whose(repro: Callable[[Path], None] | Path, options: Options, scratch: Path) -> Whose:
    """Whose the difference the short repro shows is. ``repro``: a folder holding repro.py
    (and inputs.pt), or a function that writes them into the folder it is given, as minimize's
    ``short.write`` does. ``scratch`` keeps the HLO dumps (the ``hlo`` paths are there)."""
    tries = _Tries(_writer(repro), options, scratch.resolve())
    base = tries.run("", dump=True)
    if base[0] != SHOWS:
        return tries.done(UNKNOWN, f"The repro does not show the difference here ({base[1]}).")
    if tries.run(CODEGEN)[0] == GONE:
        return tries.done(
            CODEGEN_LABEL,
            f"Goes away when XLA:CPU generates code without AVX2 and FMA (`XLA_FLAGS={CODEGEN}`), "
            f"every pass kept: the result depends on the CPU's instructions "
            f"(this machine: {cpu_features() or 'its features unknown'}), not on torch_xla's "
            "lowering (a fused multiply-add rounds once where a multiply then an add round "
            "twice); file with openxla/xla, saying the CPU.",
            flags=CODEGEN,
        )  # fmt: skip
    state, said = tries.run(ALL_OFF)
    if state == SHOWS:
        return tries.done(
            LOWERING,
            f"Still differs with every XLA pass disabled (`XLA_FLAGS={ALL_OFF}`): the HLO "
            "torch_xla emits for the op computes it; file with pytorch/xla, its HLO attached.",
            flags=ALL_OFF, hlo=_smallest(tries.dump.glob(f"*{BEFORE}")),
        )  # fmt: skip
    if state == FAILS:
        return _needing(tries, _passes(tries.dump), said)
    return _bisect(tries, _passes(tries.dump))


def _needing(tries: _Tries, passes: tuple[str, ...], said: str) -> Whose:
    """XLA:CPU cannot run the repro with every pass disabled (a dot of several contracting
    dimensions needs ``dot_decomposer``, BatchNormTraining ``batchnorm_expander``): find the
    passes it needs, each the first (in the order they run) whose enabling lets it run, by
    binary search, then judge with those alone enabled. "unknown" when it still differs: the
    lowering or a needed pass."""
    needed: list[str] = []
    while True:
        rest = [name for name in passes if name not in needed]
        state, _ = tries.run(_off(rest))
        if state == GONE:
            return _bisect(tries, tuple(rest), needed)
        if state == SHOWS:
            return tries.done(
                UNKNOWN if needed else LOWERING,
                f"XLA:CPU cannot run it with every pass disabled ({said}); with every pass "
                f"that changed the module but {_names(needed)} disabled it still differs: "
                f"torch_xla's lowering, unless "
                f"{_names(needed)} {'are' if len(needed) > 1 else 'is'} at fault."
                if needed else f"With every pass that changed the module disabled it still "
                f"differs (every pass disabled, XLA:CPU fails: {said}).",
                flags=_off(rest), hlo=_smallest(tries.dump.glob(f"*{BEFORE}")), passes=passes,
            )  # fmt: skip
        if len(needed) == NEEDED_MAX or not rest:
            return tries.done(UNKNOWN, f"XLA:CPU cannot run it with every pass disabled "
                              f"({said}), nor with only {_names(needed)} enabled.",
                              passes=passes)  # fmt: skip
        fails, runs = 0, len(rest)  # enabling rest[:fails] fails, rest[:runs] runs (the base)
        while runs - fails > 1:
            mid = (fails + runs) // 2
            if tries.run(_off(rest[mid:]))[0] == FAILS:
                fails = mid
            else:
                runs = mid
        needed.append(rest[runs - 1])


def _bisect(tries: _Tries, passes: tuple[str, ...], needed: Sequence[str] = ()) -> Whose:
    """Halve the passes that changed the module until one is left whose disabling alone takes
    the difference away: about log2(len(passes)) runs, twice that where the first half tried
    is not it. ``needed``: passes left enabled, XLA:CPU cannot run without them."""
    left, seen = list(passes), []
    if not left:
        return tries.done(UNKNOWN, "It goes away with every XLA pass disabled, yet no pass "
                          "changed the module (no pass dump).")  # fmt: skip
    while len(left) > 1 or not seen:
        halves = [left] if len(left) == 1 else [left[: len(left) // 2], left[len(left) // 2 :]]
        seen = []
        for half in halves:
            state, said = tries.run(_off(half))
            seen.append(f"disabling {', '.join(half)}: {said}")
            if state == GONE:
                left = half
                break
        else:
            return tries.done(UNKNOWN, _no_one(passes, seen), passes=passes)
    name = left[0]
    before = _before(tries.dump, name)
    return tries.done(
        PASS + name,
        f"Goes away when XLA's `{name}` pass alone is disabled (`XLA_FLAGS={_off(left)}`), "
        f"found by bisecting the {len(passes)} passes that changed the module"
        f"{f' ({_names(needed)} kept: XLA:CPU needs it)' if needed else ''}; file with "
        f"openxla/xla, with the HLO module before `{name}`.",
        flags=_off(left), hlo=before, passes=passes,
        # against XLA's interpreter: differs as it is, agrees with the pass disabled
        command=f"run_hlo_module --platform=cpu --reference_platform=interpreter {{hlo}}; "
        f"the same with --xla_disable_hlo_passes={name}",
    )  # fmt: skip


def cpu_features() -> str:
    """The instruction sets of :data:`FEATURES` this CPU has ("fma, avx2"), from
    /proc/cpuinfo; "" where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])  # fmt: skip
    return ", ".join(f for f in FEATURES if f in flags)


def _no_one(passes: Sequence[str], seen: Sequence[str]) -> str:
    failed = "; ".join(seen)
    return (
        f"It goes away with every XLA pass disabled, but no single one of the {len(passes)} "
        f"passes that changed the module takes it away ({failed}): passes that interact, or "
        "one XLA:CPU cannot run without."
    )


class _Tries:
    """The repro's runs under XLA_FLAGS, counted and timed; the first dumps every pass."""

    def __init__(self, write: Callable[[Path], None], options: Options, scratch: Path) -> None:
        self.write, self.options, self.scratch = write, options, scratch
        self.dump = scratch / XLA_DUMP
        self.runs, self.started = 0, time.monotonic()

    def run(self, flags: str, *, dump: bool = False) -> tuple[str, str]:
        """(shows, gone or fails, a few words on how it ended) of one run under ``flags``."""
        if dump:
            shutil.rmtree(self.dump, ignore_errors=True)
            flags = DUMP.format(self.dump)
        from reprokit.runner.processes.alone import run_alone

        self.runs += 1
        ran = run_alone(self.write, self.options, self.scratch, extra={"XLA_FLAGS": flags})
        return _state(ran)

    def done(self, label: str, evidence: str, **more: Any) -> Whose:
        """The verdict; the HLO it names copied out of the dump, which is then removed (its
        object files and LLVM IR are megabytes)."""
        what = "before_" + (label.removeprefix(PASS) if label.startswith(PASS) else "optimizations")
        hlo = tuple(str(self.keep(path, what)) for path in more.pop("hlo", ()))
        shutil.rmtree(self.dump, ignore_errors=True)
        if "command" in more:  # run on the HLO kept, or not said at all
            more["command"] = more["command"].format(hlo=Path(hlo[0]).name) if hlo else ""
        seconds = round(time.monotonic() - self.started, 1)
        return Whose(label, evidence, hlo=hlo, runs=self.runs, seconds=seconds, **more)

    def keep(self, path: Path, what: str) -> Path:
        """``module_0000.SyncTensorsGraph.5.0004.simplification.after_...txt`` kept as
        ``SyncTensorsGraph.5.before_algsimp.txt``: the name says what the text is."""
        step = STEP.match(path.name)
        module = step[1] if step else path.name.removesuffix(BEFORE)
        kept = self.scratch / f"{module.split('.', 1)[1]}.{what}.txt"
        shutil.copyfile(path, kept)
        return kept


def _state(ran: Ran) -> tuple[str, str]:
    if ran.shows():
        return SHOWS, "exit 1, XLA DIFFERS"
    if ran.returncode == 0 and "XLA DIFFERS" not in ran.stdout:
        return GONE, "exit 0, agrees"
    if ran.returncode is None:
        return FAILS, "timed out"
    last = (ran.stderr.strip().splitlines() or ["no output"])[-1][:160]
    return FAILS, f"exit {ran.returncode}: {last}"


def _names(passes: Sequence[str]) -> str:
    return " and ".join(f"`{name}`" for name in passes)


def _off(passes: Sequence[str]) -> str:
    return "--xla_disable_hlo_passes=" + ",".join(passes)


def _writer(repro: Callable[[Path], None] | Path) -> Callable[[Path], None]:
    if callable(repro):
        return repro
    folder = Path(repro)

    def write(where: Path) -> None:
        for name in FILES:
            if (folder / name).is_file():
                shutil.copy2(folder / name, where / name)

    return write


def _steps(dump: Path) -> dict[str, list[tuple[str, Path]]]:
    """Each module's pass dumps in order: (what the file name says after the number, path)."""
    modules: dict[str, list[tuple[str, Path]]] = {}
    for path in sorted(dump.glob("module_*.txt")):
        if matched := STEP.match(path.name):
            modules.setdefault(matched[1], []).append((matched[3], path))
    return modules


def _passes(dump: Path) -> tuple[str, ...]:
    """The passes that changed a module, in the order they first ran: the ``after_NAME`` of
    the dump file names, not a pipeline's start nor a pipeline (whose name disables none of
    the passes in it)."""
    found = [m.groups() for steps in _steps(dump).values() for what, _ in steps
             if (m := AFTER.match(what))]  # fmt: skip
    pipelines = {pipeline for pipeline, _ in found}
    names = [name for _, name in found if name != "pipeline-start" and name not in pipelines]
    return tuple(dict.fromkeys(names))


def _before(dump: Path, name: str) -> tuple[Path, ...]:
    """The smallest module as it was just before ``name`` first changed it."""
    found = []
    for module, steps in _steps(dump).items():
        for i, (what, _) in enumerate(steps):
            if (m := AFTER.match(what)) and m[2] == name:
                found.append(steps[i - 1][1] if i else dump / f"{module}{BEFORE}")
                break
    return _smallest(found)


def _smallest(paths: Any) -> tuple[Path, ...]:
    """The smallest module that computes something (not only moves parameters), or ()."""
    real = [path for path in paths if path.is_file() and _computes(path)]
    return (min(real, key=lambda path: path.stat().st_size),) if real else ()


def _computes(path: Path) -> bool:
    ops = re.findall(r"= \S+ ([a-z-]+)\(", path.read_text(encoding="utf-8"))
    return any(op not in PLUMBING for op in ops)
