"""A case's variants: ``[matrix]`` expanded as GitHub Actions expands a matrix, ``--set``
applied, each in its environments; a variant's label, parameters and files.

Torch-free, as listing cases must be.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import shutil
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reprokit.environment.variables import carried
from reprokit.errors import ReprokitError
from reprokit.generate.cases import Case, find_cases, load_case
from reprokit.generate.templates import Template
from reprokit.records import EnvSpec, VariantResult
from reprokit.records.run import captured


@dataclass(frozen=True)
class Variant:
    """One combination of a case's matrix, with every template parameter resolved."""

    case: Case
    params: dict[str, Any]
    choice: dict[str, Any] = field(default_factory=dict)  # the matrix values of this variant
    sets: dict[str, Any] = field(default_factory=dict)  # what --set changed (not a matrix axis)
    env: EnvSpec | None = None  # the environment it runs in (--env, [envs]); None: reprokit's
    # the steering variables exported where it was made (environment.variables.carried), or,
    # made again from a record, when it ran; the runner adds those exported as it prepares it
    exported: dict[str, str] = field(default_factory=dict)

    @property
    def template(self) -> Template:
        return self.case.template

    @property
    def captured(self) -> bool:
        return captured(self.params)

    def with_params(self, params: Mapping[str, Any], *, name: str | None = None) -> Variant:
        """A variant of its own with every parameter given (a minimizer's candidate, a
        minimal case): no matrix, and no choice or ``--set`` to label it (they would name
        values it may no longer have); its environment kept, ``name`` its case's if given."""
        case = replace(self.case, name=name or self.case.name, matrix={}, include=(), exclude=())
        return Variant(case, dict(params), env=self.env, exported=self.exported)

    @property
    def variables(self) -> dict[str, str]:
        """The variables its stages run with, beyond the harness's own, sorted by name: the
        case's ``[variables]``, and what was exported when it ran, which wins (as it does in
        the script: its top lines only set what is not set)."""
        return dict(sorted({**self.case.variables, **self.exported}.items()))

    @property
    def case_variables(self) -> tuple[str, ...]:
        """Which of :attr:`variables` are the case's (the others: the run's environment)."""
        found = self.variables
        return tuple(k for k, v in self.case.variables.items() if found[k] == v)

    @property
    def label(self) -> str:
        """``case`` or ``case[v1-v2]``, pytest style, and ``key=value`` for each ``--set``
        (``case[v1-mesh_shape=2x2]``), so that runs with other values keep apart, and
        ``@env`` for its environment (``case[v1]@2.8``); also the variant's folder name."""
        at = "@" + re.sub(r"[^\w.+-]", "_", self.env.name) if self.env else ""
        if not self.choice and not self.sets:
            return self.case.name + at
        values = [*map(_shown, self.choice.values())]
        values += [f"{key}={_shown(value)}" for key, value in self.sets.items()]
        inside = "-".join(re.sub(r"[^\w.=+-]", "_", value) for value in values)
        if len(inside) > 80:  # a folder name must stay short: cut, and keep it unique
            inside = f"{inside[:60]}~{hashlib.sha1(inside.encode()).hexdigest()[:10]}"
        return f"{self.case.name}[{inside}]{at}"

    @property
    def tolerances(self) -> dict[str, float | None]:
        return self.case.compare.tolerances()

    @property
    def method(self) -> str:
        return self.case.compare.method

    @property
    def compare(self) -> dict[str, Any]:
        """What templates see as ``compare``: the tolerances and the method."""
        return {**self.tolerances, "method": self.method}

    @property
    def files(self) -> dict[str, Path]:
        """The files its ``file`` parameters name (an empty one names none), by the name they
        get beside the script."""
        kinds = self.template.params
        named = (v for k, v in self.params.items() if kinds[k].type == "file" and v)
        return {Path(v).name: Path(v) for v in named}

    def copy_files(self, folder: Path, *, link: bool = False) -> list[Path]:
        """Put the files its ``file`` parameters name into ``folder``, beside its script;
        ``link``: a captured program as a hard link where the file system allows (a run
        folder then holds no second copy of a program of tens of MB)."""
        copied = [Path(folder) / name for name in self.files]
        for target, source in zip(copied, self.files.values(), strict=True):
            if not (target.exists() and target.samefile(source)):  # rendered beside its case
                _place(source, target, link=link and source.suffix == LINKED_SUFFIX)
        return copied

    def script_params(self) -> dict[str, Any]:
        """The parameters as the script sees them: a file by its name (it lies beside it)."""
        kinds = self.template.params
        return {k: Path(v).name if kinds[k].type == "file" else v for k, v in self.params.items()}

    def case_info(self) -> dict[str, Any]:
        case = self.case
        return {"name": case.name, "title": case.title, "description": case.description}

    @property
    def changed(self) -> dict[str, Any]:
        """Its parameters that are not at the template's default, as the report shows them."""
        defaults = self.template.defaults()
        return {
            k: v for k, v in self.script_params().items() if k not in defaults or defaults[k] != v
        }


# Only programs are linked: reprokit writes them by replacing the file (capture, minimize), so
# a new capture never changes what an earlier run folder holds. A checkpoint is often saved
# again in place (torch.save opens the same file), which would reach through a link.
LINKED_SUFFIX = ".pt2"


