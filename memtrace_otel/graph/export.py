"""Write a graph (or a slice of one) as JSON, GraphML or Graphviz DOT."""

from __future__ import annotations

import io
import json
from typing import Any

import networkx as nx

__all__ = ["FORMATS", "graph_to_dot", "graph_to_graphml", "graph_to_json", "write_graph"]

FORMATS = ("json", "graphml", "dot")


def _jsonable(value: Any) -> Any:
    if isinstance(value, set):
        return sorted(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def graph_to_json(G: nx.DiGraph) -> str:
    """Node-link JSON (``nodes``, ``edges``, ``graph``), networkx's interchange shape."""
    data = nx.node_link_data(G, edges="edges")
    return json.dumps(_jsonable(data), indent=1, sort_keys=True)


def _graphml_value(value: Any) -> Any:
    # GraphML has scalar types only: lists/dicts become JSON strings, None is left out.
    if isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(_jsonable(value), sort_keys=True)


def graph_to_graphml(G: nx.DiGraph) -> str:
    """GraphML for Gephi, yEd or Cytoscape."""
    H = nx.DiGraph()
    for node, data in G.nodes(data=True):
        H.add_node(node, **{k: _graphml_value(v) for k, v in data.items() if v is not None})
    for u, v, data in G.edges(data=True):
        H.add_edge(u, v, **{k: _graphml_value(x) for k, x in data.items() if x is not None})
    buffer = io.BytesIO()
    nx.write_graphml(H, buffer)
    return buffer.getvalue().decode("utf-8")


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def graph_to_dot(G: nx.DiGraph) -> str:
    """Graphviz DOT: variables as ellipses, operations as boxes (red when a failed evaluation)."""
    lines = ["digraph memtrace {", "  rankdir=LR;"]
    for node, data in G.nodes(data=True):
        if data.get("type") == "operation":
            label = f"{data.get('name', node)}\\n[{data.get('category', '')}]"
            color = "red" if data.get("passed") is False else "black"
            lines.append(f"  {_dot_quote(node)} [shape=box, color={color}, label={_dot_quote(label)}];")
        else:
            label = f"{node}\\n({data.get('kind', '')})"
            style = ", style=dashed" if data.get("deleted") else ""
            lines.append(f"  {_dot_quote(node)} [shape=ellipse{style}, label={_dot_quote(label)}];")
    for u, v, data in G.edges(data=True):
        style = " [style=dotted]" if data.get("role") == "version" else ""
        lines.append(f"  {_dot_quote(u)} -> {_dot_quote(v)}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_graph(G: nx.DiGraph, fmt: str) -> str:
    """Serialise ``G`` in one of :data:`FORMATS`."""
    if fmt == "json":
        return graph_to_json(G)
    if fmt == "graphml":
        return graph_to_graphml(G)
    if fmt == "dot":
        return graph_to_dot(G)
    raise ValueError(f"unknown graph format {fmt!r}; choose one of {', '.join(FORMATS)}")
