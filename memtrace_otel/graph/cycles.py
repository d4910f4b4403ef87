"""Lineage cycle repair: the evolution graph is a DAG, whatever the spans claimed.

A cycle means some span lied about versions (two writers of one version, a read
of a version written later). Attribution needs a DAG, so each cycle loses one
edge, reported as a problem, and the rest of the graph stays usable.

The repair depends on the graph's content only, never on the order the spans
were read in or on ``PYTHONHASHSEED``: cycles are searched over nodes and edges
in sorted order (no set is iterated for a decision), and of each cycle found the
edge dropped is the greatest by this key:

1. the edge of the operation that ran last (its ``order``): a span that lies
   about versions usually lies about what came before it;
2. an operation's output before its input: the write claim is what contradicts
   the read that happened earlier;
3. an inferred ``version`` edge never, while the cycle has an edge a span
   recorded (a cycle of version edges alone cannot exist: versions increase);
4. the node ids, the final tie-break.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from memtrace_otel.graph.node_types import OPERATION
from memtrace_otel.spans.model import Problem

__all__ = ["MAX_CYCLE_REPAIRS", "break_cycles", "is_dag"]

MAX_CYCLE_REPAIRS = 1000
"""Cycles cut at most per graph: past that the input is more lie than lineage."""


def is_dag(succ: dict[str, dict[str, Any]], pred: dict[str, dict[str, Any]]) -> bool:
    """Kahn's algorithm over adjacency dicts: True when every node can be ordered.

    >>> is_dag({"a": {"b": {}}, "b": {}}, {"a": {}, "b": {"a": {}}})
    True
    >>> is_dag({"a": {"b": {}}, "b": {"a": {}}}, {"a": {"b": {}}, "b": {"a": {}}})
    False
    """
    indegree = dict(zip(pred, map(len, pred.values()), strict=True))
    ordered = [node for node, degree in indegree.items() if not degree]
    for node in ordered:  # grows while it is walked: each node freed by its last parent
        for child in succ[node]:
            left = indegree[child] - 1
            indegree[child] = left
            if not left:
                ordered.append(child)
    return len(ordered) == len(indegree)


def _on_cycles(G: nx.DiGraph, among: set[str] | None = None) -> set[str]:
    """Nodes of ``G`` (or of its subgraph on ``among``) that lie on some cycle."""
    H = G if among is None else _sorted_subgraph(G, among)
    return {node for component in nx.strongly_connected_components(H) if len(component) > 1
            for node in component}


def _sorted_subgraph(G: nx.DiGraph, nodes: set[str]) -> nx.DiGraph:
    """A plain copy of ``G`` on ``nodes`` whose nodes and adjacency iterate in sorted order."""
    H = nx.DiGraph()
    ordered = sorted(nodes)
    H.add_nodes_from(ordered)
    H.add_edges_from((u, v) for u in ordered for v in sorted(G._succ[u]) if v in nodes)
    return H


def _drop_key(G: nx.DiGraph, edge: tuple[str, str]) -> tuple[int, int, str, str]:
    source, target = edge
    nodes = G.nodes
    if nodes[source].get("type") == OPERATION:
        return 1 + nodes[source].get("order", 0), 1, source, target
    if nodes[target].get("type") == OPERATION:
        return 1 + nodes[target].get("order", 0), 0, source, target
    return 0, 0, source, target  # variable -> variable: a version edge


def _where(G: nx.DiGraph, source: str, target: str) -> str:
    """The ``file:line`` of the span behind the dropped edge (a version edge: the later writer)."""
    for node in (source, target):
        if G.nodes[node].get("type") == OPERATION:
            return str(G.nodes[node].get("source") or "?")
    writers = sorted(p for p in G._pred[target] if G.nodes[p].get("type") == OPERATION)
    return str(G.nodes[writers[0]].get("source") or "?") if writers else "?"


def break_cycles(G: nx.DiGraph, problems: list[Problem], *, limit: int = MAX_CYCLE_REPAIRS) -> None:
    """Cut one edge of each lineage cycle of ``G`` in place; one problem per cut.

    Parameters
    ----------
    G:
        An evolution graph (modified in place).
    problems:
        Where each cut is reported.
    limit:
        Cycles cut at most; what is left past it is reported once.

    Examples
    --------
    >>> G = nx.DiGraph()
    >>> G.add_node("op:1", type="operation", order=0)
    >>> G.add_node("op:2", type="operation", order=1)
    >>> G.add_edges_from([("x@1", "op:1"), ("op:1", "y@1"), ("y@1", "op:2"), ("op:2", "x@1")])
    >>> problems = []
    >>> break_cycles(G, problems)
    >>> sorted(G.edges)
    [('op:1', 'y@1'), ('x@1', 'op:1'), ('y@1', 'op:2')]
    >>> problems[0].message
    'lineage cycle op:1 -> y@1 -> op:2 -> x@1; edge op:2 -> x@1 dropped'
    """
    if is_dag(G._succ, G._pred):  # the common case: one linear pass
        return
    remaining = _on_cycles(G)
    for _ in range(limit):
        if not remaining:
            return
        cycle = nx.find_cycle(_sorted_subgraph(G, remaining))
        source, target = max(((u, v) for u, v, *_ in cycle), key=lambda edge: _drop_key(G, edge))
        problems.append(Problem(_where(G, source, target),
                                f"lineage cycle {' -> '.join(e[0] for e in cycle)}; "
                                f"edge {source} -> {target} dropped"))
        G.remove_edge(source, target)
        remaining = _on_cycles(G, remaining)
    if remaining:
        dropped = _drop_back_edges(G, remaining)
        problems.append(Problem("?", f"more than {limit} lineage cycles; {len(dropped)} more edges "
                                     f"dropped among {len(remaining)} nodes, first {dropped[0][0]} -> "
                                     f"{dropped[0][1]}"))


def _drop_back_edges(G: nx.DiGraph, nodes: set[str]) -> list[tuple[str, str]]:
    """Remove every back edge of a depth-first search over ``nodes`` in sorted order: a DAG is left."""
    H = _sorted_subgraph(G, nodes)
    back: list[tuple[str, str]] = []
    done: set[str] = set()
    for root in H:
        if root in done:
            continue
        on_stack, stack = {root}, [(root, iter(H._succ[root]))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_stack.discard(node)
                done.add(node)
            elif child in on_stack:
                back.append((node, child))
            elif child not in done:
                on_stack.add(child)
                stack.append((child, iter(H._succ[child])))
    G.remove_edges_from(back)
    return back
