"""The captured program as the graph minimizer sees it, and its candidates as files.

:func:`load` reads a ``.pt2`` that ``reprokit capture`` wrote (checked as data first), with
its inputs, and runs it once on CPU in the captured dtypes to record the value of every node:
a candidate that removes a block of operations feeds the block's consumers those values.

A candidate is a :class:`State`: the operations kept (original node names, in order) and the
nodes returned. :func:`build` turns it into a graph whose inputs are the original inputs it
still uses plus one input per removed node it still reads; parameters, buffers and constants
stay attributes. :func:`save` re-exports that graph with ``torch.export`` (the same operations
in the same order, checked) and writes a ``.pt2`` in the capture's format, each operation's
module and source line copied from the original, so that the ordinary ``exported_program``
template runs it. torch is imported inside the functions: the CLI imports this package.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.errors import ReprokitError
from reprokit.tools.capture import INPUTS
from reprokit.tools.capture.program_file import check_program

if TYPE_CHECKING:
    import torch

VERSION = "graph-1"  # part of every candidate's name: a new way to build one is a new name
_META = ("stack_trace", "nn_module_stack")  # what the template's describe() reads


@dataclass(frozen=True)
class State:
    """One candidate program: the operations kept and the nodes it returns."""

    ops: tuple[str, ...]
    outputs: tuple[str, ...]

    def digest(self, original: str) -> str:
        text = json.dumps([VERSION, original, self.ops, self.outputs])
        return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass
class Original:
    """The captured program, what each placeholder is, and every node's recorded value."""

    path: Path
    digest: str  # of the file: candidates are named after it and their state
    graph: Any  # torch.fx.Graph, lifted: parameters are placeholders too
    user_inputs: list[str]  # placeholder names, in the program's order
    weights: dict[str, str]  # placeholder name -> parameter, buffer or constant
    values: dict[str, Any] = field(default_factory=dict)  # node name -> recorded value
    nodes: dict[str, Any] = field(default_factory=dict)  # node name -> node

    def ops(self) -> tuple[str, ...]:
        """Every call_function node, in execution order."""
        return tuple(n.name for n in self.graph.nodes if n.op == "call_function")

    def outputs(self) -> tuple[str, ...]:
        """The nodes the program returns (buffer mutations and user outputs alike)."""
        import torch.utils._pytree as pytree

        output = next(n for n in self.graph.nodes if n.op == "output")
        leaves = pytree.tree_leaves(output.args[0])
        return tuple(dict.fromkeys(n.name for n in leaves if hasattr(n, "op")))


def load(path: Path) -> Original:
    """The program at ``path`` and its inputs; every node's value recorded on CPU."""
    import torch

    check_program(path)
    extra = {INPUTS: ""}
    with warnings.catch_warnings():  # torch's own note on read-only buffers: noise here
        warnings.filterwarnings("ignore", "The given buffer is not writable")
        program = torch.export.load(path, extra_files=extra)
    signature = program.graph_signature
    weights = {s.arg.name: s.kind.name.lower() for s in signature.input_specs if s.target}
    original = Original(
        path=path,
        digest=hashlib.sha256(path.read_bytes()).hexdigest(),
        graph=program.graph,
        user_inputs=list(signature.user_inputs),
        weights=weights,
        nodes={n.name: n for n in program.graph.nodes},
    )
    inputs = read_inputs(json.loads(extra[INPUTS] or "{}"), path)
    if len(inputs) != len(original.user_inputs):
        raise ReprokitError(
            f"the program takes {len(original.user_inputs)} inputs, {INPUTS} holds {len(inputs)}",
            path,
            hint="Capture it again with `reprokit capture`.",
        )
    original.values = record(program, inputs)
    return original


def read_inputs(spec: dict[str, Any], path: Path) -> list[Any]:
    """The inputs as the exported_program template reads them: the captured values, or random
    ones from the seed (drawn in the same order, so that both see the same numbers)."""
    import torch

    if "data" in spec:
        return torch.load(io.BytesIO(base64.b64decode(spec["data"])), weights_only=True)
    if "leaves" not in spec:
        raise ReprokitError(f"no {INPUTS} in the archive", path, hint="Use `reprokit capture`.")
    generator, inputs = torch.Generator().manual_seed(spec["seed"]), []
    for leaf in spec["leaves"]:
        dtype = getattr(torch, leaf.get("dtype", "-"), None)
        if not isinstance(dtype, torch.dtype):
            inputs.append(leaf["value"])
        elif dtype.is_floating_point or dtype.is_complex:
            inputs.append(torch.randn(leaf["shape"], generator=generator, dtype=dtype))
        else:
            inputs.append(torch.zeros(leaf["shape"], dtype=dtype))
    return inputs


def record(program: Any, inputs: list[Any]) -> dict[str, Any]:
    """Every node's value in one CPU run, cloned as it is made: a later in-place operation
    (masked_fill_) must not change what an earlier node is recorded as."""
    import torch

    state = program.state_dict | dict(program.constants)
    weights = [state[s.target] for s in program.graph_signature.input_specs if s.target]
    values: dict[str, Any] = {}

    def clone(value: Any) -> Any:
        return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(), value)

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            result = super().run_node(node)
            values[node.name] = clone(result)
            for arg in (a for a in node.all_input_nodes if a.name in writes(node)):
                values[arg.name] = clone(self.env[arg])  # its consumers read it mutated
            return result

    with torch.no_grad():
        Recorder(program.graph_module).run(*weights, *inputs)
    return values


