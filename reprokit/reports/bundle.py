"""bundle.zip: what a maintainer needs to rerun and inspect, within GitHub's 25 MB limit.

Text (summary, environment, scripts, case files, logs, result files) goes in first, redacted
and with no path of the machine's layout (reprokit.reports.paths): the run folder's own
relative to it, the Python environment's as ``<venv>`` (an installed package's from
``site-packages/`` on), the folders the run names (its case's, its model's, where it ran)
relative to the folder that holds them and the run folder, else by their own name, the rest
of home under ``~``. A captured program (``.pt2``) gets the same in its JSON records (the
stack traces torch.export keeps). Tensors follow, smallest first, while they fit. What is
left out is listed inside the bundle. The run folder itself is left as the run wrote it.
"""

from __future__ import annotations

import io
import json
import os
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from reprokit.infra.redact import redact_text
from reprokit.records.folder import CASE_FILE, RESULT, SCRIPT, SUMMARY
from reprokit.records.minimize import MINIMAL_CASE
from reprokit.records.report import LEFT_OUT
from reprokit.reports.paths import public_paths, user_home

ATTACHMENT_LIMIT = 25 * 1000 * 1000  # GitHub's limit for a file attached to an issue
_RESERVE = 256 * 1024  # room for the list of left-out files and the zip's directory
TEXT = {".json", ".log", ".py", ".toml", ".txt", ".md"}
PROGRAM = ".pt2"  # a zip whose JSON records hold the exporting machine's paths


def _members(run_dir: Path, target: Path) -> list[Path]:
    """Regular files of the run folder (links are never followed), text before tensors."""
    files = [
        p
        for p in run_dir.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and p != target
        and p.name != target.name
        and not _ours(p)
        and not _minimize_scratch(run_dir, p)
    ]
    return sorted(files, key=lambda p: (_priority(p), p.stat().st_size, str(p)))


def _ours(path: Path) -> bool:
    """The run folder's lock and half-written temporary files: not part of the run. Other
    dot-files are kept: a distributed checkpoint cannot be read without its .metadata."""
    return path.name == ".reprokit.lock" or (path.name.startswith(".") and path.suffix == ".tmp")


def _minimize_scratch(run_dir: Path, path: Path) -> bool:
    """A minimize folder's rejected candidates (``candidates/``: their run folders,
    ``programs/``: their .pt2 files): the search's scratch, not what a maintainer needs (the
    minimal case and program, the repros, the summary), its own and those of each other
    root's minimization (``roots/NAME/candidates/``)."""
    if not (run_dir / MINIMAL_CASE).is_file():
        return False
    parts = path.relative_to(run_dir).parts
    at = 2 if parts[0] == "roots" and len(parts) > 2 else 0
    return parts[at] in ("candidates", "programs")


def _priority(path: Path) -> int:
    """What a maintainer needs first: the summary, then scripts and cases, results, logs."""
    order = {SUMMARY: 0, SCRIPT: 1, CASE_FILE: 1, RESULT: 2}
    if path.name in order:
        return order[path.name]
    return 3 if path.suffix in TEXT else 4


def write_bundle(run_dir: Path, target: Path, limit: int = ATTACHMENT_LIMIT) -> Path:
    """Write ``target`` from ``run_dir``; never larger than ``limit`` bytes."""
    run_dir = Path(run_dir)
    left_out: list[str] = []
    used = 0
    layout = public_layout(run_dir, user_home())

    def public(text: str) -> str:
        return public_paths(redact_text(text), **layout)

    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in _members(run_dir, target):
            name = path.relative_to(run_dir).as_posix()
            data: bytes | None = None
            if path.suffix in TEXT:
                text = path.read_bytes().decode("utf-8", errors="surrogateescape")
                data = public(text).encode("utf-8", errors="surrogateescape")
                cost = len(zlib.compress(data, 6)) + len(name) + 100  # its share of the zip
            else:  # tensors barely compress: their size is their cost, and they are not read
                cost = path.stat().st_size + len(name) + 100
                if path.suffix == PROGRAM and cost < limit - _RESERVE - used:
                    data = _program(path, public)
            if used + cost > limit - _RESERVE:
                left_out.append(f"{name} ({path.stat().st_size:,} bytes)")
                continue
            if data is None:
                bundle.write(path, name)
            else:
                bundle.writestr(name, data)
            used += cost
        if left_out:
            note = "Left out to stay within GitHub's 25 MB attachment limit:\n"
            bundle.writestr(LEFT_OUT, note + "\n".join(left_out) + "\n")
    return target


