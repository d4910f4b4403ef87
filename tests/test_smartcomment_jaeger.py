"""smartcomment graphs opened in a real Jaeger v2: ``memtrace import smartcomment --endpoint`` -> Jaeger
(OTLP/HTTP on loopback) -> ``/api/traces`` -> the same sessions, operations, annotations and verdicts.

Jaeger keeps start times in whole microseconds and turns array attributes into
JSON strings; the fixtures' operations share milliseconds (the converter orders
them by nanoseconds within one), so this checks that nothing the analysis needs
is lost on the way through a trace viewer.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_smartcomment import FIXTURES, GRAPHS, _kept, _source

from memtrace_otel.cli import main
from memtrace_otel.semconv import MemTrace, SmartComment
from memtrace_otel.spans.jaeger_query import JaegerQueryClient
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.readers import read_span_files
from memtrace_otel.spans.smartcomment import NONE_OPERATION

import jaeger_harness
from jaeger_harness import JaegerEndpoints, wait_for_trace

jaeger = jaeger_harness.jaeger  # the session fixture, visible to this module's tests

_VERDICT = ("error_type", "operation", "operation_name", "category", "trace_id", "span_id", "step",
            "evaluation", "question", "prediction", "gold")


@pytest.fixture(scope="module")
def direct() -> list[SpanRecord]:
    read = read_span_files(GRAPHS)
    assert read.problems == []
    return read.spans


@pytest.fixture(scope="module")
def jaeger_files(jaeger: JaegerEndpoints, direct: list[SpanRecord],
                 tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Import the fixtures into Jaeger with the CLI; every trace saved as a Jaeger UI download."""
    result = CliRunner().invoke(main, ["import", "smartcomment", str(FIXTURES), "--endpoint",
                                       jaeger.otlp_http, "--json"])
    assert result.exit_code == 0, result.output
    counts = Counter(span.trace_id for span in direct)
    assert json.loads(result.stdout)["spans"] == len(direct)
    folder = tmp_path_factory.mktemp("smartcomment-jaeger")
    files = []
    for trace_id, spans in sorted(counts.items()):
        document = wait_for_trace(jaeger, trace_id, spans)
        files.append(folder / f"{trace_id}.json")
        files[-1].write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return files


@pytest.fixture(scope="module")
def from_jaeger(jaeger: JaegerEndpoints, direct: list[SpanRecord],
                jaeger_files: list[Path]) -> list[SpanRecord]:
    """The imported traces as the project's Jaeger query client reads them back."""
    wanted = sorted({span.trace_id for span in direct})
    fetched = JaegerQueryClient(jaeger.query_url).fetch_traces(wanted)
    assert [str(p) for p in fetched.problems] == []
    assert fetched.received == set(wanted)
    return fetched.spans


def _sessions(spans: list[SpanRecord]) -> dict[str, tuple[str, str]]:
    """trace id -> (graph id, session id) of its root span."""
    return {s.trace_id: (s.attributes[SmartComment.GRAPH_ID], s.attributes[SmartComment.SESSION_ID])
            for s in spans if SmartComment.SESSION_ID in s.attributes}


def test_every_session_is_a_trace_and_every_operation_a_span(from_jaeger: list[SpanRecord]) -> None:
    sessions = _sessions(from_jaeger)
    assert len(sessions) == len(set(sessions.values())), "one trace per session"
    wanted_sessions, wanted_ops = set(), set()
    for path in GRAPHS:
        document = _source(path)
        graph, data = document["graph_id"], document["data"]
        wanted_sessions |= {(graph, s["session_id"]) for s in data["sessions"]}
        wanted_ops |= {(graph, o["session_id"], o["op_id"], o["op_name"]) for o in data["operations"]
                       if o["op_id"] != NONE_OPERATION}
    assert set(sessions.values()) == wanted_sessions
    roots = {s.trace_id: s.span_id for s in from_jaeger if SmartComment.SESSION_ID in s.attributes}
    ops = {(*sessions[s.trace_id], s.attributes[SmartComment.OP_ID], s.name) for s in from_jaeger
           if SmartComment.OP_ID in s.attributes and s.parent_span_id == roots[s.trace_id]}
    assert ops >= wanted_ops and len(wanted_ops) > 100
    assert {s.service_name for s in from_jaeger} == {_source(p)["project_id"] for p in GRAPHS}


