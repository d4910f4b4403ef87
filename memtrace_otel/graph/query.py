"""Queries over the memory evolution graph: plain functions, ``f(G, node, *, option=...)``.

Every example runs on :func:`_example_graph`: a message is extracted into a
memory unit, the unit is updated, retrieved, and an answer is generated and
judged (a failure).

Graph-wide lookups (operations by category, variables by name, evidence ids)
are built once per graph (:mod:`memtrace_otel.graph.index`), so a query asked
once per failure costs what it returns, not a scan of the graph. Results are
in a fixed order that depends on the graph only (execution ``order``, then the
order nodes were first met), never on set iteration or hash seeds.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any

import networkx as nx

from memtrace_otel.graph.errors import MemTraceGraphError, NodeNotFound
from memtrace_otel.graph.index import (
    evaluation_nodes,
    lookup,
    missing_by_node,
    operation_nodes,
    position,
    variables_by_name,
)
from memtrace_otel.graph.node_types import OPERATION, VARIABLE
from memtrace_otel.semconv import Category, VariableKind

__all__ = [
    "EvidenceRule",
    "answer_of",
    "backward_slice",
    "evaluations",
    "evidence_keys",
    "evidence_variables",
    "failed_evaluation_of_case",
    "failed_evaluations",
    "lineage_path",
    "memory_life",
    "missing_lineage",
    "operations",
    "operations_between",
    "producer_of",
    "trace_subgraph",
]

_ANSWER = str(VariableKind.ANSWER.value)


def _example_graph() -> nx.DiGraph:
    G = nx.DiGraph()
    for v in ["msg:D1@1", "mem:a@1", "mem:a@2", "ctx@1", "answer@1"]:
        name, version = v.split("@")
        G.add_node(v, type=VARIABLE, name=name, version=int(version), kind=VariableKind.OTHER.value)
    steps = [("op:e", Category.EXTRACTION), ("op:u", Category.UPDATE), ("op:r", Category.RETRIEVAL),
             ("op:g", Category.GENERATION), ("op:j", Category.EVALUATION)]
    for order, (op, category) in enumerate(steps):
        G.add_node(op, type=OPERATION, category=category.value, order=order, name=op, trace_id="t2")
    G.add_edges_from([("msg:D1@1", "op:e"), ("op:e", "mem:a@1"), ("mem:a@1", "op:u"),
                      ("op:u", "mem:a@2"), ("mem:a@2", "op:r"), ("op:r", "ctx@1"),
                      ("ctx@1", "op:g"), ("op:g", "answer@1"), ("answer@1", "op:j")])
    G.nodes["op:e"].update(trace_id="t1", missing_links=["f" * 32])
    G.nodes["op:j"].update(passed=False, answer="answer@1")
    return G


def _require(G: nx.DiGraph, node: str) -> None:
    if node not in G:
        raise NodeNotFound(f"{node!r} is not in the graph")


def _in_graph_order(G: nx.DiGraph, nodes: Iterable[str]) -> list[str]:
    """``nodes`` in ``G``'s node order: a fixed order, whatever order they were collected in."""
    where = position(G)
    return sorted(nodes, key=where.__getitem__)


def _by_execution(G: nx.DiGraph, ops: Iterable[str]) -> list[str]:
    where, nodes = position(G), G.nodes
    return sorted(ops, key=lambda n: (nodes[n].get("order", 0), where[n]))


def _induced_copy(G: nx.DiGraph, keep: set[str]) -> nx.DiGraph:
    """``G.subgraph(keep).copy()`` with nodes and edges in ``G``'s order.

    networkx's subgraph view iterates a small node set in set (hash) order; the copy
    would then carry a different node order in every process.
    """
    H = G.__class__()
    H.graph.update(G.graph)
    ordered = _in_graph_order(G, keep)
    H.add_nodes_from((n, G.nodes[n]) for n in ordered)
    succ = G._succ
    H.add_edges_from((u, v, d) for u in ordered for v, d in succ[u].items() if v in keep)
    return H


