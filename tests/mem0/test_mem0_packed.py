"""The packed ``add`` (one span, its stages as raw facts in ``memtrace.mem0.add``) builds the graph the stage
events built.

The scenario of ``test_mem0_stage_shape.py`` (an extraction that gets the fact wrong, more adds, on 1.x an
UPDATE decision, then a question whose answer fails its gold), run once with the stage events and once
packed, on the real mem0 of this venv. The graph builder derives the packed add's stage nodes, variables,
versions and cross-trace edges (``graph/packed.py``); the two graphs must hold the same operations,
variables, edges, categories, contents and hashes, and every engine that needs no model must give the same
verdicts. Ids are mapped as ``test_mem0_stage_shape.Canon`` maps them (stage ids are drawn in one shape
and derived in the other).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_mem0_stage_shape import _BY_DESIGN, _UUID, Canon, run_scenario, same_signature, signature, verdicts

from memtrace_otel.graph import build_graph
from memtrace_otel.graph.packed import PACKED_ADD, unpacked
from memtrace_otel.instrument.mem0 import mem0_generation
from memtrace_otel.semconv import GenAI, MemTrace, MemTraceEvent
from memtrace_otel.spans import record_from_readable
from memtrace_otel.spans.linked import missing_linked_traces
from memtrace_otel.spans.packed_add import writer_links
from memtrace_otel.spans.packed_search import PACKED_SEARCH, search_writer_links

_SEARCH_CONTENT = {GenAI.MEMORY_QUERY_TEXT, GenAI.MEMORY_RECORDS}
"""The opt-in GenAI content keys of a search span (``SearchSpec.end``, ``Operation.record_retrieval``)."""


def _hashes(G: Any, canon: Canon) -> dict[str, str]:
    return {canon(n): d["hash"] for n, d in G.nodes(data=True) if d["type"] == "variable"}


@pytest.mark.parametrize("capture", [True, False], ids=["content", "no-content"])
def test_packed_add_builds_the_graph_stage_events_built(llm_server: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capture: bool) -> None:
    events_graph, event_shape = run_scenario(False, llm_server, tmp_path / "events", monkeypatch, capture)
    packed_graph, packed_shape = run_scenario(False, llm_server, tmp_path / "packed", monkeypatch, capture,
                                              packed=True)

    # The shape is what it says: one span per add, no stage event, no link, the facts in one attribute.
    adds = [s for s in packed_shape if s.attributes.get(MemTrace.OPERATION_NAME) == "mem0.add"]
    assert len(adds) == sum(1 for s in event_shape if s.attributes.get(MemTrace.OPERATION_NAME) == "mem0.add")
    assert adds and all(PACKED_ADD in s.attributes and not s.events and not s.links for s in adds)
    assert len(packed_shape) == len(event_shape)
    assert not any(e.name == MemTraceEvent.STAGE for s in packed_shape for e in s.events)
    # The search too: one span, no link, its lineage in one attribute (the stage-event run keeps the generic
    # search, whose span has its memtrace.inputs and its writers' links).
    searches = [s for s in packed_shape if s.attributes.get(MemTrace.OPERATION_NAME) == "mem0.search"]
    assert searches and all(PACKED_SEARCH in s.attributes and not s.links
                            and MemTrace.INPUTS not in s.attributes for s in searches)
    assert all(PACKED_SEARCH not in s.attributes and MemTrace.INPUTS in s.attributes for s in event_shape
               if s.attributes.get(MemTrace.OPERATION_NAME) == "mem0.search")

    right_nodes, left, right = same_signature(events_graph, packed_graph)
    assert _hashes(events_graph, left) == _hashes(packed_graph, right)
    # Messages are named by their text's hash, which the mapping hides: the same ids in both, with the
    # same readers (the mapping names every message alike).
    messages = [{n: sorted(left(r) for r in G.successors(n)) for n in G if n.startswith("msg:")}
                for G, left in ((events_graph, left), (packed_graph, right))]
    assert messages[0] == messages[1] and len(messages[0]) >= 2
    stages = {d["name"] for d in right_nodes.values() if d["type"] == "operation" and "stage_of" in d} | {
        d["name"] for n, d in packed_graph.nodes(data=True) if d.get("stage_of")}
    assert {"mem0.add.extract", "mem0.add.search", "mem0.create"} <= stages
    if mem0_generation() == 1:
        assert {"mem0.add.decide", "mem0.update"} <= stages
    if capture:
        assert any(d.get("content") == "Moved to Porto in March" for d in right_nodes.values())
    else:
        assert not any(d.get("content") for d in right_nodes.values() if d["type"] == "variable")
    # Times and where the spans were read differ by design; stage_of names the add in both.
    for G in (events_graph, packed_graph):
        for _, data in G.nodes(data=True):
            if data.get("stage_of"):
                assert G.nodes[f"op:{data['trace_id']}:{data['stage_of']}"]["name"] == "mem0.add"
    assert {"start", "end"} <= _BY_DESIGN

    # Span by span, a packed search read back is the generic search (ids mapped): the same inputs, context
    # output, descriptors, contents, GenAI retrieval attributes and links to the records' writers.
    generic = [record_from_readable(s) for s in event_shape
               if s.attributes.get(MemTrace.OPERATION_NAME) == "mem0.search"]
    read = unpacked([record_from_readable(s) for s in searches])
    assert len(generic) == len(read) and any(r.links for r in read)
    for before, after in zip(generic, read, strict=True):
        assert left(before.attributes) == right(after.attributes)
        assert [(left(k.trace_id), left(k.span_id), left(dict(k.attributes))) for k in before.links] == [
            (right(k.trace_id), right(k.span_id), right(dict(k.attributes))) for k in after.links]
        assert [(k.trace_id, k.span_id) for k in search_writer_links(record_from_readable(
            next(s for s in searches if f"{s.context.span_id:016x}" == after.span_id)))] == [
            (k.trace_id, k.span_id) for k in after.links]

    # The raw spans a trace backend shows (before any reading) carry the GenAI content keys the generic
    # spans carried, with content capture only: the search's query text and records (which the reading
    # derives again, to the same values) and the records the add stored (AddSpec.end).
    raw = [record_from_readable(s) for s in searches]
    generic_adds = [record_from_readable(s) for s in event_shape
                    if s.attributes.get(MemTrace.OPERATION_NAME) == "mem0.add"]
    raw_adds = [record_from_readable(s) for s in adds]
    if capture:
        for before, packed_span, after in zip(generic, raw, read, strict=True):
            carried = {k: packed_span.attributes[k] for k in _SEARCH_CONTENT}
            assert carried == {k: after.attributes[k] for k in _SEARCH_CONTENT}
            assert left({k: before.attributes[k] for k in _SEARCH_CONTENT}) == right(carried)
        assert any(json.loads(s.attributes[GenAI.MEMORY_RECORDS]) for s in raw)
        assert [left(s.attributes[GenAI.MEMORY_RECORDS]) for s in generic_adds] == [
            right(s.attributes[GenAI.MEMORY_RECORDS]) for s in raw_adds]
        assert any("Porto" in s.attributes[GenAI.MEMORY_RECORDS] for s in raw_adds)
    else:
        assert not any(_SEARCH_CONTENT & s.attributes.keys() for s in [*generic, *raw, *read])
        assert not any(GenAI.MEMORY_RECORDS in s.attributes for s in [*generic_adds, *raw_adds])

    found = verdicts(packed_graph, right)
    assert verdicts(events_graph, left) == found
    assert any(answers and answers[0][1] is not None for answers in found.values())

    # The writers a packed add read from are links to whoever fetches missing traces: the same traces
    # the stage events' links named.
    records = [record_from_readable(s) for s in packed_shape]
    later = [r for r in records if PACKED_ADD in r.attributes and writer_links(r)]
    assert later, "no packed add read a record another add wrote: the links are not exercised"
    # The spans layer's walk of the packed stages names the links the graph reader gives each span.
    for record, read in zip(later, unpacked(later), strict=True):
        assert writer_links(record) == read.links
    written = {r.trace_id for r in records}
    assert missing_linked_traces(later) == {link.trace_id for r in later for link in writer_links(r)} - {
        r.trace_id for r in later}
    assert missing_linked_traces(records) == set() and written
    # The graph does not depend on the order the spans come in (the messages' versions are counted in
    # the order of the adds' starts, whatever order they are read in).
    shuffled = build_graph(list(reversed(records)))
    assert dict(shuffled.nodes(data=True)) == dict(packed_graph.nodes(data=True))
    assert set(shuffled.edges) == set(packed_graph.edges)


def test_packed_add_survives_an_attribute_length_limit(llm_server: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` would cut the packed JSON mid-value: the instrumentor writes it
    in parts (``memtrace.mem0.add.1`` ...), which the reader joins; the graph is the one without a limit."""
    whole_graph, _ = run_scenario(False, llm_server, tmp_path / "whole", monkeypatch, False, packed=True)
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "300")
    cut_graph, cut = run_scenario(False, llm_server, tmp_path / "cut", monkeypatch, False, packed=True)
    parts = [k for s in cut for k in s.attributes if k.startswith(f"{PACKED_ADD}.")]
    assert parts, "no packed add was longer than the limit: the parts are not exercised"
    assert all(len(v) <= 300 for s in cut for k, v in s.attributes.items() if k.startswith(PACKED_ADD))
    assert not [p for p in cut_graph.graph["problems"] if PACKED_ADD in str(p)]
    left_nodes, left_edges, _ = signature(whole_graph)
    right_nodes, right_edges, _ = signature(cut_graph)
    assert left_nodes == right_nodes and left_edges == right_edges


