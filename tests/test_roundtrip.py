"""Spans -> files -> graph equals the graph built from the same spans live."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from memtrace_otel.exporters import GraphSpanExporter, OTLPJsonLinesSpanExporter
from memtrace_otel.graph import (
    build_graph,
    failed_evaluations,
    lineage_path,
    memory_life,
    operations_between,
)
from memtrace_otel.spans import SpanRecord, read_span_files, record_from_readable

from graph_compare import assert_same_graph
from scenario import run_pipeline


@pytest.fixture
def pipeline(tmp_path):
    live = GraphSpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(live))
    ours = tmp_path / "ours.jsonl"
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(ours)))
    official = tmp_path / "official.jsonl"
    file_exporter = pytest.importorskip("opentelemetry.exporter.otlp.json.file")
    provider.add_span_processor(SimpleSpanProcessor(file_exporter.FileSpanExporter(str(official))))
    run_pipeline(provider)
    provider.shutdown()
    return live, ours, official


def test_our_file_gives_the_live_graph(pipeline) -> None:
    live, ours, _ = pipeline
    result = read_span_files([ours])
    assert result.problems == []
    assert_same_graph(build_graph(result.spans), live.graph())


def test_official_otlp_json_file_exporter_output_parses(pipeline) -> None:
    live, _, official = pipeline
    result = read_span_files([official])
    assert result.problems == []
    assert len(result.spans) == len(live.spans())
    assert_same_graph(build_graph(result.spans), live.graph())


def test_gzip_files_read_the_same(pipeline, tmp_path) -> None:
    live, ours, _ = pipeline
    packed = tmp_path / "ours.jsonl.gz"
    with open(ours, "rb") as source, gzip.open(packed, "wb") as target:
        shutil.copyfileobj(source, target)
    assert_same_graph(build_graph(read_span_files([packed]).spans), live.graph())


def test_graph_content_and_queries(pipeline) -> None:
    live, _, _ = pipeline
    G = live.graph()
    (failed,) = failed_evaluations(G)
    assert G.nodes[failed]["case"] == "q1" and G.nodes[failed]["gold"] == "Lisbon"
    life = memory_life(G, "mem:D1:1")
    assert [v["id"] for v in life] == ["mem:D1:1@1", "mem:D1:1@2"]
    assert G.nodes[life[1]["written_by"]]["name"] == "update"
    deleted = memory_life(G, "mem:D1:3")[-1]
    assert deleted["deleted"] is True
    path = lineage_path(G, "msg:D1:1@1", "answer:q1@1")
    on_path = [G.nodes[n]["name"] for n in path if n.startswith("op:")]
    assert on_path == ["extract", "update", "search", "generate"]
    names = [G.nodes[n]["name"] for n in operations_between(G, "msg:D1:1@1", "answer:q1@1")]
    assert names == ["extract", "update", "search", "generate"]
    # the question traces are not the ingestion trace: lineage crossed traces
    traces = {G.nodes[n]["trace_id"] for n in path if n.startswith("op:")}
    assert len(traces) == 3
    steps = G.nodes[path[1]]["steps"]
    assert [s["name"] for s in steps] == ["prompt", "parse"]


def test_many_files_stitch_into_one_graph(tmp_path) -> None:
    # Ingestion and questions exported to different files still form one lineage.
    provider = TracerProvider()
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    exporter = OTLPJsonLinesSpanExporter(first)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run_pipeline(provider)
    provider.shutdown()
    lines = first.read_text().splitlines()
    half = len(lines) // 2
    first.write_text("\n".join(lines[:half]) + "\n")
    second.write_text("\n".join(lines[half:]) + "\n")
    G = build_graph(read_span_files([first, second]).spans)
    assert lineage_path(G, "msg:D1:1@1", "answer:q1@1")
    assert G.graph["missing_traces"] == set()
    only_questions = build_graph(read_span_files([second]).spans)
    assert only_questions.graph["missing_traces"], "producers in the unread file are reported"


_VALUES = {"text": "Lisbon \u00e9 \U0001f431", "count": 3, "big": 2**62, "ratio": 0.25, "limit": float("inf"),
           "on": True,
           "tags": ["a", "b"], "sizes": [1, 2], "weights": [0.5, 1.5], "flags": [True, False]}


def _every_field(provider: TracerProvider) -> None:
    """Spans of every kind, with every status, events and links with attributes of every type."""
    tracer = provider.get_tracer("roundtrip.scope", "9.8.7")
    with tracer.start_as_current_span("root", kind=SpanKind.SERVER, attributes=_VALUES) as root:
        root.add_event("started", _VALUES)
        root.add_event("bare")
        for kind in SpanKind:
            link = Link(root.get_span_context(), {"why": "read it", "hops": 2, **_VALUES})
            with tracer.start_as_current_span(f"child {kind.name}", kind=kind, links=[link]) as child:
                if kind is SpanKind.CLIENT:
                    child.set_status(Status(StatusCode.ERROR, "it broke"))
                elif kind is SpanKind.PRODUCER:
                    child.set_status(Status(StatusCode.OK))
    with provider.get_tracer("unversioned.scope").start_as_current_span("alone"):
        pass


def _comparable(span: SpanRecord) -> dict[str, object]:
    return {k: v for k, v in dataclasses.asdict(span).items() if k != "source"}


@pytest.mark.parametrize("name", ["spans.jsonl", "spans.jsonl.gz"])
def test_every_span_field_survives_the_file(tmp_path, name) -> None:
    resource = Resource.create({"service.name": "roundtrip", "deployment.environment.name": "test",
                                "host.cpus": 2, "ratio": 0.5, "on": False, "regions": ["eu", "us"]})
    provider = TracerProvider(resource=resource)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter(tmp_path / name)))
    _every_field(provider)
    provider.shutdown()
    live = {(r.trace_id, r.span_id): _comparable(r)
            for r in map(record_from_readable, memory.get_finished_spans())}
    result = read_span_files([tmp_path / name])
    assert result.problems == []
    read = {(r.trace_id, r.span_id): _comparable(r) for r in result.spans}
    assert read == live
    # Not vacuous: every kind, every status, scopes with and without a version, typed attributes.
    assert {r["kind"] for r in read.values()} == {k.name for k in SpanKind}
    assert {r["status_code"] for r in read.values()} == {"UNSET", "OK", "ERROR"}
    assert {(r["scope_name"], r["scope_version"]) for r in read.values()} == {
        ("roundtrip.scope", "9.8.7"), ("unversioned.scope", "")}
    root = next(r for r in read.values() if r["name"] == "root")
    assert root["attributes"] == _VALUES and [e["attributes"] for e in root["events"]] == [_VALUES, {}]
    assert root["resource_attributes"]["host.cpus"] == 2
    assert root["resource_attributes"]["regions"] == ["eu", "us"]


def test_the_file_is_otlp_json_by_the_spec(tmp_path) -> None:
    """Hex ids, lowerCamelCase names, enums as numbers, 64-bit integers as strings."""
    provider = TracerProvider(resource=Resource.create({"service.name": "spec"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(tmp_path / "s.jsonl")))
    _every_field(provider)
    provider.shutdown()
    documents = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    spans = [span for document in documents for rs in document["resourceSpans"] for ss in rs["scopeSpans"]
             for span in ss["spans"]]
    client = next(s for s in spans if s["name"] == "child CLIENT")
    assert len(client["traceId"]) == 32 and int(client["traceId"], 16)
    assert len(client["spanId"]) == 16 and len(client["parentSpanId"]) == 16
    assert client["kind"] == 3 and client["status"] == {"code": 2, "message": "it broke"}
    assert isinstance(client["startTimeUnixNano"], str) and client["startTimeUnixNano"].isdigit()
    assert client["links"][0]["attributes"][1] == {"key": "hops", "value": {"intValue": "2"}}
