"""Virtual environments for other torch/torch_xla releases: built with uv, cached by content.

A case can be run under several releases (``--env 2.8="torch==2.8.0 torch_xla==2.8.0"``, or
a span of releases ``2.5..2.9``). Each environment is the python of a virtual environment made
by ``uv venv`` and filled by ``uv pip install``, kept under ``env_dir()/<digest>/`` where the
digest is that of what gets installed: the requirements, the python they are built for, the
index settings. uv's own cache (``~/.cache/uv``) hardlinks the same wheels into every
environment, so a second environment with torch in it costs seconds and megabytes, not
minutes and gigabytes.

An environment is built in ``<digest>.building`` beside its final place, checked (its python
imports what was asked, at the versions asked), described in ``reprokit-env.json``, and only
then renamed into place: the cache never holds a half-made environment, and one build at a
time per digest holds ``<digest>.lock``.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import re
import shutil
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from filelock import Timeout

from reprokit.environment.specs import parse_env as parse_env  # where it was
from reprokit.errors import ReprokitError
from reprokit.infra.caching import Store
from reprokit.infra.probe import ask
from reprokit.records import EnvSpec
from reprokit.records.environment import ENV_MARKER

MARKER = ENV_MARKER
BUILDING = ".building"
# uv settings that change which files get installed, and so belong in the content address.
INDEX_VARIABLES = (
    "UV_DEFAULT_INDEX UV_INDEX UV_INDEX_URL UV_EXTRA_INDEX_URL UV_FIND_LINKS UV_NO_INDEX "
    "UV_EXCLUDE_NEWER UV_PRERELEASE UV_RESOLUTION UV_TORCH_BACKEND"
).split()
NO_UV_HINT = "pip install 'reprokit[envs]'"
DISK_HINT = (
    "The disk is full: free space where environments are kept ({}) and in uv's cache "
    "(`uv cache dir`), or set REPROKIT_CACHE to a disk with room."
)


def digest(spec: EnvSpec) -> str:
    """The content address of ``spec``'s environment: what gets installed, for which python,
    from which index.

    The name is left out (two names for the same requirements share one environment), and so
    is the order of the requirements.
    """
    content = {
        "requirements": sorted(_normalized(text) for text in spec.requirements),
        "python": python_tag(),
        "index": {k: os.environ[k] for k in INDEX_VARIABLES if os.environ.get(k)},
    }
    return Store.key(content)[:16]


def _normalized(text: str) -> str:
    """One spelling per requirement: ``Torch_XLA == 2.8.0`` and ``torch-xla==2.8.0`` agree."""
    # packaging is imported where an environment is built: 30 ms of every command's start else
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    req = Requirement(text)
    extras = f"[{','.join(sorted(canonicalize_name(e) for e in req.extras))}]" if req.extras else ""
    where = f" @ {req.url}" if req.url else ""
    marker = f"; {req.marker}" if req.marker else ""
    return f"{canonicalize_name(req.name)}{extras}{req.specifier}{where}{marker}"


def python_tag() -> dict[str, str]:
    """The interpreter an environment is built for: version, ABI, platform, and its path.

    The path is there because a virtual environment runs its base interpreter: one built for
    another python 3.11 installation breaks when that one goes away.
    """
    base = getattr(sys, "_base_executable", None) or sys.executable
    return {
        "implementation": sys.implementation.name,
        "version": ".".join(map(str, sys.version_info[:3])),
        "abiflags": sys.abiflags,
        "platform": sysconfig.get_platform(),
        "interpreter": os.path.realpath(base),
    }


def env_dir() -> Path:
    """Where environments are kept: ``cache_root()/envs``."""
    return Store("envs").folder


def env_python(spec: EnvSpec, *, announce: Callable[[str], None] | None = None) -> Path:
    """The python of ``spec``'s environment, built first if the cache has none yet.

    ``announce`` hears a short line when a build starts, ends, or waits for another build of
    the same environment (in another process or thread); reusing one says nothing.
    """
    say = announce or (lambda _line: None)
    store, key = Store("envs"), digest(spec)
    final = store.path(key, "")
    if store.get_folder(key, ready=_ready):
        return final / "bin" / "python"
    uv_bin()  # no uv, no build: say so before anything is written
    with _disk_errors(spec), _locked(store, key, spec, say):
        if not _ready(final):  # another process may have built it while this one waited
            _sweep(store, but=final)
            shutil.rmtree(final, ignore_errors=True)  # unusable: its interpreter went away
            _build(spec, final, say)
    return final / "bin" / "python"


def _ready(folder: Path) -> bool:
    """Complete (the marker is written last) and still runnable (its interpreter exists)."""
    return (folder / MARKER).is_file() and (folder / "bin" / "python").exists()


@contextmanager
def _locked(store: Store, key: str, spec: EnvSpec, say: Callable[[str], None]) -> Iterator[None]:
    lock = store.lock(key)  # <digest>.lock: one build at a time per environment
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say(f"waiting for another build of environment {spec.label()}...")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _sweep(store: Store, *, but: Path) -> None:
    """Remove what killed builds of other environments left, unless they are being built."""
    for leftover in store.folder.glob(f"*{BUILDING}"):
        if leftover.name.removesuffix(BUILDING) != but.name:
            lock = store.lock(leftover.name.removesuffix(BUILDING))
            with suppress(Timeout), lock.acquire(timeout=0):
                _remove_leftover(leftover, waiting=None)


def _remove_leftover(staging: Path, *, waiting: Callable[[str], None] | None) -> None:
    """Remove the folder of a build that was killed, once its uv has ended (told to
    ``waiting``; without it, a folder still in use is left alone).

    A SIGKILL does not reach the children: the killed build's uv may still be writing into
    the folder. Each build holds a flock on its folder that its uv inherits (``_claim``), so
    the lock is free only when that uv is gone too.
    """
    try:
        fd = os.open(staging, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is None:
                return
            waiting("waiting for the uv of a build that was killed to end...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        shutil.rmtree(staging, ignore_errors=True)
    finally:
        os.close(fd)


def _claim(staging: Path) -> int:
    """A descriptor of the new, empty ``staging`` that holds a flock on it, for uv to inherit."""
    staging.mkdir()
    fd = os.open(staging, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _build(spec: EnvSpec, final: Path, say: Callable[[str], None]) -> None:
    """Build in ``<digest>.building``, check, describe, rename: all or nothing in the cache.

    Building in a folder of its own and renaming it (rather than building in place with a
    marker written last) means a reader never sees a half-made environment, and a killed
    build leaves a folder that is recognisably a leftover. The venv is made ``--relocatable``
    so that its entry-point scripts (``torchrun``) still work after the rename; its python
    links to the base interpreter by an absolute path, which the rename does not change.
    Bytecode is compiled at install, as pip does (uv does not by default): about 10 s and
    150 MB once, against recompiling torch at every import where PYTHONDONTWRITEBYTECODE is
    set (here: 22 s instead of 11 s to import torch_xla 2.8).
    """
    staging = final.with_name(final.name + BUILDING)
    _remove_leftover(staging, waiting=say)
    say(f"building environment {spec.label()} with uv...")
    start = time.monotonic()
    claim = _claim(staging)
    try:
        python = staging / "bin" / "python"
        uv = functools.partial(_uv, spec, claim=claim)
        uv("venv", "--quiet", "--relocatable", "--python", sys.executable, str(staging))
        uv("pip", "install", "--compile-bytecode", "--python", str(python), *spec.requirements)
        versions = _check(spec, python)
        freeze = uv("pip", "freeze", "--python", str(python)).splitlines()
        _write_marker(staging, spec, versions, freeze, time.monotonic() - start)
        staging.rename(final)
    finally:
        os.close(claim)
        shutil.rmtree(staging, ignore_errors=True)  # still there only when the build failed
    say(f"environment {spec.name} built in {time.monotonic() - start:.0f} s: {final}")


def _write_marker(
    folder: Path, spec: EnvSpec, versions: dict[str, str], freeze: list[str], seconds: float
) -> None:
    record = {
        "name": spec.name,
        "requirements": list(spec.requirements),
        "digest": digest(spec),
        "python": python_tag(),
        "versions": versions,
        "freeze": freeze,
        "seconds": round(seconds, 1),
    }
    (folder / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def uv_bin() -> str:
    """The uv binary: the ``uv`` package's (the envs extra), else one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise ReprokitError("building an environment needs uv, which is not installed", hint=NO_UV_HINT)