def test_packed_add_keeps_its_texts_in_process(llm_server: Any, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Without content capture, in-process attribution reads an add's texts from the tracer's in-process
    contents (``AttributionSpanProcessor``): the packed add keeps one tuple per add, which the builder
    gives its variables; they get the contents the stage events' variables get."""
    import memtrace_otel.instrument.mem0.instrumentor as instrumentor_module

    tracers: list[Any] = []

    class Kept(instrumentor_module.MemoryTracer):  # type: ignore[misc, name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # What an AttributionSpanProcessor on this tracer says (the add keeps its texts only then).
            self.contents.read_in_process = True
            tracers.append(self)

    monkeypatch.setattr(instrumentor_module, "MemoryTracer", Kept)
    contents = []
    for shape, packed in (("events", False), ("packed", True)):
        _, spans = run_scenario(False, llm_server, tmp_path / shape, monkeypatch, False, packed=packed)
        G = build_graph((record_from_readable(s) for s in spans), content=tracers[-1].contents.get)
        canon = Canon(G)
        contents.append({canon(n): d["content"] for n, d in G.nodes(data=True)
                         if d["type"] == "variable" and n.startswith(("mem0", "msg:", "query:", "context:"))})
    assert contents[0] == contents[1]
    assert "Moved to Porto in March" in contents[1].values()
    # The search's query and context too (the packed search keeps them only for such a reader).
    assert any(name.startswith("context:") and "Porto" in text for name, text in contents[1].items())
    assert any(name.startswith("query:") and text for name, text in contents[1].items())
    assert any(name.startswith("mem0.add.extract.prompt") and text for name, text in contents[1].items())


def _searches(packed: bool, server: Any, data: Path, monkeypatch: pytest.MonkeyPatch,
              capture: bool) -> list[Any]:
    """A record stored untraced, one stored traced, a search returning both, and a search mem0 refuses
    (no user, agent or run id): the search spans as the graph builder reads them, ids by their place."""
    import random
    import uuid

    from mem0 import Memory
    from mem0_app import USER, config, scope
    from mem0_script import add_replies
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from memtrace_otel.instrument.mem0 import Mem0Instrumentor

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", str(capture).lower())
    seeded = random.Random(41)
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=seeded.getrandbits(128), version=4))
    memory = Memory.from_config(config(server.base_url, str(data)))
    exporter, provider, instrumentor = InMemorySpanExporter(), TracerProvider(), Mem0Instrumentor()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        server.enqueue(*add_replies(["Lives in Lisbon"]))
        memory.add("I live in Lisbon.", user_id=USER)  # before the instrumentor: no lineage in its payload
        instrumentor.instrument(tracer_provider=provider, packed=packed)
        server.enqueue(*add_replies(["Has a dog called Pepper"]))
        memory.add("I have a dog called Pepper.", user_id=USER)
        found = memory.search("Where does the user live?", threshold=0.0, **scope(user_id=USER))["results"]
        assert len(found) == 2
        with pytest.raises(Exception, match="user_id"):
            memory.search("Where does the user live?")
    finally:
        instrumentor.uninstrument()
        close = getattr(memory, "close", None)
        if callable(close):
            close()
    spans = [record_from_readable(s) for s in exporter.get_finished_spans()]
    provider.shutdown()
    # Ids by their place: spans by their order, record ids (mem0's uuid4, drawn a different number of
    # times in the two runs) by the order the searches name them.
    place = {i: f"#{n}" for n, s in enumerate(spans) for i in (s.trace_id, s.span_id)}
    found = []
    for as_made, span in zip(spans, unpacked(spans), strict=True):
        if span.attributes.get(MemTrace.OPERATION_NAME) == "mem0.search":
            # The GenAI content keys as the span itself carries them, before any reading derives them.
            carried = {k: v for k, v in as_made.attributes.items() if k in _SEARCH_CONTENT}
            links = [(place[k.trace_id], place[k.span_id], dict(k.attributes)) for k in span.links]
            found.append((span.attributes, span.status_code, links, carried))
    text = json.dumps(found, sort_keys=True)
    records: dict[str, str] = {}
    for record in _UUID.findall(text):
        records.setdefault(record, f"record#{len(records)}")
    return json.loads(_UUID.sub(lambda m: records[m.group(0)], text))  # type: ignore[no-any-return]


@pytest.mark.parametrize("capture", [True, False], ids=["content", "no-content"])
def test_packed_search_reads_as_the_generic_search_with_untraced_records_and_errors(
        llm_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capture: bool) -> None:
    """The cases the scenario above has not: a returned record that carries no lineage (read by its name,
    version 1, with the empty text's hash, and no text in the context) and a search that raised (its query
    read, nothing retrieved): the packed search read back is the generic one, attribute for attribute."""
    generic = _searches(False, llm_server, tmp_path / "generic", monkeypatch, capture)
    packed = _searches(True, llm_server, tmp_path / "packed", monkeypatch, capture)
    assert len(generic) == 2 and generic[1][1] == "ERROR" and MemTrace.OUTPUTS not in generic[1][0]
    assert MemTrace.INPUTS in generic[1][0]
    assert len(generic[0][0][MemTrace.INPUTS]) == 3 and len(generic[0][2]) == 1
    # With capture the successful search carries its content keys (the untraced record's text empty, as the
    # generic rule has it), the failed one none; without capture neither does.
    assert [bool(search[3]) for search in generic] == [capture, False]
    assert packed == generic
