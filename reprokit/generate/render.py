"""Render a variant into its standalone script, with the one Jinja environment.

Every value from a case reaches the script as a Python literal (``repr`` of the checked
value): a string can never become code, whatever it holds. Templates that want plain text
(a title in a comment) or a name ask for it with the ``comment`` or ``ident`` filter. A
``file`` parameter reaches the script as the file's name: the file lies next to the script.

Templates branch and print; what follows from the values is computed here: the filters
``optimizer_class`` and ``partition_spec`` map a choice to what the script names, and a
parameter declared ``devices_of = "<mesh>"`` gets the mesh's device count before the template
runs (refused, naming the case, when the two disagree).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import textwrap
import warnings
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment
from markupsafe import Markup

from reprokit.errors import ReprokitError, ReprokitWarning
from reprokit.generate.templates import template_dirs
from reprokit.generate.variables import with_variables
from reprokit.infra.caching import cache_root, file_digest
from reprokit.records.folder import RENDERED

COMMENT_WIDTH = 96  # a wrapped comment line, "# " included, stays within 98 columns
# the torch.optim class of each `optimizer` choice of the built-in templates
OPTIMIZER_CLASSES = {"sgd": "SGD", "adam": "Adam"}
# the PartitionSpec of a 2-D weight on a ("data", "model") mesh, per `weight_sharding` choice
PARTITION_SPECS: dict[str, tuple[str | None, ...]] = {
    "replicated": (None, None),
    "rows": ("model", None),
    "cols": (None, "model"),
}

if TYPE_CHECKING:
    from collections.abc import Iterable

    from reprokit.generate.variants import Variant


def _python_literal(value: Any) -> Markup:
    """Every ``{{ value }}`` becomes a Python literal, so case data cannot become code."""
    if isinstance(value, Markup):  # output of a macro or of the comment filter
        return value
    if isinstance(value, str):  # JSON's string escapes are all valid in Python too
        return Markup(json.dumps(value))
    return Markup(_literal(value))


def _literal(value: Any) -> str:
    """repr(), but a float that is not finite as ``float("inf")``: repr's ``inf`` and ``nan``
    are no Python (an input of NaN or inf printed in a short repro)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    if isinstance(value, list):
        return f"[{', '.join(map(_literal, value))}]"
    if isinstance(value, tuple):
        return f"({', '.join(map(_literal, value))}{',' * (len(value) == 1)})"
    return repr(value)


def _comment(value: Any) -> Markup:
    """Plain text safe inside a ``#`` comment, wrapped so that the script's lines stay under
    the linters' 100 columns: every line break starts a new comment."""
    paragraphs = re.split(r"\s*[\r\n]+\s*", str(value).strip())
    lines = [line for text in paragraphs for line in textwrap.wrap(text, COMMENT_WIDTH)]
    return Markup("\n# ".join(lines or [""]))


def _identifier(value: Any) -> Markup:
    """A dotted Python name, checked, for templates that choose a class or function by name."""
    if not re.fullmatch(r"[A-Za-z_][\w.]*", str(value)):
        raise ValueError(f"not a Python name: {value!r}")
    return Markup(value)


def _optimizer_class(choice: str) -> Markup:
    """``sgd`` -> ``SGD``: the torch.optim class an ``optimizer`` choice names."""
    return _identifier(_lookup(OPTIMIZER_CLASSES, choice, "optimizer"))


def _partition_spec(choice: str) -> tuple[str | None, ...]:
    """``rows`` -> ``("model", None)``: how a ``weight_sharding`` choice shards a 2-D weight."""
    return _lookup(PARTITION_SPECS, choice, "weight_sharding")


def _lookup(table: dict[str, Any], choice: str, name: str) -> Any:
    if choice not in table:
        raise Refused(f"{name} {choice!r} is none of {', '.join(table)}")
    return table[choice]


class Refused(Exception):
    """A template refused the case's values (they cannot make a working script)."""


