"""The package's shape: modules import downwards (no circles), and reading a run needs no
torch."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import reprokit
from reprokit.records import (
    Comparison,
    Outcome,
    RunSummary,
    StageResult,
    Status,
    VariantResult,
    write_summary,
)

PACKAGE = Path(reprokit.__file__).parent


def import_graph() -> dict[str, set[str]]:
    """Module -> the reprokit modules it imports anywhere (late imports and TYPE_CHECKING
    ones too: a circle hidden in a function is still a circle)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the modules along it, or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_import_circles():
    graph = import_graph()
    records = [name for name in graph if name.startswith("reprokit.records")]
    bottom = ("reprokit.records", "reprokit.infra.pause")  # pause: stdlib only, no imports
    assert graph["reprokit.infra.pause"] == set()
    assert len(records) > 1 and all(  # at the bottom: the records import only each other
        target.startswith(bottom) for name in records for target in graph[name]
    )
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


# From the bottom up: a module imports only its own layer and those below it. The facade
# (reprokit/__init__.py) re-exports the pipeline and the tools; the adapters sit on top.
LAYERS = (
    ("reprokit.errors", "reprokit.records", "reprokit.infra"),
    ("reprokit.environment",),
    ("reprokit.generate", "reprokit.comparison", "reprokit.runner", "reprokit.reports"),
    ("reprokit.tools",),
    ("reprokit",),
    ("reprokit.cli", "reprokit.plugin", "reprokit.run_flags", "reprokit.__main__"),
)


def layer_of(module: str) -> int:
    """The layer of a module: that of the longest package prefix LAYERS names."""
    best = max(
        (prefix for layer in LAYERS for prefix in layer
         if module == prefix or module.startswith(prefix + ".")),
        key=len,
    )  # fmt: skip
    return next(i for i, layer in enumerate(LAYERS) if best in layer)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{name} (layer {layer_of(name)}) imports {target} (layer {layer_of(target)})"
        for name, targets in graph.items() for target in targets
        if layer_of(target) > layer_of(name)
    )  # fmt: skip


def test_layers_import_downwards():
    graph = import_graph()
    assert all(name == "reprokit" or layer_of(name) != 4 for name in graph)  # all placed
    assert layer_violations(graph) == []


def test_the_layer_check_finds_an_upward_import():
    graph = {"reprokit.runner.stage": {"reprokit.tools.minimize"}, "reprokit.tools.wrap": set()}
    assert layer_violations(graph) == [
        "reprokit.runner.stage (layer 2) imports reprokit.tools.minimize (layer 3)"
    ]


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


ROOT = PACKAGE.parent
# A dotted path into the package, as docs, docstrings and pyproject.toml name one (not a file
# name such as reprokit.toml, nor part of a longer word or path)
DOTTED = re.compile(r"(?<![\w./-])reprokit(?:\.[A-Za-z_]\w*)+(?![\w-])")
FILE_SUFFIXES = (".py", ".toml", ".j2", ".md", ".json", ".pt2", ".txt")


def resolves(dotted: str) -> bool:
    """Whether ``a.b.c`` names something: its longest importable module, then attributes
    (``reprokit.run`` is the facade's function, PEP 562)."""
    parts = dotted.split(".")
    if "__main__" in parts:  # importing it runs the CLI
        return dotted == "reprokit.__main__"
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a parent that is no package: reprokit.run.run
            found = False
        if found:
            thing = importlib.import_module(name)
            return all((thing := getattr(thing, part, None)) is not None for part in parts[i:])
    return False


def unresolved(text: str) -> list[str]:
    """The dotted reprokit paths in ``text`` that name nothing."""
    named = (m.group(0) for m in DOTTED.finditer(text))
    return sorted({n for n in named if not n.endswith(FILE_SUFFIXES) and not resolves(n)})


def where_paths_are_named() -> list[Path]:
    """The docs, pyproject.toml, and the package's, templates' and benchmarks' sources."""
    return [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted(PACKAGE.rglob("*.py")), *sorted((ROOT / "templates").glob("*.j2")),
            *sorted((ROOT / "bench").glob("*.py"))]  # fmt: skip


def test_every_module_path_the_docs_code_and_pyproject_name_exists():
    missing = {
        path.relative_to(ROOT).as_posix(): found
        for path in where_paths_are_named()
        if (found := unresolved(path.read_text("utf-8")))
    }
    assert missing == {}