def writes(node: Any) -> set[str]:
    """The nodes an in-place operation (masked_fill_) writes into."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.is_mutable:
        return set()
    written = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
    given = dict(zip([a.name for a in schema.arguments], node.args, strict=False)) | node.kwargs
    return {v.name for k, v in given.items() if k in written and hasattr(v, "name")}


def is_tensor_op(original: Original, name: str) -> bool:
    """An operation the template saves (node.NNNN.op): a call_function with a tensor value."""
    import torch

    node = original.nodes[name]
    return node.op == "call_function" and isinstance(node.meta.get("val"), torch.Tensor)


def saved_name(original: Original, state: State, name: str) -> str | None:
    """The name the template gives ``name`` in the candidate (node.0003.layer_norm), or None
    when the candidate does not run it: its position among the kept tensor operations."""
    kept = [op for op in state.ops if is_tensor_op(original, op)]
    if name not in kept:
        return None
    return f"node.{kept.index(name):04d}.{op_name(original.nodes[name])}"


def op_name(node: Any) -> str:
    return node.target.__name__.split(".")[0]


def reads(original: Original, state: State) -> tuple[list[str], list[str], list[str]]:
    """What the candidate reads, in the original order: original inputs, removed nodes fed as
    inputs, weights."""
    kept = set(state.ops)
    used: set[str] = {o for o in state.outputs if o not in kept}
    for name in state.ops:
        used |= {n.name for n in original.nodes[name].all_input_nodes}
    order = [n.name for n in original.graph.nodes if n.name in used]
    inputs = [n for n in order if n in original.user_inputs]
    weights = [n for n in order if n in original.weights]
    fed = [n for n in order if n not in kept and n not in inputs and n not in weights]
    return inputs, fed, weights


def build(original: Original, state: State) -> tuple[Any, list[Any]]:
    """The candidate as a GraphModule and its flat inputs (original inputs, then fed values)."""
    import torch

    inputs, fed, weights = reads(original, state)
    root, graph, env = torch.nn.Module(), torch.fx.Graph(), {}
    for name in [*inputs, *fed]:
        env[name] = graph.placeholder(name)
        env[name].meta["val"] = original.nodes[name].meta.get("val")
    for name in weights:
        _attach(root, name, original.values[name], original.weights[name])
        env[name] = graph.get_attr(name)
    for name in state.ops:
        env[name] = graph.node_copy(original.nodes[name], lambda n: env[n.name])
    outputs = [env[o] for o in state.outputs if o in state.ops]
    if not outputs:
        raise ValueError("a candidate must return one of its operations")
    graph.output(tuple(outputs))
    values = [original.values[n] for n in [*inputs, *fed]]
    return torch.fx.GraphModule(root, graph), values


def _attach(root: Any, name: str, value: Any, kind: str) -> None:
    """A weight as the module attribute the graph reads: parameters stay parameters (an SPMD
    stage replicates them, where it shards inputs)."""
    import torch

    if kind == "parameter":
        root.register_parameter(name, torch.nn.Parameter(value, requires_grad=False))
    else:
        root.register_buffer(name, value, persistent=kind == "buffer")


def save(original: Original, state: State, path: Path) -> None:
    """Re-export the candidate and write it as a capture: the .pt2, its inputs in INPUTS."""
    import torch

    module, values = build(original, state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(module, tuple(values))
    kept = [n for n in state.ops if is_tensor_op(original, n)]
    made = [n for n in program.graph.nodes if _tensor_valued(n)]
    if [str(original.nodes[n].target) for n in kept] != [str(n.target) for n in made]:
        raise ValueError("torch.export changed the candidate's operations")
    for old, new in zip(kept, made, strict=True):  # the user's module and line, not fx's
        meta = original.nodes[old].meta
        new.meta.update({k: meta[k] for k in _META if k in meta})
    program.example_inputs = None  # else torch.export.load would unpickle them
    blob = io.BytesIO()
    torch.save(values, blob)
    leaves = [{"shape": list(v.shape), "dtype": str(v.dtype).split(".")[1]} for v in values]
    spec = {"leaves": leaves, "data": base64.b64encode(blob.getvalue()).decode("ascii")}
    # the file's own name in a folder beside it: torch.export.save names the archive's folder
    # after the file, and a half-written candidate must never take the final name
    folder = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}-"))
    try:
        torch.export.save(program, folder / path.name, extra_files={INPUTS: json.dumps(spec)})
        check_program(folder / path.name)
        (folder / path.name).replace(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _tensor_valued(node: Any) -> bool:
    import torch

    return node.op == "call_function" and isinstance(node.meta.get("val"), torch.Tensor)


def counts(original: Original, state: State) -> tuple[int, int, int]:
    """Tensor operations, inputs (original and fed) and weights the candidate has."""
    inputs, fed, weights = reads(original, state)
    ops = sum(is_tensor_op(original, n) for n in state.ops)
    return ops, len(inputs) + len(fed), len(weights)
