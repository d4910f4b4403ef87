"""Graph test helpers: compare two evolution graphs on what lineage means (ignoring where spans
were read from), and write span lines whose every value type a test controls."""

from __future__ import annotations

import json
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


def any_value(value: object) -> dict[str, object]:
    """OTLP/JSON AnyValue of ``value``, written here so a test controls every type exactly."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    assert isinstance(value, dict)
    return {"kvlistValue": {"values": [{"key": k, "value": any_value(v)} for k, v in value.items()]}}


def _attributes(attributes: dict[str, object]) -> list[dict[str, object]]:
    return [{"key": k, "value": any_value(v)} for k, v in attributes.items()]


def otlp_line(span_id: str, attributes: dict[str, object], *, start: int, trace_id: str = "ab" * 16,
              events: list[dict[str, Any]] = (), links: list[tuple[str, str]] = ()) -> str:
    """One OTLP/JSON Lines line holding one span; ``events`` are ``{"name", "attributes"}``."""
    span = {"traceId": trace_id, "spanId": span_id, "name": "op", "kind": 1,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 1),
            "attributes": _attributes(attributes),
            "events": [{"name": e["name"], "timeUnixNano": str(start),
                        "attributes": _attributes(e["attributes"])} for e in events],
            "links": [{"traceId": t, "spanId": s, "attributes": []} for t, s in links]}
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"scope": {"name": "t"}, "spans": [span]}]}]})
