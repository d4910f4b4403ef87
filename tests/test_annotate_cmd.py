"""``memtrace annotate`` (issue 25, item 5): failures already stored in a real Jaeger v2 get annotated.

The offline memory agent (``examples/offline_memory_agent.py``) exports its traces to Jaeger by
OTLP/HTTP with no attribution of its own. ``memtrace annotate`` then searches Jaeger for the failed
evaluations of the agent's service, attributes them and writes the annotations back by OTLP; what
it wrote is read back through Jaeger's query API: one ``memtrace.attribution`` span under each
failed evaluation, a ``memtrace.root_cause`` span under each blamed span, both under the
application's service (a tag search of it finds them). A second run over the same window finds
every failure annotated and writes nothing. Skipped with the reason when Jaeger is not built.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner, Result
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import MemoryTracer
from memtrace_otel.cli import main
from memtrace_otel.cli.annotate_cmd import parse_time
from memtrace_otel.semconv import AnnotationSpan, MemTrace, MemTraceAttribution
from memtrace_otel.spans.jaeger_query import JaegerQueryClient

import jaeger_harness
from jaeger_harness import JaegerEndpoints, wait_for_trace

jaeger = jaeger_harness.jaeger  # the session fixture, visible to this module's tests

_EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
_A = MemTraceAttribution


@dataclass
class StoredRun:
    """The agent's run, as sent (the reference) and as Jaeger holds it."""

    service: str
    sent: list[ReadableSpan]
    started: float

    def failed(self) -> set[tuple[str, str]]:
        return {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in self.sent
                if (s.attributes or {}).get(MemTrace.EVALUATION_PASSED) is False}


def run_agent_into(jaeger: JaegerEndpoints, service: str, *, capture_content: bool = True,
                   evaluator: str | None = None) -> StoredRun:
    """The offline agent's sessions and questions exported to ``jaeger`` as ``service``, no attribution;
    returns once Jaeger holds every span. With ``evaluator`` the answers are judged by that evaluator's
    ``gen_ai.evaluation.result`` event on the question span, not by the agent's judge operation."""
    sys.path.insert(0, str(_EXAMPLES))
    try:
        import jaeger_writeback
        from offline_memory_agent import TinyMemory
    finally:
        sys.path.remove(str(_EXAMPLES))
    started = time.time()
    session = requests.Session()
    session.trust_env = False  # loopback only, whatever *_proxy says
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    reference = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(reference))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=jaeger.otlp_http_traces,
                                                                    timeout=10, session=session)))
    agent = TinyMemory(MemoryTracer(provider, capture_content=capture_content), provider.get_tracer(service),
                       evaluator=evaluator)
    jaeger_writeback.ingest(agent)
    jaeger_writeback.ask(agent)
    provider.shutdown()
    sent = list(reference.get_finished_spans())
    for trace_id, count in Counter(f"{s.context.trace_id:032x}" for s in sent).items():
        wait_for_trace(jaeger, trace_id, count)
    return StoredRun(service, sent, started)


def _annotate(jaeger: JaegerEndpoints, service: str, *extra: str) -> tuple[Result, dict[str, Any]]:
    result = CliRunner().invoke(main, ["annotate", "--jaeger", jaeger.query_url, "--service", service,
                                       "--lookback", "600", "--backend-otlp", jaeger.otlp_http_traces,
                                       "--json", *extra])
    try:
        outcome = json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"exit {result.exit_code}, not JSON on stdout: {result.output}") from None
    return result, outcome


def _spans(jaeger: JaegerEndpoints, trace_id: str) -> list[dict[str, Any]]:
    return [s for t in JaegerQueryClient(jaeger.query_url).fetch_trace(trace_id)["data"] for s in t["spans"]]


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span.get("tags") or ()}


def _wait_annotations(jaeger: JaegerEndpoints, run: StoredRun, seconds: float = 30.0) -> dict[str, list]:
    """Poll until every failed evaluation's trace holds its attribution span; trace id -> its spans."""
    deadline = time.monotonic() + seconds
    while True:
        traces = {trace_id: _spans(jaeger, trace_id) for trace_id, _ in run.failed()}
        done = {(t, s["references"][0]["spanID"].rjust(16, "0")) for t, spans in traces.items() for s in spans
                if s["operationName"] == AnnotationSpan.ATTRIBUTION and s.get("references")}
        if run.failed() <= done or time.monotonic() > deadline:
            return traces
        time.sleep(0.3)


@pytest.fixture(scope="module")
def stored(jaeger: JaegerEndpoints) -> StoredRun:
    return run_agent_into(jaeger, f"memtrace-annotate-{uuid.uuid4().hex[:8]}")


