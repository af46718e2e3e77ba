"""Paths as a public issue may show them: relative to the run folder, or under ``~``, never the
machine's absolute layout (its user name, its folders).

A report and a bundle are meant to be pasted into a public issue; what the run recorded holds
absolute paths (a captured model's source line, the rerun command's ``-o``, a reused stage's
run folder). One pure function rewrites them in any text, so report.md, report.html,
report.json and the bundle's text files say them the same way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

_NAME_GOES_ON = r"(?![\w.-])"  # /home/al is not a prefix of /home/alice
VENV = "<venv>"  # a Python environment's folder (sys.prefix): its layout is the machine's
# an installed package's file (torch's modules in a captured program's stack): from the
# packages folder on, wherever the interpreter lives
_PACKAGES = re.compile(r"(?<![\w.~-])/[^\s\"'`]*?/((?:site|dist)-packages)/")


def public_paths(
    text: str,
    *,
    run_dir: Path | str | None = None,
    home: Path | str | None = None,
    cwd: Path | str | None = None,
    prefixes: Iterable[Path | str] = (),
    named: Iterable[Path | str] = (),
) -> str:
    """``text`` with every path inside ``run_dir`` written relative to it
    (``/home/al/runs/seed/case/repro.py`` -> ``case/repro.py``) and every other path under
    ``home`` written with ``~`` (``-o /home/al/runs/seed`` -> ``-o ~/runs/seed``), and an
    installed package's file from its packages folder on (``site-packages/torch/nn/...``). The
    run folder itself, named alone, is said under ``~`` when it is there, as a rerun command
    needs it. Folders are matched as given and as resolved (a symlinked home, a relative run
    folder). ``cwd``, the folder the command ran in: a path inside it is written relative to it
    (``/tmp/trial/models.py:build`` -> ``models.py:build``), as the user typed it, unless that
    folder holds the home folder (``/``, ``/home``, home itself: ``~`` says it better).
    ``prefixes``: Python environments (``sys.prefix``), each written ``<venv>``
    (``<venv>/bin/reprokit``). ``named``: other folders of the user's (a captured model's),
    each written by its own name (``/data/al/models/mine.pt2`` -> ``models/mine.pt2``)."""
    for folder in _spellings(run_dir):
        text = re.sub(re.escape(folder) + "/+", "", text)
    text = _PACKAGES.sub(r"\1/", text)
    for folder in _all_spellings(prefixes):
        text = re.sub(re.escape(folder) + _NAME_GOES_ON, VENV, text)
    for folder in _spellings(cwd) if not _holds(cwd, home) else ():
        text = re.sub(re.escape(folder) + "/+", "", text)
    for folder in _all_spellings(named):
        text = re.sub(re.escape(folder) + _NAME_GOES_ON, Path(folder).name, text)
    for folder in _spellings(home):
        text = re.sub(re.escape(folder) + _NAME_GOES_ON, "~", text)
    return text


def _holds(folder: Path | str | None, home: Path | str | None) -> bool:
    """``folder`` is the home folder or one of its parents (or there is no home to tell)."""
    if folder is None or home is None:
        return True
    inner, outer = Path(home).expanduser().resolve(), Path(folder).expanduser().resolve()
    return inner == outer or outer in inner.parents


def _spellings(folder: Path | str | None) -> Iterable[str]:
    """A folder as written in absolute form and resolved, longest first (so that a longer
    spelling is not cut by a shorter one it starts with)."""
    if folder is None or str(folder) == "":
        return []
    path = Path(folder).expanduser()
    found = {os.path.abspath(path).rstrip("/"), str(path.resolve()).rstrip("/")} - {""}
    return sorted(found, key=len, reverse=True)  # the root folder ("") is no one's layout


def _all_spellings(folders: Iterable[Path | str]) -> list[str]:
    """Every spelling of every folder, longest first: a folder inside another is replaced
    before the one that holds it."""
    return sorted({s for folder in folders for s in _spellings(folder)}, key=len, reverse=True)


def user_home() -> Path | None:
    """The user's home folder ($HOME), or None when it cannot be told."""
    try:
        return Path.home()
    except (RuntimeError, KeyError):
        return None
