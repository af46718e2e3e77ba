"""Each compile after the first, explained: the nearest earlier compiled graph, and what
differs from it, in the script's words and with its line.

A graph is compared with the earlier graphs synced from the same place (the same frames down
to the script's line, a step's end or a value read); the first graph of a place compiles
once, as it must (a step cut short by a value read aside, which adds graphs to every step).
Two graphs are aligned node by node on their operations (difflib's matching blocks, the way a
text diff aligns lines); the differences are then named in the order a user looks for a
cause: an input's dtype or shape, a number written into the graph, operations that came or
went, another operation's shape. Where the IR text is the same, the compiled programs are
compared (hlo.py). Hand-written because no library diffs torch_xla's IR.
"""

from __future__ import annotations

from collections.abc import Iterator
from difflib import SequenceMatcher
from itertools import groupby

from reprokit.records.recompiles import Cause, Compile
from reprokit.tools.recompiles.hlo import hlo_difference
from reprokit.tools.recompiles.read import Node, Sync

NEW_BELOW = 0.2  # similarity under which a graph is new rather than a changed earlier one
SHOWN = 3  # differences named in one explanation
SPECIAL_SCALARS = "XLA_NO_SPECIAL_SCALARS=1"  # torch_xla's switch: 0 and 1 as inputs too


def explain(syncs: list[Sync], programs: list[str] | None = None) -> list[Compile]:
    """One Compile per compiled sync, in order, each with its cause; ``programs``: the HLO
    module of each compile, in the same order (hlo.py), for what the IR text leaves out."""
    compiled: list[tuple[Compile, Sync]] = []
    steps = _steps(syncs)
    for sync in (s for s in syncs if s.compiled):
        cause, what, line, nearest = _explain(sync, compiled, syncs)
        if cause is Cause.NOT_IN_IR and programs and nearest is not None:
            cause, what, line = _programs(programs, nearest, len(compiled) + 1)
            line = line or str(sync.user_line or "")
        found = Compile(len(compiled) + 1, sync.index, steps[sync.index], sync.hash, cause,
                        what, line, nearest, len(sync.nodes), sync.trigger)  # fmt: skip
        compiled.append((found, sync))
    return [c for c, _ in compiled]


def _steps(syncs: list[Sync]) -> list[int]:
    """Each sync's step: 1 plus the steps ended before it."""
    ended, steps = 0, []
    for sync in syncs:
        steps.append(ended + 1)
        ended += sync.step_end
    return steps


def _site(sync: Sync) -> tuple[tuple[str, ...], bool]:
    """Where a graph was synced from (its frames), and whether it ended a step."""
    return sync.place, sync.step_end


def _explain(sync: Sync, before: list[tuple[Compile, Sync]], syncs: list[Sync]) -> tuple:
    """(cause, what, line, nearest) of one compiled sync."""
    synced = str(sync.user_line or "")
    if not before:
        return Cause.FIRST, "", synced, None
    if any(earlier.hash == sync.hash for _, earlier in before):
        return (Cause.SAME_HASH, f"graph hash {sync.hash[:12]} was compiled before: torch_xla "
                "evicted it from its cache (XLA_COMPILATION_CACHE_SIZE) or compiled it anew",
                synced, None)  # fmt: skip
    same_site = [(c, s) for c, s in before if _site(s) == _site(sync)]
    read = _read_before(sync, syncs)
    cut = read is not None or not (sync.step_end or sync.in_closure)
    if not same_site and cut:
        return Cause.VALUE_READ, _cut(sync, read), str((read or sync).user_line), None
    if not same_site:  # a graph of its own place (an eval loop, say) compiles once: expected
        return Cause.FIRST, "", synced, None
    score, found, earlier = max(((_similarity(sync, s), c, s) for c, s in same_site),
                                key=lambda x: (x[0], x[1].number))  # fmt: skip
    if score < NEW_BELOW:
        return Cause.NEW_GRAPH, f"{len(sync.nodes)} operations unlike any graph before it", \
            synced, found.number  # fmt: skip
    found_ = _differences(earlier.nodes, sync.nodes)
    if found_ and all(cause is Cause.SETUP for cause, _, _ in found_):
        if found.number == same_site[0][0].number:  # the first graph of its place held more
            return Cause.SETUP, *_setup(earlier.nodes, sync.nodes, found.number), found.number
    if not found_:
        return Cause.NOT_IN_IR, *_not_in_ir(sync.nodes), found.number
    cause, what, line = _said([(c if c is not Cause.SETUP else Cause.OPERATIONS, w, ln)
                               for c, w, ln in found_])  # fmt: skip
    return cause, what, line or synced, found.number


