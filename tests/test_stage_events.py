"""Stages recorded as ``memtrace.stage`` events of a span (mem0's ``add``, ``docs/conventions.md``).

Built without mem0 (``tests/mem0/test_mem0_stage_shape.py`` compares both span shapes on the real
one): an ``add`` operation whose extraction, search and decision are
:class:`~memtrace_otel.instrument.mem0.stages.StageOperation` events, and a record written by a
child span. Each reader gives the graph the live spans give (OTLP/JSON file, ``memtrace serve``'s
OTLP protobuf, and Jaeger's API JSON through a real Jaeger, where event fields are tags and lists
are strings); a verdict blaming a stage is written under the ``add`` span, naming the stage; a
model call made during a stage is that stage's step; a malformed stage event is one problem.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import requests
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.attribution import Attribution, ErrorType, FailureCase
from memtrace_otel.graph import build_graph
from memtrace_otel.instrument.mem0.stages import StageOperation
from memtrace_otel.semconv import MemTrace, MemTraceAttribution, MemTraceEvent, MemTraceStage
from memtrace_otel.spans import read_span_files, record_from_readable
from memtrace_otel.writeback.annotations import annotate

from graph_compare import otlp_line

_STAGE_NAMES = ("mem0.add.extract", "mem0.add.search", "mem0.add.decide")


def _pipeline(provider: TracerProvider, *, model_call: bool = False) -> dict[str, Any]:
    """A writer, then an add whose three stages are events, then the record it created."""
    mt, app = MemoryTracer(provider, capture_content=True), provider.get_tracer("app")
    with mt.operation("writer", Category.EXTRACTION) as writer:
        old = writer.write("mem0:r1", "Lives in Porto", kind=VariableKind.MEMORY_UNIT)
    ids: dict[str, Any] = {"writer": writer.span_context}
    with mt.operation("mem0.add", Category.INGEST, gen_ai_operation="upsert_memory", store_id="s") as add:
        message = add.write("msg:D1:1", "I moved to Lisbon", kind=VariableKind.MESSAGE)
        linked: set[int] = set()
        with StageOperation(mt, "mem0.add.extract", Category.EXTRACTION, add, linked) as extract:
            extract.read(message)
            prompt = extract.intermediate("prompt:x", "Extract facts: I moved to Lisbon",
                                          kind=VariableKind.PROMPT)
            extract.step("prompt", [message], [prompt])
            if model_call:  # an LLM client instrumentation's span, made while the stage runs
                with app.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}):
                    pass
            response = extract.intermediate("response:x", '{"facts": ["Moved to Lisbon"]}',
                                            kind=VariableKind.RESPONSE)
            extract.step("response", [prompt], [response])
            facts = extract.write("facts:x", "Moved to Lisbon", kind=VariableKind.FACTS)
            extract.step("parse", [response], [facts])
        with StageOperation(mt, "mem0.add.search", Category.RETRIEVAL, add, linked) as search:
            search.read(facts)
            found = search.read(old)
            search.record_retrieval([found], top_k=5)
        with StageOperation(mt, "mem0.add.decide", Category.UPDATE, add, linked) as decide:
            decide.read(facts)
            decide.read(found)  # the same writer again: the add span links it once
            decision = decide.write("decisions:x", "UPDATE r1: Moved to Lisbon", kind=VariableKind.FACTS)
            decide.step("decide", [found], [decision])  # not the chain rule: an explicit step event
        with mt.operation("mem0.update", Category.UPDATE, gen_ai_operation="update_memory") as update:
            update.read(decision)
            new = update.update(found, "Moved to Lisbon", kind=VariableKind.MEMORY_UNIT)
    ids.update(add=add.span_context, stages=[extract.stage_id, search.stage_id, decide.stage_id],
               new=new.id, decision=decision.id, facts=facts.id, old=found.id)
    return ids


@pytest.fixture
def live() -> tuple[list[Any], dict[str, Any]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": f"stages-{uuid.uuid4().hex[:8]}"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ids = _pipeline(provider)
    provider.shutdown()
    return list(exporter.get_finished_spans()), ids


def _node(ids: dict[str, Any], index: int) -> str:
    return f"op:{ids['add'].trace_id:032x}:{ids['stages'][index]:016x}"


def test_stages_are_events_and_become_operation_nodes(live: tuple[list[Any], dict[str, Any]]) -> None:
    spans, ids = live
    names = sorted(s.attributes[MemTrace.OPERATION_NAME] for s in spans)
    assert names == ["mem0.add", "mem0.update", "writer"]
    (add,) = [s for s in spans if s.attributes[MemTrace.OPERATION_NAME] == "mem0.add"]
    stage_events = [e for e in add.events if e.name == MemTraceEvent.STAGE]
    assert [e.attributes[MemTrace.OPERATION_NAME] for e in stage_events] == list(_STAGE_NAMES)
    assert [link.context.span_id for link in add.links] == [ids["writer"].span_id]  # once, not per stage
    G = build_graph(record_from_readable(s) for s in spans)
    assert G.graph["problems"] == []
    host = f"{ids['add'].span_id:016x}"
    extract, search, decide = (G.nodes[_node(ids, i)] for i in range(3))
    assert [extract["name"], search["name"], decide["name"]] == list(_STAGE_NAMES)
    categories = [extract["category"], search["category"], decide["category"]]
    assert categories == ["extraction", "retrieval", "update"]
    assert extract["stage_of"] == search["stage_of"] == decide["stage_of"] == host
    assert extract["parent_span_id"] == host and extract["start"] <= extract["end"] <= search["start"]
    # Lineage: message -> extract -> facts -> search / decide -> decision -> update -> new version.
    assert G.has_edge("msg:D1:1@1", _node(ids, 0)) and G.has_edge(_node(ids, 0), ids["facts"])
    assert G.has_edge(ids["old"], _node(ids, 1)) and G.has_edge(ids["facts"], _node(ids, 2))
    update = next(s for s in spans if s.name == "update_memory")
    update_node = f"op:{update.context.trace_id:032x}:{update.context.span_id:016x}"
    assert G.has_edge(_node(ids, 2), ids["decision"]) and G.has_edge(ids["decision"], update_node)
    assert [s["name"] for s in extract["steps"]] == ["prompt", "response", "parse"]  # the chain rule
    assert extract["steps"][1] == {"name": "response", "inputs": ["prompt:x@1"], "outputs": ["response:x@1"]}
    assert decide["steps"] == [{"name": "decide", "inputs": [ids["old"]], "outputs": [ids["decision"]]}]
    assert "steps" not in G.nodes[f"op:{add.context.trace_id:032x}:{host}"]  # the stage's steps are not add's
    assert G.nodes[ids["facts"]]["content"] == "Moved to Lisbon"


def _signature(G: nx.DiGraph) -> tuple[dict[str, Any], set[tuple[str, str, str]]]:
    # Jaeger keeps times in whole microseconds; where a span was read from differs by design.
    nodes = {n: {k: v for k, v in d.items() if k not in ("source", "start", "end")}
             for n, d in G.nodes(data=True)}
    return nodes, {(u, v, d["role"]) for u, v, d in G.edges(data=True)}


def test_otlp_json_file_gives_the_live_graph(live: tuple[list[Any], dict[str, Any]], tmp_path: Path) -> None:
    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

    spans, _ = live
    path = tmp_path / "spans.jsonl"
    exporter = OTLPJsonLinesSpanExporter(str(path))
    exporter.export(spans)
    exporter.shutdown()
    result = read_span_files([path])
    assert result.problems == []
    want, got = build_graph(record_from_readable(s) for s in spans), build_graph(result.spans)
    assert _signature(got) == _signature(want)
    assert [d["start"] for _, d in sorted(got.nodes(data=True)) if d["type"] == "operation"] == [
        d["start"] for _, d in sorted(want.nodes(data=True)) if d["type"] == "operation"]


def test_joined_lineage_lists_read_as_the_arrays_they_join(live: tuple[list[Any], dict[str, Any]]) -> None:
    """A stage event's lineage lists are one string each (``MemTraceStage.JOINED``); the same events
    with arrays (the encoding before it) build the same graph, and a string there is its list."""
    from dataclasses import replace

    from memtrace_otel.spans.model import SpanEvent

    spans, ids = live
    records = [record_from_readable(s) for s in spans]
    (add,) = [r for r in records if r.attributes[MemTrace.OPERATION_NAME] == "mem0.add"]
    extract = next(e for e in add.events if e.name == MemTraceEvent.STAGE)
    assert extract.attributes[MemTrace.STEP_NAMES] == "prompt\nresponse\nparse"
    assert extract.attributes[MemTrace.INPUTS] == "msg:D1:1@1"
    arrays = [replace(r, events=[SpanEvent(e.name, e.time_unix_nano, {
        k: v.split("\n") if k in MemTraceStage.JOINED and isinstance(v, str) else v
        for k, v in e.attributes.items()}) for e in r.events]) for r in records]
    assert not any(isinstance(e.attributes.get(k), str) for r in arrays for e in r.events
                   for k in MemTraceStage.JOINED)
    joined_graph, array_graph = build_graph(records), build_graph(arrays)
    assert joined_graph.graph["problems"] == array_graph.graph["problems"] == []
    assert _signature(joined_graph) == _signature(array_graph)
    assert _inputs_of(joined_graph, _node(ids, 0)) == ["msg:D1:1@1"]


def _inputs_of(G: nx.DiGraph, node: str) -> list[str]:
    return sorted(G.predecessors(node))


def test_an_element_holding_the_separator_keeps_its_list() -> None:
    """A variable id with a newline in it (an application's message id) keeps the array encoding."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = MemoryTracer(provider)
    with mt.operation("mem0.add", Category.INGEST) as add:
        odd = add.write("msg:line\nbreak", "hi", kind=VariableKind.MESSAGE)
        with StageOperation(mt, "mem0.add.extract", Category.EXTRACTION, add, set()) as extract:
            extract.read(odd)
            extract.write("facts:y", "Says hi", kind=VariableKind.FACTS)
    (span,) = exporter.get_finished_spans()
    (event,) = span.events
    assert event.attributes[MemTrace.INPUTS] == ("msg:line\nbreak@1",)  # an array, as before
    assert event.attributes[MemTrace.OUTPUTS] == "facts:y@1"
    G = build_graph([record_from_readable(span)])
    assert G.has_edge("msg:line\nbreak@1", f"op:{span.context.trace_id:032x}:{extract.stage_id:016x}")


def test_serve_protobuf_gives_the_live_graph(live: tuple[list[Any], dict[str, Any]]) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.common")
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from memtrace_otel.collector.otlp_proto import decode_request, records_from_request

    spans, _ = live
    problems: list[Any] = []
    records = records_from_request(decode_request(encode_spans(spans).SerializeToString()), "serve", problems)
    assert problems == []
    want, got = build_graph(record_from_readable(s) for s in spans), build_graph(records)
    assert _signature(got) == _signature(want)


def test_a_verdict_on_a_stage_is_written_under_the_add_span(live: tuple[list[Any], dict[str, Any]]) -> None:
    spans, ids = live
    G = build_graph(record_from_readable(s) for s in spans)
    trace_id, stage = f"{ids['add'].trace_id:032x}", f"{ids['stages'][0]:016x}"
    G.add_node("op:e", type="operation", trace_id=trace_id, span_id="ee" * 8, start=0, end=0)
    verdict = Attribution("lineage", FailureCase("op:e"), operation=_node(ids, 0), trace_id=trace_id,
                          span_id=stage, operation_name="mem0.add.extract", category="extraction",
                          error_type=ErrorType.EXTRACTION, confidence=0.9)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    annotate(provider.get_tracer("memtrace_otel.writeback"), G, [verdict])
    written = {s.name: s for s in exporter.get_finished_spans()}
    root_cause, attribution = written["memtrace.root_cause"], written["memtrace.attribution"]
    assert root_cause.parent.span_id == ids["add"].span_id  # a span the trace holds, not the stage id
    assert [link.context.span_id for link in attribution.links] == [ids["add"].span_id]
    for span in (root_cause, attribution):
        assert span.attributes[MemTraceAttribution.ROOT_CAUSE_STAGE_ID] == stage
        assert span.attributes[MemTraceAttribution.ROOT_CAUSE_SPAN_ID] == f"{ids['add'].span_id:016x}"
        assert span.attributes[MemTraceAttribution.ROOT_CAUSE_OPERATION_NAME] == "mem0.add.extract"
        assert span.attributes[MemTraceAttribution.ROOT_CAUSE_SPAN_NAME] == "upsert_memory"


def test_a_report_links_a_blamed_stage_to_the_span_it_is_an_event_of(
        live: tuple[list[Any], dict[str, Any]]) -> None:
    """The stage's own id is no span a backend knows: the report's links open the add span."""
    from memtrace_otel.report import ReportInput, jaeger_linker, render_report

    spans, ids = live
    G = build_graph(record_from_readable(s) for s in spans)
    trace_id, stage = f"{ids['add'].trace_id:032x}", f"{ids['stages'][0]:016x}"
    host = f"{ids['add'].span_id:016x}"
    G.add_node("op:e", type="operation", trace_id=trace_id, span_id="ee" * 8, start=0, end=0)
    verdict = Attribution("lineage", FailureCase("op:e"), operation=_node(ids, 0), trace_id=trace_id,
                          span_id=stage, operation_name="mem0.add.extract", category="extraction",
                          error_type=ErrorType.EXTRACTION, confidence=0.9)
    page = render_report([ReportInput(G, [verdict])], linker=jaeger_linker("http://127.0.0.1:16686"))
    assert f"/trace/{trace_id}?uiFind={host}" in page
    assert f"uiFind={stage}" not in page


def test_a_model_call_during_a_stage_is_the_stages_step() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ids = _pipeline(provider, model_call=True)
    G = build_graph(record_from_readable(s) for s in exporter.get_finished_spans())
    (chat,) = [n for n, d in G.nodes(data=True) if d.get("category") == "llm_call"]
    assert G.nodes[chat]["parent_operation"] == _node(ids, 0)  # extract's, as under its own span


def test_a_malformed_stage_event_is_one_problem_and_the_rest_is_read(tmp_path: Path) -> None:
    good = {"memtrace.stage.id": "12" * 8, "memtrace.operation.name": "s",
            "memtrace.operation.category": "extraction", "memtrace.inputs": ["msg:1@1"],
            "memtrace.outputs": ["fact:1@1"]}
    events = [{"name": "memtrace.stage", "attributes": good},
              {"name": "memtrace.stage", "attributes": {**good, "memtrace.stage.id": "not-an-id"}},
              {"name": "memtrace.stage", "attributes": {**good, "memtrace.stage.id": "34" * 8,
                                                        "memtrace.outputs": ["fact:2@1"],
                                                        "memtrace.stage.start_time_unix_nano": "soon"}}]
    path = tmp_path / "spans.jsonl"
    line = otlp_line("ab" * 8, {"memtrace.operation.category": "ingest"}, start=10, events=events)
    path.write_text(line + "\n")
    G = build_graph(read_span_files([path]).spans)
    problems = [str(p) for p in G.graph["problems"]]
    assert len(problems) == 2 and MemTraceStage.ID in problems[0] and MemTraceStage.START in problems[1]
    assert f"op:{'ab' * 16}:{'12' * 8}" in G and f"op:{'ab' * 16}:{'34' * 8}" in G
    assert G.has_edge("msg:1@1", f"op:{'ab' * 16}:{'12' * 8}")


@pytest.mark.slow
def test_jaeger_api_json_gives_the_live_graph(tmp_path: Path) -> None:
    """Through a real Jaeger: event fields come back as log fields, the lists as JSON strings."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    import jaeger_harness

    binary = jaeger_harness.require_jaeger_binary()
    with jaeger_harness.run_jaeger(binary, tmp_path) as jaeger:
        live = InMemorySpanExporter()
        session = requests.Session()
        session.trust_env = False
        service = f"stages-{uuid.uuid4().hex[:8]}"
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(live))
        provider.add_span_processor(SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=jaeger.otlp_http_traces, timeout=10, session=session)))
        ids = _pipeline(provider)
        provider.shutdown()
        spans = list(live.get_finished_spans())
        documents = [jaeger_harness.wait_for_trace(jaeger, f"{ids['writer'].trace_id:032x}", 1),
                     jaeger_harness.wait_for_trace(jaeger, f"{ids['add'].trace_id:032x}", 2)]
    paths = [tmp_path / "writer.json", tmp_path / "add.json"]
    for path, document in zip(paths, documents, strict=True):
        path.write_text(json.dumps(document), encoding="utf-8")
    fields = [f for t in documents[1]["data"] for s in t["spans"] for log in s.get("logs", [])
              for f in log["fields"]]
    assert any(f["key"] == MemTrace.INPUTS and isinstance(f["value"], str) for f in fields)  # list as string
    result = read_span_files(paths)
    assert result.problems == []
    want, got = build_graph(record_from_readable(s) for s in spans), build_graph(result.spans)
    (got_nodes, got_edges), (want_nodes, want_edges) = _signature(got), _signature(want)
    assert set(got_nodes) == set(want_nodes)
    for node, data in want_nodes.items():
        assert got_nodes[node] == data, node
    assert got_edges == want_edges
    assert sum(1 for _, d in got.nodes(data=True) if "stage_of" in d) == 3
