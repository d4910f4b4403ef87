"""The lineage of one failed answer as drawable data: the backward slice from the answer to its evidence.

A failed answer's full backward slice can hold thousands of nodes (a long
memory's every version, every message a retrieval scanned). A reader needs the
path the information took, or failed to take: evidence messages, the variables
and operations carrying it, the root-cause operation and what it lost, and the
chain from there to the answer and its verdict. :func:`lineage_slice` keeps that
path whole, adds its immediate context, and folds the rest into *collapsed*
nodes that say how much they stand for:

* a run of more than :data:`_CHAIN_KEEP` versions of one variable keeps its first
  and last versions (and any marked one) and folds the middle;
* an operation with many inputs or outputs off the path (a search that scanned
  a hundred records) keeps :data:`_SIBLINGS_KEEP` of them and folds the rest;
* past ``max_nodes``, the nodes farthest from the path are folded.

Nodes come out in time order (execution order of operations; a variable at
its producer's time). Thread safety: pure functions over a graph they only read (a graph's set of
overwritten variables, its nodes' traces and times are cached per graph, dropped when its node count
changes; two threads may both compute one, with the same result).
"""

from __future__ import annotations

import heapq
import itertools
import weakref
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from memtrace_otel.graph.node_types import OPERATION, VARIABLE
from memtrace_otel.graph.query import evidence_variables

__all__ = ["MARKS", "LineageSlice", "SliceNode", "lineage_slice"]

MARKS = ("root_cause", "lost", "deleted", "overwritten", "evidence", "answer", "evaluation", "path")
"""Marks a node may carry; each is a CSS class in the picture."""

_CHAIN_KEEP = 3
_SIBLINGS_KEEP = 3
_CONTEXT_HOPS = 1
_EDGES_PER_NODE = 3


@dataclass(frozen=True, slots=True)
class SliceNode:
    """One node of the picture: a graph node, or a collapsed group of them (``hidden`` > 0)."""

    id: str
    kind: str  # "operation", "variable" or "collapsed"
    label: str
    time: float
    trace_id: str | None = None  # an operation's trace; a variable's producer's (its band in the picture)
    span_id: str | None = None
    detail: str = ""
    content: str | None = None
    marks: frozenset[str] = frozenset()
    hidden: int = 0


@dataclass(slots=True)
class LineageSlice:
    """What :func:`lineage_slice` returns: nodes in time order, edges between them, traces in time order."""

    nodes: list[SliceNode]
    edges: list[tuple[str, str]]
    traces: list[str]
    root_cause: str | None = None
    lost: list[str] = field(default_factory=list)
    total: int = 0  # nodes of the full backward slice


def _time(G: nx.DiGraph, node: str, cache: dict[str, float]) -> float:
    """Operations at their execution order; a variable after its producer (or before its first reader)."""
    if node in cache:
        return cache[node]
    nodes = G._node
    if nodes[node].get("type") == OPERATION:
        value = float(nodes[node].get("order", 0))
    else:
        writers = [nodes[p].get("order", 0) for p in G._pred[node] if nodes[p].get("type") == OPERATION]
        if writers:
            value = float(min(writers)) + 0.5
        else:
            value = float(min((nodes[r].get("order", 0) for r in G._succ[node]
                               if nodes[r].get("type") == OPERATION), default=0.5)) - 0.5
    cache[node] = value
    return value


def _trace_of(G: nx.DiGraph, node: str, cache: dict[str, str | None] | None = None) -> str | None:
    """An operation's trace; a variable belongs to its producer's trace (or its first reader's).

    ``cache`` (the graph's, :func:`_memo`) keeps each answer: a page's failures share most of
    their ancestors (the same conversation, the same memories), and every failure asks for the
    trace of each of its answer's ancestors."""
    if cache is not None:
        if node in cache:
            return cache[node]
        cache[node] = found = _trace_of(G, node)
        return found
    nodes = G._node
    if nodes[node].get("type") == OPERATION:
        return nodes[node].get("trace_id")
    near = [p for p in G._pred[node] if nodes[p].get("type") == OPERATION]
    near = near or [s for s in G._succ[node] if nodes[s].get("type") == OPERATION]
    if not near:
        return None
    return nodes[min(near, key=lambda n: nodes[n].get("order", 0))].get("trace_id")


