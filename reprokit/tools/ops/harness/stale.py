"""Stale compiled graphs, in the harness (torch-free): a sample that is right alone but wrong
right after another call of its op with the same tensors' shapes and other non-tensor
arguments got the graph compiled for that call (torch_xla's IR node hash leaves the argument
out). The workers find the candidates as they sweep (pairs.py: a differing sample whose XLA
answer is what CPU gives with an earlier matched sample's arguments, and probes that change one
argument of a sample already run); here each is judged again in fresh processes, alone and
right after its first call (worker ``recheck`` jobs, answers cached like tasks'), and becomes
a ``stale-graph`` record (named with the arguments that differ) where alone it is right and
after it is wrong again. Probes are kept only as such records, and counted."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from reprokit.infra.caching import Store
from reprokit.records.ops import Sample
from reprokit.tools.ops.harness.pool import Asking

KIND = "stale-graph"
CHECKED = 2  # candidates judged again per op, dtype, pass and argument (the rest follow them)
RIGHT = ("match", "platform", "cpu_wrong")  # verdicts where XLA agrees with float64
MODES = ("alone", "after")


def confirm(records: list[Sample], asking: Asking) -> tuple[list[Sample], dict[str, Any]]:
    """The records with every confirmed candidate a ``stale-graph`` record, the others as the
    sweep judged them (a probe that is not one left out); and the counts for ops.json's
    ``stale_graph``. Without a pool (an interrupted sweep) nothing is confirmed."""
    by_key: dict[tuple, list[Sample]] = {}
    for r in records:
        if _paired(r):
            by_key.setdefault(_key(r), []).append(r)
    checked = [r for found in by_key.values() for r in found[:CHECKED]]
    answers = _answers(checked, asking)
    confirmed = {
        key
        for key, found in by_key.items()
        if any(_shown(answers.get(id(r))) for r in found[:CHECKED])
    }
    kept, judged = [], {id(r) for r in checked}
    for r in records:  # one judged again by its own answers, the others by their key's
        if _paired(r) and (_shown(answers.get(id(r))) if id(r) in judged else _key(r) in confirmed):
            kept.append(_stale(r, answers.get(id(r))))
        elif not r.probe:
            kept.append(replace(r, stale={}, pair=None))
    probed = [r for r in records if r.probe]
    counts = {
        "ops_checked": len({(r.op, r.variant) for r in probed}),
        "probes": len(probed),
        "candidates": sum(len(found) for found in by_key.values()),
        "rechecked": len(checked) if asking.pool is not None else 0,
        "found": len({key[:2] + key[-1:] for key in confirmed}),
    }
    return kept, counts


def _paired(r: Sample) -> bool:
    """A candidate: a differing sample with an earlier one whose graph explains it, and the
    source of both calls."""
    return bool(r.stale) and "A" in (r.pair or {})


def _key(r: Sample) -> tuple:
    return (r.op, r.variant, r.dtype, r.backend, r.inplace, tuple(r.stale["args"]))


def _shown(answer: dict[str, Any] | None) -> bool:
    """Right alone, wrong again right after its first call."""
    if not answer or not all(m in answer for m in MODES):
        return False
    return answer["alone"]["verdict"] in RIGHT and answer["after"]["verdict"] == "differs"


def _stale(r: Sample, answer: dict[str, Any] | None) -> Sample:
    """A confirmed candidate as a ``stale-graph`` record: the arguments the reused graph
    ignores, what XLA gave (the sweep's detail) and what it gives alone."""
    args = ", ".join(r.stale["args"])
    alone = answer["alone"]["verdict"] if answer else "not judged again (others of it were)"
    detail = f"after a call with another {args}, XLA gives that call's graph's answer ({r.kind}: {r.detail}); alone: {alone}"  # noqa: E501
    return replace(r, kind=KIND, arg=args, was=r.kind, detail=detail)


def _answers(checked: list[Sample], asking: Asking) -> dict[int, dict[str, Any]]:
    """Each checked record's verdicts alone and after (by ``id`` of the record): cached, else
    judged in fresh workers, in rounds whose items share no op and shapes (one item's graph
    must not serve another's), the two modes' workers at once where ``jobs`` allows."""
    if asking.pool is None:
        return {}
    store = Store("ops-stale")
    found: dict[int, dict[str, Any]] = {}
    pending: dict[str, list[tuple[Sample, dict[str, Any]]]] = {m: [] for m in MODES}
    for r in checked:
        item = _item(r)
        for mode in MODES:
            hit = asking.cached(store, [item, mode])
            if hit is None:
                pending[mode].append((r, item))
            else:
                found.setdefault(id(r), {})[mode] = hit
    jobs_ = [(mode, share) for mode in MODES for share in _rounds(pending[mode]) if pending[mode]]
    if not jobs_:
        return found
    with ThreadPoolExecutor(max(1, min(asking.jobs, len(jobs_)))) as threads:
        asked = (
            {
                "recheck": [item for _, item in share],
                "mode": mode,
                "backend": share[0][1]["backend"],
            }
            for mode, share in jobs_
        )
        answered = list(threads.map(asking.pool.answer, asked))
    for (mode, share), lines in zip(jobs_, answered, strict=True):
        got = {line["recheck"]: line["record"] for line in lines if "record" in line}
        for n, (r, item) in enumerate(share):
            if n in got:
                found.setdefault(id(r), {})[mode] = got[n]
                asking.keep(store, [item, mode], got[n])
    return found


def _item(r: Sample) -> dict[str, Any]:
    """What a worker needs to judge a candidate again (worker/pairs.py's recheck)."""
    return {"op": r.op, "variant": r.variant, "dtype": r.dtype, "backend": r.backend} | {
        "inplace": r.inplace,
        "pair": r.pair,
    }


def _rounds(pending: list[tuple[Sample, Any]]) -> list[list[tuple[Sample, Any]]]:
    """The items in rounds: the k-th item of each op and tensors' shapes in round k."""
    rounds: list[list[tuple[Sample, Any]]] = []
    seen: dict[tuple, int] = {}
    for r, item in pending:
        shapes = tuple(r.described.get("tensors", ()))
        where = (r.op, r.variant, r.inplace, shapes)
        k = seen[where] = seen.get(where, -1) + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append((r, item))
    return rounds
