"""Memory spans of other instrumentations become graph lineage through their record ids
(``memtrace_otel.graph.foreign``): GenAI memory-client spans and loongsuite-instrumentation-mem0's
spans (attributes as loongsuite 0.9.0 writes them, copied from a real run in tests/mem0_peers)."""

from __future__ import annotations

import random

from memtrace_otel.graph import build_graph
from memtrace_otel.spans.model import SpanRecord

from graph_compare import assert_same_graph

T1, T2, T3 = "1" * 32, "2" * 32, "3" * 32


def _span(trace: str, span: str, name: str, start: int, parent: str | None = None,
          **attributes: object) -> SpanRecord:
    return SpanRecord(trace, span * 16, name, parent_span_id=parent, start_time_unix_nano=start,
                      end_time_unix_nano=start + 1, attributes=dict(attributes))


def genai_run() -> list[SpanRecord]:
    """Create two records, update one, delete the other, search, answer from the search, judge."""
    return [
        _span(T1, "a", "create_memory", 10, **{"gen_ai.operation.name": "create_memory",
                                                "gen_ai.memory.record.id": "r1"}),
        _span(T1, "b", "upsert_memory", 20, **{
            "gen_ai.operation.name": "upsert_memory",
            "gen_ai.memory.records": '[{"id": "r2", "content": "Has a dog called Pepper"}]'}),
        _span(T2, "c", "update_memory", 30, **{"gen_ai.operation.name": "update_memory",
                                                "gen_ai.memory.record.id": "r1"}),
        _span(T2, "d", "delete_memory", 40, **{"gen_ai.operation.name": "delete_memory",
                                                "gen_ai.memory.record.id": "r2"}),
        _span(T3, "e", "search_memory", 50, **{
            "gen_ai.operation.name": "search_memory",
            "gen_ai.memory.records": '[{"id": "r1", "content": "Moved to Porto", "score": 0.8}]'}),
        _span(T3, "f", "answer", 60, **{"memtrace.operation.category": "generation",
                                         "memtrace.operation.name": "app.answer",
                                         "memtrace.outputs": ["answer:q1@1"],
                                         "memtrace.variables": ["answer 5 0000000000000000 answer:q1@1"]}),
    ]


def test_record_ids_make_versions_tombstones_and_reads() -> None:
    G = build_graph(genai_run())
    assert G.graph["problems"] == []
    update, search, answer = f"op:{T2}:{'c' * 16}", f"op:{T3}:{'e' * 16}", f"op:{T3}:{'f' * 16}"
    assert list(G.predecessors(update)) == ["record:r1@1"] and list(G.successors(update)) == ["record:r1@2"]
    assert G.nodes["record:r2@2"]["deleted"] is True
    assert G.nodes["record:r2@1"]["content"] == "Has a dog called Pepper"
    # The search read the updated version; its context goes to the answer in its trace.
    assert list(G.predecessors(search)) == ["record:r1@2"]
    context = f"context:foreign-{'e' * 16}@1"
    assert G.nodes[context]["content"] == "Moved to Porto"
    assert context in G.predecessors(answer)
    assert G.has_edge("record:r1@1", "record:r1@2")  # the version edge
    categories = {G.nodes[f"op:{t}:{s * 16}"]["category"] for t, s in ((T1, "a"), (T1, "b"))}
    assert categories == {"extraction"}  # creates of new records
    assert G.nodes[update]["category"] == "update" and G.nodes[search]["category"] == "retrieval"


def test_the_order_spans_arrive_in_changes_nothing() -> None:
    spans = genai_run()
    shuffled = spans[:]
    random.Random(7).shuffle(shuffled)
    assert_same_graph(build_graph(spans), build_graph(shuffled))


def test_a_search_without_records_reads_nothing_and_bad_records_are_one_problem() -> None:
    spans = [_span(T1, "a", "search_memory", 1, **{"gen_ai.operation.name": "search_memory",
                                                   "gen_ai.memory.record.count": 3}),
             _span(T1, "b", "search_memory", 2, **{"gen_ai.operation.name": "search_memory",
                                                   "gen_ai.memory.records": "{not json"})]
    G = build_graph(spans)
    assert [list(G.predecessors(f"op:{T1}:{s * 16}")) for s in "ab"] == [[], []]
    (problem,) = G.graph["problems"]
    assert "gen_ai.memory.records" in str(problem) and "ignored" in str(problem)


def loongsuite_run() -> list[SpanRecord]:
    """loongsuite-instrumentation-mem0 0.9.0's spans of add, update, search (content capture on)."""
    loong = {"gen_ai.span.kind": "MEMORY", "gen_ai.operation.name": "memory_operation"}
    return [
        _span(T1, "a", "memory_operation add", 10, **loong, **{
            "gen_ai.memory.operation": "add", "gen_ai.memory.input.messages": "I moved to Lisbon.",
            "gen_ai.memory.output.messages": "{'results': [{'id': 'f691', 'memory': 'Moved to Lisbon', "
                                             "'event': 'ADD'}]}", "gen_ai.memory.result_count": 1}),
        _span(T2, "b", "memory_operation update", 20, **loong, **{
            "gen_ai.memory.operation": "update", "gen_ai.memory.id": "f691",
            "gen_ai.memory.input.messages": "Moved to Porto"}),
        _span(T3, "c", "memory_operation search", 30, **loong, **{
            "gen_ai.memory.operation": "search", "gen_ai.memory.input.messages": "Where did the user move?",
            "gen_ai.memory.output.messages": "{'results': [{'id': 'f691', 'memory': 'Moved to Porto', "
                                             "'score': 0.23, 'metadata': {'k': None}}]}"}),
    ]


def test_loongsuite_spans_are_read_by_their_record_ids() -> None:
    G = build_graph(loongsuite_run())
    assert G.graph["problems"] == []
    add, update, search = (f"op:{t}:{s * 16}" for t, s in ((T1, "a"), (T2, "b"), (T3, "c")))
    assert list(G.successors(add)) == ["record:f691@1"] and G.nodes[add]["category"] == "extraction"
    assert G.nodes["record:f691@2"]["content"] == "Moved to Porto" and G.nodes[update]["category"] == "update"
    assert list(G.predecessors(search)) == ["record:f691@2"]


def test_a_foreign_span_around_our_own_operation_is_left_out() -> None:
    """Both instrumentations on one program: theirs wraps ours; the call is read once, from ours."""
    theirs = loongsuite_run()[2]
    ours = _span(T3, "d", "search_memory", 31, parent=theirs.span_id, **{
        "gen_ai.operation.name": "search_memory", "memtrace.operation.category": "retrieval",
        "memtrace.operation.name": "mem0.search", "memtrace.inputs": ["mem0:f691@2"]})
    G = build_graph([theirs, ours])
    assert f"op:{T3}:{'c' * 16}" not in G and f"op:{T3}:{'d' * 16}" in G
    assert not any(str(node).startswith("record:") for node in G)


def test_our_own_spans_are_never_foreign() -> None:
    """A span with memtrace.operation.category is read as before, whatever its GenAI keys."""
    span = _span(T1, "a", "create_memory", 1, **{
        "gen_ai.operation.name": "create_memory", "gen_ai.memory.record.id": "r1",
        "memtrace.operation.category": "extraction", "memtrace.outputs": ["mem:1@1"]})
    G = build_graph([span])
    assert list(G.successors(f"op:{T1}:{'a' * 16}")) == ["mem:1@1"]