def _place(source: Path, target: Path, *, link: bool) -> None:
    """``source`` at ``target``: a hard link when asked and possible, else a copy; never
    written through an earlier link at ``target`` (it is removed first)."""
    target.unlink(missing_ok=True)
    if link:
        try:
            os.link(source, target)
            return
        except OSError:  # another file system, or one without hard links: a copy
            pass
    shutil.copyfile(source, target)


def variant_of(result: VariantResult, case: Case) -> Variant:
    """The variant a recorded result ran, again, from its case: its parameters, the matrix
    values among them, its environment (``VariantResult.env``) and the variables exported
    when it ran. What ``--set`` changed is among the parameters, but is not told apart: the
    result's own label says it."""
    params = dict(result.variant)
    choice = {k: params[k] for k in case.matrix if k in params}
    exported = {k: v for k, v in result.variables.items() if k not in result.case_variables}
    return Variant(case, params, choice, env=result.env, exported=exported)


def _shown(value: Any) -> str:
    """A value as a label shows it: a list as a shape (``2x2``), a path by its name."""
    if isinstance(value, list | tuple):
        return "x".join(map(_shown, value))
    return Path(value).name if isinstance(value, str) and "/" in value else str(value)


def variants(
    case: Case, sets: dict[str, Any] | None = None, envs: Iterable[EnvSpec] | None = None
) -> list[Variant]:
    """The case's variants: one per combination of its matrix, ``sets`` applied last, in each
    of ``envs`` (``--env``), else of the case's own ``[envs]``; each with the steering
    variables exported here (``Variant.exported``), so that every script made from it, by
    ``reprokit run``, ``render`` or ``minimize``, sets them."""
    sets = sets or {}
    envs = tuple(case.envs if envs is None else envs) or (None,)
    for key, value in sets.items():
        param = case.template.params.get(key)
        if param is None:
            raise ReprokitError(
                f"--set {key}: template {case.template.name!r} has no such parameter",
                case.path,
                hint="Declared: " + ", ".join(case.template.params),
            )
        if problem := param.problem(value):
            raise ReprokitError(f"--set {key}: {key} {problem}", case.path, hint=param.describe())
        if param.type == "file":  # typed on the command line: relative to where it was typed
            if not Path(value).is_file():
                raise ReprokitError(f"--set {key}: no such file {value!r}", hint=param.describe())
            sets = {**sets, key: str(Path(value).resolve())}
    base = {**case.template.defaults(), **case.params, **sets}
    for param in case.template.params.values():
        included = bool(case.include) and all(param.name in c for c in case.include)
        if param.required and param.name not in base | case.matrix and not included:
            raise ReprokitError(
                f"missing parameter {param.name!r}",
                case.path,
                hint=f"Set it in [params] or with --set: {param.describe()}",
            )
    exported = carried(os.environ)  # what its scripts set, as the run's stages get them
    return [
        Variant(case, {**base, **c, **sets}, c, sets, env, exported)
        for c in _choices(case, sets)
        for env in envs
    ]


def _choices(case: Case, sets: dict[str, Any]) -> list[dict[str, Any]]:
    """The matrix's combinations as GitHub Actions makes them: every product of the axes, less
    those an ``exclude`` entry matches; then each ``include`` entry is added to the products
    whose axis values it shares, or, sharing none, is a combination of its own. A ``--set``
    pins its parameter: an entry that disagrees with it is left out."""
    axes = {k: v for k, v in case.matrix.items() if k not in sets}
    products = [dict(zip(axes, c, strict=True)) for c in itertools.product(*axes.values())]
    if not case.matrix and case.include:
        products = []  # no axes: the combinations are what include adds
    found = [c for c in products if not any(_matches({**c, **sets}, e) for e in case.exclude)]
    originals = list(found)
    for extra in case.include:
        if any(k in sets and sets[k] != v for k, v in extra.items()):
            continue
        shared = {k: v for k, v in extra.items() if k in axes}
        matched = [c for c in originals if _matches(c, shared)]
        for combo in matched:
            combo.update({k: v for k, v in extra.items() if k not in axes and k not in sets})
        if not matched:
            found.append({k: v for k, v in extra.items() if k not in sets})
    return found


def _matches(combo: dict[str, Any], entry: dict[str, Any]) -> bool:
    return all(k in combo and combo[k] == v for k, v in entry.items())


def parse_sets(items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a value is read as TOML (``3``, ``true``, ``[4, 1]``), else text."""
    sets: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", key.strip()):
            raise ReprokitError(f"--set {item!r} is not KEY=VALUE", hint="Example: --set layers=4")
        try:
            parsed = tomllib.loads(f"value = {raw}")
            value = parsed["value"] if parsed.keys() == {"value"} else raw
        except tomllib.TOMLDecodeError:
            value = raw
        sets[key.strip()] = value
    return sets


def load_variants(
    selectors: Iterable[str] = (),
    *,
    sets: dict[str, Any] | None = None,
    cases: Iterable[Path] = (),
    templates: Iterable[Path] = (),
    envs: Iterable[EnvSpec] | None = None,
) -> list[Variant]:
    """Every variant of the selected cases (all cases when none is selected)."""
    envs = None if envs is None else tuple(envs)
    return [
        variant
        for path in find_cases(list(selectors), cases)
        for variant in variants(load_case(path, templates=templates), sets, envs)
    ]