def _uv_env() -> dict[str, str]:
    """The caller's environment, with the platform's certificates unless told otherwise.

    uv trusts only its bundled roots by default; behind a proxy that intercepts TLS (as on
    this project's machines) that fails with "invalid peer certificate". The platform's store
    holds the proxy's CA, as it does for pip (truststore). SSL_CERT_FILE, when set, is the
    user's own choice, and uv reads it. Both names of the setting: UV_SYSTEM_CERTS for newer
    uv, UV_NATIVE_TLS for older (newer ones read it with a warning, which is never shown).
    """
    env = dict(os.environ)
    if not any(env.get(k) for k in ("SSL_CERT_FILE", "UV_SYSTEM_CERTS", "UV_NATIVE_TLS")):
        env.update(UV_SYSTEM_CERTS="1", UV_NATIVE_TLS="1")
    return env


def _uv(spec: EnvSpec, *args: str, claim: int) -> str:
    """Run ``uv ARGS`` (holding the build's ``claim``); its stdout, or an error quoting it."""
    command = [uv_bin(), *args]
    try:
        done = ask(command, env=_uv_env(), pass_fds=(claim,))
    except FileNotFoundError:
        raise ReprokitError(f"cannot run {command[0]}", hint=NO_UV_HINT) from None
    if done.returncode != 0:
        raise uv_error(spec, f"uv {args[0]}", done.stderr)
    return done.stdout


