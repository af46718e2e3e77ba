"""Case files: find, load and validate them (their variants: variants.py).

Listing and validating cases never imports torch: only the standard library and the
template front matter are read.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from reprokit.environment.specs import parse_env
from reprokit.environment.variables import HARNESS_OWNED
from reprokit.errors import ReprokitError
from reprokit.generate.templates import Template, builtin_dir, did_you_mean, find_template
from reprokit.infra.redact import is_secret_name
from reprokit.records import EnvSpec, Outcome, Triage

if TYPE_CHECKING:
    from collections.abc import Iterable


# Each table a case may hold, with its keys and their types; anything else is an error.
_SCHEMA: dict[str, dict[str, type | tuple[type, ...]]] = {
    "case": {
        "title": str,
        "template": str,
        "description": str,
        "tags": list,
        "timeout": (float, int),
    },
    "compare": {"rtol": (float, int), "atol": (float, int), "method": str},
    "expect": {"outcome": str, "observed": str, "triage": str},
}
_REQUIRED_KEYS = {"case": ("title", "template")}
_EXPECTABLE = [o.value for o in Outcome if o is not Outcome.SKIPPED]
_TRIAGE_LABELS = [label.value for label in Triage]  # [expect] triage: what a rerun shows
_DEVICES = ("cpu", "tpu", "cuda")  # [expect.tpu]: what the case expects where XLA runs on a TPU
METHODS = ("allclose", "fp64")  # [compare] method: tolerances, or error against float64


@dataclass(frozen=True)
class CompareSettings:
    """A case's ``[compare]``: how its stages' tensors are judged. None: torch.testing's
    default tolerance for the tensors' dtype."""

    rtol: float | None = None
    atol: float | None = None
    method: str = "allclose"  # or "fp64": by the error against a float64 arbiter stage

    def tolerances(self) -> dict[str, float | None]:
        """The tolerances, as keyword arguments of the comparison."""
        return {"rtol": self.rtol, "atol": self.atol}


@dataclass(frozen=True)
class Case:
    """One validated case file."""

    name: str
    path: Path
    title: str
    template: Template
    description: str = ""
    tags: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    matrix: dict[str, list[Any]] = field(default_factory=dict)
    compare: CompareSettings = field(default_factory=CompareSettings)
    expect: Outcome = Outcome.MATCH
    timeout: float | None = None  # seconds each stage may run, instead of --timeout
    expect_on: dict[str, Outcome] = field(default_factory=dict)  # [expect.tpu], by device kind
    observed: dict[str, str] = field(default_factory=dict)  # "[expect]" -> where it was seen
    triage: dict[str, Triage] = field(default_factory=dict)  # "[expect]" -> its triage label
    include: tuple[dict[str, Any], ...] = ()  # [matrix] include: combinations added
    exclude: tuple[dict[str, Any], ...] = ()  # [matrix] exclude: combinations left out
    envs: tuple[EnvSpec, ...] = ()  # [envs]: each variant runs in each of these environments
    variables: dict[str, str] = field(default_factory=dict)  # [variables]: its stages' own

    def expected(self, xla_device: str) -> tuple[Outcome, str, str | None]:
        """The outcome expected where XLA runs on ``xla_device``, which table says so, and
        where that table says the outcome was observed."""
        device = xla_device.lower()
        table = f"[expect.{device}]" if device in self.expect_on else "[expect]"
        return self.expect_on.get(device, self.expect), table, self.observed.get(table)

    def expected_triage(self, xla_device: str) -> Triage | None:
        """The triage label the table :meth:`expected` chose asks for (docs/verdicts.md)."""
        return self.triage.get(self.expected(xla_device)[1])

    def to_json(self) -> dict[str, Any]:
        """As ``reprokit list --json`` shows it (its variants added there)."""
        return {
            "name": self.name,
            "path": str(self.path),
            "title": self.title,
            "template": self.template.name,
            "expect": self.expect.value,
            "expect_on": {device: outcome.value for device, outcome in self.expect_on.items()},
            "tags": list(self.tags),
            "envs": {env.name: list(env.requirements) for env in self.envs},
            "variables": dict(self.variables),
        }


def case_dirs(extra: Iterable[Path] = ()) -> list[Path]:
    """Where cases are looked up by name, the user's folders first so that theirs win."""
    return [*map(Path, extra), builtin_dir("cases")]