def operations(G: nx.DiGraph, *, category: str | None = None) -> list[str]:
    """Operation nodes in execution order, optionally of one category.

    Parameters
    ----------
    G:
        An evolution graph.
    category:
        Only operations of this :class:`~memtrace_otel.semconv.Category`.

    Returns
    -------
    list of str
        A new list (the lookup behind it is built once per graph).

    >>> G = _example_graph()
    >>> operations(G, category=Category.UPDATE)
    ['op:u']
    """
    return list(operation_nodes(G, category))


def evaluations(G: nx.DiGraph) -> list[str]:
    """Evaluation operations that carry a verdict, in execution order.

    >>> evaluations(_example_graph())
    ['op:j']
    """
    return list(evaluation_nodes(G))


def failed_evaluations(G: nx.DiGraph) -> list[str]:
    """Evaluation operations whose verdict is a failure, in execution order.

    >>> G = _example_graph()
    >>> failed_evaluations(G)
    ['op:j']
    """
    return list(lookup(G, "failed", lambda G: tuple(n for n in evaluation_nodes(G)
                                                      if not G.nodes[n]["passed"])))


def failed_evaluation_of_case(G: nx.DiGraph, case_id: str) -> str | None:
    """The failed evaluation that recorded ``case_id`` (``memtrace.evaluation.case``), if any.

    >>> G = _example_graph()
    >>> G.nodes["op:j"]["case"] = "q1"
    >>> failed_evaluation_of_case(G, "q1"), failed_evaluation_of_case(G, "q2")
    ('op:j', None)
    """
    for node in failed_evaluations(G):
        if G.nodes[node].get("case") == case_id:
            return node
    return None


def producer_of(G: nx.DiGraph, variable: str) -> str | None:
    """The operation that wrote ``variable``, if it is in the graph.

    Two operations that both claim one version (reported when the graph was
    built): the one that ran first.

    >>> G = _example_graph()
    >>> producer_of(G, "mem:a@2")
    'op:u'
    """
    _require(G, variable)
    writers = [p for p in G._pred[variable] if G.nodes[p].get("type") == OPERATION]
    if len(writers) > 1:
        writers = _by_execution(G, writers)
    return writers[0] if writers else None


def answer_of(G: nx.DiGraph, evaluation: str) -> str | None:
    """The answer variable an evaluation judged.

    >>> G = _example_graph()
    >>> answer_of(G, "op:j")
    'answer@1'
    """
    _require(G, evaluation)
    answer = G.nodes[evaluation].get("answer")
    if isinstance(answer, str) and answer in G:
        return answer
    for pred in G.predecessors(evaluation):
        if G.nodes[pred].get("kind") == _ANSWER:
            return pred
    return None


def backward_slice(G: nx.DiGraph, node: str) -> nx.DiGraph:
    """Subgraph of everything ``node`` depends on, ``node`` included, in ``G``'s node order.

    >>> G = _example_graph()
    >>> list(backward_slice(G, "ctx@1"))
    ['msg:D1@1', 'mem:a@1', 'mem:a@2', 'ctx@1', 'op:e', 'op:u', 'op:r']
    """
    _require(G, node)
    keep = nx.ancestors(G, node)
    keep.add(node)
    return _induced_copy(G, keep)


def missing_lineage(G: nx.DiGraph, node: str) -> set[str]:
    """Trace ids the operations ``node`` depends on link to, but the input lacks.

    Each operation node carries ``missing_links`` when its span links point at
    spans that were not read; a failure whose lineage reaches them was judged on
    partial input (the trace backend can fetch them).

    Parameters
    ----------
    G:
        An evolution graph.
    node:
        Any node; its backward slice (``node`` included) is searched.

    Returns
    -------
    set of str
        Trace ids, empty when the lineage of ``node`` is complete.

    Raises
    ------
    NodeNotFound
        ``node`` is not in the graph.

    >>> G = _example_graph()
    >>> missing_lineage(G, "op:j") == {"f" * 32}, missing_lineage(G, "msg:D1@1")
    (True, set())
    """
    _require(G, node)
    table = missing_by_node(G)  # computed once per graph: asked once per failure
    if table is not None:
        return set(table.get(node, ()))
    nodes = G.nodes
    missing: set[str] = set(nodes[node].get("missing_links") or ())
    for ancestor in nx.ancestors(G, node):
        links = nodes[ancestor].get("missing_links")
        if links:
            missing.update(links)
    return missing