def _programs(programs: list[str], old: int, new: int) -> tuple[Cause, str, str]:
    """What the compiled programs of compiles ``old`` and ``new`` say differs: a value or
    attribute, a sharding, or nothing at all (torch_xla's: an equal graph, another hash)."""
    found = hlo_difference(programs[old - 1], programs[new - 1])
    if found is None:
        return (Cause.SAME_PROGRAM, f"the IR and the compiled program (HLO) are those of "
                f"compile {old}, under another hash: torch_xla compiled an equal graph again",
                "")  # fmt: skip
    what, line = found
    return Cause.SHARDING if "sharding=" in what else Cause.CONSTANT, what, line


def _not_in_ir(nodes: tuple[Node, ...]) -> tuple[str, str]:
    """The same IR text, another hash: the values torch_xla does not print differ. Its
    scalar constants are the likeliest (a Python 0 or 1 is written in as one), then an
    operation's own argument (``roll``'s shifts), the inputs' sharding or aliasing."""
    lines = list(dict.fromkeys(_line(n) for n in nodes if n.op == "prim::Constant"
                               and n.shape.endswith("[]") and _line(n)))  # fmt: skip
    unprinted = "an operation's argument, inputs' sharding, which tensor feeds which input"
    if not lines:
        return f"the IR text is the same: what differs is not printed in it ({unprinted})", ""
    return (f"the IR text is the same; the values of its constants are not printed: a Python "
            f"number written in as one at line {', '.join(lines[:SHOWN])} (torch_xla writes 0 "
            f"and 1 as constants; {SPECIAL_SCALARS} makes them inputs), else what differs is "
            f"not printed in it ({unprinted})", lines[0])  # fmt: skip


def _setup(first: tuple[Node, ...], new: tuple[Node, ...], number: int) -> tuple[str, str]:
    """What the first graph of a place ran beyond this one, and its first line."""
    lines = list(dict.fromkeys(_line(n) for n in first if not n.input))
    lines = [line for line in lines if line not in {_line(n) for n in new}]
    return (f"compile {number} also ran line {', '.join(lines)} (work pending from before its "
            "sync, such as making the weights); a `torch_xla.sync()` before the loop keeps it "
            "out of the step"), lines[0] if lines else ""  # fmt: skip


def _read_before(sync: Sync, syncs: list[Sync]) -> Sync | None:
    """The value read that cut this step just before ``sync``, if one did."""
    earlier = syncs[sync.index - 1] if sync.index else None
    if earlier is None or earlier.step_end or earlier.in_closure or earlier.user_line is None:
        return None
    return earlier


def _cut(sync: Sync, read: Sync | None) -> str:
    if read is None:
        return (f"the step's graph is cut where line {sync.user_line} reads a value back "
                "(`.item()`, `print`, `bool()` of a tensor, or a CPU fallback)")  # fmt: skip
    return f"the rest of the step after the value read at line {read.user_line}"


def _similarity(a: Sync, b: Sync) -> float:
    ops = [[node.op for node in sync.nodes] for sync in (a, b)]
    return SequenceMatcher(None, *ops, autojunk=False).ratio()


def _differences(old: tuple[Node, ...], new: tuple[Node, ...]) -> list[tuple[Cause, str, str]]:
    """Every difference between two graphs, (cause, what, line), the likeliest cause first:
    the inputs paired (_pair_inputs), the other operations aligned on operation and line.
    Operations gone and inputs new are SETUP here: all of them, and nothing else, is what a
    first graph holding work from before its sync differs by."""
    inputs, came = _pair_inputs([n for n in old if n.input], [n for n in new if n.input])
    ops = [[n for n in nodes if not n.input] for nodes in (old, new)]
    keys = [[(n.op, _line(n)) for n in nodes] for nodes in ops]
    blocks = SequenceMatcher(None, *keys, autojunk=False).get_opcodes()
    pairs = [p for tag, i1, i2, j1, j2 in blocks if tag == "equal"
             for p in zip(ops[0][i1:i2], ops[1][j1:j2], strict=True)]  # fmt: skip
    gone = [n for tag, i1, i2, _, _ in blocks if tag != "equal" for n in ops[0][i1:i2]]
    added = [n for tag, _, _, j1, j2 in blocks if tag != "equal" for n in ops[1][j1:j2]]
    found = [(c, _name(c, a, b), _line(b)) for c, differs in _KINDS for a, b in (*inputs, *pairs)
             if differs(a, b)]  # fmt: skip
    found += list(_operations(gone, added, came))
    if not found:  # an operation's own shape or dtype, when no input's explains it
        found = [(c, _name(c, a, b), _line(b)) for c, differs in _DERIVED for a, b in pairs
                 if differs(a, b)]  # fmt: skip
    return found


def _said(found: list[tuple[Cause, str, str]]) -> tuple[Cause, str, str]:
    """The first difference's cause and line, and up to SHOWN of them in words."""
    found = sorted(found, key=lambda item: not item[2])  # those with a line first
    said = list(dict.fromkeys(what for _, what, _ in found))
    more = f"; {len(said) - SHOWN} more" if len(said) > SHOWN else ""
    return found[0][0], "; ".join(said[:SHOWN]) + more, found[0][2]


