"""Each group's trigger, in the harness (torch-free): learnt from the sweep's records of its
op in the same pass (its differing samples of the group's kind against its agreeing ones:
trigger.learn over the features each record's ``described`` holds), then checked on a few new
samples that the workers make from the sweep's own and judge as they judge any sample
(features.confirm): learn, generate, check. A request's answer is cached like a task's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import reprokit.tools.ops.trigger as trigger
from reprokit.infra.caching import Store
from reprokit.records.ops import Group, Sample
from reprokit.tools.ops.harness.pool import Asking
from reprokit.tools.ops.mesh import features as sharding
from reprokit.tools.ops.mesh import specs

LIMIT = 8  # new samples a group is checked with, at most
BASES = 3  # differing and agreeing samples (each) its new samples are made from
AGREES = ("match", "cpu_wrong")  # XLA right: agreeing samples
FIXED = ("dtype", "ndim", "empty", "0-d", "size-1 dim", "broadcast", "non-contiguous")
FIXED += ("over 65504 elements",)  # not varied: the new samples keep their base's sizes


def triggers(groups: list[Group], records: list[Sample], asking: Asking) -> list[Group]:
    """The groups with their ``trigger``; new samples judged by ``pool``'s workers (none
    without a pool: an interrupted sweep's triggers are learnt only)."""
    by_pass: dict[tuple, list[Sample]] = {}
    for r in records:
        by_pass.setdefault((r.op, r.variant, r.backend, r.grad, r.inplace), []).append(r)
    learnt, requests = {}, []
    stale = {(g.op, g.variant) for g in groups if g.kind == "stale-graph"}
    for g in groups:
        differ, agree = _split(g, by_pass.get((g.op, g.variant, g.backend, g.grad, g.inplace), []))
        learnt[g.id] = (differ, agree, trigger.learn([f for f, _ in differ], [f for f, _ in agree]))
        request = _request(g, *learnt[g.id])
        if request is not None and asking.pool is not None:
            # An op whose graph ignores an argument: new samples made by changing one argument
            # would get an earlier one's graph in a shared worker, each is judged alone
            requests.append(request | ({"alone": True} if (g.op, g.variant) in stale else {}))
    answers = _answers(requests, asking)
    return [replace(g, trigger=_trigger(g, *learnt[g.id], answers.get(g.id))) for g in groups]


def _features(r: Sample) -> dict[str, Any] | None:
    found = r.described.get("features")
    if not found:
        return None
    sharded = sharding(r.shard, r.mesh, r.described) if r.shard else {}
    return dict(found) | {"dtype": r.dtype} | sharded


def _split(group: Group, records: list[Sample]) -> tuple[list, list]:
    """(features, record) of the op's samples that differ as the group does, and of those
    that agree; samples without features (an older cache's) left out."""
    differ, agree = [], []
    for r in records:
        features = _features(r)
        if features is None:
            continue
        if r.differs and r.kind == group.kind:
            differ.append((features, r))
        elif r.verdict in AGREES:
            agree.append((features, r))
    return differ, agree


def _request(group: Group, differ: list, agree: list, learnt: list) -> dict[str, Any] | None:
    """What a worker needs to make and judge the group's new samples, None where no candidate
    names a feature it can change."""
    rules = [rule for rule, _ in learnt]
    names = {n for rule in rules for n in rule.names() if n not in FIXED}
    if not names:
        return None
    seen = [f for f, _ in differ + agree]
    wanted = {
        n: sorted({str(f[n]) for f in seen if f.get(n) is not None})
        if not trigger.value_class(n) and n != "uneven chunks"
        else []
        for n in sorted(names)
    }
    bases = []
    for side, differs in ((differ, True), (agree, False)):
        smallest = sorted(side, key=lambda fr: fr[1].described.get("numel", 0))
        for _, r in _distinct(smallest)[:BASES]:
            base = {"dtype": r.dtype, "edge": r.edge, "sample": r.sample, "differs": differs}
            bases.append(base | ({"shard": r.shard} if r.shard else {}))
    return _mesh(group) | {
        "id": group.id,
        "op": group.op,
        "variant": group.variant,
        "grad": group.grad,
        "inplace": group.inplace,
        "backend": group.backend,
        "bases": bases,
        "rules": [rule.to_json() for rule in rules],
        "wanted": wanted,
        "limit": LIMIT,
    }