def test_annotate_writes_each_failure_once_and_a_second_run_writes_nothing(
        jaeger: JaegerEndpoints, stored: StoredRun) -> None:
    failed = stored.failed()
    assert len(failed) >= 2  # the agent does get answers wrong, so the run is not vacuous

    first, outcome = _annotate(jaeger, stored.service, "--backend-otlp", jaeger.otlp_http)  # base URL
    assert first.exit_code == 0, first.output
    assert outcome["failures"] == len(failed) and outcome["already_annotated"] == 0
    assert outcome["annotated"] == len(failed)
    assert {(row["trace_id"], row["span_id"]) for row in outcome["annotations"]} == failed
    attributed = [row for row in outcome["annotations"] if row["root_cause_span_id"]]
    assert attributed  # verdicts with a root cause: two spans each, one without: one
    assert outcome["spans_written"] == len(failed) + len(attributed)

    traces = _wait_annotations(jaeger, stored)
    for trace_id, span_id in failed:
        (annotation,) = [s for s in traces[trace_id] if s["operationName"] == AnnotationSpan.ATTRIBUTION]
        parents = {(r["traceID"].rjust(32, "0"), r["spanID"].rjust(16, "0"))
                   for r in annotation["references"] if r["refType"] == "CHILD_OF"}
        assert parents == {(trace_id, span_id)}  # under the failed evaluation
        tags = _tags(annotation)
        row = next(r for r in outcome["annotations"] if (r["trace_id"], r["span_id"]) == (trace_id, span_id))
        assert tags.get(_A.ERROR_TYPE) == row["error_type"]
        assert tags["otel.scope.name"] == "memtrace_otel.writeback"
    for row in attributed:  # the root-cause side, in the blamed span's own trace
        spans = _spans(jaeger, row["root_cause_trace_id"])
        assert any(s["operationName"] == AnnotationSpan.ROOT_CAUSE
                   and s["references"][0]["spanID"].rjust(16, "0") == row["root_cause_span_id"]
                   for s in spans)

    # Written with the application's resource: the tag search of its own service finds them.
    error_type = attributed[0]["error_type"]
    end = time.time_ns()
    found = JaegerQueryClient(jaeger.query_url).search_traces(
        _A.ERROR_TYPE, error_type, service=stored.service, start_unix_nano=end - 600 * 10**9,
        end_unix_nano=end, limit=100)
    assert {r["trace_id"] for r in outcome["annotations"] if r["error_type"] == error_type} <= found.received

    second, again = _annotate(jaeger, stored.service)
    assert second.exit_code == 0, second.output
    assert again["failures"] == len(failed) and again["already_annotated"] == len(failed)
    assert again["annotated"] == 0 and again["spans_written"] == 0 and again["annotations"] == []


def test_an_evaluators_failing_events_are_found_by_their_name(jaeger: JaegerEndpoints) -> None:
    """No ``memtrace.evaluation.passed`` anywhere: the verdicts are an outside evaluator's GenAI events on
    the question spans. Without ``--evaluation-name`` the search finds nothing to do; with it, each
    failing result is attributed and annotated under the span it is on, and a second run writes nothing."""
    run = run_agent_into(jaeger, f"memtrace-annotate-evaluator-{uuid.uuid4().hex[:8]}",
                         evaluator="correctness")
    judged = {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in run.sent
              for e in s.events if e.name == "gen_ai.evaluation.result"}
    failed = {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in run.sent
              for e in s.events if (e.attributes or {}).get("gen_ai.evaluation.score.label") == "fail"}
    assert len(judged) == 7 and 2 <= len(failed) < len(judged)  # some pass, some fail: not vacuous
    assert not run.failed()  # no memtrace verdict at all

    blind, outcome = _annotate(jaeger, run.service, "--dry-run")
    assert blind.exit_code == 0, blind.output
    assert outcome["failures"] == 0 and outcome["traces_searched"] == 0

    first, outcome = _annotate(jaeger, run.service, "--evaluation-name", "correctness")
    assert first.exit_code == 0, first.output
    assert outcome["failures"] == len(failed) and outcome["annotated"] == len(failed)
    assert {(row["trace_id"], row["span_id"]) for row in outcome["annotations"]} == failed
    assert all(row["root_cause_span_id"] for row in outcome["annotations"])
    deadline = time.monotonic() + 30
    while True:  # each annotation lands under the question span that carries the failing result
        under = {(t, s["references"][0]["spanID"].rjust(16, "0"))
                 for t, _ in failed for s in _spans(jaeger, t)
                 if s["operationName"] == AnnotationSpan.ATTRIBUTION and s.get("references")}
        if failed <= under or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert under == failed

    second, again = _annotate(jaeger, run.service, "--evaluation-name", "correctness",
                              "--evaluation-name", "relevance")  # a name nobody wrote finds nothing more
    assert second.exit_code == 0, second.output
    assert again["failures"] == len(failed) and again["already_annotated"] == len(failed)
    assert again["spans_written"] == 0


