"""bundle.zip: what a maintainer needs to rerun and inspect, within GitHub's 25 MB limit.

Text (summary, environment, scripts, case files, logs, result files) goes in first, redacted
and with its paths relative to the run folder or under ``~`` (reprokit.reports.paths);
tensors follow, smallest first, while they fit. What is left out is listed inside the bundle.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

from reprokit.infra.redact import redact_text
from reprokit.records.folder import CASE_FILE, RESULT, SCRIPT, SUMMARY
from reprokit.reports.paths import public_paths, user_home

ATTACHMENT_LIMIT = 25 * 1000 * 1000  # GitHub's limit for a file attached to an issue
_RESERVE = 256 * 1024  # room for the list of left-out files and the zip's directory
TEXT = {".json", ".log", ".py", ".toml", ".txt", ".md"}
LEFT_OUT = "LEFT_OUT.txt"


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
    if not (run_dir / "minimal.toml").is_file():
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
    home = user_home()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in _members(run_dir, target):
            name = path.relative_to(run_dir).as_posix()
            if path.suffix in TEXT:
                text = path.read_bytes().decode("utf-8", errors="surrogateescape")
                text = public_paths(redact_text(text), run_dir=run_dir, home=home)
                data = text.encode("utf-8", errors="surrogateescape")
                cost = len(zlib.compress(data, 6)) + len(name) + 100  # its share of the zip
            else:  # tensors barely compress: their size is their cost, and they are not read
                data, cost = None, path.stat().st_size + len(name) + 100
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
