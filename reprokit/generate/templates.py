"""Templates: find them and read their parameter declarations (TOML front matter).

A template is one file, ``templates/<name>.py.j2``. It opens with a Jinja comment holding
TOML, its declarations, so that a user's template is a single file too::

    {#- reprokit
    title = "What the scenario shows"
    [params]
    layers = {type = "int", default = 2, min = 1, help = "hidden layers of the MLP"}
    seed = {type = "int", default = 0, help = "the seed", minimize = false}
    program = {type = "file", help = "a file the case brings, copied next to the script"}
    spmd_devices = {type = "int", default = 0, min = 0, devices_of = "mesh_shape", help = "..."}
    old_knob = {type = "int", default = 0, deprecated = "remove it from the case", help = "..."}
    -#}

``devices_of`` makes a device count follow a mesh (computed and checked when rendering);
``deprecated`` keeps a parameter that no longer does anything accepted, with a warning.

Reading the declarations needs only the standard library: listing never imports torch.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.errors import ReprokitError

if TYPE_CHECKING:
    from collections.abc import Iterable

_PACKAGE = Path(__file__).resolve().parents[1]  # reprokit/
_FRONT_MATTER = re.compile(r"\A\{#-?\s*reprokit\s*\n(?P<toml>.*?)-?#\}", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
    "str": (str,),
    "list": (list,),
    "file": (str,),  # a path, relative to the case file; the script gets the file's name
}
_REQUIRED = object()
SUFFIX = ".py.j2"
CONTEXT = {"case", "compare"}  # what render() gives every template beside its parameters


def builtin_dir(kind: str) -> Path:
    """The built-in ``templates`` or ``cases`` folder: inside the wheel, else the checkout's."""
    packaged = _PACKAGE / "_builtin" / kind
    return packaged if packaged.is_dir() else _PACKAGE.parent / kind


@dataclass(frozen=True)
class Param:
    """One declared template parameter."""

    name: str
    type: str
    help: str
    default: Any = _REQUIRED
    min: float | None = None
    choices: tuple[Any, ...] | None = None
    minimize: bool = True  # false: `reprokit minimize` leaves it alone (a seed, a fault knob)
    # the list parameter holding a mesh whose device count this parameter is (0: the mesh's)
    devices_of: str | None = None
    # why a case should stop setting it (it is accepted, ignored, and warned about)
    deprecated: str | None = None

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not acceptable for this parameter, or None when it is."""
        allowed = _TYPES[self.type]
        if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
            return f"must be {self.type}, not {type(value).__name__} {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(map(repr, self.choices))}, not {value!r}"
        if self.min is not None and value < self.min:
            return f"must be at least {self.min}, not {value!r}"
        return None

    def to_json(self) -> dict[str, Any]:
        """As ``reprokit list --json`` shows it."""
        return {
            "name": self.name,
            "type": self.type,
            "default": None if self.required else self.default,
            "required": self.required,
            "min": self.min,
            "choices": self.choices,
            "help": self.help,
        }

    def describe(self) -> str:
        default = "required" if self.required else f"default {self.default!r}"
        extra = f", one of {list(self.choices)}" if self.choices else ""
        extra += f", at least {self.min}" if self.min is not None else ""
        extra += f", deprecated: {self.deprecated}" if self.deprecated else ""
        return f"{self.type}, {default}{extra}: {self.help}"


@dataclass(frozen=True)
class Template:
    """A template file and what its front matter declares."""

    name: str
    path: Path
    title: str
    params: dict[str, Param] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """As ``reprokit list --json`` shows it."""
        params = [p.to_json() for p in self.params.values()]
        return {"name": self.name, "path": str(self.path), "title": self.title, "params": params}

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params.values() if not p.required}


def template_dirs(extra: Iterable[Path] = ()) -> list[Path]:
    """Where templates are looked up, the user's folders first so that theirs win."""
    return [*map(Path, extra), builtin_dir("templates")]


