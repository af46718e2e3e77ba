"""Environments built by the real uv from the real PyPI: two torch_xla releases, the cache's
reuse, builds that fail (and leave nothing behind), and the parsing of --env and releases."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

from reprokit.environment.releases import release_env, releases
from reprokit.environment.uv import (
    BUILDING,
    INDEX_VARIABLES,
    MARKER,
    digest,
    env_dir,
    env_python,
    parse_env,
    python_tag,
    uv_error,
)
from reprokit.errors import ReprokitError
from reprokit.infra.caching import cache_root
from reprokit.records import EnvSpec

needs_uv = pytest.mark.skipif(
    importlib.util.find_spec("uv") is None and shutil.which("uv") is None,
    reason="uv is not installed (pip install 'reprokit[envs]')",
)
SIX = EnvSpec("six", ("six==1.17.0",))  # the smallest real build: a second or so


def leftovers(spec: EnvSpec) -> list[str]:
    """What env_dir() holds besides the spec's lock file."""
    found = os.listdir(env_dir()) if env_dir().exists() else []
    return sorted(set(found) - {f"{digest(spec)}.lock"})


VERSIONS = (
    "import json, torch, torch_xla; print(json.dumps([torch.__version__, torch_xla.__version__]))"
)


@needs_uv
@pytest.mark.parametrize("release", ["2.9", "2.8"])
def test_release_environment_imports_its_torch_and_torch_xla(shared_cache, release):
    said: list[str] = []
    python = env_python(release_env(release), announce=said.append)
    assert python.parent.parent.parent == env_dir()
    done = subprocess.run(
        [python, "-c", VERSIONS],
        capture_output=True,
        text=True,
        env=dict(os.environ, PJRT_DEVICE="CPU"),
        check=True,
    )
    torch, torch_xla = json.loads(done.stdout.splitlines()[-1])
    assert torch.split("+")[0] == f"{release}.0"
    assert torch_xla == f"{release}.0"
    marker = json.loads((python.parent.parent / MARKER).read_text())
    assert marker["versions"] == {"torch": f"{release}.0", "torch-xla": torch_xla}
    assert any(line.startswith("torch-xla==") for line in marker["freeze"])


@needs_uv
def test_second_request_reuses_the_environment(shared_cache):
    first = env_python(release_env("2.8"))
    marker = (first.parent.parent / MARKER).stat()
    said: list[str] = []
    again = env_python(release_env("2.8"), announce=said.append)
    # Another name for the same requirements, in another order, is the same environment.
    renamed = env_python(parse_env("mine=torch_xla==2.8.0,torch==2.8.0"), announce=said.append)
    assert again == first == renamed
    now = (first.parent.parent / MARKER).stat()
    assert (now.st_ino, now.st_mtime_ns) == (marker.st_ino, marker.st_mtime_ns)
    assert said == []  # no build, so nothing announced


@needs_uv
def test_a_release_that_does_not_exist_quotes_uv_and_leaves_nothing():
    spec = EnvSpec("2.42", ("torch==2.8.0", "torch_xla==2.42.0"))
    with pytest.raises(ReprokitError) as error:
        env_python(spec)
    text = str(error.value)
    assert "uv pip failed for environment 2.42" in text
    assert "no version of torch-xla==2.42.0" in text
    assert "warning:" not in text and "Traceback" not in text
    assert "exists on the index" in error.value.hint
    assert leftovers(spec) == []


@needs_uv
def test_requirements_that_cannot_go_together_quote_the_resolver():
    spec = parse_env("tpu=torch_xla[tpu]==2.8.0 libtpu==0.0.1")
    with pytest.raises(ReprokitError) as error:
        env_python(spec)
    assert "No solution found" in str(error.value)
    assert "torch-xla[tpu]==2.8.0 depends on libtpu==" in str(error.value)
    assert leftovers(spec) == []


