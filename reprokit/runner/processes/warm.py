"""Warm start: stages forked from a server that imported torch (and torch_xla) already.

Python starting and importing torch and torch_xla takes seconds (3.9 s on an idle 2-core
machine, 6-9 s on a busy one), the repro often less. A server (``warm_server.py``) pays that
once per environment and forks one child per stage. The child applies the stage's environment
before the XLA runtime starts and runs the script as ``python repro.py --stage S`` would. It
is still one process per stage, leading its own process group: :func:`procs.supervise` drives
it exactly as a cold child (timeout, stop, capped logs, the group killed, the watchdog told),
and its return code is the real one (3 for ``sys.exit(3)``, -11 for SIGSEGV).

A server outlives the run that started it by ``REPROKIT_WARM_IDLE`` seconds (:data:`LINGER`
when unset; 0: it ends with its last run), so that the next run in the same environment
starts its stages at once instead of after the imports. A run finds it by name (an abstract
Unix socket named after its key, served to the same user only) and starts one where nobody
has the name; a server whose imported files changed since it started (an upgrade) tells the
run so, ends, and is replaced.

Which server: one per (modules imported before the fork, environment those imports may read).
torch_xla's import reads the environment (PJRT_DEVICE to pick a default device, PT_XLA_DEBUG,
XLA_REGISTER_INSTALLED_PLUGINS, TF_CPP_MIN_LOG_LEVEL...), torch's reads OMP_*, MKL_*, TORCH_*,
OpenBLAS and the interpreter PYTHON*; rather than trust a list, the whole environment keys the
server except :data:`NOT_KEYED`: :data:`RUNTIME_READ`, the variables shown to be read only
when the runtime starts (set after ``import torch_xla``, CPU_NUM_DEVICES=4 gives four devices,
an unknown flag in XLA_FLAGS aborts only at the first device use, XLA_SAVE_TENSORS_FILE still
gets the graphs), and the shell's, the terminal's and pytest's bookkeeping (:data:`SESSION`:
two terminals share a server). (torch_xla's import also appends
``--xla_cpu_enable_fast_math=false`` to XLA_FLAGS: the child redoes that on its own
XLA_FLAGS.) A cpu stage is forked from a server without torch_xla: its import patches torch
(dynamo config, clip_grad_norm_), which a cold cpu stage never sees.

Each stage's record says how it started: ``started: "warm"`` when forked, else ``"cold: why"``:
--cold, xla_multicore (xmp.spawn starts its own processes), CUDA and XLA on TPU/GPU (not
verified here), a server that could not start or died too often.
A server dying during a stage costs that stage a cold re-run, never its result.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from reprokit.environment.variables import RUNTIME_READ
from reprokit.errors import ReprokitWarning
from reprokit.infra.offload import here
from reprokit.infra.python_source import parse_python
from reprokit.records import Status
from reprokit.records.folder import CHILD_INPUT, CHILD_OUTPUT, LIST_STAGES, child_logs
from reprokit.runner.backends import stage_env
from reprokit.runner.options import Options
from reprokit.runner.processes import signals
from reprokit.runner.processes.procs import Ended, supervise
from reprokit.runner.processes.stage import WARM, Launch, LocalExecutor, StageJob, cold

SERVER = Path(__file__).with_name("warm_server.py")
OFFLOADED = Path(__file__).with_name("offload_child.py")
OFFLOAD_TIMEOUT = 3600.0  # a comparison of GBs of tensors; past it, done here instead
WARM_BACKENDS = ("cpu", "xla", "xla_spmd")
COLD_ASKED = "--cold"  # the why of a stage when the run asked for no warm start
TAKEN = 4  # a server's exit status when another holds its name (warm_server.TAKEN)
MAX_SERVERS = 4  # distinct environments in one run; more start cold
MAX_DEATHS = 2  # a server that died this often is not started again: cold starts
READY = 600.0  # seconds a server may take to import (a loaded machine, a slow disk)
IDLE = "REPROKIT_WARM_IDLE"  # seconds a server waits for the next run; 0: it ends with its run
LINGER = 600.0  # ... when that is not set
# Set by the shell, the terminal or pytest, per folder, window, login or test, and read by no
# import: a server is kept for a run in another folder, another terminal (tmux, ssh, an IDE's),
# or pytest's next item; REPROKIT_CACHE is where the harness keeps results, no stage's concern
SESSION = {"PWD", "OLDPWD", "SHLVL", "_", "PYTEST_CURRENT_TEST", "TERM", "COLORTERM", "COLUMNS",
           "LINES", "DISPLAY", "WINDOWID", "TMUX", "TMUX_PANE", "STY", "WINDOW", "SSH_CLIENT",
           "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "TERM_PROGRAM", "TERM_PROGRAM_VERSION",
           "TERM_SESSION_ID", "XDG_SESSION_ID", "REPROKIT_CACHE"}  # fmt: skip
NOT_KEYED = RUNTIME_READ | SESSION
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

    ``close()`` (the scheduler calls it when the run ends) hangs up on every server; ``offload``
    does the harness's torch work in a fork of one (infra/offload.py)."""

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
        server, why = self._server_for(how, stop)
        if server is None:
            return self._cold(how, stop, why)
        try:
            ended, lost = self._forked(server, how, stop)
        except ServerLost as exc:
            return self._cold(how, stop, f"the warm server failed ({exc})")
        if not lost:
            return ended, WARM
        if stop.is_set():
            return replace(ended, status=Status.INTERRUPTED), WARM
        _clear_outputs(how.logs[0].parent, how.logs)
        return self._cold(how, stop, "the warm server died during the stage: re-run cold")

    def offload(self, work: str, data: Any, stop: threading.Event) -> Any:
        """``offload.here(work, data)`` in a child forked from the warm server that has torch
        (one started for it if need be, as a cpu stage would start it), so that the harness
        never imports torch; in this process where that fails (no server, a crash)."""
        if sys.modules.get("torch") is not None:  # here already (pytest's, a fallback's)
            return here(work, data)
        with tempfile.TemporaryDirectory(prefix="reprokit-offload-") as folder:
            cwd = Path(folder)
            (cwd / CHILD_INPUT).write_text(json.dumps(data), "utf-8")
            command = [sys.executable, str(OFFLOADED), work, CHILD_INPUT, CHILD_OUTPUT]
            env = stage_env("cpu", self.options.xla_device)
            logs = child_logs(cwd)
            how = Launch(command, "offload", "cpu", env, cwd, logs, OFFLOAD_TIMEOUT)
            server, _ = self._server_for(how, stop)
            with contextlib.suppress(ServerLost):
                ended, lost = self._forked(server, how, stop) if server else (None, True)
                if not lost and ended.status is Status.OK and (cwd / CHILD_OUTPUT).is_file():
                    return json.loads((cwd / CHILD_OUTPUT).read_text("utf-8"))
        return here(work, data)

    def _server_for(self, how: Launch, stop: threading.Event) -> tuple[_Server | None, str]:
        """The server to fork ``how`` from, or None and why it starts cold."""
        if not self.options.warm:
            return None, COLD_ASKED
        why = _cold_because(how, self.options.xla_device)
        if why is not None:
            return None, why
        server, why = self._server(_key(how), stop)
        return server, why or "no warm server"

    def _forked(self, server: _Server, how: Launch, stop: threading.Event) -> tuple[Ended, bool]:
        """``how`` forked from ``server`` and driven to its end, and whether the server died
        meanwhile (the child's group killed: its ending is unknown). ServerLost: the server
        did not fork it."""
        try:
            child, pipes, begun = server.fork(how)
        except ServerLost:
            self._died(server)
            raise
        ended = supervise(child, pipes, *how.logs, begun, how.timeout, stop, *self._limits())
        if child.lost:
            self._died(server)
        return ended, child.lost

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
        key = _key(how)
        with self._lock:
            gate = self._starting.get(key)
            return gate is not None and gate.locked() and key not in self._servers

    def close(self) -> None:
        """Hang up on every server (each kills what it still runs for us): all told first, then
        those that end with the run waited for, so that their exits (a torch_xla process takes
        tenths of a second to end) overlap."""
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


