"""The memtrace CLI on real span files: inspect and graph, for people and for machines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.cli import main
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

from scenario import run_pipeline

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def spans_file(tmp_path) -> Path:
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    run_pipeline(provider)
    provider.shutdown()
    return path


def test_inspect_json(spans_file) -> None:
    outcome = CliRunner().invoke(main, ["inspect", "--json", str(spans_file)])
    assert outcome.exit_code == 0, outcome.output
    summary = json.loads(outcome.stdout)
    assert summary["operations_by_category"]["update"] == 1
    assert summary["operations_by_category"]["deletion"] == 1
    assert summary["evaluations"] == 2
    (failed,) = summary["failed_evaluations"]
    assert (failed["case"], failed["gold"], failed["prediction"]) == ("q1", "Lisbon", "Porto")
    assert summary["traces"] == 4 and summary["content_captured"] is True


def test_inspect_table_escapes_user_content(tmp_path) -> None:
    path = tmp_path / "s.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    from memtrace_otel import Category, MemoryTracer

    mt = MemoryTracer(provider, capture_content=True)
    with mt.operation("judge", Category.EVALUATION) as op:
        op.record_evaluation(False, question="[bold red]pwn[/]", prediction="x", gold="y")
    provider.shutdown()
    outcome = CliRunner().invoke(main, ["inspect", str(path)], terminal_width=200)
    assert outcome.exit_code == 0
    assert "[bold red]pwn[/]" in outcome.stdout


def test_inspect_warns_when_spans_carry_no_content(tmp_path) -> None:
    path = tmp_path / "private.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    run_pipeline(provider, capture_content=False)
    provider.shutdown()
    outcome = CliRunner().invoke(main, ["inspect", str(path)], terminal_width=200)
    assert "carry no content" in outcome.stdout


@pytest.mark.parametrize("fmt", ["json", "graphml", "dot"])
def test_graph_formats(spans_file, fmt) -> None:
    outcome = CliRunner().invoke(main, ["graph", "--format", fmt, str(spans_file)])
    assert outcome.exit_code == 0, outcome.output
    if fmt == "json":
        G = nx.node_link_graph(json.loads(outcome.stdout), edges="edges")
        assert "answer:q1@1" in G and G.nodes["mem:D1:1@2"]["kind"] == "memory_unit"
    elif fmt == "graphml":
        G = nx.parse_graphml(outcome.stdout)
        assert "answer:q1@1" in G
    else:
        assert outcome.stdout.startswith("digraph memtrace {") and '"answer:q1@1"' in outcome.stdout


def test_graph_answer_slice_and_trace_filter(spans_file, tmp_path) -> None:
    runner = CliRunner()
    sliced = runner.invoke(main, ["graph", "--answer", "answer:q2@1", str(spans_file)])
    nodes = {n["id"] for n in json.loads(sliced.stdout)["nodes"]}
    assert "msg:D1:2@1" in nodes and "msg:D1:1@1" not in nodes and "answer:q1@1" not in nodes
    whole = json.loads(runner.invoke(main, ["graph", str(spans_file)]).stdout)
    trace_id = next(n["trace_id"] for n in whole["nodes"] if n.get("name") == "update")
    out = tmp_path / "g.json"
    traced = runner.invoke(main, ["graph", "--trace", trace_id, "-o", str(out), str(spans_file)])
    assert traced.exit_code == 0
    names = {n.get("name") for n in json.loads(out.read_text())["nodes"] if n["type"] == "operation"}
    assert names == {"update", "delete"}


def test_graph_domain_errors_are_one_line(spans_file) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["graph", "--answer", "nope@1", str(spans_file)])
    assert missing.exit_code == 1 and "'nope@1' is not in the graph" in missing.stderr
    assert "Traceback" not in missing.output
    usage = runner.invoke(main, ["graph", "--format", "png", str(spans_file)])
    assert usage.exit_code == 2


def test_python_dash_m_and_example_end_to_end(tmp_path) -> None:
    out = tmp_path / "spans"
    example = ROOT / "examples" / "offline_memory_agent.py"
    run = subprocess.run([sys.executable, str(example), "--out", str(out)],
                         capture_output=True, text=True, check=True)
    assert "questions right" in run.stdout
    inspect = subprocess.run([sys.executable, "-m", "memtrace_otel", "inspect", "--json", str(out)],
                             capture_output=True, text=True)
    assert inspect.returncode == 0, inspect.stderr
    summary = json.loads(inspect.stdout)
    assert summary["failed_evaluations"], "the example gets some questions wrong"
    assert summary["evaluations"] > len(summary["failed_evaluations"]), "and some right"
    assert summary["traces"] >= 4 and summary["missing_traces"] == []


def test_example_failures_are_attributed_to_what_the_example_got_wrong(tmp_path) -> None:
    # The example's bugs are known by construction: its extractor keeps only sentences that
    # start with "I ", its store keys facts by verb (a second "adopted" overwrites the first),
    # retrieval keeps one record, and the answerer keeps two words.
    out = tmp_path / "spans"
    example = ROOT / "examples" / "offline_memory_agent.py"
    subprocess.run([sys.executable, str(example), "--out", str(out)], check=True, capture_output=True)
    outcome = CliRunner().invoke(main, ["analyze", "--json", str(out)])
    assert outcome.exit_code == 0, outcome.output
    verdicts = {f["case_id"]: (f["error_type"], f["operation_name"])
                for f in json.loads(outcome.stdout)["failures"]}
    assert verdicts == {
        "q1": ("ExtractionError", "agent.extract"),
        "q2": ("UpdateError", "agent.store"),
        "q4": ("ExtractionError", "agent.extract"),
        "q5": ("RetrievalError", "agent.search"),
        "q6": ("ExtractionError", "agent.extract"),
        "q7": ("ResponseError", "agent.generate"),
    }
