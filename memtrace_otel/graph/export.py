"""Write a graph (or a slice of one) as JSON, GraphML or Graphviz DOT.

Names and contents come from spans, so they may hold anything: quotes,
backslashes, newlines, terminal escapes, lone surrogates. Each format escapes
them by its own rules, and what a format cannot carry at all (XML 1.0 forbids
most control characters, even escaped) is written visibly as ``\\xHH`` /
``\\uHHHH``:

* JSON: :func:`json.dumps` (``ensure_ascii``) escapes everything itself.
* GraphML: characters XML 1.0 forbids are written visibly; node ids stay
  distinct (a collision gets a ``#2`` suffix).
* DOT: ids and labels are quoted strings; in a label ``\\`` shows a backslash,
  ``\\n`` breaks the line and ``&amp;`` shows ``&`` (Graphviz reads HTML
  entities in labels); control characters are shown visibly.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterable, Iterator
from operator import countOf
from typing import Any, TextIO

import networkx as nx

from memtrace_otel.graph.node_types import OPERATION
from memtrace_otel.semconv import Category

__all__ = ["FORMATS", "dump_graph", "graph_to_dot", "graph_to_graphml", "graph_to_json", "write_graph"]

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


def _default(value: Any) -> Any:
    # What json's C encoder cannot write itself, as _jsonable writes it.
    return sorted(value) if isinstance(value, set) else str(value)


def _line_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, sort_keys=True, default=_default)``, without building an encoder per call:
    json's C encoder where this Python has it (a third faster on a graph's many small dicts)."""
    try:
        from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]

        # No circular-reference markers: data read from spans cannot hold a cycle (and _jsonable,
        # which wrote graphs before, would not end on one either).
        encode = c_make_encoder(None, _default, encode_basestring_ascii, None, ": ", ", ", True, False, True)
        return lambda value: "".join(encode(value, 0))
    except (ImportError, TypeError):  # no C accelerator, or another signature
        return json.JSONEncoder(sort_keys=True, default=_default).encode


def _orjson_dumps() -> tuple[Callable[..., bytes], int] | None:
    """orjson's ``dumps`` and the options :func:`_json_lines` gives it, or ``None`` without orjson.

    Called with ``_default`` and the options as positional arguments: through a ``partial`` with
    keywords each call costs a fifth more (100k-span graph: 0.41 against 0.33 s for its nodes).
    """
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency
        return None
    options = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
    return orjson.dumps, options


def _json_lines(items: Iterable[dict[str, Any]], encode: Callable[[Any], str], first: bool) -> Iterator[str]:
    """Each item as JSON on a line of its own, ``,`` between them; a few thousand lines a piece.

    orjson writes an item first (several times json's C encoder on a graph's many small dicts);
    its text differs from json's only in spacing. Where orjson would not say what json says,
    :func:`_json_item` writes the item: orjson raises on a lone surrogate, an integer beyond 64
    bits or a key that is not a string (json writes them), its non-ASCII text is UTF-8 where json
    escapes (``isascii``), and it writes NaN and infinities as ``null``, so an item whose ``null``
    count is not its top-level ``None`` values' count goes to json too (no NaN becomes ``null``).
    Datetimes and dataclasses go to ``_default`` (``str``) as they do with json.
    """
    orjson = _orjson_dumps()
    dumps, options = orjson if orjson is not None else (None, 0)
    lines: list[str] = []
    for item in items:
        text = None
        if dumps is not None:
            try:
                data = dumps(item, _default, options)
            except TypeError:  # orjson.JSONEncodeError: json's way writes it, or says why not
                data = b"\x80"
            nulls = data.count(b"null")  # not `in`: bytes.__contains__ tries the bytes as an int first
            if data.isascii() and (not nulls or nulls == countOf(item.values(), None)):
                text = data.decode("ascii")
        lines.append(text if text is not None else _json_item(item, encode))
        if len(lines) == 4096:
            yield ("\n" if first else ",\n") + ",\n".join(lines)
            first, lines = False, []
    if lines:
        yield ("\n" if first else ",\n") + ",\n".join(lines)


def _json_item(value: Any, encode: Callable[[Any], str]) -> str:
    """One value as JSON on one line, by json (the indenting encoder is pure Python, and slow).

    Mixed-type or non-scalar dict keys (which sorting or the encoder refuse) go through
    :func:`_jsonable` first, so every graph writes as before.
    """
    try:
        return encode(value)
    except (TypeError, ValueError):
        return json.dumps(_jsonable(value), sort_keys=True)


def _json_chunks(G: nx.DiGraph) -> Iterator[str]:
    """Node-link JSON in pieces: one line per node and per edge, so no copy of the graph's data
    (``node_link_data``) nor the whole text is ever held: ``memtrace graph`` on a 100k-span file
    would otherwise need three times the memory of the graph itself."""
    encode = _line_encoder()
    yield f'{{"directed": {json.dumps(G.is_directed())},\n"edges": ['
    # The graph's own dicts, walked in the order G.edges and G.nodes give (without their views'
    # generator per item); a multigraph's edges have keys, so it goes through its view.
    edges = (G.edges(data=True) if G.is_multigraph()
             else ((u, v, data) for u, targets in G._adj.items() for v, data in targets.items()))
    yield from _json_lines(({**data, "source": u, "target": v} for u, v, data in edges), encode, True)
    graph = _json_item(G.graph, encode)
    yield f'],\n"graph": {graph},\n"multigraph": {json.dumps(G.is_multigraph())},\n"nodes": ['
    yield from _json_lines(({**data, "id": node} for node, data in G._node.items()), encode, True)
    yield "]}\n"


