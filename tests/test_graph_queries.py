"""Graph queries: evidence lookup rules, missing lineage, trace subgraphs, and lookups built once per
graph (issue 7.5, 7.6, 8.6, 8.7)."""

from __future__ import annotations

import networkx as nx
import pytest

import memtrace_otel.graph as graph_api
from memtrace_otel.graph import (
    NodeNotFound,
    backward_slice,
    build_graph,
    clear_index,
    evaluations,
    evidence_keys,
    evidence_variables,
    failed_evaluations,
    memory_life,
    missing_lineage,
    operations,
    trace_subgraph,
)
from memtrace_otel.semconv import Category
from memtrace_otel.spans.model import SpanLink, SpanRecord

_CATEGORY, _INPUTS, _OUTPUTS = "memtrace.operation.category", "memtrace.inputs", "memtrace.outputs"
INGEST, ASK = "a" * 32, "b" * 32
ABSENT = "c" * 32


def _span(trace: str, span: str, start: int, category: str, inputs: list[str], outputs: list[str],
          **more: object) -> SpanRecord:
    links = more.pop("links", [])
    return SpanRecord(trace, span * 16, span, start_time_unix_nano=start, links=links, source=f"f:{start}",
                      attributes={_CATEGORY: category, _INPUTS: inputs, _OUTPUTS: outputs, **more})


def _pipeline() -> nx.DiGraph:
    """Ingestion in one trace; a question in another whose update links to a trace never read."""
    return build_graph([
        _span(INGEST, "1", 1, "extraction", ["msg:D1:1@1", "msg:D1:2@1"], ["mem:a@1"]),
        _span(INGEST, "2", 2, "extraction", ["msg:D1:3@1"], ["mem:b@1"]),
        _span(INGEST, "3", 3, "update", ["mem:a@1"], ["mem:a@2"],
              links=[SpanLink(ABSENT, "9" * 16, {}), SpanLink(INGEST, "1" * 16, {})]),
        _span(ASK, "4", 4, "retrieval", ["mem:a@2", "q@1"], ["ctx@1"]),
        _span(ASK, "5", 5, "generation", ["ctx@1"], ["answer@1"]),
        _span(ASK, "6", 6, "evaluation", ["answer@1"], [], **{"memtrace.evaluation.passed": False}),
        _span(ASK, "7", 7, "retrieval", ["mem:b@1"], ["ctx:b@1"]),
        _span(ASK, "8", 8, "evaluation", ["ctx:b@1"], [], **{"memtrace.evaluation.passed": True}),
    ])


def _op(trace: str, span: str) -> str:
    return f"op:{trace}:{span * 16}"


def test_evidence_default_rule_matches_names_and_namespaced_names() -> None:
    G = _pipeline()
    assert evidence_variables(G, ["D1:3", "D1:1"]) == ["msg:D1:1@1", "msg:D1:3@1"]  # graph order
    assert evidence_variables(G, ["msg:D1:2"]) == ["msg:D1:2@1"]
    assert evidence_variables(G, ["zzz", "", 5, "D9:9"]) == [], "only version-1 names that match"
    assert evidence_keys("msg:D1:3") == ("msg:D1:3", "D1:3")


def test_evidence_rule_can_be_replaced() -> None:
    G = _pipeline()

    def turn_number(name: str) -> list[str]:  # a scheme where evidence ids are bare turn numbers
        return [name.rpartition(":")[2]]

    assert evidence_variables(G, ["2"], match=turn_number) == ["msg:D1:2@1"]
    assert evidence_variables(G, ["D1:2"], match=turn_number) == []


def test_lookups_are_built_once_per_graph_and_follow_structural_changes() -> None:
    G = _pipeline()
    calls = []

    def rule(name: str) -> tuple[str, ...]:
        calls.append(name)
        return evidence_keys(name)

    for _ in range(50):
        assert evidence_variables(G, ["D1:1"], match=rule) == ["msg:D1:1@1"]
    assert len(calls) == sum(1 for _, d in G.nodes(data=True) if d.get("version") == 1), "one pass"
    G.add_node("msg:D1:1b@1", type="variable", name="msg:D1:1", version=1)  # networkx clears its cache
    assert evidence_variables(G, ["D1:1"], match=rule) == ["msg:D1:1@1", "msg:D1:1b@1"]

    (failed,) = failed_evaluations(G)
    G.nodes[failed]["passed"] = True  # changed in place: the index cannot see it ...
    clear_index(G)  # ... until told
    assert failed_evaluations(G) == [] and len(evaluations(G)) == 2
    operations(G).clear()  # callers get copies
    assert len(operations(G)) == 8


def test_views_are_answered_afresh() -> None:
    G = _pipeline()
    view = G.subgraph([_op(ASK, "6"), _op(ASK, "8"), "answer@1"])
    assert failed_evaluations(view) == [_op(ASK, "6")]
    assert operations(G, category=Category.EVALUATION) == [_op(ASK, "6"), _op(ASK, "8")]


def test_missing_links_and_missing_lineage() -> None:
    G = _pipeline()
    assert G.graph["missing_traces"] == {ABSENT}
    assert G.nodes[_op(INGEST, "3")]["missing_links"] == [ABSENT]
    assert "missing_links" not in G.nodes[_op(INGEST, "1")], "only when some link is unresolved"
    assert missing_lineage(G, _op(ASK, "6")) == {ABSENT}, "the failure read memory the update wrote"
    assert missing_lineage(G, _op(ASK, "8")) == set(), "this one's lineage is whole"
    with pytest.raises(NodeNotFound):
        missing_lineage(G, "nope@1")


def test_trace_subgraph_is_library_api() -> None:
    G = _pipeline()
    sub = trace_subgraph(G, ASK)
    assert {n for n, d in sub.nodes(data=True) if d["type"] == "operation"} == {
        _op(ASK, s) for s in "45678"}
    assert {"mem:a@2", "mem:b@1", "answer@1"} <= set(sub) and "msg:D1:1@1" not in sub
    assert list(sub) == [n for n in G if n in sub], "in the graph's order"
    assert trace_subgraph(G, "f" * 32).number_of_nodes() == 0
    assert "trace_subgraph" in graph_api.__all__ and "missing_lineage" in graph_api.__all__


def test_slices_keep_the_graph_order_and_memory_life_the_versions() -> None:
    G = _pipeline()
    keep = backward_slice(G, "answer@1")
    assert list(keep) == [n for n in G if n in keep]
    assert [v["id"] for v in memory_life(G, "mem:a")] == ["mem:a@1", "mem:a@2"]
    assert memory_life(G, "mem:a")[1]["read_by"] == [_op(ASK, "4")]
