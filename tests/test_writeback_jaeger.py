"""Live attribution into a real Jaeger v2 (issue 9, 6a): processor in process, OTLP out, query API in.

``examples/jaeger_writeback.py`` (the offline memory agent, content capture
off, the AttributionSpanProcessor beside a BatchSpanProcessor) exports over
OTLP/HTTP to Jaeger on loopback. A second, in-memory exporter on the same
provider is the reference of what was sent. Then, through Jaeger's query API
only: every trace holds every span sent (application and annotation), the
annotation spans carry their tags and sit under the right parents with the
links as references, and the tag search of ``docs/jaeger.md`` finds them.
Skipped with the reason when the Jaeger binary is not built.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.semconv import (
    EVIDENCE_EVENT,
    WRITEBACK_SCOPE,
    AnnotationSpan,
    ErrorType,
    MemTrace,
    MemTraceAttribution,
)

import jaeger_harness
from jaeger_harness import JaegerEndpoints

jaeger = jaeger_harness.jaeger  # the session fixture, visible to this module's tests

_EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
_POLL_SECONDS = 30.0
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_A = MemTraceAttribution


@dataclass
class LiveRun:
    service: str
    sent: list[ReadableSpan]
    stored: dict[str, list[dict[str, Any]]]  # trace id -> Jaeger's spans of that trace
    sessions: list[str]  # the ingestion traces, stored in Jaeger before any question was asked

    def sent_annotations(self, role: AnnotationSpan) -> list[ReadableSpan]:
        return [s for s in self.sent if s.name == role and s.instrumentation_scope is not None
                and s.instrumentation_scope.name == WRITEBACK_SCOPE]


def _hex_ids(span: ReadableSpan) -> tuple[str, str]:
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def _exporter(jaeger: JaegerEndpoints) -> OTLPSpanExporter:
    session = requests.Session()
    session.trust_env = False  # loopback only, whatever *_proxy says
    return OTLPSpanExporter(endpoint=jaeger.otlp_http_traces, timeout=10, session=session)


def _get_json(url: str) -> Any:
    """One GET of Jaeger's query API, as the UI makes it (the project's own client is not under test)."""
    with _DIRECT.open(url, timeout=10) as response:
        return json.load(response)


def _stored_trace(jaeger: JaegerEndpoints, trace_id: str, spans: int) -> list[dict[str, Any]]:
    """Jaeger stores asynchronously (its batch processor): poll until the whole trace is there."""
    deadline, last = time.monotonic() + _POLL_SECONDS, "never answered"
    while time.monotonic() < deadline:
        jaeger.assert_alive()
        try:
            found = [s for t in _get_json(f"{jaeger.query_url}/api/traces/{trace_id}")["data"]
                     for s in t["spans"]]
        except (OSError, ValueError) as error:  # 404 until the first span is stored
            last = str(error)
        else:
            if len(found) >= spans:
                return found
            last = f"{len(found)} of {spans} spans"
        time.sleep(0.2)
    raise AssertionError(f"trace {trace_id} not complete in Jaeger after {_POLL_SECONDS:g} s ({last}); "
                         f"Jaeger log:\n{jaeger.log_tail()}")


def _counts(spans: list[ReadableSpan]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for span in spans:
        counts[_hex_ids(span)[0]] += 1
    return counts


@pytest.fixture(scope="module")
def live_run(jaeger: JaegerEndpoints) -> LiveRun:
    sys.path.insert(0, str(_EXAMPLES))
    try:
        import jaeger_writeback
    finally:
        sys.path.remove(str(_EXAMPLES))
    service = f"memtrace-writeback-{uuid.uuid4().hex[:8]}"
    pipeline = jaeger_writeback.instrumented_provider(_exporter(jaeger), service)
    reference = InMemorySpanExporter()
    pipeline.provider.add_span_processor(SimpleSpanProcessor(reference))
    agent = jaeger_writeback.new_agent(pipeline)
    sessions = jaeger_writeback.ingest(agent)
    assert pipeline.provider.force_flush(10_000)
    ingested = _counts(list(reference.get_finished_spans()))
    assert set(sessions) == set(ingested)
    for trace_id, count in ingested.items():  # stored before any question: annotations come late
        _stored_trace(jaeger, trace_id, count)
    jaeger_writeback.ask(agent)
    pipeline.provider.shutdown()  # the documented way out: drains attribution, then the exporter
    sent = list(reference.get_finished_spans())
    stored = {trace_id: _stored_trace(jaeger, trace_id, count) for trace_id, count in _counts(sent).items()}
    return LiveRun(service, sent, stored, sessions)


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span.get("tags") or ()}


def _references(span: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(r["refType"], r["traceID"].rjust(32, "0"), r["spanID"].rjust(16, "0"))
            for r in span.get("references") or ()}


def _stored_span(run: LiveRun, span: ReadableSpan) -> dict[str, Any]:
    trace_id, span_id = _hex_ids(span)
    (found,) = [s for s in run.stored[trace_id] if s["spanID"].rjust(16, "0") == span_id]
    return found


def test_every_span_sent_is_in_jaeger(live_run: LiveRun) -> None:
    for trace_id, spans in live_run.stored.items():
        sent = {_hex_ids(s)[1] for s in live_run.sent if _hex_ids(s)[0] == trace_id}
        assert {s["spanID"].rjust(16, "0") for s in spans} == sent, trace_id
    application = [s for s in live_run.sent if s.instrumentation_scope.name != WRITEBACK_SCOPE]
    assert len(application) > 40  # the agent did run: sessions, questions, their memory operations


def test_each_failure_has_its_attribution_span_under_the_evaluation(live_run: LiveRun) -> None:
    failed = {_hex_ids(s) for s in live_run.sent
              if (s.attributes or {}).get(MemTrace.EVALUATION_PASSED) is False}
    attributions = live_run.sent_annotations(AnnotationSpan.ATTRIBUTION)
    assert failed and len(attributions) == len(failed)
    for span in attributions:
        stored, sent = _stored_span(live_run, span), dict(span.attributes or {})
        evaluation = (sent[_A.EVALUATION_TRACE_ID], sent[_A.EVALUATION_SPAN_ID])
        assert evaluation in failed and stored["operationName"] == AnnotationSpan.ATTRIBUTION
        tags = _tags(stored)
        for key in (_A.ERROR_TYPE, _A.ROOT_CAUSE_OPERATION_NAME, _A.ROOT_CAUSE_TRACE_ID,
                    _A.ROOT_CAUSE_SPAN_ID, _A.ENGINE, _A.EXPLANATION):
            assert tags[key] == sent[key], key
        assert tags["otel.status_code"] == "ERROR"
        blamed = (sent[_A.ROOT_CAUSE_TRACE_ID], sent[_A.ROOT_CAUSE_SPAN_ID])
        status = f"{sent[_A.ERROR_TYPE]} in {sent[_A.ROOT_CAUSE_OPERATION_NAME]}"
        assert tags["otel.status_description"] == status
        assert _references(stored) == {("CHILD_OF", *evaluation), ("FOLLOWS_FROM", *blamed)}
        logs = {_tags({"tags": log["fields"]}).get("event"): _tags({"tags": log["fields"]})
                for log in stored["logs"]}
        assert logs["gen_ai.evaluation.result"]["gen_ai.evaluation.score.label"] == sent[_A.ERROR_TYPE]
        assert _A.EVIDENCE_PATH in logs[EVIDENCE_EVENT]  # the path is a log, not a tag
        assert _A.EVIDENCE_PATH not in tags
        (blamed_span,) = [s for s in live_run.stored[blamed[0]] if s["spanID"].rjust(16, "0") == blamed[1]]
        assert tags[_A.ROOT_CAUSE_SPAN_NAME] == blamed_span["operationName"]  # as Jaeger names it
        assert not stored.get("warnings"), stored.get("warnings")  # no clock-skew warning


def test_each_root_cause_trace_has_its_root_cause_span(live_run: LiveRun) -> None:
    root_causes = live_run.sent_annotations(AnnotationSpan.ROOT_CAUSE)
    assert len(root_causes) == len(live_run.sent_annotations(AnnotationSpan.ATTRIBUTION))
    late = 0
    for span in root_causes:
        stored, sent = _stored_span(live_run, span), dict(span.attributes or {})
        blamed = (sent[_A.ROOT_CAUSE_TRACE_ID], sent[_A.ROOT_CAUSE_SPAN_ID])
        assert _hex_ids(span)[0] == blamed[0]  # stored in the blamed span's own trace
        assert blamed[1] in {s["spanID"].rjust(16, "0") for s in live_run.stored[blamed[0]]}
        evaluation = (sent[_A.EVALUATION_TRACE_ID], sent[_A.EVALUATION_SPAN_ID])
        assert _references(stored) == {("CHILD_OF", *blamed), ("FOLLOWS_FROM", *evaluation)}
        assert _tags(stored)[_A.ERROR_TYPE] == sent[_A.ERROR_TYPE]
        late += blamed[0] in live_run.sessions
    assert late  # some verdicts blame ingestion: their spans joined traces Jaeger already stored


def _tag_search(jaeger: JaegerEndpoints, service: str, tags: dict[str, str]) -> set[str]:
    """The search of docs/jaeger.md, as the UI sends it."""
    end = int(time.time() * 1_000_000)
    query = urllib.parse.urlencode({"service": service, "tags": json.dumps(tags), "limit": "100",
                                    "start": str(end - 3600 * 1_000_000), "end": str(end)})
    return {t["traceID"].rjust(32, "0") for t in _get_json(f"{jaeger.query_url}/api/traces?{query}")["data"]}


@pytest.mark.parametrize("error_type", [ErrorType.RETRIEVAL, ErrorType.UPDATE])
def test_the_tag_search_finds_the_annotated_traces(jaeger: JaegerEndpoints, live_run: LiveRun,
                                                   error_type: ErrorType) -> None:
    expected = {_hex_ids(s)[0] for s in live_run.sent if s.instrumentation_scope.name == WRITEBACK_SCOPE
                and (s.attributes or {}).get(_A.ERROR_TYPE) == error_type.value}
    assert expected  # the agent makes this kind of mistake, so the search is not vacuous
    assert _tag_search(jaeger, live_run.service, {_A.ERROR_TYPE: error_type.value}) == expected
