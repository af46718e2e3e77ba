"""Capture a training step: the user's model and loss as one joint forward-and-backward program.

``capture_training(module, args)`` exports the module (its forward returns the loss: a scalar,
or a tuple or dict whose first item is), keeps only the loss as the program's output, and turns
the program into one joint graph with ``torch.export.experimental._decompose_exported_program``
and empty decomposition tables: the backward operations stay the ones autograd runs in
training (``elu_backward``, ``native_layer_norm_backward``, ...). The default core-aten
decomposition rewrites several of them into plain operations, and the XLA bugs in those
backward kernels then vanish from the capture. The joint program returns the loss and every
parameter's gradient (and the new values of buffers training updates, as BatchNorm's).

torch 2.9 traces the joint graph twice, and the second trace drops where each operation comes
from; the first trace keeps it (the user's line, and autograd's sequence number that ties a
backward operation to the forward one it differentiates). ``_first_trace`` keeps that trace
aside, and ``_provenance`` copies its stack traces onto the final graph's operations of the
same name and target, and marks each operation (``node.meta["custom"]["reprokit"]``, which
torch.export saves as JSON): its pass (``fwd`` or ``bwd``), its index among the operations,
and for a backward one the index of the forward operation it comes from.

The archive is written by the one writer, :mod:`reprokit.tools.capture.writer` (a joint
program round-trips ``torch.export.save``), checked as every capture is: plain data, no
pickles, loaded back in a fresh interpreter. Refused, in one line: tied weights, parameters
the loss does not use, in-place updates of the inputs, random operations (dropout), a loss
that is not a scalar.
"""

from __future__ import annotations

