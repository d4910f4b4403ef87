"""Queries over the memory evolution graph: plain functions, ``f(G, node, *, option=...)``.

Every example runs on :func:`_example_graph`: a message is extracted into a
memory unit, the unit is updated, retrieved, and an answer is generated and
judged (a failure).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import networkx as nx

from memtrace_otel.graph.errors import MemTraceGraphError, NodeNotFound

__all__ = [
    "answer_of",
    "backward_slice",
    "evaluations",
    "evidence_variables",
    "failed_evaluations",
    "lineage_path",
    "memory_life",
    "operations",
    "operations_between",
    "producer_of",
]


def _example_graph() -> nx.DiGraph:
    G = nx.DiGraph()
    for v in ["msg:D1@1", "mem:a@1", "mem:a@2", "ctx@1", "answer@1"]:
        name, version = v.split("@")
        G.add_node(v, type="variable", name=name, version=int(version), kind="other")
    steps = [("op:e", "extraction"), ("op:u", "update"), ("op:r", "retrieval"),
             ("op:g", "generation"), ("op:j", "evaluation")]
    for order, (op, category) in enumerate(steps):
        G.add_node(op, type="operation", category=category, order=order, name=op)
    G.add_edges_from([("msg:D1@1", "op:e"), ("op:e", "mem:a@1"), ("mem:a@1", "op:u"),
                      ("op:u", "mem:a@2"), ("mem:a@2", "op:r"), ("op:r", "ctx@1"),
                      ("ctx@1", "op:g"), ("op:g", "answer@1"), ("answer@1", "op:j")])
    G.nodes["op:j"].update(passed=False, answer="answer@1")
    return G


def _require(G: nx.DiGraph, node: str) -> None:
    if node not in G:
        raise NodeNotFound(f"{node!r} is not in the graph")


def operations(G: nx.DiGraph, *, category: str | None = None) -> list[str]:
    """Operation nodes in execution order, optionally of one category.

    >>> G = _example_graph()
    >>> operations(G, category="update")
    ['op:u']
    """
    ops = [n for n, d in G.nodes(data=True) if d.get("type") == "operation"
           and (category is None or d.get("category") == category)]
    return sorted(ops, key=lambda n: G.nodes[n].get("order", 0))


def evaluations(G: nx.DiGraph) -> list[str]:
    """Evaluation operations that carry a verdict, in execution order."""
    return [n for n in operations(G, category="evaluation") if "passed" in G.nodes[n]]


def failed_evaluations(G: nx.DiGraph) -> list[str]:
    """Evaluation operations whose verdict is a failure.

    >>> G = _example_graph()
    >>> failed_evaluations(G)
    ['op:j']
    """
    return [n for n in evaluations(G) if not G.nodes[n]["passed"]]


def producer_of(G: nx.DiGraph, variable: str) -> str | None:
    """The operation that wrote ``variable``, if it is in the graph.

    >>> G = _example_graph()
    >>> producer_of(G, "mem:a@2")
    'op:u'
    """
    _require(G, variable)
    for pred in G.predecessors(variable):
        if G.nodes[pred].get("type") == "operation":
            return pred
    return None


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
        if G.nodes[pred].get("kind") == "answer":
            return pred
    return None


def backward_slice(G: nx.DiGraph, node: str) -> nx.DiGraph:
    """Subgraph of everything ``node`` depends on, ``node`` included.

    >>> G = _example_graph()
    >>> sorted(backward_slice(G, "ctx@1"))[:3]
    ['ctx@1', 'mem:a@1', 'mem:a@2']
    """
    _require(G, node)
    keep = nx.ancestors(G, node)
    keep.add(node)
    return G.subgraph(keep).copy()


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
    versions = sorted(
        (d["version"], n) for n, d in G.nodes(data=True)
        if d.get("type") == "variable" and d.get("name") == name
    )
    if not versions:
        raise NodeNotFound(f"no variable named {name!r} in the graph")
    life = []
    for _, node in versions:
        readers = [s for s in G.successors(node) if G.nodes[s].get("type") == "operation"]
        life.append({
            "id": node,
            "deleted": G.nodes[node].get("deleted", False),
            "written_by": producer_of(G, node),
            "read_by": sorted(readers, key=lambda n: G.nodes[n].get("order", 0)),
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
    return sorted((n for n in between if G.nodes[n].get("type") == "operation"),
                  key=lambda n: G.nodes[n].get("order", 0))


def evidence_variables(G: nx.DiGraph, evidence_ids: Iterable[str]) -> Iterator[str]:
    """Message variables that hold the given evidence ids (e.g. LoCoMo ``D1:3``).

    A message variable matches when its name is the id, or the id follows the
    name's first ``:`` (``msg:D1:3``). The earliest version is yielded.

    >>> G = _example_graph()
    >>> list(evidence_variables(G, ["D1"]))
    ['msg:D1@1']
    """
    wanted = set(evidence_ids)
    if not wanted:
        return
    for node, data in G.nodes(data=True):
        if data.get("type") != "variable" or data.get("version") != 1:
            continue
        name = data.get("name", "")
        if name in wanted or name.partition(":")[2] in wanted:
            yield node
