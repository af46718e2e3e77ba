"""Faults injected in stages, interrupts at random moments, and a suite of 200 variants.

Every stage of tests/data/reliability/faults.py.j2 writes its pid (and so does the grandchild
it may start) into a folder, so that orphans are found by pid as well as by a look through
/proc for any process still working inside the run folder.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

from reliability_common import (
    FAULT_TEMPLATES,
    PYTHON,
    ROOT,
    Figure,
    case_file,
    info,
    orphans,
    reprokit,
    zero,
)

from reprokit.generate.variants import load_variants
from reprokit.infra.pause import POINTS
from reprokit.records import read_summary
from reprokit.runner.options import Options
from reprokit.runner.scheduler import run

# mode: (outcome, the second stage's status, its signal). Why each is right:
EXPECTED = {
    "ok": ("match", "ok", None),  # the control: faults elsewhere must not touch it
    "raise": ("error", "error", None),  # an exception: exit code 1
    "exit3": ("error", "error", None),  # a non-zero exit is an error, with its code
    "abort": ("crash", "crash", "SIGABRT"),  # died by a signal: a crash, named
    "segfault": ("crash", "crash", "SIGSEGV"),
    "waitkill": ("crash", "crash", "SIGKILL"),  # killed from outside (the OOM killer, a user)
    "hang": ("timeout", "timeout", None),  # outlived --timeout: its group killed
    "grandchild": ("timeout", "timeout", None),  # and the grandchild that ignores SIGTERM too
    "flood": ("match", "ok", None),  # output is not a fault: logs capped, tensors agree
    "badutf8": ("match", "ok", None),  # bytes are logged as they come
    "rmworkdir": ("error", "ok", None),  # exit 0 but the tensors to compare are gone
    "evil": ("error", "ok", None),  # a pickle that runs code is refused, never loaded
}
LOG_NOTE = 100  # bytes: the "[... N bytes cut ...]" note a capped log may add to the cap
FAULT_CASE = """\
[case]
title = "faults"
template = "faults"
[params]
pids = "{pids}"
marker = "{marker}"
megabytes = {megabytes}
[matrix]
mode = {modes}
"""


def _killer(pids: Path, stop: threading.Event) -> None:
    """SIGKILL, from outside, every `waitkill` stage as soon as it has written its pid."""
    killed: set[Path] = set()
    while not stop.wait(0.05):
        for path in set(pids.glob("*.second.waitkill")) - killed:
            if text := path.read_text():
                os.kill(int(text), signal.SIGKILL)
                killed.add(path)


def faults(
    folder: Path, *, megabytes: int, timeout: float = 8.0, modes: list[str] | None = None
) -> list[Figure]:
    """Faults of EXPECTED (all by default) in one run (-n 2): classified right, logs capped,
    no orphan, the other stages and the control variant untouched."""
    modes = list(EXPECTED) if modes is None else modes
    pids, marker, run_dir = folder / "pids", folder / "pwned", folder / "run"
    pids.mkdir(parents=True)
    text = FAULT_CASE.format(pids=pids, marker=marker, megabytes=megabytes, modes=json.dumps(modes))
    variants = load_variants([str(case_file(folder, "faults", text))], templates=[FAULT_TEMPLATES])
    cap = 256 * 1024
    options = Options(jobs=2, timeout=timeout, templates=(FAULT_TEMPLATES,), log_cap=cap, grace=1.0)
    stop = threading.Event()
    killer = threading.Thread(target=_killer, args=(pids, stop), daemon=True)
    killer.start()
    try:
        summary = run(variants, run_dir=run_dir, options=options)
    except Exception as exc:  # the harness itself broke: that is the figure
        return [Figure(f"faults {'+'.join(modes)}: harness crashed", type(exc).__name__, "", False)]
    finally:
        stop.set()
        killer.join()
    right, wrong, others = 0, [], 0
    for result in summary.variants:
        mode = result.variant["mode"]
        stages = {s.name: s for s in result.stages}
        second = stages["second"]
        got = (result.outcome.value, second.status.value, second.signal)
        want = EXPECTED[mode]
        ok = got[:2] == want[:2] and (want[2] is None or got[2] == want[2])
        right += ok
        if not ok:
            wrong.append(f"{mode}: {got}")
        others += any(stages[n].status.value != "ok" for n in ("first", "aside"))
    logs = [p.stat().st_size for p in run_dir.rglob("*.log")]
    flood = run_dir / "faults[flood]/stages/second/stdout.log"
    evil = next((v for v in summary.variants if v.variant["mode"] == "evil"), None)
    refused = evil is not None and "refused" in (evil.reason or "")
    figures = [
        info("faults injected", len(modes) - ("ok" in modes)),
        Figure("faults classified right (+ok)", right, f"{len(modes)}", right == len(modes)),
        info(f"flood printed (MiB, each stream, cap {cap // 1024} KiB)", megabytes),
        Figure(
            "largest log (bytes)", max(logs), f"<= cap + {LOG_NOTE}", max(logs) <= cap + LOG_NOTE
        ),
        zero("orphans after faults", len(orphans(pids, run_dir))),
        zero("other stages affected", others),
        zero("evil tensors.pt executed (runner)", int(marker.exists())),
    ]
    if "flood" in modes:
        figures.append(Figure("flood log kept its tail", _tail(flood), "True", _tail(flood)))
    if "evil" in modes:
        figures.append(Figure("evil tensors.pt refused (runner)", refused, "True", refused))
    for line in wrong:
        figures.append(Figure(f"  misclassified {line}", "", "", False))
    return figures


def _tail(log: Path) -> bool:
    return log.exists() and log.read_bytes().rstrip().endswith(b"the end of stdout")


INTERRUPT_CASE = """\
[case]
title = "interrupts"
template = "faults"
[params]
pids = "{pids}"
nap = 0.3
[matrix]
i = {indices}
"""


def _finished_on_disk(run_dir: Path) -> set[str]:
    """Variants whose three stages all wrote result.json (their last act before exit)."""
    done = set()
    for folder in run_dir.glob("interrupts*"):
        if all((folder / f"stages/{s}/result.json").exists() for s in ("first", "second", "aside")):
            done.add(folder.name)
    return done


def _one_interrupt(
    folder: Path, case: Path, delay: float, signum: int, pause: str | None = None
) -> dict:
    """Start `reprokit run`, signal it after ``delay`` seconds, or once it holds still at the
    test point ``pause`` (reprokit/infra/pause.py), and judge what it left."""
    run_dir, marker = folder / "run", folder / "paused"
    command = [PYTHON, "-m", "reprokit", "run", str(case), "-n", "2", "-o", str(run_dir)]
    command += ["--templates", str(FAULT_TEMPLATES), "--timeout", "120", "--no-cache"]
    env = dict(os.environ, REPROKIT_PAUSE=f"{pause}:{marker}") if pause else None
    child = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    paused = _held(marker, child) if pause else bool(time.sleep(delay))
    child.send_signal(signum)
    if paused:  # a worker thread holds still until the marker goes; the main thread does not
        time.sleep(0.2)
        marker.unlink()
    code = child.wait(timeout=300)
    judged = {"code": code, "unreadable": 0, "lost": 0, "report": None, "paused": paused}
    judged["started"] = any(run_dir.glob("*/stages"))
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        judged["unreadable"] = int(judged["started"])  # nothing ran: nothing to keep
        return judged
    try:
        labels = {v.label for v in read_summary(run_dir).variants}
    except (ValueError, KeyError, TypeError):
        judged["unreadable"] = 1
        return judged
    judged["lost"] = len(_finished_on_disk(run_dir) - labels)
    judged["report"] = reprokit("report", run_dir, "--format", "md").returncode
    return judged


def _held(marker: Path, child: subprocess.Popen, limit: float = 120) -> bool:
    """Wait until the run writes its pid into ``marker``: it holds still at its test point."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and child.poll() is None:
        if marker.exists() and marker.read_text().endswith("\n"):
            return True
        time.sleep(0.02)
    return False