import json
import operator
import re
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.errors import ReprokitError
from reprokit.records.run import TRAINING
from reprokit.records.sweep import case_file
from reprokit.tools.capture.export import draws, export
from reprokit.tools.capture.factory import command as capture_command
from reprokit.tools.capture.writer import (
    INPUTS,
    SEED,
    check_name,
    fresh_interpreter,
    inputs_record,
    load_state_dict,
    write_program,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch

TEMPLATE = TRAINING


def capture_training(
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    name: str,
    out_dir: Path | str = ".",
    state_dict: Path | str | None = None,
    random_inputs: bool = False,
) -> Path:
    """Export ``module``'s training step as one joint program; write NAME.pt2 and NAME.toml.

    Returns the case file's path; nothing is left half-written (as ``capture``)."""
    check_name(name)
    if state_dict is not None:
        load_state_dict(module, Path(state_dict))
    _refuse_tied(module)
    with fresh_interpreter() as loads_back:  # it imports torch while the module is exported
        with warnings.catch_warnings():  # random operations are refused below, not warned of
            warnings.simplefilter("ignore")
            program = export(module, tuple(args), dict(kwargs or {}))
        inputs = inputs_record(program, args, kwargs or {}, random_inputs)
        _refuse_in_place_inputs(program, type(module).__name__)
        program = loss_only(program, type(module).__name__)
        _refuse_untrainable(program, module)
        joint = joint_program(program, type(module).__name__)
        return write_program(joint, {INPUTS: json.dumps(inputs)}, loads_back,
                             _case_text(module, name, random_inputs),
                             Path(out_dir) / case_file(name))  # fmt: skip


def _refuse_tied(module: Any) -> None:
    """One tensor under two names gets two gradients in a joint graph, and torch.export gives
    only one of them a use: refused, naming both."""
    seen: dict[int, str] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        if id(parameter) in seen:
            raise ReprokitError(
                f"{seen[id(parameter)]} and {name} are one tensor (tied weights): a training "
                "capture needs each parameter under one name",
                hint="Untie them for the capture (e.g. model.lm_head.weight = "
                "nn.Parameter(model.lm_head.weight.detach().clone())), or capture the part "
                "of the model without the tie.",
            )
        seen[id(parameter)] = name


def _refuse_in_place_inputs(program: Any, kind: str) -> None:
    """An operation that writes into an input (``x.mul_(2)``) changes the data of the next
    step: refused at the first such operation."""
    from torch.export.graph_signature import InputKind

    inputs = {s.arg.name for s in program.graph_signature.input_specs
              if s.kind == InputKind.USER_INPUT}  # fmt: skip
    for node in program.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        for argument, value in zip(schema.arguments, node.args, strict=False):
            written = argument.alias_info is not None and argument.alias_info.is_write
            if written and getattr(value, "name", None) in inputs:
                raise ReprokitError(
                    f"{kind}'s forward updates its input {value.name} in place ({node.target})",
                    hint="A training step's inputs are data: compute on a copy "
                    "(x = x.clone()) or out of place (x * 2 rather than x.mul_(2)).",
                )


def loss_only(program: Any, kind: str) -> Any:
    """The program with the loss (its first output) as its only output, refused unless that is
    a floating scalar; the other outputs (logits, metrics) and what only they need are gone."""
    import torch
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import ExportGraphSignature, OutputKind

    signature = program.graph_signature
    kept = [s for s in signature.output_specs if s.kind != OutputKind.USER_OUTPUT]
    users = [s for s in signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    graph = program.graph_module
    output = graph.graph.output_node()
    value = output.args[0][len(kept)].meta.get("val") if users else None
    if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() == 1):
        shape = tuple(getattr(value, "shape", ()))
        got = "nothing" if value is None else f"a tensor of shape {shape}" if shape else "that"
        raise ReprokitError(
            f"{kind}'s forward must return the loss (a floating scalar) first, not {got}",
            hint="Make the module compute its loss: return loss, or (loss, logits), or "
            "{'loss': loss, ...}; e.g. wrap the model and F.cross_entropy in one module.",
        )
    output.args = (tuple(output.args[0][: len(kept) + 1]),)
    graph.graph.eliminate_dead_code()
    graph.recompile()
    call_graph = [entry for entry in program.module_call_graph]
    call_graph[0].signature.out_spec = pytree.tree_flatten((value,))[1]  # one tensor, in a tuple
    call_graph[0].signature.outputs = call_graph[0].signature.outputs[:1]
    return torch.export.ExportedProgram(
        root=graph, graph=graph.graph,
        graph_signature=ExportGraphSignature(signature.input_specs, [*kept, users[0]]),
        state_dict=program.state_dict, range_constraints=program.range_constraints,
        module_call_graph=call_graph, example_inputs=None, constants=program.constants,
        verifiers=program.verifiers,  # training IR: in-place buffer updates (BatchNorm)
    )  # fmt: skip


def _refuse_untrainable(program: Any, module: Any) -> None:
    """Trainable parameters the loss does not use get no gradient (torch asserts), and a random
    operation draws differently on each backend: both refused in one line."""
    from torch.export.graph_signature import InputKind

    kind = type(module).__name__
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    unused = [
        s.target
        for s in program.graph_signature.input_specs
        if s.kind == InputKind.PARAMETER
        and not placeholders[s.arg.name].users
        and module.get_parameter(s.target).requires_grad
    ]
    if unused:
        raise ReprokitError(
            f"{kind}'s loss does not use the parameter{'s' * (len(unused) > 1)} "
            f"{', '.join(unused[:5])}: it would get no gradient",
            hint="Freeze it for the capture (p.requires_grad_(False)), or remove it.",
        )
    drawn = sorted({str(n.target) for n in program.graph.nodes if draws(n)})
    if drawn:
        raise ReprokitError(
            f"{kind}'s training step draws random numbers ({', '.join(drawn)}): each backend "
            "would draw its own",
            hint="Set dropout to 0 (nn.Dropout(0.0), or p=0 in the model's config) for the "
            "capture; a training capture compares deterministic steps.",
        )


def joint_program(program: Any, kind: str) -> Any:
    """The joint forward-and-backward program, its original backward operations kept, and
    each operation's pass and origin (the module docstring)."""
    from torch.export.experimental import _decompose_exported_program

    traces: list[Any] = []
    try:
        with _first_trace(traces), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            joint = _decompose_exported_program(
                program, cia_to_decomp={}, python_decomp_table={}, joint_loss_index=0,
                decompose_custom_triton_ops=False,
            )  # fmt: skip
    except Exception as exc:  # torch asserts, or fails inside autograd: its words, one line
        first = next((s.strip() for s in str(exc).splitlines() if s.strip()), "")
        raise ReprokitError(
            f"torch cannot make {kind}'s joint forward-and-backward graph: "
            f"{type(exc).__name__}: {first[:300]}",
            hint="Capture a smaller part of the model (a submodule and a loss on its output), "
            "or check that every parameter reaches the loss.",
        ) from None
    _provenance(joint, traces[-1] if traces else None)
    return joint


@contextmanager
def _first_trace(found: list[Any]) -> Iterator[None]:
    """Keep the graphs aot_autograd's first trace makes (see the module docstring). Where
    torch's internals have moved, nothing is kept and the capture goes on without sources."""
    import torch._functorch._aot_autograd.graph_capture as graph_capture

    original = getattr(graph_capture, "_create_graph", None)
    if original is None:
        yield
        return

    def keeping(*args: Any, **kwargs: Any) -> Any:
        graph = original(*args, **kwargs)
        found.append(graph)
        return graph

    graph_capture._create_graph = keeping
    try:
        yield
    finally:
        graph_capture._create_graph = original


def _provenance(joint: Any, first: Any) -> None:
    """Each operation's pass (``fwd``: the loss or a kept output depends on it; ``bwd``: the
    rest), and from the first trace, its stack trace and the forward operation a backward one
    differentiates (autograd's sequence number, as torch's copy_fwd_metadata_to_bw_nodes)."""
    from torch.export.graph_signature import OutputKind

    graph = joint.graph
    names = {s.arg.name for s in joint.graph_signature.output_specs
             if s.kind in (OutputKind.LOSS_OUTPUT, OutputKind.USER_OUTPUT)}  # fmt: skip
    forward: set[str] = set()
    pending = [n for n in graph.nodes if n.name in names]
    while pending:
        node = pending.pop()
        if node.name not in forward:
            forward.add(node.name)
            pending.extend(node.all_input_nodes)
    ops = [n for n in graph.nodes if n.op == "call_function"]
    passes = {n.name: "fwd" if n.name in forward else "bwd" for n in ops}
    for node in ops:  # a forward op's other results (layer norm's mean, rstd) are forward too
        if node.target is operator.getitem and node.args[0].name in passes:
            passes[node.name] = passes[node.args[0].name]
    origins = _origins(ops, first) if first is not None else {}
    index = {n.name: i for i, n in enumerate(ops)}
    for node in ops:  # node.meta["custom"] is saved as JSON with the program, names are not
        mark = {"pass": passes[node.name], "op": index[node.name]}
        if node.name in origins:
            mark["forward"] = index[origins[node.name]]
        node.meta["custom"] = {**node.meta.get("custom", {}), "reprokit": mark}


def _origins(ops: list[Any], first: Any) -> dict[str, str]:
    """Copy the first trace's stack traces onto ``ops``; return backward op -> forward op."""
    traced = {n.name: n for n in first.graph.nodes if n.op == "call_function"}
    by_seq: dict[int, Any] = {}
    for node in traced.values():  # the forward ones: those with a module stack
        if node.meta.get("nn_module_stack") and "seq_nr" in node.meta:
            by_seq.setdefault(node.meta["seq_nr"], node)
    origins: dict[str, str] = {}
    for node in ops:
        node.meta.pop("stack_trace", None)  # the second trace's: a line of torch's own code
        twin = traced.get(node.name)
        if twin is None or twin.target != node.target:
            continue  # the traces disagree here: no source rather than a wrong one
        own = twin.meta.get("nn_module_stack")
        origin = None if own else by_seq.get(twin.meta.get("seq_nr"))
        if origin is not None:
            origins[node.name] = origin.name
        source = twin if own else origin
        trace = _user_trace(twin) or (_user_trace(source) if source is not None else None)
        if trace:
            node.meta["stack_trace"] = trace
        if source is not None:
            node.meta["nn_module_stack"] = source.meta["nn_module_stack"]
    return origins


def _user_trace(node: Any) -> str | None:
    """A node's stack trace, unless it only names code torch generated (``<eval_with_key>``:
    the tangent autograd starts from, a view aot_autograd adds)."""
    trace = node.meta.get("stack_trace") or ""
    return trace if re.search(r'File "(?!<eval_with_key>)', trace) else None


def _case_text(module: Any, name: str, random_inputs: bool) -> str:
    import torch

    kind = type(module).__name__
    inputs = f"random inputs (seed {SEED})" if random_inputs else "the example inputs"
    description = (
        f"{kind}'s training step (loss and every parameter's gradient) captured as one joint "
        f"forward-and-backward graph, run with {inputs} on CPU, XLA and in float64; each XLA "
        "result judged by its error against float64 relative to CPU's."
    )
    return (
        f"# Made by `reprokit capture --train`: {kind}, torch {torch.__version__}.\n"
        "[case]\n"
        f"title = {json.dumps(f'Captured training step of {kind}: forward and backward on CPU, XLA vs float64')}\n"  # noqa: E501
        f'template = "{TEMPLATE}"\n'
        f"description = {json.dumps(description)}\n\n"
        f'[params]\nprogram = "{name}.pt2"  # relative to this file\n'
        '# steps = 3  # optimizer = "adam"  # lr = 1e-3: several steps, parameters compared\n\n'
        "[compare]\nmethod = \"fp64\"  # XLA's error against float64, relative to CPU's\n\n"
        '[expect]\noutcome = "match"\n'
    )


def command(spec: str, **options: Any) -> Path:
    """``reprokit capture FILE.py:FUNCTION --train``: the case file written."""
    return capture_command(spec, capturing=capture_training, **options)
