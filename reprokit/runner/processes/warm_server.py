"""The warm-start server: imports torch (and torch_xla) once, then forks one stage a request.

Run by ``warm.py`` as ``python warm_server.py PRELOAD NAME LINGER`` (PRELOAD: modules to
import, comma separated; NAME: the abstract Unix socket it listens on; LINGER: seconds it waits
for the next run once no run is connected), with the environment of the stages it serves
minus the variables no import reads (``warm.NOT_KEYED``: those the XLA runtime reads). Standard
library only, and no reprokit: each stage it forks is to look like ``python repro.py --stage
S`` started cold, so the server leaves as little behind as it can.

It binds NAME before it imports: the bind is the lock that makes one server per name, and a
run that finds the name taken connects and waits for the imports instead of starting its own.
It outlives the run that started it by LINGER seconds, so that the next run (the same python,
modules and environment, hence the same NAME) forks its stages at once; it ends when no run
has been connected for that long, or, after a run connects, when a file it imported (any
module's, its own, the interpreter) changed since it started: it answers that run
``{"stale": why}``, stops listening, and ends once its last run hangs up.

Protocol. A run connects (SOCK_SEQPACKET; only a process of the server's own user is served)
and is greeted ``{"ready": PID}``. A request is one message on that connection: JSON
``{"script", "argv", "cwd", "env"}`` (``cwd`` absolute: the server runs in ``/``, not where
the run does; ``script`` relative to ``cwd``) with three descriptors (a socket for this stage,
the write ends of its stdout and stderr pipes). On the stage's socket the server answers ``{"pid":
N}``, then ``{"exited": true}`` once the child has exited (seen with ``waitid(WNOWAIT)``: not
reaped, so that its pid, the id of its process group, stays taken while the harness kills the
group), and, when the harness sends ``reap``, ``{"returncode": R}`` as Popen gives it (-N:
killed by signal N). EOF on a run's connection (the run is done, or dead): the groups of that
run's children are killed.

What must not happen before the fork (found by reading torch_xla/__init__.py and by
experiment, torch 2.9 / torch_xla 2.9): the PJRT client must not exist (it starts a thread pool
per device and reads PJRT_DEVICE, CPU_NUM_DEVICES and XLA_FLAGS when it starts); the server
checks ``_xla_runtime_is_initialized()`` before each fork. No tensor work either: the OpenMP
pool (libgomp) and torch's intra-op pool start at the first parallel op, and their threads
would be missing in the child. The one thread the server has besides its own is OpenBLAS's
pool (numpy, imported by torch), which shuts itself down around fork (``pthread_atfork``).

Where a child differs from a cold process, on purpose: it skips the interpreter's module
teardown at exit (about 1 s once torch is imported; threads, atexit, the script's objects and
the streams are still done, see ``_exit``), and what the imports created is frozen
(``gc.freeze``: collections skip it, and its pages stay shared instead of being copied).
``random`` reseeds itself in a forked child and numpy's global generator (where imported) is
reseeded here; torch's generators start from their fixed seed either way.
"""

from __future__ import annotations

import sys

del sys.path[0]  # this folder: nothing of reprokit may shadow a module torch imports

import atexit  # noqa: E402
import builtins  # noqa: E402
import gc  # noqa: E402
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import weakref  # noqa: E402

_POLL = 0.05  # seconds between looks at the children
_FIRST = 30.0  # seconds it waits for its first run, whatever LINGER says (that run is starting)
TAKEN = 4  # the exit status when another server holds the name (and serves it)


class _Kid:
    """One forked stage: its socket to the harness, and where it is in the protocol."""

    def __init__(self, pid: int, sock: socket.socket, run: socket.socket) -> None:
        self.pid, self.sock, self.run = pid, sock, run  # run: the connection that asked
        self.told = False  # the harness knows it exited
        self.reap = False  # the harness asked for its return code
        self.ended = _pidfd(pid)  # readable once it exits: no poll's delay in telling so
        self.abandoned = False  # the harness hung up: nobody to tell


def _preload(modules: list[str]) -> tuple[bytes, bytes]:
    """Import ``modules`` with fds 1 and 2 on files; what they printed, to replay in each child
    (a cold stage prints it at its start; a warning shown once here is not shown again)."""
    saved = [os.dup(1), os.dup(2)]
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    for fd, file in zip((1, 2), files, strict=True):
        os.dup2(file.fileno(), fd)
    try:
        for name in modules:
            __import__(name)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip((1, 2), saved, strict=True):
            os.dup2(old, fd)
            os.close(old)
    printed = []
    for file in files:
        file.seek(0)
        printed.append(file.read())
        file.close()
    return printed[0], printed[1]


