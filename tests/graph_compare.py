"""Compare two evolution graphs on what lineage means, ignoring where spans were read from."""

from __future__ import annotations

from typing import Any

import networkx as nx

_IGNORED = {"source"}


def _norm(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, float):
        return round(value, 9)
    return value


def graph_signature(G: nx.DiGraph) -> tuple[dict[str, dict[str, Any]], set[tuple[str, str, str]]]:
    nodes = {n: {k: _norm(v) for k, v in d.items() if k not in _IGNORED} for n, d in G.nodes(data=True)}
    edges = {(u, v, d.get("role", "")) for u, v, d in G.edges(data=True)}
    return nodes, edges


def assert_same_graph(left: nx.DiGraph, right: nx.DiGraph) -> None:
    left_nodes, left_edges = graph_signature(left)
    right_nodes, right_edges = graph_signature(right)
    assert set(left_nodes) == set(right_nodes), set(left_nodes) ^ set(right_nodes)
    for node, data in left_nodes.items():
        assert data == right_nodes[node], (node, data, right_nodes[node])
    assert left_edges == right_edges, left_edges ^ right_edges
