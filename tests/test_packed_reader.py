"""The graph builder's reading of a packed mem0 ``add`` (``memtrace.mem0.add``, ``graph/packed.py``) where the
input is odd: cut in parts by an attribute length limit, read in another order than it was written,
malformed. (What it derives from real adds is compared with the stage events on the real mem0 by
``tests/mem0/test_mem0_packed.py``.)"""

from __future__ import annotations

import json
from typing import Any

from memtrace_otel.graph import build_graph
from memtrace_otel.graph.packed import unpacked
from memtrace_otel.semconv import MemTrace, MemTraceLink
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.packed_add import writer_links

_KEY = MemTrace.MEM0_ADD


def _add(span_id: str, start: int, message: str, record: str) -> SpanRecord:
    """An ``add`` of one message: an extraction of one fact, and the record it wrote."""
    facts = [1, ["model", "openai", None, None], [[message, 12]], [
        ["llm", ["mem0.add.extract", "extraction", "mem0.facts", False], start + 1, start + 2, 400, 30, 1, 9,
         None],
        ["write", start + 3, start + 4, None, [[record, 9, "0123456789abcdef"]], 1, None]]]
    return SpanRecord(f"{span_id * 2:0>32}", f"{span_id:0>16}", "upsert_memory", start_time_unix_nano=start,
                      end_time_unix_nano=start + 5, attributes={
                          MemTrace.OPERATION_NAME: "mem0.add", MemTrace.OPERATION_CATEGORY: "ingest",
                          "gen_ai.operation.name": "upsert_memory", _KEY: json.dumps(facts)})


def _nodes(G: Any) -> dict[str, Any]:
    return {n: {k: v for k, v in d.items() if k != "source"} for n, d in G.nodes(data=True)}


def test_parts_are_joined_as_written() -> None:
    whole = _add("a1", 100, "msg:D1:1", "r1")
    text = whole.attributes[_KEY]
    cut = SpanRecord(whole.trace_id, whole.span_id, whole.name, start_time_unix_nano=100,
                     end_time_unix_nano=105, attributes={
                         **{k: v for k, v in whole.attributes.items() if k != _KEY},
                         _KEY: text[:50], f"{_KEY}.1": text[50:90], f"{_KEY}.2": text[90:]})
    G, H = build_graph([whole]), build_graph([cut])
    assert _nodes(G) == _nodes(H) and set(G.edges) == set(H.edges)
    assert not H.graph["problems"]
    assert {d["name"] for _, d in H.nodes(data=True) if d.get("stage_of")} == {"mem0.add.extract",
                                                                               "mem0.create"}


def test_a_message_added_twice_is_versioned_by_start_time_whatever_the_reading_order() -> None:
    first, second = _add("b1", 100, "msg:D1:1", "r1"), _add("b2", 200, "msg:D1:1", "r2")
    for order in ([first, second], [second, first]):
        G = build_graph(order)
        assert G.has_edge("msg:D1:1@1", "msg:D1:1@2")
        writers = {v: next(iter(G.predecessors(v))) for v in ("msg:D1:1@1", "msg:D1:1@2")}
        assert writers == {"msg:D1:1@1": f"op:{first.trace_id}:{first.span_id}",
                           "msg:D1:1@2": f"op:{second.trace_id}:{second.span_id}"}
    # The spans as the builder reads them: the same message versions.
    spans = unpacked([second, first])
    assert [s.attributes[MemTrace.OUTPUTS] for s in spans] == [["msg:D1:1@2"], ["msg:D1:1@1"]]


def test_a_malformed_packed_add_is_one_problem_and_the_span_is_read() -> None:
    for value in ("[1, [", json.dumps([9, [], [], []]), json.dumps([1, [None] * 4, [], [["nonsense"]]])):
        span = _add("c1", 100, "msg:D1:1", "r1")
        span.attributes[_KEY] = value
        G = build_graph([span])
        problems = [p for p in G.graph["problems"] if _KEY in str(p)]
        assert len(problems) == 1, (value, G.graph["problems"])
        assert f"op:{span.trace_id}:{span.span_id}" in G
        assert not any(d.get("stage_of") for _, d in G.nodes(data=True))


def test_the_writers_named_without_a_graph_are_the_links_the_reader_gives() -> None:
    """``spans.packed_add.writer_links`` (what ``memtrace analyze --jaeger`` fetches before a graph exists)
    walks the packed stages itself: it names what ``unpack`` links, each writer once, never the span
    itself, and skips what it cannot read."""
    other, again = f"00-{'e' * 32}-{'1' * 16}-01", f"00-{'f' * 32}-{'2' * 16}-01"
    span = _add("d1", 100, "msg:D1:1", "r1")
    mine = f"00-{span.trace_id}-{span.span_id}-01"
    facts = json.loads(span.attributes[_KEY])
    facts[3].insert(0, ["search", 90, 95, 10, None, [
        ["r7", "mem0:r7@2", other], ["r8", "mem0:r8@1", other], ["r9", "mem0:r9@1", mine],
        ["r0", "untraced", again], ["rx", "mem0:rx@1", "not-a-traceparent"]], None])
    span.attributes[_KEY] = json.dumps(facts)
    links = writer_links(span)
    assert [(link.trace_id, link.span_id, dict(link.attributes)) for link in links] == [
        ("e" * 32, "1" * 16, {MemTraceLink.VARIABLE: "mem0:r7@2"})]
    assert links == unpacked([span])[0].links
    facts[3][0][5].append(7)  # a found item that is not a list: the reader fails, the walk skips it
    span.attributes[_KEY] = json.dumps(facts)
    assert writer_links(span) == links
    for value in ("[1, [", json.dumps([1, [], [], "stages"]), 5):
        span.attributes[_KEY] = value
        assert writer_links(span) == []