def _core(G: nx.DiGraph, attribution: Any) -> tuple[list[str], list[str], str | None]:
    """The path nodes (evidence -> root cause -> answer -> evaluation), the evidence, the root cause."""
    case = attribution.case
    evidence = [v for v in evidence_variables(G, case.evidence) if v in G]
    path = [n for n in attribution.evidence_path if isinstance(n, str) and n in G]
    root = attribution.operation if attribution.operation in G else None
    extra = [n for n in (*evidence, root, case.answer, case.evaluation) if n is not None and n in G]
    return list(dict.fromkeys([*path, *extra])), evidence, root


def _lost(G: nx.DiGraph, attribution: Any, root: str | None) -> list[str]:
    """What the root cause lost: the variable that carried the evidence into it, and versions it ended."""
    if root is None:
        return []
    path = [n for n in attribution.evidence_path if isinstance(n, str) and n in G]
    lost = []
    if root in path and path.index(root) > 0:
        before = path[path.index(root) - 1]
        if G.nodes[before].get("type") == VARIABLE:
            lost.append(before)
    for out in G._succ[root]:
        data = G.nodes[out]
        if data.get("deleted"):
            lost.append(out)
        for prior in G._pred[out]:  # the version this output replaced
            if G.edges[prior, out].get("role") == "version" and prior in G._pred[root]:
                lost.append(prior)
    return list(dict.fromkeys(lost))


def _question_trace(G: nx.DiGraph, answer: str, upstream: set[str],
                    traces: dict[str, str | None]) -> set[str]:
    """What the answer was made of in its own trace: the question, the search, the context."""
    trace = _trace_of(G, answer, traces)
    if not trace:
        return set()
    # The cache looked up here, not through _trace_of: this runs over every ancestor of every answer.
    return {n for n in upstream if (traces[n] if n in traces else _trace_of(G, n, traces)) == trace}


def _ancestors(G: nx.DiGraph, node: str) -> set[str]:
    """``nx.ancestors(G, node)``, the same set, by a plain walk over ``G._pred`` (networkx's goes
    through a generic breadth-first search, a generator of edges, at several times the cost: the
    report takes every failed answer's ancestors)."""
    pred = G._pred
    seen: set[str] = set()
    frontier = [node]
    while frontier:
        for parent in pred[frontier.pop()]:
            if parent not in seen:
                seen.add(parent)
                frontier.append(parent)
    seen.discard(node)
    return seen


def _reachable_within(G: nx.DiGraph, sources: list[str], upstream: set[str]) -> set[str]:
    """The sources and what they reach inside ``upstream`` (the answer's ancestors): as
    ``descendants(source) & upstream``, since every node on a path to an ancestor is one, but
    without walking a message's whole future (in a long context, everything after it)."""
    seen = set(sources)
    frontier = list(sources)
    while frontier:
        node = frontier.pop()
        for nxt in G._succ[node]:
            if nxt in upstream and nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return seen


def _candidate_nodes(G: nx.DiGraph, core: list[str], evidence: list[str], answer: str | None,
                     upstream: set[str], traces: dict[str, str | None]) -> set[str]:
    """The core, the answer's own trace, everything between the evidence and the answer, one hop around."""
    keep = set(core)
    if answer is not None and answer in G:
        keep |= _question_trace(G, answer, upstream, traces)
        keep |= _reachable_within(G, [m for m in evidence if m in upstream], upstream)
    frontier = set(core)
    for _ in range(_CONTEXT_HOPS):
        frontier = {m for n in frontier for m in (*G._pred[n], *G._succ[n])} - keep
        keep |= frontier
    return keep


