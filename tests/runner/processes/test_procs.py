"""One child process: classification, the group kill (grandchildren included), capped logs."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from reprokit.records import Status
from reprokit.runner.processes import signals
from reprokit.runner.processes.procs import run_process

GRANDCHILD = (
    "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(3600)"
)


def gone(pid: int) -> bool:
    """No such process, or only a zombie that nobody reaped yet (it runs no code)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def python(tmp_path: Path, code: str, **kwargs):
    return run_process(
        [sys.executable, "-c", code],
        stdout=tmp_path / "stdout.log",
        stderr=tmp_path / "stderr.log",
        **kwargs,
    )


@pytest.mark.parametrize(
    ("code", "status", "returncode", "signal"),
    [
        ("print('hi')", Status.OK, 0, None),
        ("raise SystemExit(3)", Status.ERROR, 3, None),
        ("raise ValueError('no')", Status.ERROR, 1, None),
        ("import os; os.abort()", Status.CRASH, -6, "SIGABRT"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", Status.CRASH, -11, "SIGSEGV"),
    ],
)
def test_each_ending_is_classified(tmp_path, code, status, returncode, signal):
    ended = python(tmp_path, code)
    assert (ended.status, ended.returncode, ended.signal) == (status, returncode, signal)


def test_output_lands_in_the_logs_and_stdin_is_closed(tmp_path):
    code = "import sys; print(repr(sys.stdin.read())); print('e', file=sys.stderr)"
    ended = python(tmp_path, code)
    assert ended.status is Status.OK
    assert (tmp_path / "stdout.log").read_text() == "''\n"
    assert (tmp_path / "stderr.log").read_text() == "e\n"


def spawn_grandchild(marker: Path) -> str:
    """Code that starts a grandchild ignoring SIGTERM and waits until it wrote its pid."""
    return (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {GRANDCHILD!r}, {str(marker)!r}])\n"
        f"while not os.path.exists({str(marker)!r}) or not open({str(marker)!r}).read():\n"
        "    time.sleep(0.01)\n"
    )


def test_an_ending_kills_the_group_with_a_grandchild_that_ignores_sigterm(tmp_path):
    # A stop once the grandchild is up, and a long grace (it costs nothing: the group's SIGKILL
    # follows as soon as the child itself has gone).
    marker = tmp_path / "grandchild.pid"
    stop = threading.Event()
    ready = threading.Thread(target=lambda: wait_for(marker) or stop.set())
    ready.start()
    code = spawn_grandchild(marker) + "time.sleep(3600)\n"
    ended = python(tmp_path, code, stop=stop, timeout=120, grace=30)
    ready.join()
    assert ended.status is Status.INTERRUPTED
    assert ended.signal == "SIGTERM"  # the child itself went at once; the grandchild needed KILL
    assert gone(int(marker.read_text()))


def test_a_child_hears_sigterm_where_the_harness_ignores_it(tmp_path):
    # As after an interrupt or the CLI's last words in a process that goes on (a test that
    # ran the CLI in-process): a child must not inherit SIG_IGN and need SIGKILL.
    with signals.ignored():
        ended = python(tmp_path, "import time; time.sleep(60)", timeout=1, grace=30)
    assert (ended.status, ended.signal) == (Status.TIMEOUT, "SIGTERM")


def wait_for(marker: Path) -> None:
    while not (marker.exists() and marker.read_text()):
        time.sleep(0.01)
    time.sleep(0.2)  # the child leaves its wait loop for the long sleep


def test_a_grandchild_left_behind_by_a_child_that_exits_is_killed(tmp_path):
    marker = tmp_path / "grandchild.pid"
    ended = python(tmp_path, spawn_grandchild(marker))
    assert ended.status is Status.OK
    assert gone(int(marker.read_text()))


def test_a_stop_request_ends_the_child(tmp_path):
    stop = threading.Event()
    marker = tmp_path / "pid"
    code = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(99)"
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    ended = python(tmp_path, code, stop=stop, grace=1)
    timer.join()
    assert ended.status is Status.INTERRUPTED
    assert gone(int(marker.read_text()))


def test_logs_keep_the_head_and_the_tail_under_the_cap(tmp_path):
    code = (
        "import sys\n"
        "sys.stdout.write('HEAD\\n' + 'x' * 3_000_000 + '\\nTAIL\\n')\n"
        "sys.stderr.write('y' * 10)\n"
    )
    ended = python(tmp_path, code, log_cap=64 * 1024)
    log = (tmp_path / "stdout.log").read_text()
    assert ended.status is Status.OK
    assert ended.cut == ("stdout.log",)
    assert len(log) < 64 * 1024 + 200
    assert log.startswith("HEAD\n") and log.endswith("\nTAIL\n")
    assert "bytes cut from the middle of this log" in log
    assert (tmp_path / "stderr.log").read_text() == "y" * 10


def test_a_missing_program_is_an_error_not_a_hang(tmp_path):
    with pytest.raises(FileNotFoundError):
        run_process(
            [os.fspath(tmp_path / "nope")],
            stdout=tmp_path / "o.log",
            stderr=tmp_path / "e.log",
        )