def trace_subgraph(G: nx.DiGraph, trace_id: str) -> nx.DiGraph:
    """The operations of one trace and the variables they read or wrote.

    Parameters
    ----------
    G:
        An evolution graph.
    trace_id:
        32 lowercase hex chars, as in the operation nodes' ``trace_id``.

    Returns
    -------
    networkx.DiGraph
        A new graph in ``G``'s node order; empty when no operation is of that trace.

    >>> G = _example_graph()
    >>> list(trace_subgraph(G, "t1"))
    ['msg:D1@1', 'mem:a@1', 'op:e']
    """
    nodes = G.nodes
    ops = [n for n in operation_nodes(G) if nodes[n].get("trace_id") == trace_id]
    keep = set(ops)
    for op in ops:
        keep.update(G._pred[op])
        keep.update(G._succ[op])
    return _induced_copy(G, keep)


def _version_edges_cost_more(u: str, v: str, data: dict[str, Any]) -> int:
    return 3 if data.get("role") == "version" else 1


def lineage_path(G: nx.DiGraph, source: str, target: str) -> list[str]:
    """Shortest lineage path from ``source`` to ``target``.

    Raises
    ------
    NodeNotFound
        Either end is not in the graph.
    MemTraceGraphError
        There is no lineage from ``source`` to ``target``.

    >>> G = _example_graph()
    >>> lineage_path(G, "msg:D1@1", "ctx@1")
    ['msg:D1@1', 'op:e', 'mem:a@1', 'op:u', 'mem:a@2', 'op:r', 'ctx@1']
    """
    _require(G, source)
    _require(G, target)
    try:
        # A version edge v -> v+1 is a shortcut past the operation that made v+1; prefer
        # the path through the operation, and use the version edge only when none exists.
        return nx.shortest_path(G, source, target, weight=_version_edges_cost_more)
    except nx.NetworkXNoPath as error:
        raise MemTraceGraphError(f"no lineage from {source!r} to {target!r}") from error


def memory_life(G: nx.DiGraph, name: str) -> list[dict[str, Any]]:
    """Every version of variable ``name`` with the operation that wrote it and those that read it.

    >>> G = _example_graph()
    >>> [(v["id"], v["written_by"], v["read_by"]) for v in memory_life(G, "mem:a")]
    [('mem:a@1', 'op:e', ['op:u']), ('mem:a@2', 'op:u', ['op:r'])]
    """
    versions = variables_by_name(G).get(name)
    if not versions:
        raise NodeNotFound(f"no variable named {name!r} in the graph")
    life = []
    for _, node in versions:
        readers = [s for s in G._succ[node] if G.nodes[s].get("type") == OPERATION]
        life.append({
            "id": node,
            "deleted": G.nodes[node].get("deleted", False),
            "written_by": producer_of(G, node),
            "read_by": _by_execution(G, readers),
        })
    return life


def operations_between(G: nx.DiGraph, source: str, target: str) -> list[str]:
    """Operations on some lineage path from ``source`` to ``target``, in execution order.

    >>> G = _example_graph()
    >>> operations_between(G, "msg:D1@1", "answer@1")
    ['op:e', 'op:u', 'op:r', 'op:g']
    """
    _require(G, source)
    _require(G, target)
    between = nx.descendants(G, source) & nx.ancestors(G, target)
    return _by_execution(G, (n for n in between if G.nodes[n].get("type") == OPERATION))


EvidenceRule = Callable[[str], Iterable[str]]
"""Which evidence ids a variable name holds: ``rule(name) -> ids``."""


def evidence_keys(name: str) -> tuple[str, ...]:
    """The default :data:`EvidenceRule`: the name itself, and what follows its namespace prefix.

    A variable named ``msg:D1:3`` holds evidence ``msg:D1:3`` and ``D1:3``
    (the text after the first ``:``, the namespace prefix being ``msg``). It
    is the rule the instrumented systems' ``msg:<dialog id>`` message names
    need, and the one benchmark numbers are computed with.

    >>> evidence_keys("msg:D1:3")
    ('msg:D1:3', 'D1:3')
    >>> evidence_keys("question")
    ('question',)
    """
    rest = name.partition(":")[2]
    return (name, rest) if rest else (name,)


