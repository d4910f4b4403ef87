"""`memtrace serve` encodes its annotation spans itself: the bytes are the request the SDK's path (a
tracer, the span moved under its parent's resource, the SDK's OTLP encoder) makes of the same spans."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import SpanContext, TraceFlags

from memtrace_otel.attribution import Attribution, FailureCase
from memtrace_otel.collector.export import Answer
from memtrace_otel.collector.otlp_encode import AnnotationEncoder
from memtrace_otel.collector.serve import VerdictLogSender
from memtrace_otel.semconv import WRITEBACK_SCOPE, AnnotationSpan, ErrorType, MemTraceAttribution
from memtrace_otel.version import __version__
from memtrace_otel.writeback.annotations import Annotation, annotations_of, write

_T0 = 1_700_000_000 * 10**9
_EVAL_TRACE, _EVAL_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
_ROOT_TRACE, _ROOT_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
_HOST_SPAN = "1111aaaa2222bbbb"
_EVAL, _MEM = f"op:{_EVAL_TRACE}:{_EVAL_SPAN}", f"op:{_ROOT_TRACE}:{_ROOT_SPAN}"
_RESOURCE = Resource.create({"service.name": "memtrace"})


def _graph() -> nx.DiGraph:
    G = nx.DiGraph()
    G.add_node("msg:D1:1@1", type="variable", name="msg:D1:1", version=1, kind="message",
               content="I moved to Lisbon")
    G.add_node(_MEM, type="operation", name="agent.store", span_name="update_memory tiny-memory",
               category="update", service="tiny-app", start=_T0, end=_T0 + 5_000, trace_id=_ROOT_TRACE,
               span_id=_ROOT_SPAN)
    G.add_node("mem:1@2", type="variable", name="mem:1", version=2, kind="memory_unit",
               content="User moved to Porto — «é»")
    G.add_edge("msg:D1:1@1", _MEM, role="input")
    G.add_edge(_MEM, "mem:1@2", role="output")
    G.add_node(_EVAL, type="operation", name="judge", span_name="judge", start=_T0 + 10**9,
               end=_T0 + 10**9 + 7_000, trace_id=_EVAL_TRACE, span_id=_EVAL_SPAN)
    # a stage of a mem0 add recorded as an event of its host span (the verdict names the host)
    G.add_node(f"op:{_ROOT_TRACE}:stage1", type="operation", name="extract", category="extraction",
               stage_of=_HOST_SPAN, trace_id=_ROOT_TRACE, span_id="stage1", start=_T0, end=_T0 + 10)
    G.add_node(f"op:{_ROOT_TRACE}:{_HOST_SPAN}", type="operation", name="mem0.add", span_name="add mem0",
               trace_id=_ROOT_TRACE, span_id=_HOST_SPAN, start=_T0 - 10, end=_T0 + 20)
    return G


def _verdicts() -> list[Attribution]:
    case = FailureCase(_EVAL)
    blamed = Attribution("lineage", case, operation=_MEM, trace_id=_ROOT_TRACE, span_id=_ROOT_SPAN,
                         operation_name="agent.store", category="update", error_type=ErrorType.UPDATE,
                         confidence=0.9, explanation="agent.store lost 'Lisbon': " + "x" * 5000,
                         evidence_path=["msg:D1:1@1", _MEM, "mem:1@2", _EVAL] * 40)
    stage = Attribution("lineage", case, operation=f"op:{_ROOT_TRACE}:stage1", trace_id=_ROOT_TRACE,
                        span_id="stage1", operation_name="extract", category="extraction",
                        error_type=ErrorType.EXTRACTION, confidence=0.5, step_span_id="abab" * 4,
                        step_name="chat gpt")
    unattributed = Attribution("lineage", case, failure_reason="no evidence named")
    return [blamed, stage, unattributed]


def _sdk_request(annotations: Sequence[Annotation],
                 resources: Mapping[tuple[str, str], Mapping[str, Any]]) -> tuple[bytes, list[int]]:
    """What serve sent before it encoded annotations itself: SDK spans under their parents' resources."""
    tracer = TracerProvider(resource=_RESOURCE).get_tracer(WRITEBACK_SCOPE, __version__)
    moved: list[ReadableSpan] = []
    made: dict[tuple[tuple[str, str], ...], Resource] = {}
    for annotation in annotations:
        span: ReadableSpan = write(tracer, annotation)  # type: ignore[assignment]
        parent = annotation.parent
        attributes = resources.get((f"{parent.trace_id:032x}", f"{parent.span_id:016x}"))
        if attributes:
            key = tuple(sorted((name, repr(value)) for name, value in attributes.items()))
            resource = made.setdefault(key, Resource(dict(attributes)))
            span = ReadableSpan(
                name=span.name, context=span.context, parent=span.parent, resource=resource,
                attributes=span.attributes, events=span.events, links=span.links, kind=span.kind,
                status=span.status, start_time=span.start_time, end_time=span.end_time,
                instrumentation_scope=span.instrumentation_scope)
        moved.append(span)
    return encode_spans(moved).SerializeToString(), [span.context.span_id for span in moved]