@needs_uv
def test_a_torch_and_torch_xla_that_do_not_match_fail_the_check():
    # torch_xla does not pin its torch: the pair installs, then torch_xla fails to import.
    spec = EnvSpec("mixed", ("torch==2.8.0", "torch_xla==2.7.0"))
    with pytest.raises(ReprokitError) as error:
        env_python(spec)
    assert "installed, but does not work" in str(error.value)
    assert "torch-xla: ImportError" in str(error.value)
    assert "undefined symbol" in str(error.value)
    assert leftovers(spec) == []


@needs_uv
def test_no_network_to_the_index_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv"))
    with pytest.raises(ReprokitError) as error:
        env_python(SIX)
    assert "Connection refused" in str(error.value)
    assert "check the network" in error.value.hint
    assert leftovers(SIX) == []


@needs_uv
def test_builds_without_ssl_cert_file(tmp_path, monkeypatch):
    # An empty uv cache, so that uv must download from PyPI through this machine's proxy.
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "UV_SYSTEM_CERTS", "UV_NATIVE_TLS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv"))
    said: list[str] = []
    python = env_python(SIX, announce=said.append)
    assert said[0] == "building environment six (six==1.17.0) with uv..."
    assert said[1].startswith("environment six built in ")
    subprocess.run([python, "-c", "import six"], check=True)
    assert leftovers(SIX) == [digest(SIX)]