def _pidfd(pid: int) -> int | None:
    """A descriptor readable once ``pid`` exits (Linux 5.3), else None: polled then."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _runtime_started() -> bool:
    xla = sys.modules.get("torch_xla")
    return bool(xla and xla._XLAC._xla_runtime_is_initialized())


def _send(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass  # the harness hung up; _serve notices on its next read


def _serve(listener: socket.socket, linger: float) -> dict | None:
    """The server's loop; returns a request only in a forked child (which then runs it)."""
    stamps = _stamps()
    runs: set[socket.socket] = set()
    kids: dict[socket.socket, _Kid] = {}
    quiet_since, linger_now = time.monotonic(), max(linger, _FIRST)
    while True:
        listening = [listener] if listener.fileno() >= 0 else []
        endings = [kid.ended for kid in kids.values() if kid.ended is not None]
        ready, _, _ = select.select([*listening, *runs, *kids, *endings], [], [], _POLL)
        for sock in ready:
            if sock is listener:
                run = _welcome(listener, stamps)
                if run is not None:
                    runs.add(run)
                    linger_now = linger
            elif sock in runs:
                message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
                if not message:  # that run is done (or dead): so are its stages
                    runs.discard(sock)
                    _end_run(sock, kids)
                    sock.close()
                    continue
                request = json.loads(message)
                if _fork(request, fds, sock, [listener, *runs], kids):
                    return request  # the child: on to the stage
            elif sock in kids:
                _heard(kids[sock])
        for kid in list(kids.values()):
            _look(kid, kids)
        if runs or kids:
            quiet_since = time.monotonic()
        elif listener.fileno() < 0 or time.monotonic() - quiet_since >= linger_now:
            return None


def _welcome(listener: socket.socket, stamps: dict) -> socket.socket | None:
    """Accept a run: greeted when it is ours and nothing we imported changed; else None (a
    stale server tells the run why and stops listening: no new run from now on)."""
    try:
        run, _ = listener.accept()
    except OSError:
        return None
    creds = run.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    if struct.unpack("3i", creds)[1] != os.getuid():  # another user's: it may not fork us
        run.close()
        return None
    changed = _changed(stamps)
    if changed is not None:
        _send(run, {"stale": f"{changed} changed since the warm server started"})
        run.close()
        listener.close()
        return None
    _send(run, {"ready": os.getpid()})
    return run


def _stamps() -> dict[str, tuple[int, int] | None]:
    """Every file the imports read (modules, this script, the interpreter), by mtime and size:
    an install or an upgrade since then makes the server stale."""
    files = {sys.executable, os.path.abspath(__file__)}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            files.add(path)
    return {path: _stat(path) for path in files}


def _stat(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size


def _changed(stamps: dict) -> str | None:
    """The first stamped file that changed; one gone from the temporary folder is not a change
    (torch.distributed's import writes _remote_module_non_scriptable.py there, and the exit
    handlers of the first stage forked remove it)."""
    scratch = os.path.join(tempfile.gettempdir(), "")
    for path, stamp in stamps.items():
        now = _stat(path)
        if now != stamp and not (now is None and path.startswith(scratch)):
            return path
    return None


def _fork(
    request: dict, fds: list[int], run: socket.socket, server: list[socket.socket], kids: dict
) -> bool:
    """Fork the stage; True in the child, whose fds 0, 1, 2 are then /dev/null and the pipes."""
    sock = socket.socket(fileno=fds[0])
    if _runtime_started():  # a child would share the parent's PJRT client: refuse
        _send(sock, {"error": "the server's XLA runtime had started"})
        sock.close()
        os.close(fds[1])
        os.close(fds[2])
        return False
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for kid in kids.values():  # the other stages' descriptors, as no cold stage has them
            if kid.ended is not None:
                os.close(kid.ended)
        _become_stage(request, fds[1:], [sock, *server, *kids])
        return True
    os.close(fds[1])
    os.close(fds[2])
    kids[sock] = _Kid(pid, sock, run)
    _send(sock, {"pid": pid})
    return False


def _become_stage(request: dict, pipes: list[int], server: list[socket.socket]) -> None:
    """In the child: its own session, no descriptor of the server, its stage's environment."""
    os.setsid()
    for sock in server:  # held here, they would hide the server's death from the harness
        sock.close()
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (pipes[0], 1), (pipes[1], 2)):
        os.dup2(source, target)
        os.close(source)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    generator = sys.modules.get("numpy.random")  # numpy imports it at first use only (50 ms)
    if generator is not None:  # seeded from the OS at import: each child its own, as cold
        generator.seed()
    for finalizer in list(getattr(weakref.finalize, "_registry", ())):  # no public registry
        finalizer.atexit = False  # the server's cleanups: see _exit
    xla = sys.modules.get("torch_xla")
    if xla is not None:  # what its import did to the environment, redone on the stage's own
        xla._setup_default_env()
        xla._setup_xla_flags()