def _mesh(group: Group) -> dict[str, Any]:
    """A sharded group's new samples are its bases and their mutants under every spec."""
    if not group.shard:
        return {}
    mesh = tuple(group.witness["mesh"])
    return {"mesh": list(mesh), "specs": specs(mesh)}


def _distinct(side: list[tuple]) -> list[tuple]:
    """One record per sample (a sharded sample has one per spec): the bases' new samples are
    made under every spec anyway."""
    kept: dict[tuple, tuple] = {}
    for fr in side:
        kept.setdefault((fr[1].dtype, fr[1].edge, fr[1].sample), fr)
    return list(kept.values())


def _answers(requests: list[dict[str, Any]], asking: Asking) -> dict[str, list[dict[str, Any]]]:
    """Each request's new samples' records (by group id): from the cache, else judged by the
    workers (``jobs`` at once); a request its worker did not finish is not cached."""
    store = Store("ops-confirm")
    found: dict[str, list[dict[str, Any]]] = {}
    pending = []
    for request in requests:
        hit = asking.cached(store, request)
        if hit is None:
            pending.append(request)
        else:
            found[request["id"]] = hit
    if not pending:
        return found
    jobs = max(1, asking.jobs)
    shared = [r for r in pending if not r.get("alone")]
    shares = [share for share in (shared[i::jobs] for i in range(jobs)) if share]
    shares += [[r | {"only": k}] for r in pending if r.get("alone") for k in range(r["limit"])]
    with ThreadPoolExecutor(max(1, min(jobs, len(shares)))) as threads:
        asked = (
            {"confirm": share, "backend": share[0]["backend"], "mesh": share[0].get("mesh")}
            for share in shares
        )
        answered = list(threads.map(asking.pool.answer, asked))
    got: dict[str, tuple[list[dict[str, Any]], bool]] = {}
    for lines in answered:  # a request judged alone comes back in pieces, in order
        for key, (records, done) in _read(lines).items():
            before, finished = got.get(key, ([], True))
            got[key] = (before + records, finished and done)
    for request in pending:
        if request["id"] in got:
            records, done = got[request["id"]]
            found[request["id"]] = records
            if done:
                asking.keep(store, request, records)
    return found


def _read(lines: list[dict[str, Any]]) -> dict[str, tuple[list[dict[str, Any]], bool]]:
    """A worker's answer: per request its records and whether it finished; a sample begun and
    not answered killed the worker (a crash)."""
    got: dict[str, tuple[list[dict[str, Any]], bool]] = {}
    begun: dict[str, Any] | None = None
    for line in lines:
        if "confirm" not in line:
            continue
        records, _ = got.setdefault(line["confirm"], ([], False))
        if "begin" in line:
            begun = line
        elif "record" in line:
            records.append(line["record"])
            begun = None
        elif line.get("done"):
            got[line["confirm"]] = (records, True)
    if begun is not None:
        said = {k: begun[k] for k in ("what", "dtype", "features", "from_differs") if k in begun}
        dead = {"verdict": "differs", "kind": "crash", "detail": "the worker died"}
        got[begun["confirm"]][0].append(dead | said)
    return got


def _trigger(
    group: Group, differ: list, agree: list, learnt: list, new: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """The ``trigger`` of ops.json: the condition with its counts on the sweep's samples and
    on the new ones; or why there is none."""
    counts = {"differs": [len(differ), len(differ)], "agrees": [0, len(agree)]}
    if not differ:
        return {"condition": None, "why": "no sample with features"}
    if not agree:
        return {"condition": None, "why": "no sample of the op agrees"} | counts
    if not learnt:
        return {"condition": None, "why": "no condition over the features separates them"} | counts
    new = new or []
    mine = [r for r in new if r["verdict"] == "differs" and r.get("kind") == group.kind]
    fine = [r for r in new if r["verdict"] in AGREES]
    found = trigger.settle(learnt, [_of(r) for r in mine], [_of(r) for r in fine])
    rule = trigger.Rule.from_json(found["rule"])
    tested = [
        {
            "what": r.get("what", ""),
            "dtype": r.get("dtype", ""),
            "differs": r in mine,
            "meets": rule.holds(_of(r)),
        }
        for r in mine + fine
    ]
    return found | {"tested": tested, "other": len(new) - len(tested)}


def _of(record: dict[str, Any]) -> dict[str, Any]:
    return dict(record.get("features") or {})
