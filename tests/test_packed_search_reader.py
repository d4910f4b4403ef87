"""The graph builder's reading of a packed mem0 ``search`` (``memtrace.mem0.search``,
``graph/packed_search.py``) where the input is odd: cut in parts by an attribute length limit, malformed,
naming writers that are the span itself, its parent, or nobody. (What it derives from real searches is
compared with the generic search on the real mem0 by ``tests/mem0/test_mem0_packed.py``.)"""

from __future__ import annotations

import json
from typing import Any

from memtrace_otel.graph import build_graph
from memtrace_otel.graph.packed import unpacked
from memtrace_otel.semconv import MemTrace, MemTraceLink
from memtrace_otel.spans.linked import missing_linked_traces
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.packed_search import search_writer_links

_KEY = MemTrace.MEM0_SEARCH
_TRACE, _SPAN, _PARENT = "a" * 32, "1" * 16, "2" * 16
_OTHER, _AGAIN = f"00-{'e' * 32}-{'3' * 16}-01", f"00-{'f' * 32}-{'4' * 16}-01"


def _search(records: list[Any], **attributes: Any) -> SpanRecord:
    facts = [1, [None, None], ["query:00000000000000aa", 5, "00000000000000aa", None],
             ["context:mem0-user_id=u-00000000000000aa", 2, 9, "00000000000000bb", None], records]
    return SpanRecord(_TRACE, _SPAN, "search_memory", parent_span_id=_PARENT, start_time_unix_nano=1,
                      end_time_unix_nano=2, attributes={
                          MemTrace.OPERATION_NAME: "mem0.search", MemTrace.OPERATION_CATEGORY: "retrieval",
                          "gen_ai.operation.name": "search_memory", _KEY: json.dumps(facts), **attributes})


def _nodes(G: Any) -> dict[str, Any]:
    return {n: {k: v for k, v in d.items() if k != "source"} for n, d in G.nodes(data=True)}


def test_the_lineage_is_derived_and_parts_are_joined() -> None:
    whole = _search([["r1", "mem0:r1@3", _OTHER], ["r2", None, None]])
    (read,) = unpacked([whole])
    assert _KEY not in read.attributes
    assert read.attributes[MemTrace.INPUTS] == ["query:00000000000000aa@1", "mem0:r1@3", "mem0:r2@1"]
    assert read.attributes[MemTrace.OUTPUTS] == ["context:mem0-user_id=u-00000000000000aa@2"]
    # The query and the untraced record (no writer: the empty text's hash) are described, then the context.
    kinds = [d.split(" ")[0] for d in read.attributes[MemTrace.VARIABLES]]
    assert kinds == ["query", "memory_unit", "context"]
    assert [(k.trace_id, k.span_id) for k in read.links] == [("e" * 32, "3" * 16)]
    text = whole.attributes[_KEY]
    cut = _search([], **{_KEY: text[:40], f"{_KEY}.1": text[40:100], f"{_KEY}.2": text[100:]})
    G, H = build_graph([whole]), build_graph([cut])
    assert _nodes(G) == _nodes(H) and set(G.edges) == set(H.edges) and not H.graph["problems"]
    assert G.has_edge("mem0:r1@3", f"op:{_TRACE}:{_SPAN}")
    assert G.has_edge(f"op:{_TRACE}:{_SPAN}", "context:mem0-user_id=u-00000000000000aa@2")


def test_writers_are_each_named_once_never_the_span_nor_its_parent() -> None:
    mine, parent = f"00-{_TRACE}-{_SPAN}-01", f"00-{_TRACE}-{_PARENT}-01"
    span = _search([["r1", "mem0:r1@1", _OTHER], ["r2", "mem0:r2@1", _OTHER], ["r3", "mem0:r3@1", mine],
                    ["r4", "mem0:r4@1", parent], ["r5", None, _AGAIN], ["r6", "mem0:r6@1", "nonsense"],
                    ["r7", "mem0:r7@2", _AGAIN], 7])
    links = search_writer_links(span)
    assert [(k.trace_id, k.span_id, dict(k.attributes)) for k in links] == [
        ("e" * 32, "3" * 16, {MemTraceLink.VARIABLE: "mem0:r1@1"}),
        ("f" * 32, "4" * 16, {MemTraceLink.VARIABLE: "mem0:r7@2"})]
    assert missing_linked_traces([span]) == {"e" * 32, "f" * 32}


def test_a_malformed_packed_search_is_one_problem_and_the_span_is_read() -> None:
    for value in ("[1, [", json.dumps([9, [None, None], None, None, []]),
                  json.dumps([1, [None, None], ["query:x", 1], None, []]), 5):
        span = _search([])
        span.attributes[_KEY] = value
        G = build_graph([span])
        problems = [p for p in G.graph["problems"] if _KEY in str(p)]
        assert len(problems) == 1, (value, G.graph["problems"])
        assert f"op:{_TRACE}:{_SPAN}" in G and not G.pred[f"op:{_TRACE}:{_SPAN}"]
        assert search_writer_links(span) == []