def _key(how: Launch) -> _Key:
    """Which server forks ``how``: its python, what its script imports, its environment less
    what no import reads."""
    env = frozenset((k, v) for k, v in how.env.items() if k not in NOT_KEYED)
    return _Key(how.command[0], _preload(how), env)


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
    """Our connection to the server of one key: found by its name, started when nobody has
    it. ``proc``: the server, when this run started it."""

    def __init__(self, key: _Key, stop: threading.Event) -> None:
        self.key, self.name, self.linger = key, _name(key), _linger(key.env)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None  # what ours printed, should it fail to start
        try:
            self.control = self._connect(stop)
        except ServerLost:
            if self.linger == 0:  # nobody else is to use the one we started: it goes
                self._end()
            raise
        self.send_lock = threading.Lock()

    def _connect(self, stop: threading.Event) -> socket.socket:
        """Connected and greeted; a server started where none had the name, or where the one
        that had it was stale or died before it was ready."""
        deadline = time.monotonic() + READY
        while True:
            if stop.is_set():
                raise ServerLost("the run was stopped")
            if time.monotonic() > deadline:
                raise ServerLost(f"no answer within {READY:g} s")
            sock = _dial(self.name)
            if sock is None:
                self._start()
                time.sleep(0.02)  # it takes the name once its Python has started
                continue
            greeting = _greeting(sock, stop, deadline)
            if "ready" in greeting:
                return sock
            sock.close()
            if self.proc is not None and self.proc.poll() not in (None, TAKEN):
                raise ServerLost(self._last_words())

    def _start(self) -> None:
        """Start a server unless ours is still taking the name; the name taken by another
        (TAKEN) means that one serves."""
        if self.proc is not None:
            ended = self.proc.poll()
            if ended is None:
                return
            if ended != TAKEN:
                raise ServerLost(self._last_words())
        _reap_lingering()
        self.log = self.log or tempfile.TemporaryFile()
        preload, linger = ",".join(self.key.preload), f"{self.linger:g}"
        self.proc = subprocess.Popen(
            [self.key.python, str(SERVER), preload, self.name, linger],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            env=dict(self.key.env),
            cwd="/",  # no run folder: it would count as a process left in it
            start_new_session=True,  # a stage's group kill never reaches it
            preexec_fn=signals.heard_in_child(),  # its forks, our stages, hear SIGTERM
        )

    def _last_words(self) -> str:
        assert self.proc is not None and self.log is not None
        self.proc.wait()
        self.log.seek(0)
        lines = self.log.read().decode("utf-8", "replace").strip().splitlines()
        return f"exit {self.proc.returncode}: {lines[-1] if lines else 'no output'}"

    def alive(self) -> bool:
        """Nothing comes on a greeted connection but its end (the server died)."""
        try:
            return not select.select([self.control], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def fork(self, how: Launch) -> tuple[_Forked, tuple[Any, Any], float]:
        """Ask for the stage's child; its pipes' read ends, and when it was asked for."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out, err = os.pipe(), os.pipe()
        # the server runs in a folder of its own: a relative cwd (`-o runs/x`) is the run's
        request = {
            "script": how.command[1],
            "argv": how.command[1:],
            "cwd": os.path.abspath(how.cwd),
        }
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
        """EOF on our connection: the server kills what it runs for us (not waited for)."""
        self.control.close()

    def close(self) -> None:
        """Hang up (again, if done already: a socket closes twice). A server this run started
        and that does not linger is waited for (else killed); one that lingers is left to
        serve the next run."""
        self.hang_up()
        if self.log is not None:
            self.log.close()
        if self.proc is None:
            return
        if self.linger > 0 and self.proc.poll() is None:
            _LINGERING.append(self.proc)
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._end()

    def _end(self) -> None:
        """Kill the server we started (its group: it leads one) and reap it."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


_LINGERING: list[subprocess.Popen[bytes]] = []  # servers we started that outlive their run


def _reap_lingering() -> None:
    """Reap the servers we started that have ended since (a long-lived process, such as
    pytest's, starts many)."""
    _LINGERING[:] = [proc for proc in _LINGERING if proc.poll() is None]


def _name(key: _Key) -> str:
    """The server's abstract socket name: one per user and key (and server script)."""
    identity = repr((key.python, key.preload, sorted(key.env), str(SERVER)))
    return f"reprokit-warm-{os.getuid()}-{hashlib.sha256(identity.encode()).hexdigest()[:32]}"


def _linger(env: Iterable[tuple[str, str]]) -> float:
    """Seconds the server waits for the next run (``REPROKIT_WARM_IDLE``, else
    :data:`LINGER`; 0: it ends with its last run)."""
    value = dict(env).get(IDLE, "")
    try:
        return max(0.0, float(value)) if value.strip() else LINGER
    except ValueError:
        warnings.warn(f"{IDLE}={value!r} is not a number of seconds: the warm servers wait "
                      f"{LINGER:g} s for the next run; set it to seconds (0: they end with "
                      "the run)", ReprokitWarning, stacklevel=2)  # fmt: skip
        return LINGER


def _dial(name: str) -> socket.socket | None:
    """Connected to the server that has ``name``, or None when none has it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect("\0" + name)
    except OSError:
        sock.close()
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    if struct.unpack("3i", creds)[1] != os.getuid():  # it would see our stages' environment
        sock.close()
        raise ServerLost("another user's process holds the warm server's name")
    return sock


def _greeting(sock: socket.socket, stop: threading.Event, deadline: float) -> dict[str, Any]:
    """The server's first message ({"ready": pid} or {"stale": why}); {} when it ended first."""
    sock.settimeout(0.2)
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            return {}
        sock.settimeout(None)
        return json.loads(data) if data else {}
    raise ServerLost("the run was stopped" if stop.is_set() else f"no answer within {READY:g} s")


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

    def ending(self) -> int | None:
        """Our socket: the server says there when it exited (or closes it, should it die)."""
        return None if self.sock.fileno() < 0 else self.sock.fileno()

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
