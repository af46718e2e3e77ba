"""Python source parsed one thread at a time.

Before Python 3.12, ``ast.parse`` is not thread-safe (CPython gh-106905: "AST constructor
recursion depth mismatch" when two threads build AST objects at once), and the runner's
worker threads read and render scripts side by side. Every ``ast.parse`` in reprokit goes
through :func:`parse_python`, so that they all take the same lock.

A script is parsed several times within moments: render checks it, the runner reads its
stages and its imports (5 ms each for a 500-line script, a good part of a re-run served from
the results cache). The last few trees are kept, by their source's text: callers only read
them.
"""

from __future__ import annotations

import ast
import functools
import threading

_PARSING = threading.Lock()


@functools.lru_cache(maxsize=16)
def parse_python(source: str) -> ast.Module:
    """``ast.parse(source)``, never two at once in this process; the same tree for the same
    text (never change it)."""
    with _PARSING:
        return ast.parse(source)