def list_templates(extra: Iterable[Path] = ()) -> list[Template]:
    """Every template, by name; a user's template hides a built-in one of the same name."""
    found: dict[str, Path] = {}
    for folder in template_dirs(extra):
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            name = path.name.removesuffix(SUFFIX)
            if not name.startswith("_"):
                found.setdefault(name, path)
    return [load_template(path) for _, path in sorted(found.items())]


def find_template(name: str, extra: Iterable[Path] = ()) -> Template:
    """The template called ``name``; the name is a bare identifier, never a path."""
    dirs = template_dirs(extra)
    if _NAME.fullmatch(name) and len(name) <= 100:  # longer: no file system has the name
        for folder in dirs:
            if (folder / f"{name}{SUFFIX}").is_file():
                return load_template(folder / f"{name}{SUFFIX}")
    names = [t.name for t in list_templates(extra)]
    known = ", ".join(names)
    raise ReprokitError(
        f"unknown template {name!r}{did_you_mean(name, names)}",
        hint=f"Known templates: {known}. A template is a name (no path) of a "
        f"<name>{SUFFIX} file in {', '.join(map(str, dirs))}; add a folder with --templates.",
    )


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean xser_to_spmd?`` when a known name is close (difflib), else nothing."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


@cache
def load_template(path: Path) -> Template:
    """Read a template's front matter into a :class:`Template`."""
    name = path.name.removesuffix(SUFFIX)
    match = _FRONT_MATTER.match(path.read_text(encoding="utf-8"))
    if match is None:  # a hand-written template may declare nothing
        return Template(name, path, title=name)
    try:
        spec = tomllib.loads(match["toml"])
    except tomllib.TOMLDecodeError as exc:
        raise ReprokitError(f"front matter is not valid TOML: {exc}", path) from None
    params = {key: _param(path, key, decl) for key, decl in spec.get("params", {}).items()}
    if reserved := sorted(params.keys() & CONTEXT):
        raise ReprokitError(
            f"parameter {reserved[0]!r} has the name of a variable reprokit sets itself",
            path,
            hint=f"Rename it: {', '.join(sorted(CONTEXT))} are given to every template.",
        )
    for param in params.values():
        mesh = params.get(param.devices_of) if param.devices_of else None
        if param.devices_of and (param.type != "int" or mesh is None or mesh.type != "list"):
            raise ReprokitError(
                f"parameter {param.name!r}: devices_of = {param.devices_of!r} is not usable",
                path,
                hint="devices_of names a list parameter (the mesh) and belongs on an int one.",
            )
    return Template(name, path, str(spec.get("title", name)), params)


def _param(path: Path, key: str, decl: Any) -> Param:
    if not isinstance(decl, dict) or decl.get("type") not in _TYPES or "help" not in decl:
        raise ReprokitError(
            f"parameter {key!r} is badly declared",
            path,
            hint=f'Declare it as {key} = {{type = "int|float|bool|str|list|file", default = ..., '
            'help = "..."}, with min = ... for numbers and choices = [...] where it fits.',
        )
    choices = decl.get("choices")
    param = Param(
        key,
        decl["type"],
        decl["help"],
        decl.get("default", _REQUIRED),
        decl.get("min"),
        tuple(choices) if choices is not None else None,
        bool(decl.get("minimize", True)),
        _optional_text(path, key, decl, "devices_of"),
        _optional_text(path, key, decl, "deprecated"),
    )
    if not param.required and (problem := param.problem(param.default)):
        raise ReprokitError(f"the default of parameter {key!r} {problem}", path)
    return param


def _optional_text(path: Path, key: str, decl: dict[str, Any], name: str) -> str | None:
    """A declaration's optional text key (``devices_of``, ``deprecated``), checked."""
    value = decl.get(name)
    if value is not None and not (isinstance(value, str) and value):
        raise ReprokitError(f"parameter {key!r}: {name} must be a non-empty string", path)
    return value