def test_the_path_check_finds_a_path_that_names_nothing():
    text = "found by reprokit.render.builtin_dir, run by ``reprokit.run.run``; reprokit.toml"
    assert unresolved(text) == ["reprokit.render.builtin_dir", "reprokit.run.run"]
    named = "reprokit.generate.templates.builtin_dir, reprokit.run, reprokit.plugin"
    assert unresolved(named) == []


def test_no_file_cites_the_founders_design():
    """The founders' design document is not in the repository and users do not have it: the
    contract is the README and docs/contract.md, which is what a file cites."""
    design = "DESIGN" + ".md"  # spelled apart: this file is one of those checked
    command = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]
    try:
        listed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = [ROOT / name for name in listed.stdout.splitlines()]
    citing = [f.relative_to(ROOT).as_posix() for f in files
              if f.is_file() and design.encode() in f.read_bytes()]  # fmt: skip
    assert citing == []


BLOCK_TORCH = "import sys; sys.modules['torch'] = None; from reprokit.cli import main; main()"


def reprokit_without_torch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``reprokit ARGS`` in a process where ``import torch`` fails."""
    command = [sys.executable, "-c", BLOCK_TORCH, *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=120)


def mismatching_run(run_dir: Path) -> None:
    """A run folder with one variant whose act.1 differs, written from records alone."""

    def comparison(name: str, close: bool) -> Comparison:
        return Comparison(name, "cpu", "xla", (4,), "float32", 0.0 if close else 0.5,
                          0.0 if close else 0.25, 0 if close else 4, 4, close)  # fmt: skip

    comparisons = (comparison("act.0", True), comparison("act.1", False))
    variant = VariantResult(
        case="demo", label="demo", variant={}, outcome=Outcome.MISMATCH,
        expected=Outcome.MATCH, seconds=1.0, comparisons=comparisons,
        first_divergence={"xla": "act.1"},
        stages=(StageResult("cpu", "cpu", Status.OK), StageResult("xla", "xla", Status.OK)),
    )  # fmt: skip
    (run_dir / "demo").mkdir(parents=True)
    (run_dir / "demo" / "repro.py").write_text("print('repro')\n")
    write_summary(RunSummary(started="now", variants=(variant,)), run_dir)


def test_list_and_report_work_without_torch(tmp_path):
    listed = reprokit_without_torch("list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "xser_to_spmd" in listed.stdout
    mismatching_run(tmp_path / "run")
    reported = reprokit_without_torch("report", "run", cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    body = (tmp_path / "run" / "report.md").read_text()
    assert "act.0 agrees; act.1 is the first to differ" in body  # read without torch
    assert (tmp_path / "run" / "report.html").is_file()
    assert (tmp_path / "run" / "bundle.zip").is_file()


# The options only `reprokit run` takes (what to run, where to write) and only the plugin takes
# (pytest picks the items and the parallelism): every other option is a run option, both sides.
CLI_ONLY = {"-n", "-o", "--output", "-k", "--set", "--cases", "--help"}
PLUGIN_ONLY = {"--reprokit-run-dir"}


def test_the_cli_and_the_plugin_take_the_same_run_options():
    import pytest
    import typer

    from reprokit import plugin
    from reprokit.cli import app
    from reprokit.run_flags import RUN_OPTIONS

    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    cli = {flag for param in run.params for flag in param.opts if flag.startswith("-")}
    parser = pytest.Parser(_ispytest=True)
    plugin.pytest_addoption(parser)
    taken = {name for option in parser.getgroup("reprokit").options for name in option.names()}
    assert cli - CLI_ONLY == {option.flag for option in RUN_OPTIONS}
    assert taken - PLUGIN_ONLY == {option.plugin_flag for option in RUN_OPTIONS}
    assert {f.removeprefix("--") for f in cli - CLI_ONLY} == {
        f.removeprefix("--reprokit-") for f in taken - PLUGIN_ONLY
    }


def test_the_run_options_build_the_options_reprokit_run_always_built():
    import pytest

    from reprokit.errors import ReprokitError
    from reprokit.run_flags import build_options
    from reprokit.runner.options import Options

    assert build_options({"xla_device": "cpu"}) == Options()  # each default is Options' own
    given = {"no_cache": True, "cold": True, "stages": "a,,b", "templates": ["t"], "jobs": 9}
    built = build_options(given | {"xla_device": "CPU", "shared_dir": "s"}, jobs=3)
    assert (built.cache, built.warm, built.stages, built.jobs) == (False, False, ("a", "b"), 3)
    assert (built.templates, built.shared_dir) == ((Path("t"),), Path("s"))
    with pytest.raises(ReprokitError, match="--executor 'k8s': not one of local, ray"):
        build_options({"executor": "k8s", "xla_device": "CPU"})


def test_python_source_is_parsed_only_under_the_one_lock():
    """ast.parse from two threads at once can fail before Python 3.12 (gh-106905: seen twice
    in this runner's threads); infra/python_source.py holds the lock every parse must take."""
    callers = [path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
               if "ast.parse(" in path.read_text("utf-8")]  # fmt: skip
    assert callers == ["infra/python_source.py"]


def test_a_script_rendered_then_listed_is_parsed_once(tmp_path):
    """Render checks the script by compiling its text (no Python AST), the runner reads its
    stages from the one parse (5 ms a script, a part of an unchanged re-run): render once
    parsed it too, for a tree the runner found gone in a run of more than 16 variants."""
    from reprokit.generate.cases import load_case
    from reprokit.generate.render import render
    from reprokit.generate.variants import variants
    from reprokit.infra.python_source import parse_python
    from reprokit.runner.dag import read_stages

    (variant, *_) = variants(load_case(PACKAGE.parent / "cases" / "module_forward.toml"), {})
    parse_python.cache_clear()
    script = tmp_path / "repro.py"
    script.write_text(render(variant), encoding="utf-8")
    assert read_stages(script.read_text("utf-8"))
    info = parse_python.cache_info()
    assert (info.misses, info.hits) == (1, 0)


# The run folder's layout is spelled in one module (reprokit/records/folder.py, as pytest's
# cacheprovider.py owns .pytest_cache): no other joins "stages" or names "repro.py".
FOLDER_OWNER = "records/folder.py"


def folder_spellings(source: str) -> list[int]:
    """The lines where ``source`` spells a run folder path part itself: "repro.py" anywhere,
    "stages" joined into a path (``/ "stages"``, ``os.path.join("stages", ...)``, ``Path``,
    ``ignore_patterns``); "stages" as a record's JSON key or an option's name is no path."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value == "repro.py":
            found.append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            found += [side.lineno for side in (node.left, node.right)
                      if isinstance(side, ast.Constant) and side.value == "stages"]  # fmt: skip
        elif isinstance(node, ast.Call):
            callee = ast.unparse(node.func)
            if callee.endswith(("join", "Path", "ignore_patterns", "joinpath")):
                found += [arg.lineno for arg in node.args
                          if isinstance(arg, ast.Constant) and arg.value == "stages"]  # fmt: skip
    return sorted(found)


def test_the_run_folder_is_spelled_in_one_module():
    spelled = {
        path.relative_to(PACKAGE).as_posix(): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := folder_spellings(path.read_text("utf-8")))
    }
    assert FOLDER_OWNER in spelled  # the check still sees the spelling where it lives
    assert set(spelled) <= {FOLDER_OWNER}, spelled


def test_the_folder_check_finds_a_hand_spelled_path():
    source = 'a = run / "stages" / name\nb = os.path.join("stages", n)\nc = d / "repro.py"\n'
    source += 'e = {"stages": []}\nf = RunOption("stages", str)\n'
    assert folder_spellings(source) == [1, 2, 3]


RUNNER = PACKAGE / "runner"
# What starts a child process: subprocess, a fork, a multiprocessing or concurrent.futures
# process pool, a Ray task or actor.
STARTS = re.compile(
    r"subprocess\.(run|Popen|call|check_call|check_output)\(|os\.(fork|posix_spawn)\(|"
    r"\bmultiprocessing\b|ProcessPoolExecutor|\.remote\("
)


def test_the_runner_plans_above_and_starts_processes_below():
    """runner/'s top level plans and schedules (at most 12 modules); what starts and watches
    processes is runner/processes/, and only it (and the few probes named here) starts one."""
    assert len(list(RUNNER.glob("*.py"))) <= 12
    starters = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if STARTS.search(path.read_text("utf-8"))
    }  # fmt: skip
    probes = {"infra/probe.py"}  # short questions: is CUDA there, the machine's torch_xla, uv
    assert {s for s in starters if not s.startswith("runner/processes/")} == probes
    executors = re.compile(r"\b(LocalExecutor|run_process)\b")
    borrowed = [path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
                if not path.is_relative_to(RUNNER / "processes")
                and executors.search(path.read_text("utf-8"))]  # fmt: skip
    assert borrowed == []


# Every file name a run, minimize, ops, sweep or report folder holds is spelled in records/
# (folder.py, and beside it each record's own: SUMMARY, OPS, BISECT, REPORT_MD...), as pytest's
# cacheprovider.py alone names what .pytest_cache holds. A name outside records/ is one of
# these: a module's own source file, or one that names no folder of ours.
OUTPUT_NAME = re.compile(r"^[\w.-]+\.(json|jsonl|md|py|pt|pt2|toml|html|zip|out|log|txt|hlo)$")
NOT_OURS = {
    "known.toml",  # the package's own data (infra/known.py)
    "inputs.json", "outputs.json",  # members of a captured .pt2 archive, not files of a folder
    ".before_optimizations.txt",  # the end of XLA's own dump files' names (tools/whose.py)
    "replacing-summary.json",  # a pause point's name (infra/pause.py), not a file
}  # fmt: skip


def spelled_names(source: str, sources: set[str]) -> list[tuple[int, str]]:
    """The file names ``source`` spells as strings (docstrings aside) that are neither one of
    ``sources`` (the package's own modules) nor in NOT_OURS."""
    tree = ast.parse(source)
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr)}  # fmt: skip
    return sorted(
        (node.lineno, node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docs and OUTPUT_NAME.match(node.value)
        and node.value not in sources | NOT_OURS
    )  # fmt: skip


def outside_records(check) -> dict[str, list]:
    """What ``check`` finds in each module's source outside records/ (module -> its finds):
    the layout rules below that records/ alone may break."""
    return {
        path.relative_to(PACKAGE).as_posix(): found
        for path in PACKAGE.rglob("*.py")
        if not path.is_relative_to(PACKAGE / "records")
        and (found := check(path.read_text("utf-8")))
    }


def test_every_output_file_name_is_spelled_in_records():
    sources = {path.name for path in PACKAGE.rglob("*.py")}
    assert outside_records(lambda source: spelled_names(source, sources)) == {}


def test_the_name_check_finds_a_hand_spelled_file_name():
    source = '"""report.md, in a docstring."""\nA = run / "report.md"\nB = "worker.py"\n'
    assert spelled_names(source, {"worker.py"}) == [(2, "report.md")]


# And every folder of ours joined to a path (``out_dir / "candidates"``): spelled in records/
# too. A name joined outside records/ is a module's source (its file or package folder) or
# names no folder of ours: another program's layout.
NOT_OUR_FOLDERS = {
    ".metadata",  # torch.distributed.checkpoint's own file, in a user's checkpoint folder
    "pyvenv.cfg", "bin", "python",  # a virtual environment's (uv's)
    "vfio", "accel*", "vendor", "device",  # the machine's /dev and /sys (environment/machine.py)
    ".cache", "reprokit",  # XDG's cache folder and ours in it (infra/caching.py)
    "_builtin",  # the wheel's packaged templates and cases
}  # fmt: skip


def joined_names(source: str, sources: set[str]) -> list[tuple[int, str]]:
    """The names ``source`` joins to a path as strings (``path / "name"``) that are neither one
    of ``sources`` (the package's modules and folders) nor in NOT_OUR_FOLDERS."""
    return sorted(
        (node.lineno, node.right.value) for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
        and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)
        and node.right.value not in sources | NOT_OUR_FOLDERS
    )  # fmt: skip