def _mesh_devices(shape: Any, devices: Any) -> int:
    """The SPMD devices a mesh of ``shape`` takes; ``devices`` (0: as many as the mesh needs)
    must agree, so that a mesh that cannot fit is refused here, not in the stage."""
    if not shape or not all(type(n) is int and n >= 1 for n in shape):
        raise Refused(f"mesh_shape {shape!r} must be a list of positive whole numbers")
    needed = math.prod(shape)
    if devices and devices != needed:
        raise Refused(f"mesh_shape {shape} takes {needed} devices, but spmd_devices is {devices}")
    return needed


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """Jinja's own cache of compiled templates, kept between processes: a run of the library
    compiles 11 templates, 0.17 s. Its entries are keyed by a template's source; this file's
    digest names their folder, since the code Jinja compiles also depends on the options
    below. One that cannot be read or written is no cache: the render goes on."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, ValueError, EOFError):  # unreadable: compiled anew
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            os.makedirs(self.directory, exist_ok=True)
            super().dump_bytecode(bucket)


@cache
def environment(dirs: tuple[Path, ...], cache: Path | None = None) -> SandboxedEnvironment:
    """The one Jinja environment: sandboxed, strict about undefined names; its compiled
    templates kept under ``cache`` (a folder of :func:`cache_root`), where given."""
    env = SandboxedEnvironment(
        loader=jinja2.FileSystemLoader([str(d) for d in dirs]),
        bytecode_cache=_CompiledTemplates(str(cache)) if cache else None,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=True,  # with _python_literal as finalize: escaping means "make it a literal"
        finalize=_python_literal,
    )
    env.filters["comment"] = _comment
    env.filters["ident"] = _identifier
    env.filters["optimizer_class"] = _optimizer_class
    env.filters["partition_spec"] = _partition_spec
    env.globals["mesh_devices"] = _mesh_devices  # for templates written before devices_of
    return env


@cache
def _compiled_templates(root: Path) -> Path:
    return root / RENDERED / str(file_digest(Path(__file__)))[:16]


@lru_cache(maxsize=64)
def _undeclared(env: SandboxedEnvironment, source: str) -> frozenset[str]:
    """The names a template's text uses without defining them: once a text (every variant of a
    case renders the same template, a parse of 2-3 ms each)."""
    return frozenset(meta.find_undeclared_variables(env.parse(source)))


def _context(variant: Variant) -> dict[str, Any]:
    """What the template sees: the parameters (a ``devices_of`` one as its mesh's device
    count), the case and the comparison."""
    params = variant.script_params()
    for param in variant.template.params.values():
        if param.devices_of:
            params[param.name] = _mesh_devices(params[param.devices_of], params[param.name])
    return {**params, "case": variant.case_info(), "compare": variant.compare}


def _warn_deprecated(variant: Variant) -> None:
    """A deprecated parameter the case (or --set) still sets: accepted, ignored, warned of."""
    declared = variant.template.params
    for name in {**variant.case.params, **variant.choice, **variant.sets}:
        if message := declared[name].deprecated:
            warnings.warn(
                f"{variant.case.path}: parameter {name} of template {variant.template.name!r} "
                f"is deprecated and has no effect: {message}",
                ReprokitWarning,
                stacklevel=3,
            )


def render(variant: Variant, *, templates: Iterable[Path] = ()) -> str:
    """The standalone script of ``variant``, checked to be valid Python."""
    template = variant.template
    # the template's own folder first: a case found with --templates renders without it too
    dirs = dict.fromkeys([template.path.parent, *template_dirs(templates)])
    env = environment(tuple(dirs), _compiled_templates(cache_root()))
    _warn_deprecated(variant)
    source = template.path.read_text(encoding="utf-8")
    try:
        context = _context(variant)
        unset = sorted(_undeclared(env, source) - context.keys())
        if unset:
            raise ReprokitError(
                f"the template uses {', '.join(unset)}, which it does not declare",
                template.path,
                hint="Declare every variable the template uses in its front matter [params].",
            )
        script = env.get_template(template.path.name).render(context)
        # after the template, so that every template gets them, one written without the
        # protocol's macros too; before the compile check, which covers them
        script = with_variables(script, variant.variables, variant.case_variables)
    except Refused as exc:
        raise ReprokitError(
            f"{variant.label}: {exc}",
            variant.case.path,
            hint="Change it in the case file or with --set; spmd_devices = 0 takes the mesh's.",
        ) from None
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None)
        raise ReprokitError(f"cannot render: {exc}", template.path, line) from None
    except SyntaxError as exc:  # with_variables reads the script: it is not Python
        raise _not_python(exc, template.path) from None
    try:  # from the text, with no Python AST made: a run renders every variant before it
        # lists the first's stages, which parses the script (python_source.py's few trees
        # would no longer hold this one by then in a run of more than a few variants)
        compile(script, f"{variant.label}.py", "exec")
    except SyntaxError as exc:
        raise _not_python(exc, template.path) from None
    return script


def _not_python(exc: SyntaxError, template: Path) -> ReprokitError:
    return ReprokitError(
        f"the rendered script is not valid Python: {exc.msg} (script line {exc.lineno})",
        template,
        hint="Fix the template; `reprokit render` shows the script it made.",
    )