def _numbered(body: bytes, span_ids: Sequence[int]) -> bytes:
    """``body`` with each annotation's random span id replaced by its position."""
    for number, span_id in enumerate(span_ids):
        assert span_id != 0
        body = body.replace(span_id.to_bytes(8, "big"), f"SPANID{number:02d}".encode())
    return body


_APP = {"service.name": "tiny-app", "host.name": "h1", "deployment.environment": "test"}
_RESOURCES: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
    "none": {},
    "one service": {(_EVAL_TRACE, _EVAL_SPAN): _APP, (_ROOT_TRACE, _ROOT_SPAN): dict(reversed(_APP.items()))},
    "two services": {(_EVAL_TRACE, _EVAL_SPAN): _APP,
                     (_ROOT_TRACE, _HOST_SPAN): {"service.name": "ingest", "process.pid": 7, "weight": 0.5,
                                                 "tags": ["a", "b"], "nested": {"k": 1, "l": [True, None]},
                                                 "none": None, "mixed": [1, "a"], "huge": 1 << 70}},
}


@pytest.mark.parametrize("resources", list(_RESOURCES), ids=str)
@pytest.mark.parametrize("quotable", [True, False])
def test_serve_encodes_the_bytes_the_sdk_path_made(resources: str, quotable: bool) -> None:
    marks = {MemTraceAttribution.PROVISIONAL: True, MemTraceAttribution.SUPERSEDES: ["00000000000000aa"]}
    annotations = annotations_of(_graph(), _verdicts(), include_explanation=quotable, marks=marks)
    assert [a.role for a in annotations] == [AnnotationSpan.ATTRIBUTION, AnnotationSpan.ROOT_CAUSE] * 2 + [
        AnnotationSpan.ATTRIBUTION]
    given = _RESOURCES[resources]
    body, span_ids = AnnotationEncoder(_RESOURCE, WRITEBACK_SCOPE, __version__).encode(annotations, given)
    expected, sdk_ids = _sdk_request(annotations, given)
    assert len(set(span_ids)) == len(annotations)
    assert _numbered(body, span_ids) == _numbered(expected, sdk_ids)
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    # a group per resource: the fallback's, and the application's under which the parent was recorded
    assert len(request.resource_spans) == {"none": 1, "one service": 2, "two services": 3}[resources]


def test_a_span_without_a_graph_is_stamped_now_as_the_sdk_stamps_it() -> None:
    evaluation = SpanContext(int(_EVAL_TRACE, 16), int(_EVAL_SPAN, 16), is_remote=True,
                             trace_flags=TraceFlags(TraceFlags.SAMPLED))
    annotation = Annotation(AnnotationSpan.ATTRIBUTION, evaluation, None, {"k": "v", "n": 3, "none": None},
                            (("e", {"x": [1, 2]}),))
    body, span_ids = AnnotationEncoder(_RESOURCE, WRITEBACK_SCOPE, __version__).encode([annotation], {})
    expected, sdk_ids = _sdk_request([annotation], {})
    got, want = ExportTraceServiceRequest(), ExportTraceServiceRequest()
    got.ParseFromString(_numbered(body, span_ids))
    want.ParseFromString(_numbered(expected, sdk_ids))
    (span,) = got.resource_spans[0].scope_spans[0].spans
    (sdk_span,) = want.resource_spans[0].scope_spans[0].spans
    assert span.start_time_unix_nano > _T0 and span.start_time_unix_nano == span.events[0].time_unix_nano
    for message in (span, sdk_span):  # the clock's readings aside, the same span
        message.start_time_unix_nano = message.end_time_unix_nano = message.events[0].time_unix_nano = 0
    assert got == want
    assert [kv.key for kv in span.attributes] == ["k", "n", "none"]  # None: an empty value, as the SDK has it


def test_without_a_backend_each_verdict_span_is_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    annotations = annotations_of(_graph(), _verdicts())
    body, _ = AnnotationEncoder(_RESOURCE, WRITEBACK_SCOPE, __version__).encode(annotations, {})
    with caplog.at_level(logging.WARNING, logger="memtrace_otel.collector.serve"):
        assert VerdictLogSender().send(body) == (Answer.ACCEPTED, "")
    # the unattributed verdict names no error type: no line
    assert caplog.messages == [f"trace {_EVAL_TRACE}: UpdateError at agent.store",
                               f"trace {_ROOT_TRACE}: UpdateError at agent.store",
                               f"trace {_EVAL_TRACE}: ExtractionError at extract",
                               f"trace {_ROOT_TRACE}: ExtractionError at extract"]


def test_a_row_the_verdict_log_cannot_parse_is_refused_for_good() -> None:
    """A row that does not parse never will: a permanent refusal, so the retrying exporter does not keep it
    at the head of the outbox."""
    answer, reason = VerdictLogSender().send(b"\x0a\xff\xff")
    assert answer is Answer.PERMANENT and reason.startswith("not an OTLP export request")