@needs_uv
def test_what_a_killed_build_left_is_cleaned_up():
    env_dir().mkdir(parents=True)
    for key in (digest(SIX), "0123456789abcdef"):
        (env_dir() / f"{key}{BUILDING}" / "bin").mkdir(parents=True)
    env_python(SIX)
    assert leftovers(SIX) == [digest(SIX), "0123456789abcdef.lock"]


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("holding", flush=True)
time.sleep(1.5)
"""


@needs_uv
def test_a_killed_builds_uv_still_running_is_waited_for():
    # What a SIGKILLed build leaves: its folder, and its uv, which holds the folder's flock.
    staging = env_dir() / f"{digest(SIX)}{BUILDING}"
    (staging / "bin").mkdir(parents=True)
    orphan = subprocess.Popen([sys.executable, "-c", HOLD, staging], stdout=subprocess.PIPE)
    assert orphan.stdout.readline() == b"holding\n"
    said: list[str] = []
    env_python(SIX, announce=said.append)
    assert orphan.wait(timeout=10) == 0
    assert said[0] == "waiting for the uv of a build that was killed to end..."
    assert leftovers(SIX) == [digest(SIX)]


BUILD = """
import sys
from reprokit.environment.uv import EnvSpec, env_python
print(env_python(EnvSpec("six", ("six==1.17.0",)), announce=lambda line: print(line)))
"""


@needs_uv
def test_two_processes_asking_at_once_build_once():
    command = [sys.executable, "-c", textwrap.dedent(BUILD)]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [proc.communicate()[0].splitlines() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    lines = [line for output in outputs for line in output]
    assert sum(line.startswith("building environment") for line in lines) == 1
    assert outputs[0][-1] == outputs[1][-1] == str(env_dir() / digest(SIX) / "bin" / "python")


@needs_uv
def test_threads_asking_at_once_build_once():
    said: list[str] = []
    found: list[object] = []
    threads = [
        threading.Thread(target=lambda: found.append(env_python(SIX, announce=said.append)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == [env_dir() / digest(SIX) / "bin" / "python"] * 3
    assert sum(line.startswith("building environment") for line in said) == 1


def test_uv_missing_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "uv", None)  # import uv fails
    monkeypatch.setenv("PATH", str(tmp_path))  # and no uv on PATH
    with pytest.raises(ReprokitError) as error:
        env_python(SIX)
    assert error.value.hint == "pip install 'reprokit[envs]'"
    assert not env_dir().exists()


def test_uv_errors_quote_the_error_lines_and_say_what_to_do():
    stderr = (
        "warning: The `--native-tls` flag is deprecated\n"
        "Using Python 3.11.7 environment at: /x\n"
        "error: Failed to install: torch-2.8.0-cp311-cp311-manylinux_2_28_x86_64.whl\n"
        "  Caused by: No space left on device (os error 28)\n"
    )
    error = uv_error(SIX, "uv pip", stderr)
    assert error.message.splitlines()[1:] == stderr.splitlines()[2:]
    assert error.hint.startswith("The disk is full")
    cert = "error: Failed to fetch\n  cause: invalid peer certificate: UnknownIssuer\n"
    assert "SSL_CERT_FILE" in uv_error(SIX, "uv pip", cert).hint


def test_parse_env():
    assert parse_env("2.8=torch==2.8.0 torch_xla==2.8.0") == release_env("2.8")
    spec = parse_env("x= torch>=2.8,<2.9, torch_xla[tpu,pallas]==2.8.0,six ")
    assert spec == EnvSpec("x", ("torch>=2.8,<2.9", "torch_xla[tpu,pallas]==2.8.0", "six"))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("torch", "is not NAME=REQUIREMENTS"),
        ("=torch==2.8.0", "has no environment name"),
        ("torch==2.8.0", "has no environment name"),
        ("a b=six", "cannot name an environment"),
        ("x=", "has no requirement"),
        ("x=  ", "has no requirement"),
        ("x=torch >= 2.8", "'>=' is not a requirement"),
        ("x=torch==2.8.0 torch_xla==", "'torch_xla==' is not a requirement"),
    ],
)
def test_parse_env_errors(text, says):
    with pytest.raises(ReprokitError, match=says) as error:
        parse_env(text)
    assert error.value.hint


def test_release_env():
    assert release_env("2.8") == EnvSpec("2.8", ("torch==2.8.0", "torch_xla==2.8.0"))
    assert release_env("2.1").requirements == ("torch==2.1.0", "torch_xla==2.1.0")
    assert release_env("2.8.1") == EnvSpec("2.8.1", ("torch==2.8.0", "torch_xla==2.8.1"))
    for bad in ("2", "2.x", "v2.8", "2.8.1.1", ""):
        with pytest.raises(ReprokitError, match="is not a torch_xla release"):
            release_env(bad)


def test_releases():
    assert releases("2.5..2.9") == ["2.5", "2.6", "2.7", "2.8", "2.9"]
    assert releases("2.5,2.7,2.9") == ["2.5", "2.7", "2.9"]
    assert releases("2.8") == ["2.8"]
    assert releases("2.1..2.2, 2.8.1,2.2") == ["2.1", "2.2", "2.8.1"]
    assert releases("2.9..2.9") == ["2.9"]


@pytest.mark.parametrize(
    ("span", "says"),
    [
        ("2.9..2.5", "runs backwards"),
        ("1.9..2.1", "within one major release"),
        ("2.5..", "not a range"),
        ("2.5.1..2.6", "not a range"),
        ("2.5,,2.6", "'' in '2.5,,2.6' is not a torch_xla release"),
        ("two", "is not a torch_xla release"),
    ],
)
def test_releases_errors(span, says):
    with pytest.raises(ReprokitError, match=says):
        releases(span)


def test_digest_is_what_gets_installed(monkeypatch):
    spec = release_env("2.8")
    same = EnvSpec("other name", ("Torch_XLA == 2.8.0", "torch==2.8.0"))
    assert digest(spec) == digest(same)
    assert digest(spec) != digest(release_env("2.9"))
    before = digest(spec)
    monkeypatch.setenv("UV_INDEX_URL", "https://example.org/simple")  # other files
    assert digest(spec) != before


def test_the_digest_names_the_folders_of_earlier_releases(monkeypatch):
    """Moved onto the one store, the digest is still the one that named environments before
    (sha256 of the sorted JSON, 16 digits): environments already built are found again."""
    for name in INDEX_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    spec = EnvSpec("x", ("torch_xla==2.8.0", "Torch==2.8.0"))
    content = {"requirements": ["torch-xla==2.8.0", "torch==2.8.0"], "python": python_tag(),
               "index": {}}  # fmt: skip
    before = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
    assert digest(spec) == before
    assert env_dir() == cache_root() / "envs"