def _heard(kid: _Kid) -> None:
    try:
        data = kid.sock.recv(64)
    except OSError:
        data = b""
    if data == b"reap":
        kid.reap = True
    elif not data:  # the harness's thread is gone: end the stage, reap it, tell nobody
        kid.reap = kid.abandoned = True
        _kill_group(kid.pid)


def _look(kid: _Kid, kids: dict) -> None:
    """Tell the harness once the kid exited; reap it once asked to."""
    try:
        info = os.waitid(os.P_PID, kid.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        info = None
    if info is None:
        return
    if not kid.told and not kid.abandoned:
        _send(kid.sock, {"exited": True})
        kid.told = True
    if kid.reap:
        _, status = os.waitpid(kid.pid, 0)
        if kid.ended is not None:
            os.close(kid.ended)
        if not kid.abandoned:
            _send(kid.sock, {"returncode": os.waitstatus_to_exitcode(status)})
        kid.sock.close()
        del kids[kid.sock]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def _end_run(run: socket.socket, kids: dict) -> None:
    """A run hung up: none of its stages outlives it (each reaped once its group is gone)."""
    for kid in kids.values():
        if kid.run is run:
            kid.reap = kid.abandoned = True
            _kill_group(kid.pid)


def _run_stage(request: dict, printed: tuple[bytes, bytes]) -> None:
    """Run the script as ``python repro.py ARGS`` would: its folder first on sys.path, the
    module ``__main__`` with an absolute ``__file__``, compiled without this file's future
    flags; an exception printed from the script's first frame on; then :func:`_exit`."""
    os.write(1, printed[0])
    os.write(2, printed[1])
    script = os.path.join(request["cwd"], request["script"])
    sys.argv = list(request["argv"])
    sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
    main = importlib.util.module_from_spec(importlib.machinery.ModuleSpec("__main__", None))
    loader = importlib.machinery.SourceFileLoader("__main__", script)
    main.__dict__.update(__file__=script, __cached__=None, __loader__=loader, __spec__=None)
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    try:
        with open(script, "rb") as file:
            code = compile(file.read(), script, "exec", dont_inherit=True)
        exec(code, main.__dict__)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        tb = tb or exc.__traceback__  # the hook prints the exception's own traceback
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        status = -signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1
    _exit(status, main.__dict__)


def _exit_status(code: object) -> int:
    """What the interpreter makes of ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _exit(status: int, script: dict) -> None:
    """End as the interpreter ends, less its module teardown (about 1 s once torch is
    imported, and the point of warm start): non-daemon threads joined, atexit handlers run,
    the script's own objects released (an unclosed file flushes), the streams flushed. Of
    weakref.finalize's exit-time cleanups, only the stage's own: those the server's imports
    made are the server's (torch.library's, 127 to 163 of them, undo registrations that this
    exit discards anyway: 25 ms a stage; the temporary folder torch.distributed makes when
    torch_xla imports it, which the first child to end would remove from under the server and
    every later child).
    Killed by SIGINT where Python would re-raise it (an uncaught KeyboardInterrupt)."""
    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()
    atexit._run_exitfuncs()
    for name in reversed(list(script)):
        if not name.startswith("__"):
            del script[name]
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # as Python: the output could not be written
    if status == -signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status & 0xFF)


def main() -> tuple[dict, tuple[bytes, bytes]] | None:
    """Take the name, import, serve; returns only in a forked child: its request, and what the
    imports printed."""
    modules = [name for name in sys.argv[1].split(",") if name]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind("\0" + sys.argv[2])
    except OSError as exc:
        print(f"the name is taken: {exc}", file=sys.stderr)
        sys.exit(TAKEN)
    listener.listen(64)
    try:
        printed = _preload(modules)
    except BaseException:
        traceback.print_exc()
        sys.exit(3)
    if _runtime_started():
        print("importing started the XLA runtime: no fork is safe", file=sys.stderr)
        sys.exit(3)
    gc.freeze()  # what the imports made lives on; a child's collections skip it (and its pages)
    request = _serve(listener, float(sys.argv[3]))
    return None if request is None else (request, printed)


if __name__ == "__main__":
    _child = main()
    if _child is not None:  # a forked child: the server is gone from here on
        _run_stage(*_child)