def paused_interrupt(folder: Path, point: str, signum: int) -> dict:
    """One run of 3 variants signalled while it holds still at the test point ``point``;
    the judgement, with the processes it left behind under "orphans"."""
    pids = folder / "pids"
    pids.mkdir(parents=True)
    text = INTERRUPT_CASE.format(pids=pids, indices=[0, 1, 2]).replace("nap = 0.3", "nap = 0.1")
    judged = _one_interrupt(folder, case_file(folder, "interrupts", text), 0, signum, point)
    judged["orphans"] = orphans(pids, folder / "run")
    return judged


def test_points(folder: Path) -> list[Figure]:
    """A signal at each test point of reprokit/infra/pause.py, each of SIGINT, SIGTERM, SIGHUP."""
    wrong = []
    for point in POINTS:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            judged = paused_interrupt(folder / f"{point}-{signum}", point, signum)
            ok = judged["paused"] and judged["code"] == 130 and judged["report"] == 0
            if not ok or judged["lost"] or judged["unreadable"] or judged["orphans"]:
                wrong.append(f"{point} {signal.Signals(signum).name}: {judged}")
    figures = [info("signals sent at test points", len(POINTS) * 3)]
    figures.append(zero("  not 130, lost, unreadable or orphaned", len(wrong)))
    return figures + [Figure(f"  {line}", "", "", False) for line in wrong]