@dataclass(slots=True)
class _Memo:
    """What a graph's failures share, kept per graph while its node count holds: its variables
    with a newer version (one pass over its edges), each node's trace and time (a message read
    by thousands of operations, a memory many answers descend from, would otherwise be looked at
    again in every failure)."""

    size: int
    overwritten: frozenset[str]
    traces: dict[str, str | None] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)


_MEMO: weakref.WeakKeyDictionary[nx.DiGraph, _Memo] = weakref.WeakKeyDictionary()


def _memo(G: nx.DiGraph) -> _Memo:
    size = len(G)  # O(1), unlike number_of_edges(): a graph that grew is looked at again
    memo = _MEMO.get(G)
    if memo is None or memo.size != size:
        found = frozenset(u for u, _, role in G.edges(data="role") if role == "version")
        memo = _MEMO[G] = _Memo(size, found)
    return memo


def _marks(G: nx.DiGraph, node: str, core: set[str], evidence: set[str], lost: set[str],
           root: str | None, answer: str | None, evaluation: str,
           overwritten: frozenset[str]) -> frozenset[str]:
    data = G._node[node]  # the node dict itself: G.nodes[...] builds a view per call
    marks = set()
    if node == root:
        marks.add("root_cause")
    if node in lost:
        marks.add("lost")
    if data.get("deleted"):
        marks.add("deleted")
    if data.get("type") == VARIABLE and node in overwritten:
        marks.add("overwritten")
    for flag, hit in (("evidence", node in evidence), ("answer", node == answer),
                      ("evaluation", node == evaluation), ("path", node in core)):
        if hit:
            marks.add(flag)
    return frozenset(marks)


def _fold_chains(G: nx.DiGraph, keep: set[str], protected: set[str]) -> dict[str, str]:
    """Variable versions to fold, each mapped to its group id: the middle of long runs of one name."""
    by_name: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for node in keep:
        data = G._node[node]
        if data.get("type") == VARIABLE and isinstance(data.get("version"), int):
            by_name[str(data.get("name"))].append((data["version"], node))
    folded: dict[str, str] = {}
    for name, versions in sorted(by_name.items()):
        if len(versions) <= _CHAIN_KEEP:
            continue
        versions.sort()
        middle = [n for _, n in versions[1:-1] if n not in protected]
        for node in middle:
            folded[node] = f"fold:chain:{name}"
        for node in middle:  # the operations that only made folded versions go with them
            for op in G._pred[node]:
                if op in keep and op not in protected and all(o in folded for o in G._succ[op]
                                                              if o in keep):
                    folded[op] = f"fold:chain:{name}"
    return folded