def graph_to_json(G: nx.DiGraph) -> str:
    """Node-link JSON (``nodes``, ``edges``, ``graph``), networkx's interchange shape
    (``nx.node_link_graph(data, edges="edges")`` reads it back); one node or edge a line."""
    return "".join(_json_chunks(G))


# What XML 1.0 cannot hold, escaped or not; DOT gets the C1 controls and DEL too (a label
# with a terminal escape is no better in an SVG).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_NOT_SHOWN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _xml_text(text: str) -> str:
    """``text`` with the characters XML 1.0 forbids written as ``\\xHH`` / ``\\uHHHH``.

    >>> _xml_text("a\x1b[2Jb")
    'a\\\\x1b[2Jb'
    """
    return _NOT_XML.sub(_visible, text)


def _graphml_value(value: Any) -> Any:
    # GraphML has scalar types only: lists/dicts become JSON strings (ASCII, so XML-safe).
    if isinstance(value, str):
        return _xml_text(value)
    if isinstance(value, (int, float, bool)):
        return value
    return json.dumps(_jsonable(value), sort_keys=True)


def _graphml_ids(G: nx.DiGraph) -> dict[str, str]:
    """An XML-safe id per node, distinct even when two ids differ only in forbidden characters."""
    ids: dict[str, str] = {}
    taken: set[str] = set()
    for node in G:
        safe = base = _xml_text(str(node))
        suffix = 1
        while safe in taken:
            suffix += 1
            safe = f"{base}#{suffix}"
        ids[node] = safe
        taken.add(safe)
    return ids


def _graphml_data(data: dict[str, Any]) -> dict[str, Any]:
    return {_xml_text(str(k)): _graphml_value(v) for k, v in data.items() if v is not None}


def graph_to_graphml(G: nx.DiGraph) -> str:
    """GraphML for Gephi, yEd or Cytoscape: valid XML 1.0 whatever the names hold."""
    ids = _graphml_ids(G)
    H = nx.DiGraph()
    H.add_nodes_from((ids[node], _graphml_data(data)) for node, data in G.nodes(data=True))
    H.add_edges_from((ids[u], ids[v], _graphml_data(data)) for u, v, data in G.edges(data=True))
    buffer = io.BytesIO()
    nx.write_graphml(H, buffer)
    return buffer.getvalue().decode("utf-8")


def _dot_id(text: str) -> str:
    """A quoted DOT id: only ``\\`` and ``\\"`` are escapes there, so the id reads back distinct."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _NOT_SHOWN.sub(_visible, text) + '"'


def _dot_label(lines: list[str]) -> str:
    """A quoted DOT label showing ``lines`` exactly, one per line."""
    def line(text: str) -> str:  # "\x1b" first, then its backslash doubled like any other
        text = _NOT_SHOWN.sub(_visible, text)
        return text.replace("\\", "\\\\").replace("&", "&amp;").replace('"', '\\"')
    return '"' + "\\n".join(line(text) for text in lines) + '"'


def graph_to_dot(G: nx.DiGraph) -> str:
    r"""Graphviz DOT: variables as ellipses, operations as boxes (red when a failed evaluation).

    >>> G = nx.DiGraph()
    >>> G.add_node('say "hi"@1', type="variable", kind="message")
    >>> print(graph_to_dot(G), end="")
    digraph memtrace {
      rankdir=LR;
      "say \"hi\"@1" [shape=ellipse, label="say \"hi\"@1\n(message)"];
    }
    """
    lines = ["digraph memtrace {", "  rankdir=LR;"]
    for node, data in G.nodes(data=True):
        if data.get("type") == OPERATION:
            label = _dot_label([str(data.get("name", node)), f"[{data.get('category', Category.OTHER)}]"])
            color = "red" if data.get("passed") is False else "black"
            lines.append(f"  {_dot_id(node)} [shape=box, color={color}, label={label}];")
        else:
            label = _dot_label([str(node), f"({data.get('kind', '')})"])
            style = ", style=dashed" if data.get("deleted") else ""
            lines.append(f"  {_dot_id(node)} [shape=ellipse{style}, label={label}];")
    for u, v, data in G.edges(data=True):
        style = " [style=dotted]" if data.get("role") == "version" else ""
        lines.append(f"  {_dot_id(u)} -> {_dot_id(v)}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dump_graph(G: nx.DiGraph, fmt: str, handle: TextIO) -> None:
    """Write ``G`` in one of :data:`FORMATS` to ``handle``; JSON goes out a node or an edge at a
    time, so a large graph is never held a second time as text."""
    if fmt == "json":
        for chunk in _json_chunks(G):
            handle.write(chunk)
        return
    handle.write(write_graph(G, fmt))


def write_graph(G: nx.DiGraph, fmt: str) -> str:
    """Serialise ``G`` in one of :data:`FORMATS`."""
    if fmt == "json":
        return graph_to_json(G)
    if fmt == "graphml":
        return graph_to_graphml(G)
    if fmt == "dot":
        return graph_to_dot(G)
    raise ValueError(f"unknown graph format {fmt!r}; choose one of {', '.join(FORMATS)}")