def _program(path: Path, public: Callable[[str], str]) -> bytes | None:
    """A captured program's archive with ``public`` applied to its JSON records (the nodes'
    stack traces: metadata, not what runs), every other entry as it was, in its order; None
    (the file as it is) when it is no archive."""
    if not zipfile.is_zipfile(path):
        return None
    copy = io.BytesIO()
    with zipfile.ZipFile(path) as program, zipfile.ZipFile(copy, "w") as written:
        for entry in program.infolist():
            data = program.read(entry)
            if entry.filename.endswith(".json"):
                data = public(data.decode("utf-8", errors="surrogateescape")).encode(
                    "utf-8", errors="surrogateescape"
                )
            written.writestr(entry, data, compress_type=entry.compress_type)
    return copy.getvalue()


def public_layout(run_dir: Path, home: Path | None) -> dict[str, Any]:
    """How reports and the bundle write the paths the run recorded (public_paths): the Python
    environments (this one, and the one whose ``reprokit`` the run's command line started) as
    ``<venv>``; the folders the summary names (the case's, the model's, an earlier
    run's, the run folder's parent) relative to the folder that holds them all with the run
    folder, where that is the user's own (not ``/``, ``/tmp``, home or a folder above it), and
    each one that is not (the run folder's parent too, where no other is) by its own name."""
    argv, folders = _recorded(run_dir)
    prefixes = environments(argv, home)
    runs = Path(os.path.abspath(run_dir)).parent
    mine = [f for f in folders if not _inside(f, [Path(os.path.abspath(run_dir)), *prefixes])]
    near = [f for f in mine if _own(Path(os.path.commonpath([runs, f])), home)]
    base = Path(os.path.commonpath([runs, *near])) if near and _own(runs, home) else None
    named = [f for f in [runs, *mine] if base is None or not _inside(f, [base])]
    return {"run_dir": run_dir, "home": home, "cwd": base, "prefixes": prefixes, "named": named}


def _recorded(run_dir: Path) -> tuple[list[str], list[Path]]:
    """The run's command line, and the folders of every existing absolute path its summary
    names (the folder of a file); none where it has no summary (an ops folder)."""
    try:
        data = json.loads((run_dir / SUMMARY).read_text("utf-8"))
    except (OSError, ValueError):
        return [], []
    argv = [str(a) for a in data.get("run", {}).get("argv", [])] if isinstance(data, dict) else []
    system = [Path(sys.base_prefix), Path("/usr"), Path("/etc"), Path("/proc"), Path("/dev")]
    found = set()
    for value in _strings(data):
        path = Path(value)
        if _inside(path, system) or not path.exists():
            continue
        found.add(path if path.is_dir() else path.parent)
    return argv, sorted(found)


def _strings(data: object) -> Iterator[str]:
    """Every string in a JSON value that could be an absolute path (one line, no spaces)."""
    if isinstance(data, dict):
        for value in data.values():
            yield from _strings(value)
    elif isinstance(data, list):
        for value in data:
            yield from _strings(value)
    elif isinstance(data, str) and data.startswith("/") and len(data) < 4096:
        if not any(c.isspace() for c in data):
            yield data


def environments(argv: list[str], home: Path | None) -> list[Path]:
    """This Python environment, where it is a virtual one or the user's own (under home), and
    the one the run's ``reprokit`` belongs to (``<venv>/bin/reprokit``)."""
    found = []
    here = Path(sys.prefix)
    if sys.prefix != sys.base_prefix or (home is not None and _inside(here, [home])):
        found.append(here)
    if argv and argv[0].startswith("/"):
        started = Path(argv[0]).parent.parent
        if (started / "pyvenv.cfg").is_file() and started not in found:
            found.append(started)
    return found


def _inside(path: Path, folders: list[Path]) -> bool:
    """``path`` is one of ``folders`` or inside one (as written: links are not followed)."""
    path = Path(os.path.abspath(path))
    return any(path == f or f in path.parents for f in (Path(os.path.abspath(f)) for f in folders))


def _own(folder: Path, home: Path | None) -> bool:
    """A folder of the user's own: two levels deep at least, and not home nor above it."""
    folder = Path(os.path.abspath(folder))
    if len(folder.parts) < 3:
        return False
    return home is None or not _inside(Path(home), [folder])
