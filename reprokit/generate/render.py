"""Render a variant into its standalone script, with the one Jinja environment.

Every value from a case reaches the script as a Python literal (``repr`` of the checked
value): a string can never become code, whatever it holds. Templates that want plain text
(a title in a comment) or a name ask for it with the ``comment`` or ``ident`` filter. A
``file`` parameter reaches the script as the file's name: the file lies next to the script.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment
from markupsafe import Markup

from reprokit.errors import ReprokitError
from reprokit.generate.templates import template_dirs

COMMENT_WIDTH = 96  # a wrapped comment line, "# " included, stays within 98 columns

if TYPE_CHECKING:
    from collections.abc import Iterable

    from reprokit.generate.variants import Variant


def _python_literal(value: Any) -> Markup:
    """Every ``{{ value }}`` becomes a Python literal, so case data cannot become code."""
    if isinstance(value, Markup):  # output of a macro or of the comment filter
        return value
    if isinstance(value, str):  # JSON's string escapes are all valid in Python too
        return Markup(json.dumps(value))
    return Markup(repr(value))


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


@cache
def environment(dirs: tuple[Path, ...]) -> SandboxedEnvironment:
    """The one Jinja environment: sandboxed, strict about undefined names."""
    env = SandboxedEnvironment(
        loader=jinja2.FileSystemLoader([str(d) for d in dirs]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=True,  # with _python_literal as finalize: escaping means "make it a literal"
        finalize=_python_literal,
    )
    env.filters["comment"] = _comment
    env.filters["ident"] = _identifier
    env.globals["mesh_devices"] = _mesh_devices
    return env


def render(variant: Variant, *, templates: Iterable[Path] = ()) -> str:
    """The standalone script of ``variant``, checked to be valid Python."""
    template = variant.template
    # the template's own folder first: a case found with --templates renders without it too
    dirs = dict.fromkeys([template.path.parent, *template_dirs(templates)])
    env = environment(tuple(dirs))
    context = {**variant.script_params(), "case": variant.case_info(), "compare": variant.compare}
    source = template.path.read_text(encoding="utf-8")
    try:
        unset = sorted(meta.find_undeclared_variables(env.parse(source)) - context.keys())
        if unset:
            raise ReprokitError(
                f"the template uses {', '.join(unset)}, which it does not declare",
                template.path,
                hint="Declare every variable the template uses in its front matter [params].",
            )
        script = env.get_template(template.path.name).render(context)
    except Refused as exc:
        raise ReprokitError(
            f"{variant.label}: {exc}",
            variant.case.path,
            hint="Change it in the case file or with --set; spmd_devices = 0 takes the mesh's.",
        ) from None
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None)
        raise ReprokitError(f"cannot render: {exc}", template.path, line) from None
    try:
        compile(script, f"{variant.label}.py", "exec")
    except SyntaxError as exc:
        raise ReprokitError(
            f"the rendered script is not valid Python: {exc.msg} (script line {exc.lineno})",
            template.path,
            hint="Fix the template; `reprokit render` shows the script it made.",
        ) from None
    return script