def _evidence_index(rule: EvidenceRule) -> Callable[[nx.DiGraph], dict[str, tuple[str, ...]]]:
    def build(G: nx.DiGraph) -> dict[str, tuple[str, ...]]:
        # The earliest version of each name: usually 1, but a long-running writer's registry may
        # start a new name higher (it never reissues an evicted name's versions).
        earliest: dict[str, int] = {}
        for _, data in G.nodes(data=True):
            version = data.get("version")
            if data.get("type") == VARIABLE and isinstance(version, int):
                name = str(data.get("name", ""))
                earliest[name] = min(version, earliest.get(name, version))
        index: dict[str, list[str]] = {}
        for node, data in G.nodes(data=True):  # graph order: the order matches come out in
            name = str(data.get("name", ""))
            if data.get("type") == VARIABLE and data.get("version") == earliest.get(name):
                for key in dict.fromkeys(rule(name)):
                    index.setdefault(key, []).append(node)
        return {key: tuple(found) for key, found in index.items()}
    return build


def _versions_in_time(G: nx.DiGraph) -> dict[str, tuple[list[int], list[str]]]:
    # Names written more than once -> their versions by their writers' execution order (a version
    # no operation wrote counts as written before everything), for a bisect per failure.
    nodes, pred = G.nodes, G._pred
    table = {}
    for name, versions in variables_by_name(G).items():
        if len(versions) > 1:
            written = sorted((min((nodes[p].get("order", 0) for p in pred[v]
                                   if nodes[p].get("type") == OPERATION), default=-1), i, v)
                             for i, (_, v) in enumerate(versions))
            table[name] = ([order for order, *_ in written], [v for *_, v in written])
    return table


def _current_at(G: nx.DiGraph, variable: str, at: str) -> str:
    """The version of ``variable``'s name written last before operation ``at`` ran, else ``variable``."""
    found = lookup(G, "versions_in_time", _versions_in_time).get(G.nodes[variable].get("name"))
    if found is None:
        return variable
    orders, versions = found
    before = bisect.bisect_left(orders, G.nodes[at].get("order", 0))
    return versions[before - 1] if before else variable


def evidence_variables(G: nx.DiGraph, evidence_ids: Iterable[str], *,
                       match: EvidenceRule = evidence_keys, at: str | None = None) -> list[str]:
    """Message variables that hold the given evidence ids (e.g. LoCoMo ``D1:3``).

    An evaluation names the messages that hold its answer by evidence ids
    (``memtrace.evaluation.evidence``); this finds their variables. The rule is:
    a variable matches an id when it is the earliest version of its name in
    the graph (messages are written once) and ``match(name)`` yields the id. The default,
    :func:`evidence_keys`, matches a variable whose name equals the id, or
    whose name is a namespace prefix, a ``:``, and the id (``msg:D1:3`` holds
    ``D1:3``). Pass another ``match`` for other naming schemes, e.g.
    ``lambda name: [name.removeprefix("chat/")]``.

    Parameters
    ----------
    G:
        An evolution graph.
    evidence_ids:
        The ids to look up; anything but a string is ignored.
    match:
        The rule, a function from a variable name to the evidence ids it holds.
        The index it implies is built once per graph and rule: pass the same
        function object each time, not a new lambda per call.
    at:
        An operation (the failed evaluation): a name written several times (a long-running
        app that reuses its message names, one conversation after another) gives the version
        written last before ``at`` ran, the message the question was asked about, instead of
        the earliest. Names written once give the same either way.

    Returns
    -------
    list of str
        Matching variable ids, each once, in graph order.

    >>> G = _example_graph()
    >>> evidence_variables(G, ["D1"])
    ['msg:D1@1']
    >>> evidence_variables(G, ["D1"], match=lambda name: [name.upper()])
    []
    """
    index = lookup(G, ("evidence", match), _evidence_index(match))
    found: dict[str, None] = {}
    for evidence_id in evidence_ids:
        if isinstance(evidence_id, str):
            variables = index.get(evidence_id, ())
            if at is not None:
                variables = tuple(_current_at(G, v, at) for v in variables)
            found.update(dict.fromkeys(variables))
    return _in_graph_order(G, found) if len(found) > 1 else list(found)