def interrupts(folder: Path, count: int, rng: random.Random) -> list[Figure]:
    """``count`` runs of 8 variants, each stopped by SIGINT, SIGTERM or SIGHUP at a random
    moment."""
    folder.mkdir(parents=True, exist_ok=True)
    results, pids = [], folder / "pids"
    pids.mkdir()
    text = INTERRUPT_CASE.format(pids=pids, indices=list(range(8)))
    case = case_file(folder, "interrupts", text)
    for n in range(count):
        signum = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
        results.append(_one_interrupt(folder / f"{n}", case, rng.uniform(0.2, 9.0), signum))
    codes = sorted({r["code"] for r in results})
    # A signal that comes while Python still imports reprokit ends it the default way (-15):
    # nothing had started, nothing is lost. After a stage started, the exit must be 0 or 130.
    bad_codes = [r for r in results if r["started"] and r["code"] not in (0, 130)]
    early = sum(not r["started"] and r["code"] not in (0, 130) for r in results)
    reports = [r["report"] for r in results if r["report"] is not None]
    return [
        info("interrupts sent", count),
        info("  exit codes seen", ",".join(map(str, codes))),
        info("  ended by the signal itself before any stage (no summary)", early),
        zero("  exit codes other than 0/130 once a stage started", len(bad_codes)),
        zero("runs left unreadable", sum(r["unreadable"] for r in results)),
        zero("finished variants lost", sum(r["lost"] for r in results)),
        zero("reprokit report failures", sum(code != 0 for code in reports)),
        zero("orphans after interrupts", len(orphans(pids, folder))),
    ]


LOAD_CASE = """\
[case]
title = "load"
template = "faults"
[params]
compared = false
[matrix]
i = {indices}
"""


def _peak_rss(case: Path, run_dir: Path) -> tuple[int, int, float]:
    """Run the suite; return the harness's peak RSS (KiB, sampled VmHWM), exit code, seconds."""
    command = [PYTHON, "-m", "reprokit", "run", str(case), "-n", "auto", "-o", str(run_dir)]
    command += ["--templates", str(FAULT_TEMPLATES), "--timeout", "300"]
    start = time.monotonic()
    child = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    peak = 0
    while child.poll() is None:
        peak = max(peak, _vm_hwm(child.pid))
        time.sleep(0.05)
    return peak, child.returncode, time.monotonic() - start


def _vm_hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def load(folder: Path, sizes: tuple[int, ...]) -> list[Figure]:
    """Suites of ``sizes`` variants with -n auto: all results present, harness memory flat."""
    figures, peaks = [], {}
    for size in sizes:
        text = LOAD_CASE.format(indices=list(range(size)))
        case = case_file(folder / f"{size}", "load", text)
        run_dir = folder / f"{size}/run"
        peak, code, seconds = _peak_rss(case, run_dir)
        summary = read_summary(run_dir)
        present = sum(v.outcome.value == "match" for v in summary.variants)
        peaks[size] = peak
        figures += [
            Figure(f"load {size}: results present (match)", present, f"{size}", present == size),
            Figure(f"load {size}: exit code", code, "0", code == 0),
            info(f"load {size}: seconds", round(seconds, 1)),
            info(f"load {size}: harness peak RSS (MiB)", round(peak / 1024, 1)),
        ]
    small, large = peaks[min(sizes)], peaks[max(sizes)]
    ratio = round(large / small, 2) if small else float("inf")
    figures.append(Figure("load: peak RSS ratio large/small", ratio, "<= 1.25", ratio <= 1.25))
    return figures