def find_cases(selectors: Iterable[str] = (), extra: Iterable[Path] = ()) -> list[Path]:
    """Case files for paths or names; every case when none is given."""
    dirs = case_dirs(extra)
    if not selectors:
        found: dict[str, Path] = {}
        for folder in dirs:
            for path in sorted(folder.glob("*.toml")):
                found.setdefault(path.stem, path)
        return [found[name] for name in sorted(found)]
    return [_find_case(selector, dirs) for selector in selectors]


def _find_case(selector: str, dirs: list[Path]) -> Path:
    if selector.endswith(".toml"):
        if Path(selector).is_file():
            return Path(selector)
        raise ReprokitError("no such case file", selector, hint="Check the path.")
    for folder in dirs:
        if re.fullmatch(r"[\w.-]+", selector) and (folder / f"{selector}.toml").is_file():
            return folder / f"{selector}.toml"
    names = {path.stem for folder in dirs for path in folder.glob("*.toml")}
    raise ReprokitError(
        f"unknown case {selector!r}{did_you_mean(selector, sorted(names))}",
        hint=f"Give a .toml path or a case name from {', '.join(map(str, dirs))} "
        "(`reprokit list` shows them); add a folder with --cases.",
    )


def load_case(path: Path, *, templates: Iterable[Path] = ()) -> Case:
    """Read and validate one case file against its template's declarations."""
    path = Path(path)
    text, data = _read(path)
    where = _Locator(path, text)
    sections, per_device = _sections(data, where)
    info = sections["case"]
    template = _template_of(info, templates, where)
    params, matrix = sections["params"], dict(sections["matrix"])
    combos = {key: _combos(matrix.pop(key, []), key, template, where) for key in _COMBOS}
    _check_params(template, params, matrix, where)
    params, matrix = _resolve_files(template, params, matrix, path.parent, where)
    for key in combos["exclude"][0] if combos["exclude"] else ():
        if key not in matrix:
            where.fail("exclude", "matrix", f"[matrix] exclude names {key!r}, not a matrix axis")
    expect_tables = sections["expect"]
    expect = _outcome(expect_tables, "expect", where) or Outcome.MATCH
    expect_on = {d: _outcome(t, f"expect.{d}", where) for d, t in per_device.items()}
    return Case(
        name=path.stem,
        path=path,
        title=info["title"],
        template=template,
        description=info.get("description", ""),
        tags=tuple(info.get("tags", ())),
        params=params,
        matrix=matrix,
        compare=_compare_settings(sections["compare"]),
        expect=expect,
        expect_on={d: o for d, o in expect_on.items() if o is not None},
        observed=_per_table(expect_tables, per_device, "observed"),
        triage={
            k: Triage(v) for k, v in _per_table(sections["expect"], per_device, "triage").items()
        },
        timeout=float(info["timeout"]) if "timeout" in info else None,
        include=combos["include"],
        exclude=combos["exclude"],
        envs=tuple(_env(name, value, where) for name, value in sections["envs"].items()),
        variables=_variables(sections["variables"], where),
    )


def _per_table(
    expect: dict[str, Any], per_device: dict[str, dict[str, Any]], key: str
) -> dict[str, Any]:
    """``key`` of [expect] and of each [expect.DEVICE] that sets it, by the table's name."""
    tables = [("[expect]", expect)] + [(f"[expect.{d}]", t) for d, t in per_device.items()]
    return {name: table[key] for name, table in tables if key in table}


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    """The case file's text and its TOML, or the error naming the file (and line)."""
    try:
        text = path.read_bytes().decode("utf-8")
        return text, tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ReprokitError(f"cannot read the case file: {exc}", path) from None
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_from_message(str(exc))
        raise ReprokitError(
            f"not valid TOML: {exc}", path, line, hint="See https://toml.io for the syntax."
        ) from None


