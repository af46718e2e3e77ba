"""Warm start: stages forked from a server that imported torch (and torch_xla) already.

Python starting and importing torch and torch_xla takes seconds (3.9 s on an idle 2-core
machine, 6-9 s on a busy one), the repro often less. A server (``warm_server.py``) pays that
once per environment and forks one child per stage. The child applies the stage's environment
before the XLA runtime starts and runs the script as ``python repro.py --stage S`` would. It
is still one process per stage, leading its own process group: :func:`procs.supervise` drives
it exactly as a cold child (timeout, stop, capped logs, the group killed, the watchdog told),
and its return code is the real one (3 for ``sys.exit(3)``, -11 for SIGSEGV).

Which server: one per (modules imported before the fork, environment those imports may read).
torch_xla's import reads the environment (PJRT_DEVICE to pick a default device, PT_XLA_DEBUG,
XLA_REGISTER_INSTALLED_PLUGINS, TF_CPP_MIN_LOG_LEVEL...), torch's reads OMP_*, MKL_*, TORCH_*,
OpenBLAS and the interpreter PYTHON*; rather than trust a list, the whole environment keys the
server except :data:`RUNTIME_READ`, the variables shown to be read only when the runtime
starts: set after ``import torch_xla``, CPU_NUM_DEVICES=4 gives four devices, an unknown flag in
XLA_FLAGS aborts only at the first device use, XLA_SAVE_TENSORS_FILE still gets the graphs.
(torch_xla's import also appends ``--xla_cpu_enable_fast_math=false`` to XLA_FLAGS: the child
redoes that on its own XLA_FLAGS.) A cpu stage is forked from a server without torch_xla: its
import patches torch (dynamo config, clip_grad_norm_), which a cold cpu stage never sees.

Each stage's record says how it started: ``started: "warm"`` when forked, else ``"cold: why"``:
--cold, xla_multicore (xmp.spawn starts its own processes), CUDA and XLA on TPU/GPU (not
verified here), a server that could not start or died too often.
A server dying during a stage costs that stage a cold re-run, never its result.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reprokit.environment.variables import RUNTIME_READ
from reprokit.infra.python_source import parse_python
from reprokit.records import Status
from reprokit.runner import signals
from reprokit.runner.options import Options
from reprokit.runner.procs import Ended, supervise
from reprokit.runner.stage import LIST_STAGES, WARM, Launch, LocalExecutor, StageJob, cold
from reprokit.runner.watchdog import WATCHDOG

SERVER = Path(__file__).with_name("warm_server.py")
WARM_BACKENDS = ("cpu", "xla", "xla_spmd")
COLD_ASKED = "--cold"  # the why of a stage when the run asked for no warm start
MAX_SERVERS = 4  # distinct environments in one run; more start cold
MAX_DEATHS = 2  # a server that died this often is not started again: cold starts
READY = 600.0  # seconds a server may take to import (a loaded machine, a slow disk)
ANSWER = 60.0  # seconds the server may take to fork, or to reap a killed child


class ServerLost(Exception):
    """The server is gone (killed, crashed) or refused: the stage starts cold."""


@dataclass(frozen=True)
class _Key:
    python: str  # the run's, or that of the variant's environment
    preload: tuple[str, ...]
    env: frozenset[tuple[str, str]]


class WarmExecutor(LocalExecutor):
    """A :class:`LocalExecutor` whose stages are forked from warm servers where that is safe.

    ``close()`` (the scheduler calls it when the run ends) stops every server."""

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self._lock = threading.Lock()
        self._servers: dict[_Key, _Server] = {}
        self._starting: dict[_Key, threading.Lock] = {}
        self._deaths: dict[_Key, int] = {}
        self._refused: dict[_Key, str] = {}  # why a server did not start: not tried again

    def start(self, how: Launch, stop: threading.Event) -> tuple[Ended, str]:
        if how.name == LIST_STAGES:  # not a stage: no server for it
            return super().start(how, stop)
        if not self.options.warm:
            return self._cold(how, stop, COLD_ASKED)
        why = _cold_because(how, self.options.xla_device)
        server = None
        if why is None:
            key = _Key(how.command[0], _preload(how), _key_env(how.env))
            server, why = self._server(key, stop)
        if server is None:
            return self._cold(how, stop, why or "no warm server")
        try:
            child, pipes, begun = server.fork(how)
        except ServerLost as exc:
            self._died(server)
            return self._cold(how, stop, f"the warm server failed ({exc})")
        ended = supervise(child, pipes, *how.logs, begun, how.timeout, stop, *self._limits())
        if not child.lost:
            return ended, WARM
        self._died(server)
        if stop.is_set():
            return replace(ended, status=Status.INTERRUPTED), WARM
        _clear_outputs(how.logs[0].parent, how.logs)
        return self._cold(how, stop, "the warm server died during the stage: re-run cold")

    def waits(self, job: StageJob) -> bool:
        """Whether ``job`` would now wait for a warm server that another stage is starting
        (seconds of imports): the scheduler gives its slot to other work meanwhile."""
        if not self.options.warm:
            return False
        command, env = self.command_of(job)
        stage = job.stage
        how = Launch(command, stage.name, stage.backend, env, job.folder, [], 0.0)
        if _cold_because(how, self.options.xla_device) is not None:
            return False
        key = _Key(how.command[0], _preload(how), _key_env(how.env))
        with self._lock:
            gate = self._starting.get(key)
            return gate is not None and gate.locked() and key not in self._servers

    def close(self) -> None:
        """Stop every server (each kills what it still runs): all told first, then each
        waited for, so that their exits (a torch_xla process takes tenths of a second to
        end) overlap."""
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.hang_up()
        for server in servers:
            server.close()

    def _limits(self) -> tuple[float, float]:
        return self.options.log_cap, self.options.grace

    def _cold(self, how: Launch, stop: threading.Event, why: str) -> tuple[Ended, str]:
        ended, _ = super().start(how, stop)
        return ended, cold(why)

    def _server(self, key: _Key, stop: threading.Event) -> tuple[_Server | None, str | None]:
        """The running server for ``key``, started if need be (one thread starts it, the
        others wait for it); else None and why."""
        with self._lock:
            gate = self._starting.setdefault(key, threading.Lock())
        with gate:
            found = self._servers.get(key)
            if found is not None and found.alive():
                return found, None
            if found is not None:  # died between stages
                self._died(found)
            with self._lock:
                if key in self._refused:
                    return None, self._refused[key]
                if self._deaths.get(key, 0) >= MAX_DEATHS:
                    return None, f"the warm server for this environment died {MAX_DEATHS} times"
                if len(self._servers) >= MAX_SERVERS:
                    return None, f"more than {MAX_SERVERS} environments need a warm server"
            try:
                server = _Server(key, stop)
            except ServerLost as exc:
                with self._lock:
                    self._refused[key] = f"the warm server did not start ({exc})"
                    return None, self._refused[key]
            with self._lock:
                self._servers[key] = server
            return server, None

    def _died(self, server: _Server) -> None:
        server.close()
        with self._lock:
            if self._servers.get(server.key) is server:
                del self._servers[server.key]
                self._deaths[server.key] = self._deaths.get(server.key, 0) + 1


def _cold_because(how: Launch, xla_device: str) -> str | None:
    """Why this stage must not be forked, or None."""
    if how.backend == "xla_multicore":
        return "xmp.spawn (xla_multicore) starts processes of its own"
    if how.backend not in WARM_BACKENDS:
        return f"warm start is not verified on the {how.backend} backend"
    if how.backend != "cpu" and xla_device != "CPU":
        return f"warm start is not verified on XLA:{xla_device}"
    if len(how.command) < 2 or not how.command[1].endswith(".py"):
        return "not a Python script"
    return None


def _preload(how: Launch) -> tuple[str, ...]:
    """What the server imports: torch where the script imports it at its top (a script that
    does not gets a server without it), torch_xla for an XLA stage or where the top does."""
    top = _top_imports(how.cwd / how.command[1])
    modules = [name for name in ("torch", "torch_xla") if name in top]
    if how.backend != "cpu" and "torch_xla" not in modules:
        modules.append("torch_xla")
    return tuple(modules)


def _top_imports(script: Path) -> frozenset[str]:
    try:
        stat = script.stat()
    except OSError:
        return frozenset()
    return _parsed_imports(str(script), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _parsed_imports(script: str, _mtime: int, _size: int) -> frozenset[str]:
    """The top-level packages a script imports in its module body (ast, nothing run)."""
    try:
        tree = parse_python(Path(script).read_text("utf-8"))  # thread-safe: see python_source.py
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return frozenset()
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return frozenset(found)


def _key_env(env: dict[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset((k, v) for k, v in env.items() if k not in RUNTIME_READ)


def _clear_outputs(stage_dir: Path, keep: list[Path]) -> None:
    """What a killed warm attempt left (a result.json would pass for the re-run's)."""
    for path in stage_dir.iterdir() if stage_dir.is_dir() else ():
        if path in keep:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


class _Server:
    """One server process, its control socket, and the forks it makes for us."""

    def __init__(self, key: _Key, stop: threading.Event) -> None:
        self.key = key
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile()  # what it printed, should it fail to start
        with theirs:
            self.proc = subprocess.Popen(
                [key.python, str(SERVER), ",".join(key.preload), str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=self.log,
                stderr=self.log,
                env=dict(key.env),
                cwd="/",  # no run folder: it would count as a process left in it
                pass_fds=[theirs.fileno()],
                start_new_session=True,  # a stage's group kill never reaches it
                preexec_fn=signals.heard_in_child(),  # its forks, our stages, hear SIGTERM
            )
        WATCHDOG.watch(self.proc.pid)  # the harness dies: the server goes too
        self.send_lock = threading.Lock()
        try:
            self._ready(stop)
        except ServerLost:
            self.close()
            raise

    def _ready(self, stop: threading.Event) -> None:
        deadline = time.monotonic() + READY
        self.control.settimeout(0.2)
        while True:
            if stop.is_set():
                raise ServerLost("the run was stopped")
            if time.monotonic() > deadline:
                raise ServerLost(f"no answer within {READY:g} s")
            with contextlib.suppress(TimeoutError):
                if self.control.recv(4096):
                    self.control.settimeout(None)
                    return
                raise ServerLost(self._last_words())

    def _last_words(self) -> str:
        self.proc.wait()
        self.log.seek(0)
        lines = self.log.read().decode("utf-8", "replace").strip().splitlines()
        return f"exit {self.proc.returncode}: {lines[-1] if lines else 'no output'}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, how: Launch) -> tuple[_Forked, tuple[Any, Any], float]:
        """Ask for the stage's child; its pipes' read ends, and when it was asked for."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out, err = os.pipe(), os.pipe()
        request = {"script": how.command[1], "argv": how.command[1:], "cwd": str(how.cwd)}
        message = json.dumps(request | {"env": how.env}).encode()
        begun, failed = time.monotonic(), None
        try:
            with self.send_lock:
                socket.send_fds(self.control, [message], [theirs.fileno(), out[1], err[1]])
        except OSError as exc:
            failed = exc
        finally:  # the server has its copies: ours would keep the pipes from ever ending
            theirs.close()
            os.close(out[1])
            os.close(err[1])
        if failed is not None:
            os.close(out[0])
            os.close(err[0])
            ours.close()
            raise ServerLost(f"the request was not taken: {failed}")
        pipes = (open(out[0], "rb", buffering=0), open(err[0], "rb", buffering=0))
        try:
            return _Forked(ours), pipes, begun
        except ServerLost:
            for pipe in pipes:
                pipe.close()
            raise

    def hang_up(self) -> None:
        """EOF on its control socket: it kills what it runs and exits (not waited for)."""
        self.control.close()

    def close(self) -> None:
        """Hang up (again, if done already: a socket closes twice) and wait for it to exit;
        else it is killed."""
        self.hang_up()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        WATCHDOG.forget(self.proc.pid)
        self.log.close()


class _Forked:
    """The :class:`procs.Child` a server forked: it leads its own group, the server (its
    parent) tells us when it exited and, once we ask, its return code. ``lost``: the server
    went away first; the stage's group has been killed by then (``supervise`` does that as
    soon as ``exited()`` says so), and its ending is unknown."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lost = False
        self.done = False
        self.returncode: int | None = None
        answer = self._receive(ANSWER)
        if answer is None or "pid" not in answer:
            sock.close()
            raise ServerLost((answer or {}).get("error", "no child"))
        self.pid: int = answer["pid"]

    def _receive(self, wait: float | None) -> dict[str, Any] | None:
        """The next message, None on EOF (the server died) or when none came in ``wait``."""
        self.sock.settimeout(wait)
        try:
            data = self.sock.recv(4096)
        except (TimeoutError, BlockingIOError):
            return None
        except OSError:
            data = b""
        if not data:
            self.lost = True
            return None
        message = json.loads(data)
        self.done = self.done or "exited" in message or "returncode" in message
        return message

    def exited(self) -> bool:
        if not (self.done or self.lost):
            self._receive(0.0)
        return self.done or self.lost

    def wait(self) -> int:
        """Ask the server to reap it; -SIGKILL when the server is gone (the group was killed)."""
        if not self.lost:
            with contextlib.suppress(OSError):
                self.sock.send(b"reap")
            deadline = time.monotonic() + ANSWER
            while self.returncode is None and not self.lost and time.monotonic() < deadline:
                message = self._receive(max(0.0, deadline - time.monotonic())) or {}
                self.returncode = message.get("returncode", self.returncode)
        self.sock.close()
        if self.returncode is None:
            self.lost = True
            return -signal.SIGKILL
        return self.returncode