def _kept_neighbours(G: nx.DiGraph, keep: set[str]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Each kept node's kept predecessors and successors, found once for the folds, the cap and the edges.

    A dict view's ``&`` iterates the smaller side (set.intersection would iterate the dict): in a long
    context a message touches thousands of nodes, and a slice keeps a few hundred.
    """
    pred, succ = G._pred, G._succ
    return {n: pred[n].keys() & keep for n in keep}, {n: succ[n].keys() & keep for n in keep}


def _fold_siblings(G: nx.DiGraph, keep: set[str], protected: set[str], folded: dict[str, str],
                   kept: tuple[dict[str, set[str]], dict[str, set[str]]]) -> None:
    """Fold the off-path inputs and outputs of operations with many of them (those touching nothing else):
    all but the first :data:`_SIBLINGS_KEEP` by id of an operation's unfolded, unprotected ones."""
    into, out_of = kept
    lone = {n for n in keep if len(into[n]) + len(out_of[n]) == 1}  # touching one kept node, its operation
    for op in sorted(n for n in keep if G._node[n].get("type") == OPERATION):
        for side, near in (("in", into[op]), ("out", out_of[op])):
            if len(near) <= _SIBLINGS_KEEP:
                continue
            # Found by set operations (an operation may have hundreds of them): the candidates that touch
            # nothing else, less the first few candidates by id, which stay.
            candidates = near - protected - folded.keys()
            folding = candidates & lone
            if folding:
                folding.difference_update(heapq.nsmallest(_SIBLINGS_KEEP, candidates))
                folded.update(dict.fromkeys(folding, f"fold:{side}:{op}"))


def _cap(keep: set[str], protected: set[str], folded: dict[str, str], limit: int,
         kept: tuple[dict[str, set[str]], dict[str, set[str]]]) -> None:
    """Past ``limit`` shown nodes, fold the ones farthest (in hops) from the protected path."""
    shown = [n for n in keep if n not in folded]
    if len(shown) <= limit:
        return
    # Breadth first, a level at a time (hop distances do not depend on the order within a level).
    into, out_of = kept
    distance = dict.fromkeys(protected & keep, 0)
    frontier = set(distance)
    hops = 0
    while frontier and len(distance) < len(keep):  # the last level would reach only nodes already met
        hops += 1
        reached: set[str] = set()
        for n in frontier:
            reached |= into[n]
            reached |= out_of[n]
        frontier = reached.difference(distance)
        distance.update(dict.fromkeys(frontier, hops))
    ranked = sorted(shown, key=lambda n: (distance.get(n, 1 << 30), n))
    for node in ranked[max(limit - 1, len(protected & keep)):]:
        folded[node] = "fold:far"


def lineage_slice(G: nx.DiGraph, attribution: Any, *, max_nodes: int = 200) -> LineageSlice:
    """The drawable lineage of one verdict: evidence -> root cause (and what it lost) -> answer -> verdict.

    Parameters
    ----------
    G:
        The evolution graph the verdict was reached on.
    attribution:
        An :class:`~memtrace_otel.attribution.base.Attribution` (only ``case``,
        ``operation`` and ``evidence_path`` are read).
    max_nodes:
        At most about this many nodes are drawn; the rest are folded into collapsed nodes.

    Returns
    -------
    LineageSlice
        Nodes in time order; ``total`` counts the answer's full backward slice and the nodes kept besides.

    >>> from memtrace_otel.attribution.base import Attribution, FailureCase
    >>> from memtrace_otel.graph.query import _example_graph
    >>> G = _example_graph()
    >>> a = Attribution("x", FailureCase("op:j", answer="answer@1"), operation="op:u",
    ...                 evidence_path=["msg:D1@1", "op:e", "mem:a@1", "op:u", "mem:a@2"])
    >>> s = lineage_slice(G, a)
    >>> [n.id for n in s.nodes if "root_cause" in n.marks], s.lost
    (['op:u'], ['mem:a@1'])
    """
    case = attribution.case
    core, evidence, root = _core(G, attribution)
    answer = case.answer if case.answer in G else None
    memo = _memo(G)
    upstream = _ancestors(G, answer) | {answer} if answer else set()
    keep = _candidate_nodes(G, core, evidence, answer, upstream, memo.traces)
    lost = _lost(G, attribution, root)
    keep |= set(lost)
    protected = set(core) | set(lost)
    folded = _fold_chains(G, keep, protected)
    kept = _kept_neighbours(G, keep)
    _fold_siblings(G, keep, protected, folded, kept)
    _cap(keep, protected, folded, max_nodes, kept)
    total = len(upstream | keep)
    return _assemble(G, keep, folded, core, evidence, lost, root, answer, case.evaluation, total, memo,
                     kept[1])


def _node(G: nx.DiGraph, node: str, time: float, marks: frozenset[str],
          traces: dict[str, str | None]) -> SliceNode:
    data = G._node[node]
    if data.get("type") == OPERATION:
        steps = data.get("steps") or data.get("step") or ()
        detail = str(data.get("category") or "")
        if isinstance(steps, list) and steps:
            detail += f", {len(steps)} step(s)"
        return SliceNode(node, "operation", str(data.get("name") or node), time, data.get("trace_id"),
                         data.get("span_id"), detail, None, marks)
    content = data.get("content")
    size = data.get("size")
    detail = f"{data.get('kind') or 'variable'}" + (f", {size} B" if isinstance(size, int) else "")
    return SliceNode(node, "variable", node, time, _trace_of(G, node, traces), None, detail,
                     content if isinstance(content, str) else None, marks)


def _assemble(G: nx.DiGraph, keep: set[str], folded: dict[str, str], core: list[str], evidence: list[str],
              lost: list[str], root: str | None, answer: str | None, evaluation: str,
              total: int, memo: _Memo, successors: dict[str, set[str]]) -> LineageSlice:
    times, traces = memo.times, memo.traces
    core_set, evidence_set, lost_set = set(core), set(evidence), set(lost)
    overwritten = memo.overwritten
    nodes: dict[str, SliceNode] = {}
    groups: dict[str, list[str]] = defaultdict(list)
    for node in keep:
        if node in folded:
            groups[folded[node]].append(node)
        else:
            marks = _marks(G, node, core_set, evidence_set, lost_set, root, answer, evaluation, overwritten)
            nodes[node] = _node(G, node, _time(G, node, times), marks, traces)
    for group, members in groups.items():
        nodes[group] = _collapsed(G, group, members, times, traces)
    edges = _edges(keep, folded, core_set | lost_set, successors)
    ordered = sorted(nodes.values(), key=lambda n: (n.time, n.id))
    return LineageSlice(ordered, edges, _traces(G, keep, times, traces), root, lost, total)


def _collapsed(G: nx.DiGraph, group: str, members: list[str], times: dict[str, float],
               traces: dict[str, str | None]) -> SliceNode:
    when = sorted(_time(G, m, times) for m in members)
    ops = sum(G._node[m].get("type") == OPERATION for m in members)
    what = {"fold:chain": "versions", "fold:in": "other inputs", "fold:out": "other outputs"}
    kind = next((label for prefix, label in what.items() if group.startswith(prefix)), "more nodes")
    label = f"… {len(members)} {kind}"
    detail = f"{len(members) - ops} variable(s), {ops} operation(s) folded"
    middle = sorted(members, key=lambda m: _time(G, m, times))[len(members) // 2]
    return SliceNode(group, "collapsed", label, when[len(when) // 2], _trace_of(G, middle, traces), None,
                     detail, None, frozenset(), len(members))


def _edges(keep: set[str], folded: dict[str, str], path: set[str], successors: dict[str, set[str]]
           ) -> list[tuple[str, str]]:
    """Edges between drawn nodes (``successors``: each kept node's kept successors); when too dense to
    read, those of the path and one into each node."""
    edges: set[tuple[str, str]] = set()
    for u in keep:
        # The kept successors mapped to their drawn nodes in C (``folded.get(v, v)``): a long context's
        # slice has tens of thousands of edges that fold into a few hundred, so the set of targets is
        # built before any Python-level loop. Both results below are sorted, so the walk's order does
        # not matter.
        a = folded.get(u, u)
        targets: set[str] = set(map(folded.get, *itertools.tee(successors[u])))  # type: ignore[arg-type]
        targets.discard(a)
        edges.update(zip(itertools.repeat(a), targets))
    drawn = len(set(folded.values())) + len(keep) - len(folded)
    if len(edges) <= _EDGES_PER_NODE * drawn:
        return sorted(edges)
    kept: dict[tuple[str, str], None] = {}
    entered: set[str] = set()
    for a, b in sorted(edges):
        if a in path or b in path or b not in entered:
            kept[(a, b)] = None
            entered.add(b)
    return list(kept)


def _traces(G: nx.DiGraph, keep: Iterable[str], times: dict[str, float],
            cache: dict[str, str | None]) -> list[str]:
    first: dict[str, float] = {}
    for node in keep:
        trace = _trace_of(G, node, cache)
        if trace:
            first[trace] = min(first.get(trace, float("inf")), _time(G, node, times))
    return sorted(first, key=lambda t: (first[t], t))