def _sections(
    data: dict[str, Any], where: _Locator
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each known table (empty when absent), their keys checked; and ``[expect.DEVICE]``
    apart from ``[expect]``."""
    for table in data:
        if table not in (*_SCHEMA, *_FREE):
            where.fail(table, None, f"unknown table [{table}]", hint=_TABLES_HINT)
    sections = {name: _table(data, name, where) for name in (*_SCHEMA, *_FREE)}
    expect = dict(sections["expect"])
    per_device = {d: _table(expect, d, where, f"expect.{d}") for d in _DEVICES if d in expect}
    sections["expect"] = {k: v for k, v in expect.items() if k not in per_device}
    for name, keys in _SCHEMA.items():
        _check_keys(sections[name], keys, name, where)
    for device, table in per_device.items():
        _check_keys(table, _SCHEMA["expect"], f"expect.{device}", where)
    return sections, per_device


def _template_of(info: dict[str, Any], templates: Iterable[Path], where: _Locator) -> Template:
    """The template ``[case] template`` names; an unknown name is the case file's error."""
    try:
        return find_template(info["template"], templates)
    except ReprokitError as exc:
        if exc.path is not None:  # the template itself is broken: point at it
            raise
        where.fail("template", "case", exc.message, hint=exc.hint)


def _compare_settings(table: dict[str, Any]) -> CompareSettings:
    """``[compare]``, checked already: tolerances as floats (TOML may give integers)."""
    return CompareSettings(**{k: v if k == "method" else float(v) for k, v in table.items()})


_FREE = ("params", "matrix", "envs", "variables")  # tables whose keys are the case's own
_TABLES_HINT = (
    "A case holds [case], [params], [matrix], [compare], [expect], [envs] and [variables] "
    "(docs/cases.md)."
)
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _variables(table: dict[str, Any], where: _Locator) -> dict[str, str]:
    """``[variables]`` ``NAME = "value"``: the environment variables its stages run with.

    Refused, rather than overridden or warned of: a name the harness sets per stage itself
    (one value cannot be right for every stage: a CPU stage has no PJRT_DEVICE, an SPMD stage
    its own device count; --xla-device, a stage's "devices" and --dump-hlo set them), one of
    reprokit's own settings, and a secret (a case file and its scripts are meant to be shared).
    """
    for name, value in table.items():
        if not _VARIABLE.fullmatch(name):
            hint = "A variable's name is letters, digits and _, not starting with a digit."
            where.fail(name, "variables", f"[variables] {name!r} is not a variable's name", hint)
        if not isinstance(value, str):
            shown = str(value).lower() if isinstance(value, bool) else value
            where.fail(
                name,
                "variables",
                f"[variables] {name} must be a string, not {type(value).__name__}",
                f'Quote it: {name} = "{shown}".',
            )
        if name in HARNESS_OWNED or name.startswith("REPROKIT_"):
            hint = "reprokit sets it per stage (--xla-device, a stage's devices, --dump-hlo)."
            where.fail(name, "variables", f"[variables] {name} is reprokit's to set", hint)
        if is_secret_name(name):
            hint = "A case file is shared: export the secret where it runs instead."
            where.fail(name, "variables", f"[variables] {name} looks like a secret", hint)
    return dict(sorted(table.items()))


def _env(name: str, value: Any, where: _Locator) -> EnvSpec:
    """``[envs]`` ``NAME = "REQUIREMENT ..."`` (or a list of requirements)."""
    if isinstance(value, list) and all(isinstance(r, str) for r in value):
        value = " ".join(value)
    example = '"2.8" = "torch==2.8.0 torch_xla==2.8.0"'
    if not isinstance(value, str):
        where.fail(name, "envs", f"[envs] {name} must be requirements", f"E.g. {example}")
    try:
        return parse_env(f"{name}={value}")
    except ReprokitError as exc:
        where.fail(name, "envs", f"[envs] {name}: {exc.message}", exc.hint)


_COMBOS = ("include", "exclude")  # [matrix] keys that are lists of combinations, not axes


def _combos(value: Any, key: str, template: Template, where: _Locator) -> tuple[dict, ...]:
    """``[matrix] include`` or ``exclude``: a list of tables of declared parameters."""
    example = f'{key} = [{{mesh_shape = [4, 1], weight_sharding = "rows"}}]'
    if not isinstance(value, list) or not all(isinstance(c, dict) and c for c in value):
        where.fail(key, "matrix", f"[matrix] {key} must be a list of tables", f"E.g. {example}")
    for combo in value:
        for name, one in combo.items():
            param = template.params.get(name)
            if param is None:
                where.fail(key, "matrix", f"[matrix] {key}: no parameter {name!r}", example)
            elif problem := param.problem(one):
                where.fail(key, "matrix", f"[matrix] {key}: {name} {problem}", param.describe())
            elif param.type == "file":
                where.fail(key, "matrix", f"[matrix] {key}: a file ({name}) cannot be combined")
    return tuple(value)


def _outcome(table: dict[str, Any], section: str, where: _Locator) -> Outcome | None:
    value = table.get("outcome")
    if value is not None and value not in _EXPECTABLE:
        where.fail("outcome", section, f"unknown outcome {value!r}", f"Use one of {_EXPECTABLE}.")
    return None if value is None else Outcome(value)


def _table(
    data: dict[str, Any], name: str, where: _Locator, shown: str | None = None
) -> dict[str, Any]:
    table, shown = data.get(name, {}), shown or name
    if not isinstance(table, dict):
        where.fail(shown, None, f"{shown} must be a table, [{shown}]", hint=_TABLES_HINT)
    for key in _REQUIRED_KEYS.get(name, ()):
        if key not in table:
            where.fail(name, None, f"[{name}] lacks {key!r}", hint=f"Add {key} = ... to [{name}].")
    return table


def _check_keys(table: dict[str, Any], keys: dict[str, Any], name: str, where: _Locator) -> None:
    for key, value in table.items():
        if key not in keys:
            where.fail(key, name, f"unknown key {key!r} in [{name}]", f"Known: {', '.join(keys)}.")
        if isinstance(value, bool) or not isinstance(value, keys[key]):
            where.fail(key, name, f"[{name}] {key} has the wrong type: {type(value).__name__}")
        if key == "timeout" and value <= 0:
            where.fail(key, name, "[case] timeout must be positive (seconds)")
        if key == "tags" and not all(isinstance(tag, str) for tag in value):
            where.fail(key, name, "[case] tags must be a list of strings")
        if key == "triage" and value not in _TRIAGE_LABELS:
            hint = "Use one of " + ", ".join(_TRIAGE_LABELS) + " (docs/verdicts.md)."
            where.fail(key, name, f"unknown triage label {value!r}", hint)
        if name == "compare" and key == "method" and value not in METHODS:
            where.fail(key, name, f"unknown method {value!r}", f"Use one of {', '.join(METHODS)}.")
        elif name == "compare" and key != "method" and value < 0:
            where.fail(key, name, f"[compare] {key} must not be negative")


def _check_params(
    template: Template, params: dict[str, Any], matrix: dict[str, Any], where: _Locator
) -> None:
    declared = template.params
    hint = "Declared: " + ", ".join(declared) if declared else "It declares no parameters."
    for section, table in (("params", params), ("matrix", matrix)):
        for key, value in table.items():
            if key not in declared:
                message = f"template {template.name!r} has no parameter {key!r}"
                where.fail(key, section, message, hint)
            values = value if section == "matrix" else [value]
            if section == "matrix" and (not isinstance(value, list) or not value):
                where.fail(key, section, f"[matrix] {key} must be a non-empty list of values")
            for one in values:
                if problem := declared[key].problem(one):
                    where.fail(key, section, f"{key} {problem}", declared[key].describe())
            if section == "matrix" and key in params:
                where.fail(key, section, f"{key} is set in both [params] and [matrix]")


def _resolve_files(
    template: Template, params: dict[str, Any], matrix: dict[str, Any], base: Path, where: _Locator
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``file`` parameters as absolute paths: a case names its files relative to itself."""
    files = {name for name, p in template.params.items() if p.type == "file"}

    def resolve(key: str, section: str, value: str) -> str:
        path = (base / value).resolve()
        if not path.is_file():
            hint = "A file parameter is a path relative to the case file."
            where.fail(key, section, f"{key}: no such file {str(path)!r}", hint)
        return str(path)

    params = {k: resolve(k, "params", v) if k in files else v for k, v in params.items()}
    matrix = {
        k: [resolve(k, "matrix", v) for v in vs] if k in files else vs for k, vs in matrix.items()
    }
    return params, matrix


@dataclass
class _Locator:
    """Raises errors that point at the line of a key, since tomllib gives lines only on syntax."""

    path: Path
    text: str

    def line_of(self, key: str, section: str | None) -> int | None:
        current = None
        for number, line in enumerate(self.text.splitlines(), 1):
            header = re.match(r"\s*\[\s*([^\]]+?)\s*\]", line)
            if header:
                current = header[1]
                if section is None and current == key:
                    return number
            elif current == section and re.match(rf"\s*[\"']?{re.escape(key)}[\"']?\s*=", line):
                return number
        return None

    def fail(
        self, key: str, section: str | None, message: str, hint: str | None = None
    ) -> NoReturn:
        raise ReprokitError(message, self.path, self.line_of(key, section), hint)


def _line_from_message(message: str) -> int | None:
    found = re.search(r"line (\d+)", message)
    return int(found[1]) if found else None