def test_every_folder_joined_is_spelled_in_records():
    sources = {path.name for path in PACKAGE.rglob("*") if path.suffix == ".py" or path.is_dir()}
    assert outside_records(lambda source: joined_names(source, sources)) == {}


def test_the_join_check_finds_a_hand_joined_folder():
    source = 'a = out_dir / "candidates" / f"batch-{n}"\nb = root / "worker" / "main.py"\n'
    assert joined_names(source, {"worker", "main.py"}) == [(1, "candidates")]


CAPTURE_TEMPLATES = {"exported_program", "training_program"}


def captured_asked(source: str) -> list[tuple[int, str]]:
    """Where ``source`` asks "a captured program?" itself: a capture template's name spelled,
    or ``"program" in ...`` / ``.get("program")`` (records.run.captured is the one way)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in CAPTURE_TEMPLATES:
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant):
            if node.left.value == "program" and isinstance(node.ops[0], ast.In | ast.NotIn):
                found.append((node.lineno, '"program" in'))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get":
            if (
                node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "program"
            ):
                found.append((node.lineno, '.get("program")'))
    return sorted(found)


def test_a_captured_program_is_asked_one_way():
    assert outside_records(captured_asked) == {}


def test_the_captured_check_finds_each_way_to_ask():
    source = (
        'a = v.template.name == "exported_program"\nb = "program" in v.variant\n'
        'c = v.params.get("program")\nd = v.captured\n'
    )
    assert captured_asked(source) == [(1, "exported_program"), (2, '"program" in'),
                                      (3, '.get("program")')]  # fmt: skip


def unnamed_modules(layout: str, modules: list[Path]) -> list[str]:
    """The ``modules`` (paths under the package) docs/development.md's ``layout`` block does not
    name: a module by its file name, a package by its folder (cli/'s modules are its commands,
    one module per command: named by that rule)."""
    found = []
    for path in modules:
        if path.parts[0] == "cli":
            continue
        name = f"{path.parent.name}/" if path.name == "__init__.py" else path.name
        if path.parent != Path(".") or path.name != "__init__.py":
            if name not in layout:
                found.append(path.as_posix())
    return found


def test_the_development_guide_names_every_module_and_package():
    layout = (ROOT / "docs" / "development.md").read_text("utf-8").split("```")[1]
    modules = sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py"))
    assert unnamed_modules(layout, modules) == []


def test_the_guide_check_finds_an_unnamed_module():
    layout = "reprokit/tools/  ops/ (harness/: sweep.py)"
    modules = [Path("tools/ops/__init__.py"), Path("tools/ops/harness/sweep.py"),
               Path("tools/ops/harness/sharded.py"), Path("tools/since/__init__.py")]  # fmt: skip
    assert unnamed_modules(layout, modules) == [
        "tools/ops/harness/sharded.py",
        "tools/since/__init__.py",
    ]


def defined_twice(sources: dict[str, str]) -> dict[str, list[str]]:
    """Class names defined in more than one of ``sources`` (module -> its source)."""
    defined: dict[str, list[str]] = {}
    for module, source in sorted(sources.items()):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(module)
    return {name: where for name, where in defined.items() if len(where) > 1}


def test_no_class_name_is_defined_in_two_modules():
    sources = {
        p.relative_to(PACKAGE).as_posix(): p.read_text("utf-8") for p in PACKAGE.rglob("*.py")
    }
    assert defined_twice(sources) == {}


def test_the_class_check_finds_a_name_defined_twice():
    sources = {"a.py": "class Interrupted(Exception): ...", "b.py": "class Interrupted: ..."}
    assert defined_twice(sources | {"c.py": "class Other: ..."}) == {
        "Interrupted": ["a.py", "b.py"]
    }


LONGEST = 60  # lines of a function, its signature and docstring included


def long_functions(source: str) -> list[tuple[str, int]]:
    return [(node.name, node.end_lineno - node.lineno + 1)
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > LONGEST]  # fmt: skip


def test_no_function_is_longer_than_sixty_lines():
    found = {
        path.relative_to(PACKAGE).as_posix(): long
        for path in PACKAGE.rglob("*.py")
        if (long := long_functions(path.read_text("utf-8")))
    }
    assert found == {}


def test_the_length_check_finds_a_long_function():
    def function(lines: int) -> str:
        return "def f():\n" + "".join(f"    x{i} = {i}\n" for i in range(lines - 1))

    assert long_functions(function(61)) == [("f", 61)]
    assert long_functions(function(60)) == []


def hands_names_on(source: str) -> bool:
    """A package's __init__ that only imports and names what it offers (docstring, imports,
    ``__all__``)."""
    tree = ast.parse(source)
    kinds = {type(node).__name__ for node in tree.body}
    assigned = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]
    return kinds <= {"Expr", "ImportFrom", "Assign"} and assigned in ([], ["__all__"])


def test_the_op_sweeps_package_only_hands_names_on():
    """tools/ops/__init__.py names what the package offers; the harness is harness/sweep.py."""
    assert hands_names_on((PACKAGE / "tools" / "ops" / "__init__.py").read_text("utf-8"))
    assert not hands_names_on('"""Doc."""\nfrom a import b\nTIMEOUT = 30\n')
    assert not hands_names_on("from a import b\n\ndef sweep():\n    return b()\n")


OPS = "reprokit.tools.ops"


def side_crossings(graph: dict[str, set[str]], torch_imports: dict[str, set[str]]) -> list[str]:
    """Imports across the op sweep's process boundary: the harness importing the worker's side
    or torch, the worker importing the harness. Between them only records/ and trigger.py."""
    crossed = []
    for name, targets in graph.items():
        for this, other in (("harness", ".worker"), ("worker", ".harness")):
            if name.startswith(f"{OPS}.{this}"):
                crossed += [f"{name} imports {t}" for t in targets if t.startswith(OPS + other)]
    for name, torches in torch_imports.items():
        if name.startswith(f"{OPS}.harness"):
            crossed += [f"{name} imports {t}" for t in torches]
    return sorted(crossed)


def torch_imports() -> dict[str, set[str]]:
    """Module -> the torch modules it imports anywhere (late imports too)."""
    found: dict[str, set[str]] = {}
    for path in (PACKAGE / "tools" / "ops").rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found.setdefault(name, set()).update(n for n in names if n.split(".")[0] == "torch")
    return found


def test_the_op_sweeps_harness_and_worker_meet_only_in_records_and_the_trigger():
    graph = import_graph()
    assert any(name.startswith(f"{OPS}.worker.") for name in graph)  # the sides exist
    assert any(name.startswith(f"{OPS}.harness.") for name in graph)
    assert side_crossings(graph, torch_imports()) == []


def test_the_side_check_finds_a_crossing():
    graph = {f"{OPS}.harness.groups": {f"{OPS}.worker.judge", f"{OPS}.trigger"},
             f"{OPS}.worker.judge": {"reprokit.records.ops"}}  # fmt: skip
    assert side_crossings(graph, {f"{OPS}.harness.pool": {"torch"}}) == [
        f"{OPS}.harness.groups imports {OPS}.worker.judge",
        f"{OPS}.harness.pool imports torch",
    ]


def protocol_breaches(protocol: type, cls: type) -> list[str]:
    """The methods of ``protocol`` that ``cls`` lacks, or takes other parameters for."""
    import inspect

    found = []
    for name, method in vars(protocol).items():
        if name.startswith("_") or not callable(method):
            continue
        mine = getattr(cls, name, None)
        if mine is None:
            found.append(f"{cls.__name__} has no {name}")
        elif list(inspect.signature(mine).parameters) != list(inspect.signature(method).parameters):
            found.append(f"{cls.__name__}.{name} takes other parameters")
    return found


def test_both_pools_are_the_op_sweeps_workers():
    """The sweep types its workers by the Workers protocol: Pool and RayPool each give it."""
    from reprokit.tools.ops.harness.cluster import RayPool
    from reprokit.tools.ops.harness.pool import Pool, Workers

    assert protocol_breaches(Workers, Pool) == [] and protocol_breaches(Workers, RayPool) == []


def test_the_protocol_check_finds_a_missing_or_changed_method():
    from reprokit.tools.ops.harness.pool import Workers

    class Half:
        def close(self) -> None: ...

        def run(self, tasks: list) -> None: ...

    assert protocol_breaches(Workers, Half) == [
        "Half has no listing", "Half has no answer", "Half has no in_flight",
        "Half.run takes other parameters",
    ]  # fmt: skip


SHARED = {"-n", "--timeout", "--cold", "--no-cache"}  # declared once: cli/app.py, run_flags.py


def declared_options(source: str) -> list[str]:
    """The shared options a module declares itself: typer.Option calls naming one of them."""
    return sorted(
        arg.value for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Option"
        for arg in node.args if isinstance(arg, ast.Constant) and arg.value in SHARED
    )  # fmt: skip


def test_the_shared_options_are_declared_once():
    """-n, --timeout, --cold and --no-cache come from cli/app.py's jobs_option and run_option
    (each with one meaning); ops keeps its old per-sample --timeout, hidden, for a warning."""
    declared = {
        path.name: found
        for path in (PACKAGE / "cli").glob("*.py")
        if path.name != "app.py" and (found := declared_options(path.read_text("utf-8")))
    }
    assert declared == {"ops.py": ["--timeout"]}


def test_the_option_check_finds_a_declared_option():
    source = 'import typer\nN = typer.Option("-n", help="x")\nT = typer.Option("--tags")\n'
    assert declared_options(source) == ["-n"]


@pytest.mark.parametrize(
    "line",
    ["subprocess.run(['uv', 'pip'])", "multiprocessing.get_context('spawn')",
     "with ProcessPoolExecutor(2) as pool:", "actor.judge.remote(task)", "os.fork()"],
)  # fmt: skip
def test_the_launch_check_finds_each_way_to_start_a_process(line):
    assert STARTS.search(line)
