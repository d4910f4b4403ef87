"""Bad span files: one clear line naming file, line and problem; the rest is still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.cli import main
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.exporters.otlp_json_file import encode_traces_data
from memtrace_otel.graph import build_graph
from memtrace_otel.spans import SpanRecord, read_span_files
from memtrace_otel.spans.otlp_json import MAX_ATTRIBUTE_CHARS

from scenario import run_pipeline


@pytest.fixture
def good_lines(tmp_path) -> list[str]:
    path = tmp_path / "good.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    run_pipeline(provider)
    provider.shutdown()
    return path.read_text().splitlines()


def _span_line(trace_id: str, span_id: str, **attributes: object) -> str:
    record = SpanRecord(trace_id, span_id, "op", attributes={"memtrace.operation.category": "other",
                                                             **attributes})
    return json.dumps(encode_traces_data([record]))


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


BAD_LINES = {
    "invalid JSON": "{not json",
    "no resourceSpans": '{"foo": 1}',
    "resourceSpans entry is not an object": '{"resourceSpans": [42]}',
    "span is not an object": '{"resourceSpans": [{"scopeSpans": [{"spans": ["x"]}]}]}',
    "is not 32 hex chars": _span_line("nothex", "b" * 16),
    "all zeros": _span_line("0" * 32, "b" * 16),
}


@pytest.mark.parametrize("expected", sorted(BAD_LINES))
def test_each_bad_line_is_reported_and_the_rest_read(tmp_path, good_lines, expected) -> None:
    lines = [*good_lines[:3], BAD_LINES[expected], *good_lines[3:]]
    path = _write(tmp_path, lines)
    result = read_span_files([path])
    assert len(result.spans) == len(good_lines)  # every good span survived
    (problem,) = result.problems
    assert problem.where == f"{path}:4" and expected in problem.message

    runner = CliRunner()
    outcome = runner.invoke(main, ["inspect", str(path)])
    assert outcome.exit_code == 3, outcome.output
    assert f"{path}:4" in outcome.stderr and "Traceback" not in outcome.output
    strict = runner.invoke(main, ["inspect", "--strict", str(path)])
    assert strict.exit_code == 1 and "--strict" in strict.stderr


def test_truncated_last_line(tmp_path, good_lines) -> None:
    path = _write(tmp_path, [*good_lines[:-1], good_lines[-1][: len(good_lines[-1]) // 2]])
    result = read_span_files([path])
    assert len(result.problems) == 1 and "invalid JSON" in result.problems[0].message
    assert result.problems[0].where.endswith(f":{len(good_lines)}")
    assert len(result.spans) >= len(good_lines) - 1


def test_duplicate_spans_are_kept_once(tmp_path, good_lines) -> None:
    path = _write(tmp_path, [*good_lines, good_lines[0]])
    result = read_span_files([path])
    assert sum("duplicate span" in p.message for p in result.problems) >= 1
    assert len({(s.trace_id, s.span_id) for s in result.spans}) == len(result.spans)


def test_lineage_cycle_is_cut_and_reported(tmp_path) -> None:
    path = _write(tmp_path, [
        _span_line("a" * 32, "1" * 16, **{"memtrace.inputs": ["x@1"], "memtrace.outputs": ["y@1"]}),
        _span_line("a" * 32, "2" * 16, **{"memtrace.inputs": ["y@1"], "memtrace.outputs": ["x@1"]}),
    ])
    G = build_graph(read_span_files([path]).spans)
    (problem,) = G.graph["problems"]
    assert "lineage cycle" in problem.message and problem.where.startswith(str(path))
    import networkx as nx

    assert nx.is_directed_acyclic_graph(G)
    assert CliRunner().invoke(main, ["graph", str(path)]).exit_code == 3


def test_huge_attribute_is_truncated_not_fatal(tmp_path, good_lines) -> None:
    huge = _span_line("c" * 32, "d" * 16, **{"memtrace.output.contents": ["x" * 10_000_000],
                                             "memtrace.outputs": ["big@1"], "note": "y" * 10_000_000})
    path = _write(tmp_path, [huge, *good_lines])
    result = read_span_files([path])
    assert len(result.spans) == len(good_lines) + 1
    big = next(s for s in result.spans if s.span_id == "d" * 16)
    assert len(big.attributes["note"]) == MAX_ATTRIBUTE_CHARS
    assert {p.where for p in result.problems} == {f"{path}:1"}


def test_wrong_types_inside_a_span_are_reported(tmp_path) -> None:
    path = _write(tmp_path, [_span_line("a" * 32, "1" * 16, **{"memtrace.inputs": "not-a-list"})])
    G = build_graph(read_span_files([path]).spans)
    assert any("memtrace.inputs is not a list" in p.message for p in G.graph["problems"])


def test_missing_file_and_directory_arguments(tmp_path) -> None:
    runner = CliRunner()
    outcome = runner.invoke(main, ["inspect", str(tmp_path / "nope.jsonl")])
    assert outcome.exit_code == 1 and "no such file" in outcome.stderr
    (tmp_path / "empty").mkdir()
    assert runner.invoke(main, ["inspect", str(tmp_path / "empty")]).exit_code == 0


def test_jaeger_json_document(tmp_path) -> None:
    # The shape of Jaeger's /api/traces and UI download, arrays turned into JSON strings.
    document = {"data": [{"traceID": "ab" * 16, "processes": {"p1": {"serviceName": "svc"}}, "spans": [
        {"traceID": "ab" * 16, "spanID": "cd" * 8, "operationName": "search_memory s", "processID": "p1",
         "startTime": 1_700_000_000_000_000, "duration": 5, "references": [
             {"refType": "FOLLOWS_FROM", "traceID": "ef" * 16, "spanID": "12" * 8}],
         "tags": [{"key": "memtrace.operation.category", "type": "string", "value": "retrieval"},
                  {"key": "memtrace.inputs", "type": "string", "value": '["mem:1@1"]'},
                  {"key": "memtrace.input.sizes", "type": "string", "value": "[4]"},
                  {"key": "memtrace.input.producers", "type": "string",
                   "value": '["00-' + "ef" * 16 + "-" + "12" * 8 + '-01"]'},
                  {"key": "otel.status_code", "type": "string", "value": "ERROR"},
                  {"key": "memtrace.evaluation.prediction", "type": "string", "value": "[1, 2]"}],
         "logs": [{"timestamp": 1_700_000_000_000_001, "fields": [
             {"key": "event", "type": "string", "value": "memtrace.step"}]}]},
        {"traceID": "ab" * 16, "spanID": "zz", "operationName": "bad"}]}]}
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps(document, indent=2))
    result = read_span_files([path])
    (span,) = result.spans
    assert span.attributes["memtrace.inputs"] == ["mem:1@1"] and span.status_code == "ERROR"
    assert span.attributes["memtrace.evaluation.prediction"] == "[1, 2]"  # a string stays a string
    assert span.service_name == "svc" and span.links[0].trace_id == "ef" * 16
    assert span.start_time_unix_nano == 1_700_000_000_000_000_000
    assert [e.name for e in span.events] == ["memtrace.step"]
    (problem,) = result.problems
    assert "'bad' skipped" in problem.message
    G = build_graph(result.spans)
    assert G.graph["missing_traces"] == {"ef" * 16}
