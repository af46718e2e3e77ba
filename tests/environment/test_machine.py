"""The environment capture: collect_env's fields as torch gives them, pip's list without pip."""

from __future__ import annotations

import subprocess
import sys

import torch.utils.collect_env

from reprokit.environment import machine


def test_the_package_list_is_pips_own():
    """In a fresh interpreter, as where reprokit asks (a fork of a warm server, or the CLI):
    this process's sys.path is pytest's, which earlier tests add to (importing Ray puts its
    vendored colorama and psutil on it)."""

    def printed(*command: str) -> str:
        env = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PATH": "/usr/bin:/bin"}
        done = subprocess.run([sys.executable, *command], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    ours = "from reprokit.environment.machine import pip_freeze; print(pip_freeze())"
    assert printed("-c", ours) == printed(*machine.PIP_LIST)


def test_collect_env_gives_the_same_fields_without_running_pip():
    asked = []

    def never_pip(command):
        asked.append(command)
        return collect_env.run(command)

    collect_env = torch.utils.collect_env
    plain = collect_env.get_env_info()._asdict()
    with machine._pip_list_from_metadata(collect_env):
        fast = collect_env.get_env_info()._asdict()
        pip_packages = collect_env.get_pip_packages(never_pip)
    assert fast == plain and pip_packages[1] == plain["pip_packages"]
    assert not [c for c in asked if "pip" in " ".join(map(str, c))]  # answered, not run
    assert collect_env.get_pip_packages.__name__ == "get_pip_packages"  # put back


def test_versions_are_read_again_after_an_install(tmp_path, monkeypatch):
    """Kept between calls (a run asks 6 times), but not past an install into sys.path."""
    read = []
    version = machine.metadata.version

    def counted(name: str) -> str:
        read.append(name)
        return version(name)

    monkeypatch.setattr(machine.metadata, "version", counted)
    monkeypatch.syspath_prepend(str(tmp_path))
    machine._versions.cache_clear()
    first = machine.versions()
    assert first["jax"] is None and sorted(read) == sorted(machine.PACKAGES)
    read.clear()
    assert machine.versions() == first and read == []  # kept: no package's metadata read again
    found = tmp_path / "jax-9.9.dist-info"  # what pip or uv leaves in site-packages
    found.mkdir()
    (found / "METADATA").write_text("Metadata-Version: 2.1\nName: jax\nVersion: 9.9\n")
    assert machine.versions()["jax"] == "9.9"
    assert sorted(read) == sorted(machine.PACKAGES)  # read again, once
