"""Python source parsed one thread at a time.

Before Python 3.12, ``ast.parse`` is not thread-safe (CPython gh-106905: "AST constructor
recursion depth mismatch" when two threads build AST objects at once), and the runner's
worker threads read and render scripts side by side. Every ``ast.parse`` in reprokit goes
through :func:`parse_python`, so that they all take the same lock.
"""

from __future__ import annotations

import ast
import threading

_PARSING = threading.Lock()


def parse_python(source: str) -> ast.Module:
    """``ast.parse(source)``, never two at once in this process."""
    with _PARSING:
        return ast.parse(source)
