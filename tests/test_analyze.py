"""``memtrace analyze`` on span files written by the project's own OTLP/JSON Lines exporter."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from test_attribution_lineage import FACT, Memory, rag_history

from memtrace_otel.attribution.runner import NO_CONTENT_WARNING, attribute_failures, summarize
from memtrace_otel.cli import main
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.graph.build import build_graph
from memtrace_otel.spans.readers import read_span_files


def write_spans(path: str, scenario: Callable[[Memory], None], *, capture: bool = True) -> Memory:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    memory = Memory(provider, capture=capture)
    scenario(memory)
    provider.shutdown()
    return memory


def two_failures(memory: Memory) -> None:
    """A retrieval miss and a response error over one RAG store."""
    rag_history(memory)
    memory.ask("q1", ["D1:2", "D1:3"], "last year")
    memory.ask("q2", ["D1:1"], "[bold red]boom[/bold red]",
               question="When did [bold]Caroline[/bold] go to the LGBTQ support group?")
    memory.ask("q3", ["D1:2"], "lake sunrise", question="What did Melanie paint?", gold="lake sunrise",
               evidence=("D1:2",))


def many_failures(memory: Memory) -> None:
    """Twelve failed questions, enough for several worker processes."""
    rag_history(memory)
    for i in range(12):
        memory.ask(f"q{i}", ["D1:2"] if i % 2 else ["D1:1"], "last year")


@pytest.fixture
def spans(tmp_path) -> tuple[str, Memory]:
    path = str(tmp_path / "spans.jsonl")
    return path, write_spans(path, two_failures)


def run(*args: str):
    return CliRunner().invoke(main, ["analyze", *args])


def test_table_names_question_error_type_operation_and_trace(spans):
    path, memory = spans
    result = run(path)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "RetrievalError" in out and "ResponseError" in out
    assert "search" in out and "answer" in out
    trace_id = memory.ops["search q1"].split(":")[1]
    assert trace_id[:8] in out
    assert "Where failures concentrate" in out
    # User content is printed literally, never interpreted as markup.
    assert "[bold" in out


def test_json_is_data_only_with_verdicts_and_summary(spans):
    path, memory = spans
    result = CliRunner().invoke(main, ["analyze", "--json", path])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    verdicts = {row["case_id"]: row for row in data["failures"]}
    assert set(verdicts) == {"q1", "q2"}
    assert verdicts["q1"]["error_type"] == "RetrievalError"
    assert verdicts["q1"]["operation"] == memory.ops["search q1"]
    assert verdicts["q2"]["error_type"] == "ResponseError"
    assert verdicts["q2"]["operation"] == memory.ops["answer q2"]
    assert verdicts["q1"]["evidence_path"][0] == "msg:D1:1@1"
    assert data["summary"]["error_types"] == {"ResponseError": 1, "RetrievalError": 1}
    assert {row["name"] for row in data["summary"]["operations"]} == {"search", "answer"}


def test_bad_lines_are_reported_once_each_and_the_rest_is_analyzed(spans):
    path, _ = spans
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    result = CliRunner().invoke(main, ["analyze", "--json", path])
    assert result.exit_code == 3
    assert f"{os.path.basename(path)}:" in result.stderr and "Traceback" not in result.stderr
    assert len(json.loads(result.stdout)["failures"]) == 2
    strict = CliRunner().invoke(main, ["analyze", "--strict", path])
    assert strict.exit_code == 1 and "--strict" in strict.stderr


def test_missing_file_and_unknown_engine_are_clear_errors(tmp_path, spans):
    path, _ = spans
    missing = run(str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 1 and "nope.jsonl" in missing.stderr
    unknown = run("--engine", "psychic", path)
    assert unknown.exit_code == 2 and "lineage" in unknown.stderr


def test_without_content_the_warning_is_given_once(tmp_path):
    path = str(tmp_path / "bare.jsonl")
    write_spans(path, two_failures, capture=False)
    result = CliRunner().invoke(main, ["analyze", "--json", path])
    assert result.exit_code == 0
    assert result.stderr.count("no variable contents") == 1
    rows = json.loads(result.stdout)["failures"]
    assert len(rows) == 2 and all(r["confidence"] < 0.5 for r in rows)


def test_no_failures_says_so(tmp_path):
    path = str(tmp_path / "fine.jsonl")

    def passing(memory: Memory) -> None:
        memory.chunk("D1:1", FACT)
        memory.ask("q1", ["D1:1"], "7 May 2023")

    write_spans(path, passing)
    result = run(path)
    assert result.exit_code == 0 and "No failed evaluations" in result.output


def test_processes_give_the_same_verdicts_as_one(tmp_path):
    path = str(tmp_path / "many.jsonl")
    write_spans(path, many_failures)
    G = build_graph(read_span_files([path]).spans)
    seen: list[int] = []
    one = attribute_failures(G, "lineage", jobs=1)
    two = attribute_failures(G, "lineage", jobs=2, progress=lambda done, total: seen.append(done))
    assert [a.operation for a in one] == [a.operation for a in two]
    assert [a.error_type for a in one] == [a.error_type for a in two]
    assert seen and seen[-1] == 12
    summary = summarize(two)
    assert summary["failures"] == 12
    assert {row["name"] for row in summary["operations"]} == {"search", "answer"}
    cli = CliRunner().invoke(main, ["analyze", "--jobs", "2", "--json", path])
    assert cli.exit_code == 0 and len(json.loads(cli.stdout)["failures"]) == 12


def test_runner_warns_through_the_given_callback_once(tmp_path):
    path = str(tmp_path / "bare.jsonl")
    write_spans(path, two_failures, capture=False)
    G = build_graph(read_span_files([path]).spans)
    warnings: list[str] = []
    attribute_failures(G, warn=warnings.append)
    assert warnings == [NO_CONTENT_WARNING]
