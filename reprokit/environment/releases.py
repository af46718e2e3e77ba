"""torch_xla releases as environments: ``2.8`` is torch_xla 2.8.0 and the torch it was built
with, and spans of them (``2.5..2.9``) as ``reprokit bisect --releases`` takes them."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from reprokit.errors import ReprokitError
from reprokit.records import EnvSpec

RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def release_env(release: str) -> EnvSpec:
    """A torch_xla release and the torch it was built with: ``2.8`` is torch 2.8.0 and
    torch_xla 2.8.0; a patch release of torch_xla (``2.8.1``) still runs on torch 2.8.0.

    Only the form is checked here: whether the release exists is the index's answer (PyPI
    has torch_xla 2.1 to 2.9), which :func:`env_python` quotes.
    """
    match = RELEASE.fullmatch(release.strip())
    if not match:
        raise ReprokitError(
            f"{release!r} is not a torch_xla release",
            hint="A release is MAJOR.MINOR or MAJOR.MINOR.PATCH: 2.8, 2.8.1.",
        )
    major, minor, patch = match.groups()
    requirements = (f"torch=={major}.{minor}.0", f"torch_xla=={major}.{minor}.{patch or 0}")
    return EnvSpec(release.strip(), requirements)


def release_python(release: str, *, announce: Callable[[str], None] | None = None) -> Path:
    """The python to run a standalone script on ``release`` with: this interpreter when it has
    that very torch and torch_xla installed (the project's venv for its own release: no
    second copy of torch), else the release's uv environment, built once (uv.env_python)."""
    spec = release_env(release)
    if installed_here(spec):
        return Path(sys.executable)
    from reprokit.environment.uv import env_python

    return env_python(spec, announce=announce)


def installed_here(spec: EnvSpec) -> bool:
    """Whether this interpreter has every requirement of ``spec`` at the version it pins (a
    local build tag aside: torch 2.9.0+cu128 is torch==2.9.0, as pip reads it)."""
    from packaging.requirements import Requirement

    for text in spec.requirements:
        wanted = Requirement(text)
        try:
            found = metadata.version(wanted.name)
        except metadata.PackageNotFoundError:
            return False
        if not wanted.specifier.contains(found, prereleases=True):
            return False
    return True


def releases(span: str) -> list[str]:
    """``2.5..2.9`` (every minor release in between), ``2.5,2.7,2.9``, or both mixed."""
    found: list[str] = []
    for item in (part.strip() for part in span.split(",")):
        for release in _span_item(item, span):
            if release not in found:
                found.append(release)
    return found


def _span_item(item: str, span: str) -> list[str]:
    hint = "Write releases as 2.5..2.9 (a range of minor releases) or 2.5,2.7,2.9 (a list)."
    low, dots, high = item.partition("..")
    if not dots:
        if not RELEASE.fullmatch(item):
            raise ReprokitError(f"{item!r} in {span!r} is not a torch_xla release", hint=hint)
        return [item]
    ends = [re.fullmatch(r"(\d+)\.(\d+)", end.strip()) for end in (low, high)]
    if not all(ends):
        raise ReprokitError(f"{item!r} in {span!r} is not a range of MAJOR.MINOR", hint=hint)
    (major, first), (other, last) = (tuple(map(int, end.groups())) for end in ends)
    if major != other:
        raise ReprokitError(f"{item!r}: a range stays within one major release", hint=hint)
    if first > last:
        raise ReprokitError(f"{item!r} runs backwards", hint=f"Write {high}..{low}.")
    return [f"{major}.{minor}" for minor in range(first, last + 1)]