def test_a_dry_run_writes_nothing(jaeger: JaegerEndpoints) -> None:
    run = run_agent_into(jaeger, f"memtrace-annotate-dry-{uuid.uuid4().hex[:8]}")
    result, outcome = _annotate(jaeger, run.service, "--dry-run")
    assert result.exit_code == 0, result.output
    assert outcome["spans_written"] == 0 and len(outcome["annotations"]) == len(run.failed())
    time.sleep(1.0)  # what a write would have taken to be stored (its batch timeout is 100 ms)
    for trace_id, _ in run.failed():
        assert not any(s["operationName"] == AnnotationSpan.ATTRIBUTION for s in _spans(jaeger, trace_id))


def test_a_window_with_no_failures_annotates_nothing(jaeger: JaegerEndpoints, stored: StoredRun) -> None:
    before = str(stored.started - 60)  # a minute before the agent ran
    result, outcome = _annotate(jaeger, stored.service, "--until", before, "--lookback", "60")
    assert result.exit_code == 0, result.output
    assert outcome["failures"] == 0 and outcome["spans_written"] == 0


def test_an_unreachable_backend_is_exit_1_in_one_line() -> None:
    result = CliRunner().invoke(main, ["annotate", "--jaeger", "http://127.0.0.1:9", "--service", "x",
                                       "--dry-run"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output and "nothing annotated" in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--service", "x", "--dry-run"], "--jaeger URL or --tempo URL"),
    (["--jaeger", "http://127.0.0.1:9", "--service", "x"], "--backend-otlp"),
    (["--jaeger", "http://127.0.0.1:9", "--service", "x", "--dry-run", "--since", "2030-01-01",
      "--until", "2029-01-01"], "window is empty"),
    (["--jaeger", "http://127.0.0.1:9", "--service", "x", "--dry-run", "--since", "yesterday"],
     "neither Unix seconds nor an ISO 8601"),
    (["--jaeger", "http://127.0.0.1:9", "--service", "x", "--backend-otlp", "ftp://h/"], "not http(s)://"),
])
def test_usage_errors_are_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["annotate", *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_parse_time_reads_unix_seconds_and_iso_8601() -> None:
    assert parse_time("1700000000.5") == 1700000000.5
    assert parse_time("2023-11-14T22:13:20+00:00") == parse_time("2023-11-14T22:13:20") == 1700000000.0
    assert parse_time("2023-11-14T23:13:20+01:00") == 1700000000.0
    with pytest.raises(ValueError, match="not a time"):
        parse_time("-5")


def test_tempo_searches_the_boolean_attribute_unquoted() -> None:
    """TraceQL compares a boolean with a bare ``false``: ``"false"`` (a string) would match nothing."""
    import http.server
    import threading
    import urllib.parse

    from memtrace_otel.spans.backend import FailureSearch
    from memtrace_otel.spans.tempo_query import TempoQueryClient

    asked: list[dict[str, list[str]]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query))
            body = json.dumps({"traces": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = TempoQueryClient(f"http://127.0.0.1:{server.server_address[1]}")
        assert isinstance(client, FailureSearch)
        fetch = client.search_failed_evaluations(service="svc", start_unix_nano=0, end_unix_nano=10**18,
                                                 limit=7)
        named = client.search_evaluator_results('say "no"', service="svc", start_unix_nano=0,
                                                end_unix_nano=10**18, limit=7)
    finally:
        server.shutdown()
        server.server_close()
    assert fetch.problems == [] and fetch.received == set() and not fetch.limited
    assert named.problems == [] and named.received == set()
    query, by_name = asked
    assert query["q"] == ['{ resource.service.name = "svc" && span.memtrace.evaluation.passed = false }']
    assert query["limit"] == ["7"]
    # an evaluator's name is an attribute of the span's event: TraceQL's event scope, the value quoted
    assert by_name["q"] == ['{ resource.service.name = "svc" && '
                            'event.gen_ai.evaluation.name = "say \\"no\\"" }']


def test_a_search_that_hits_the_limit_is_exit_3(jaeger: JaegerEndpoints, stored: StoredRun) -> None:
    result, outcome = _annotate(jaeger, stored.service, "--limit", "1", "--dry-run")
    assert result.exit_code == 3, result.output
    assert outcome["limited"] == [stored.service] and outcome["traces_searched"] == 1
    assert "hit --limit 1" in result.stderr
