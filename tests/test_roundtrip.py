"""Spans -> files -> graph equals the graph built from the same spans live."""

from __future__ import annotations

import gzip
import shutil

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.exporters import GraphSpanExporter, OTLPJsonLinesSpanExporter
from memtrace_otel.graph import (
    build_graph,
    failed_evaluations,
    lineage_path,
    memory_life,
    operations_between,
)
from memtrace_otel.spans import read_span_files

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
