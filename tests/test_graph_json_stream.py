"""``memtrace graph``'s JSON written a node or an edge at a time (issue 28, item 3): the same data as
networkx's node-link shape, whatever the graph's values hold, without holding the text twice."""

from __future__ import annotations

import datetime
import io
import json
import math

import networkx as nx

from memtrace_otel.graph.export import _jsonable, dump_graph, graph_to_json, write_graph


def _reference(G: nx.DiGraph) -> object:
    """What the writer produced before it streamed: node_link_data through _jsonable."""
    return json.loads(json.dumps(_jsonable(nx.node_link_data(G, edges="edges")), sort_keys=True))


class _Opaque:
    def __str__(self) -> str:
        return "opaque value"


def _graph() -> nx.DiGraph:
    G = nx.DiGraph()
    G.graph["input_traces"] = {"b" * 32, "a" * 32}
    G.graph["problems"] = [_Opaque()]
    G.add_node("msg:D1:1@1", type="variable", kind="message", content='say "hi"\n\x1b[2J\ud800',
               readers={"op:2", "op:1"}, version=1, score=math.nan)
    G.add_node("op:1", type="operation", name="extract", passed=None, inputs=("msg:D1:1@1",),
               nested={"k": [1, 2.5, True, None], "z": {"y", "x"}})
    G.add_node("op:2", type="operation", name="judge", odd={1: "one", 2: "two"},
               mixed={1: "int key", "a": "str key"})  # json's sort refuses mixed key types
    G.add_node(("tuple", "node"), type="variable")
    G.add_edge("msg:D1:1@1", "op:1", role="input", variable="msg:D1:1")
    G.add_edge("op:1", "op:2", role="version", order=[3, 1, 2], when=_Opaque())
    G.add_edge("op:2", ("tuple", "node"))
    return G


def test_streamed_json_holds_what_node_link_data_held() -> None:
    G = _graph()
    text = graph_to_json(G)
    assert json.loads(text) == _reference(G)
    assert json.loads(text)["graph"]["input_traces"] == ["a" * 32, "b" * 32]  # sets sorted
    assert text.isascii()  # escapes, so any stream can carry it
    back = nx.node_link_graph(json.loads(text), edges="edges")
    assert (back.number_of_nodes(), back.number_of_edges()) == (G.number_of_nodes(), G.number_of_edges())
    assert back.nodes["op:2"]["mixed"] == {"1": "int key", "a": "str key"}
    assert back.edges["op:1", "op:2"]["when"] == "opaque value"


def test_one_node_or_edge_a_line_and_the_same_text_streamed() -> None:
    G = _graph()
    text = graph_to_json(G)
    lines = text.splitlines()
    # the head, the graph's line, the multigraph flag and the nodes' opening, then one per item
    assert len(lines) == 5 + G.number_of_nodes() + G.number_of_edges()
    handle = io.StringIO()
    dump_graph(G, "json", handle)
    assert handle.getvalue() == text == write_graph(G, "json")
    G.remove_node(("tuple", "node"))  # those two formats name nodes by strings
    for fmt in ("graphml", "dot"):
        handle = io.StringIO()
        dump_graph(G, fmt, handle)
        assert handle.getvalue() == write_graph(G, fmt)


def test_empty_and_deterministic() -> None:
    assert json.loads(graph_to_json(nx.DiGraph())) == _reference(nx.DiGraph())
    first, second = _graph(), _graph()
    assert graph_to_json(first) == graph_to_json(second)


def test_what_orjson_would_write_otherwise_goes_through_json() -> None:
    """orjson writes most items; those it would write differently (NaN as null, UTF-8, huge ints,
    datetimes, non-string keys) are written by json, so the text says what json's said."""
    G = nx.DiGraph()
    G.add_node("plain", type="variable", content="null", passed=None, size=4)  # "null" text, one None
    G.add_node("nested-nan", type="operation", scores=[1.0, math.nan], inf=math.inf)
    G.add_node("nested-none", type="operation", steps=[None, "a"], outcome=None)
    G.add_node("unicode", type="variable", content="café ☕")
    G.add_node("huge", type="variable", size=1 << 70)
    G.add_node("when", type="variable", at=datetime.datetime(2026, 11, 26, 12, 0))
    G.add_node("int-keys", type="operation", odd={2: "two", 1: "one"})
    G.add_edge("plain", "nested-nan", role="input", weight=math.nan)
    text = graph_to_json(G)
    assert text.isascii()
    back = json.loads(text)
    assert back == _reference(G)
    nodes = {n["id"]: n for n in back["nodes"]}
    assert math.isnan(nodes["nested-nan"]["scores"][1]) and nodes["nested-nan"]["inf"] == math.inf
    assert nodes["unicode"]["content"] == "café ☕" and nodes["huge"]["size"] == 1 << 70
    assert nodes["when"]["at"] == "2026-11-26 12:00:00"  # str(), as json's default wrote it
    assert nodes["plain"]["content"] == "null" and nodes["plain"]["passed"] is None
    assert math.isnan(back["edges"][0]["weight"])
