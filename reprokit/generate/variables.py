"""The variables a script sets at its top, before anything is imported: one place for every
script reprokit writes (render() adds them to every template's script, users' own included;
a writer that renders otherwise, as the minimizer's short repro, calls :func:`with_variables`).

Lines of ``os.environ.setdefault(NAME, VALUE)``, not assignments: a value exported where the
script runs wins. Under ``reprokit run`` that is the same value (the stage inherits the run's
environment, the case's variables under it); run by hand, a maintainer can try another value
(``XLA_USE_32BIT_LONG=0 python repro.py``) without editing the script, and a clean
environment (``env -i``) gets the values it was found with. Values are written as literals
(JSON's string escapes are Python's): a value can never become code.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Collection, Mapping

from reprokit.infra.python_source import parse_python

FROM_CASE = "# From the case's [variables]:"
FROM_RUN = "# Exported where reprokit ran:"


def variables_header(variables: Mapping[str, str], case: Collection[str] = ()) -> str:
    """The lines that set ``variables`` (none when there are none); those named in ``case``
    under a comment saying the case's ``[variables]`` gave them, the others the run's
    environment."""
    if not variables:
        return ""
    lines = [
        "import os",
        "",
        "# The environment variables its stages ran with, set before torch is imported; one",
        "# exported where this script runs wins.",
    ]
    for comment, names in (
        (FROM_CASE, [k for k in variables if k in case]),
        (FROM_RUN, [k for k in variables if k not in case]),
    ):
        lines += [comment] if names else []
        lines += [_setdefault(name, variables[name]) for name in names]
    return "\n".join(lines) + "\n\n"


WIDTH = 100  # the linters' columns, as the rest of a rendered script keeps to


def _setdefault(name: str, value: str) -> str:
    """One variable's line; a long value (XLA_FLAGS) as pieces split at its spaces, one a line,
    so that the script stays within the linters' columns (a piece longer still is let be)."""
    line = f"os.environ.setdefault({json.dumps(name)}, {json.dumps(value)})"
    if len(line) <= WIDTH:
        return line
    pieces, room = [""], WIDTH - 6  # 4 of indent, a comma, and a margin
    for word in re.split(r"(?<= )", value):
        if pieces[-1] and len(json.dumps(pieces[-1] + word)) > room:
            pieces.append("")
        pieces[-1] += word
    shown = [f"    {json.dumps(piece)}" for piece in pieces]
    shown[-1] += ","
    shown = [f"{line}  # noqa: E501" if len(line) > WIDTH else line for line in shown]
    return "\n".join([f"os.environ.setdefault(\n    {json.dumps(name)},", *shown, ")"])


def with_variables(script: str, variables: Mapping[str, str], case: Collection[str] = ()) -> str:
    """``script`` with :func:`variables_header` inserted before its first statement that is
    neither its docstring nor a ``from __future__`` import (which must stay first): after
    the comments that open it, before anything is imported. Unchanged when there are none."""
    header = variables_header(variables, case)
    if not header:
        return script
    lines = script.splitlines(keepends=True)
    at = _first_statement(script)
    at = len(lines) if at is None else at
    return "".join([*lines[:at], header, *lines[at:]])


def _first_statement(script: str) -> int | None:
    """The 0-based line of the first statement that runs something, or None (there is none)."""
    body = parse_python(script).body  # in the runner's threads too
    for index, node in enumerate(body):
        docstring = (
            index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        )
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (docstring or future):
            decorators = getattr(node, "decorator_list", [])
            return min([node.lineno, *(d.lineno for d in decorators)]) - 1
    return None
