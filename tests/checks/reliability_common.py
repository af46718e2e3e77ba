"""What the reliability checks share (tests/runner/test_reliability.py runs them small,
bench/reliability.py large): figures, the table, the orphan hunt.

Each check (reliability_hostile, reliability_runs, reliability_safety) makes its own files under
the folder it is given and returns figures. A check never asserts: a figure that misses its
target is reported, so that one finding does not hide the others.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
FAULT_TEMPLATES = DATA / "reliability"  # faults.py.j2: a script that misbehaves as told
ECHO_TEMPLATES = DATA / "templates"  # echo.py.j2: the template tests/generate/test_fuzz.py fuzzes
PYTHON = sys.executable


@dataclass(frozen=True)
class Figure:
    name: str
    value: object
    target: str
    ok: bool


def table(figures: list[Figure]) -> str:
    """The final table: figure, value, target, ok."""
    width = max(len(f.name) for f in figures)
    lines = [f"{'figure':<{width}}  {'value':>12}  {'target':<24}  ok", "-" * (width + 46)]
    for f in figures:
        mark = "yes" if f.ok else "NO"
        lines.append(f"{f.name:<{width}}  {f.value!s:>12}  {f.target:<24}  {mark}")
    return "\n".join(lines)


def zero(name: str, value: int) -> Figure:
    return Figure(name, value, "0", value == 0)


def info(name: str, value: object) -> Figure:
    return Figure(name, value, "(measured)", True)


def files_under(folder: Path) -> set[Path]:
    return set(folder.rglob("*")) if folder.exists() else set()


def reprokit(*args: object, env: dict[str, str] | None = None, timeout: float = 900):
    """``python -m reprokit ARGS`` as a real subprocess (its own signals, its own exit)."""
    command = [PYTHON, "-m", "reprokit", *map(str, args)]
    return subprocess.run(command, capture_output=True, env=env, timeout=timeout, cwd=ROOT)


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped yet (it runs no code)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def orphans(pids_dir: Path, run_dir: Path) -> list[int]:
    """Processes still alive that a stage started: by the pid files they wrote, and by /proc
    (any live process whose working folder or command line is inside ``run_dir``)."""
    alive = {int(p.read_text()) for p in pids_dir.glob("*.*") if p.read_text().isdigit()}
    alive = {pid for pid in alive if not gone(pid)}
    marker = str(run_dir.resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if (cwd.startswith(marker) or marker in cmdline) and not gone(int(entry.name)):
            alive.add(int(entry.name))
    return sorted(alive)


def case_file(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path
