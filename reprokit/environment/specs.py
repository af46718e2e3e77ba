"""Reading an environment's name and requirements, as ``--env`` and a case's ``[envs]`` give
them (``2.8="torch==2.8.0 torch_xla==2.8.0"``): into an :class:`EnvSpec`, checked, with
nothing built (reprokit.environment.uv builds them)."""

from __future__ import annotations

import re

from reprokit.errors import ReprokitError
from reprokit.records import EnvSpec

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
# Requirements are separated by whitespace, or by a comma that starts a new name: the comma in
# "torch>=2.8,<2.9" is the specifier's, the one in "torch_xla[tpu,pallas]" the extras'.
SEPARATOR = re.compile(r"\s+|,(?=\s*[A-Za-z0-9])(?![^\[]*\])")


def parse_env(text: str) -> EnvSpec:
    """``NAME=REQUIREMENTS``, as in ``--env 2.8="torch==2.8.0 torch_xla==2.8.0"``."""
    example = 'Write NAME="REQUIREMENTS", e.g. --env 2.8="torch==2.8.0 torch_xla==2.8.0"'
    name, equals, rest = text.partition("=")
    name = name.strip()
    if not equals:
        raise ReprokitError(f"{text!r} is not NAME=REQUIREMENTS", hint=example)
    if not name or rest.startswith("="):
        raise ReprokitError(f"{text!r} has no environment name before '='", hint=example)
    if not NAME.fullmatch(name):
        raise ReprokitError(
            f"{name!r} cannot name an environment", hint="Use letters, digits, _ . + -"
        )
    requirements = tuple(token for token in SEPARATOR.split(rest.strip()) if token)
    if not requirements:
        raise ReprokitError(f"environment {name!r} has no requirement after '='", hint=example)
    # imported here, for the cases that name an environment: 30 ms of every command's start
    from packaging.requirements import InvalidRequirement, Requirement

    for token in requirements:
        try:
            Requirement(token)
        except InvalidRequirement as exc:
            raise ReprokitError(
                f"environment {name!r}: {token!r} is not a requirement: {exc}",
                hint="Write each requirement without spaces (torch>=2.8,<2.9) and separate "
                "requirements with spaces or commas.",
            ) from None
    return EnvSpec(name, requirements)