def _pair_inputs(old: list[Node], new: list[Node]) -> tuple[list[tuple[Node, Node]], list[Node]]:
    """The graphs' inputs paired, each new one with an old one of the same first line and
    shape, else line, else shape, else dtype and rank, in order; and the new ones left over.
    (An input's line is where an operation first used it, so it moves with the code.)"""
    pairs, left, unpaired = [], list(old), list(new)
    for alike in (_same_place, _same_line, _same_shape, _same_kind):
        for node in list(unpaired):
            match = next((o for o in left if alike(o, node)), None)
            if match is not None:
                left.remove(match)
                unpaired.remove(node)
                pairs.append((match, node))
    return pairs, unpaired


def _same_place(a: Node, b: Node) -> bool:
    return _same_line(a, b) and _same_shape(a, b)


def _same_shape(a: Node, b: Node) -> bool:
    return a.shape == b.shape


def _same_line(a: Node, b: Node) -> bool:
    return _line(a) == _line(b) != ""


def _same_kind(a: Node, b: Node) -> bool:
    return _dtype(a.shape) == _dtype(b.shape) and a.shape.count(",") == b.shape.count(",")


def _operations(gone: list[Node], added: list[Node], came: list[Node]):
    """Operations that came or went and inputs that came, a phrase per line of the script;
    a constant that became an input on the same line (or back) is torch_xla's special scalar."""
    special = [n for n in came if any(_line(g) == _line(n) and g.op == "prim::Constant"
                                      for g in gone)]  # fmt: skip
    for node in special:
        yield Cause.CONSTANT, (f"a number at line {_line(node)} was written into the graph as a "
               "constant in one and is an input in the other: torch_xla writes a Python 0 or 1 "
               f"as a constant ({SPECIAL_SCALARS} makes it an input); a Python number that "
               "becomes a tensor after the first step (an accumulator started at `0`) changes "
               "the graph either way: start it as a tensor on the device"), _line(node)  # fmt: skip
    lines = {_line(n) for n in special}
    for line, nodes in groupby([n for n in added if _line(n) not in lines], _line):
        where = f"line {line}" if line else "code with no Python line (autograd's backward)"
        yield Cause.OPERATIONS, f"{where} now also runs {_op_list(nodes)}", line
    for node in (n for n in came if n not in special):
        yield Cause.SETUP, f"a new input, first used at line {_line(node)}", _line(node)
    for line, nodes in groupby([n for n in gone if _line(n) not in lines], _line):
        where = f"line {line}" if line else "code with no Python line (autograd's backward)"
        yield Cause.SETUP, f"{where} no longer runs {_op_list(nodes)}", line


def _op_list(nodes) -> str:
    names = list(dict.fromkeys(f"`{n.op}`" for n in nodes))
    return ", ".join(names[:4]) + (" ..." if len(names) > 4 else "")


def _name(cause: Cause, a: Node, b: Node) -> str:
    """One difference between two aligned nodes, in the user's words, with its line."""
    at = f" at line {_line(b)}" if _line(b) else ""
    if cause is Cause.CONSTANT:
        changes = "; ".join(f"{name} {old} → {new}" for name, old, new in _tag_changes(a, b))
        return f"`{b.op}`{at}: {changes}"
    what = "an input" if a.input else f"`{b.op}`"
    return f"{what}{at}: {_readable(a.shape)} → {_readable(b.shape)}"


def _tag_changes(a: Node, b: Node) -> Iterator[tuple[str, str, str]]:
    old, new = dict(a.tags), dict(b.tags)
    for name in dict.fromkeys([*old, *new]):
        if old.get(name) != new.get(name):
            yield name, old.get(name, "(none)"), new.get(name, "(none)")


def _dtype(shape: str) -> str:
    return shape.split("[", 1)[0]


def _readable(shape: str) -> str:
    """``f32[4,16]`` as ``f32 [4, 16]``."""
    dtype, _, dims = shape.partition("[")
    return f"{dtype} [{dims.rstrip(']').replace(',', ', ')}]" if dims else shape


def _line(node: Node) -> str:
    return str(node.location) if node.location is not None else ""


# The differences between two aligned nodes, in the order a user looks for a cause; the
# operations that came or went are named after them (_difference).
_DTYPE = lambda a, b: _dtype(a.shape) != _dtype(b.shape)  # noqa: E731
_KINDS = (
    (Cause.DTYPE, lambda a, b: a.input and _DTYPE(a, b)),
    (Cause.INPUT_SHAPE, lambda a, b: a.input and a.shape != b.shape and not _DTYPE(a, b)),
    (Cause.CONSTANT, lambda a, b: a.tags != b.tags),
)
_DERIVED = (
    (Cause.DTYPE, _DTYPE),
    (Cause.INPUT_SHAPE, lambda a, b: a.shape != b.shape),
)