def test_annotations_arrive_with_their_labels(direct: list[SpanRecord],
                                              from_jaeger: list[SpanRecord]) -> None:
    cases = {s.attributes[MemTrace.EVALUATION_CASE]: s for s in from_jaeger
             if MemTrace.EVALUATION_CASE in s.attributes}
    imported = {s.attributes[MemTrace.EVALUATION_CASE]: s for s in direct
                if MemTrace.EVALUATION_CASE in s.attributes}
    annotations = [a for path in GRAPHS for a in _source(path)["data"]["annotations"]]
    assert len(cases) == len(annotations) == 40
    for annotation in annotations:
        span = cases[annotation["query_id"]]
        a = span.attributes
        assert (a[MemTrace.EVALUATION_QUESTION], a[MemTrace.EVALUATION_PREDICTION],
                a[MemTrace.EVALUATION_PASSED], a[MemTrace.EVALUATION_GOLD],
                a[SmartComment.LABEL_ERROR_TYPE], a[SmartComment.LABEL_OP_ID]) == (
            annotation["query"], annotation["prediction"], False, "; ".join(annotation["golden_answers"]),
            annotation["final_error_type"], annotation["final_op_id"])
        want = imported[annotation["query_id"]]  # on the same evaluation span, reading the same answer
        assert (span.span_id, a[MemTrace.EVALUATION_ANSWER], a[MemTrace.EVALUATION_EVIDENCE],
                a[MemTrace.INPUTS], a.get(SmartComment.LABEL_SPAN_ID)) == (
            want.span_id, want.attributes[MemTrace.EVALUATION_ANSWER],
            want.attributes[MemTrace.EVALUATION_EVIDENCE], want.attributes[MemTrace.INPUTS],
            want.attributes.get(SmartComment.LABEL_SPAN_ID))


# Needs memtrace_otel/spans/jaeger_json.py (not this test's owner) to decode the smartcomment.* array keys
# (edge ids/sources/targets/categories, variable ids/categories, golden answers, evidence ids) as it does
# memtrace.* ones; checked to pass with them added. Strict: once fixed, drop the mark.
def test_jaeger_gives_back_every_span_as_imported(direct: list[SpanRecord],
                                                  from_jaeger: list[SpanRecord]) -> None:
    for path in GRAPHS:
        document = _source(path)
        _kept([s for s in from_jaeger if s.attributes.get(SmartComment.GRAPH_ID) == document["graph_id"]],
              document["data"])
    want = {(s.trace_id, s.span_id): s for s in direct}
    assert len(from_jaeger) == len(want)
    for span in from_jaeger:
        imported = want[(span.trace_id, span.span_id)]
        assert (span.name, span.parent_span_id, span.service_name, span.attributes) == (
            imported.name, imported.parent_span_id, imported.service_name, imported.attributes), span.name
        assert span.start_time_unix_nano == imported.start_time_unix_nano // 1000 * 1000


def _verdicts(result: Any) -> dict[str, tuple[Any, ...]]:
    assert result.exit_code == 0, result.output
    failures = json.loads(result.stdout)["failures"]
    return {f["case_id"]: tuple(f[k] for k in _VERDICT) for f in failures}


def test_analyze_gives_the_same_verdicts_on_what_jaeger_returns(jaeger: JaegerEndpoints,
                                                                jaeger_files: list[Path]) -> None:
    runner = CliRunner()
    on_fixtures = _verdicts(runner.invoke(main, ["analyze", "--json", *map(str, GRAPHS)]))
    on_jaeger = _verdicts(runner.invoke(main, ["analyze", "--json", "--jaeger", jaeger.query_url,
                                               *map(str, jaeger_files)]))
    assert len(on_fixtures) == 40
    assert on_jaeger == on_fixtures
    by_type: dict[str, int] = defaultdict(int)
    for verdict in on_jaeger.values():
        by_type[verdict[0]] += 1
    assert len(by_type) == 5, by_type  # not vacuous: every error type is among the verdicts