def uv_error(spec: EnvSpec, step: str, stderr: str) -> ReprokitError:
    """uv's own error lines (not its warnings, not its progress), with what to do about them."""
    lines = [line for line in stderr.splitlines() if not line.startswith("warning:")]
    first = next((i for i, line in enumerate(lines) if line.startswith("error:")), None)
    quoted = lines[first:][:20] if first is not None else lines[-10:]
    text = "\n".join(quoted).strip() or f"(no message; exit status of {step} was not 0)"
    message = f"{step} failed for environment {spec.label()}:\n{text}"
    return ReprokitError(message, hint=_hint(text))


def _hint(text: str) -> str:
    if re.search(r"No space left on device|os error 28|Disk quota exceeded", text):
        return DISK_HINT.format(env_dir())
    if re.search(r"certificate|UnknownIssuer", text):
        return (
            "uv cannot verify the index's certificate: set SSL_CERT_FILE to your CA bundle "
            "(e.g. /etc/ssl/certs/ca-certificates.crt), or UV_SYSTEM_CERTS=1."
        )
    if re.search(r"Failed to fetch|error sending request|dns error|connect|timed out", text, re.I):
        return (
            "uv cannot reach the package index: check the network (and proxy), and the index "
            "settings (UV_DEFAULT_INDEX, UV_INDEX_URL); PyPI is https://pypi.org/simple."
        )
    if "No solution found" in text:
        return (
            "Check that each release exists on the index (torch_xla's are listed at "
            "https://pypi.org/project/torch-xla/#history) and that the requirements go "
            "together: torch_xla 2.N needs torch 2.N.0."
        )
    return "Run the same uv command by hand to see more (uv -v ...)."


@contextmanager
def _disk_errors(spec: EnvSpec) -> Iterator[None]:
    """A full disk met by reprokit itself (mkdir, the marker, the rename) as a clear error."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        message = f"no space left to build environment {spec.label()}: {exc}"
        raise ReprokitError(message, hint=DISK_HINT.format(env_dir())) from None


# Run by the new environment's python: import each requirement's top-level module (the one
# named like the distribution, else its first) and report the installed versions, as JSON on
# the last line of stdout. The imports are what fail when torch and torch_xla do not match.
CHECK = """
import importlib, importlib.metadata as metadata, json, re, sys
owners = metadata.packages_distributions()
canon = lambda name: re.sub(r"[-_.]+", "-", name).lower()
found, error = {}, None
for name in json.loads(sys.argv[1]):
    try:
        found[name] = metadata.version(name)
        tops = sorted(top for top, dists in owners.items() if name in map(canon, dists)
                      and top.isidentifier() and not top.startswith("_"))
        module = name.replace("-", "_")
        for top in [module] if module in tops or not tops else tops[:1]:
            importlib.import_module(top)
    except Exception as exc:
        error = f"{name}: {type(exc).__name__}: {exc}"
        break
print(json.dumps({"versions": found, "error": error}))
"""


def _check(spec: EnvSpec, python: Path) -> dict[str, str]:
    """The installed versions of the requirements, once their modules import; else an error."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wanted = [Requirement(text) for text in spec.requirements]
    wanted = [req for req in wanted if req.marker is None or req.marker.evaluate()]
    names = [canonicalize_name(req.name) for req in wanted]
    # The environment's own packages only (no PYTHONPATH, no user site), and no accelerator:
    # importing torch_xla must not pick up the caller's torch or grab a TPU.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONNOUSERSITE="1", PJRT_DEVICE="CPU")
    done = ask([python, "-c", CHECK, json.dumps(names)], env=env)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    if result is None or result["error"]:
        problem = result["error"] if result else "\n".join(done.stderr.splitlines()[-5:])
        raise ReprokitError(
            f"environment {spec.label()} installed, but does not work:\n{problem}",
            hint="torch_xla needs the torch of its own release (torch_xla 2.N with torch "
            "2.N.0): name a release (2.8) rather than the pair, or fix the pair.",
        )
    for req, name in zip(wanted, names, strict=True):
        version = result["versions"][name]
        if not req.specifier.contains(version, prereleases=True):
            raise ReprokitError(f"environment {spec.label()}: {name} {version} is not {req}")
    return result["versions"]
