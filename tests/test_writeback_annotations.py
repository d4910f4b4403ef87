"""The write-back span format: what memtrace.attribution and memtrace.root_cause spans carry."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, StatusCode, TraceFlags

from memtrace_otel.attribution import Attribution, FailureCase
from memtrace_otel.attribution.base import Candidate
from memtrace_otel.semconv import (
    EVIDENCE_EVENT,
    ROOT_CAUSE_EVALUATION_NAME,
    WRITEBACK_SCOPE,
    AnnotationSpan,
    ErrorType,
    GenAI,
    MemTraceAttribution,
    all_keys,
)
from memtrace_otel.writeback import write_annotations, write_attribution_span, write_root_cause_span

DOCS = Path(__file__).resolve().parent.parent / "docs" / "conventions.md"
_SUPPRESS = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", "suppress_instrumentation")
_EVALUATION = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
_ROOT_TRACE, _ROOT_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def _write_back_keys() -> list[str]:
    return [v for k, v in vars(MemTraceAttribution).items() if k.isupper() and isinstance(v, str)]


def test_write_back_keys_are_documented_and_fit_the_other_keys() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert [k for k in _write_back_keys() if f"`{k}`" not in text] == []
    keys = all_keys()
    assert set(_write_back_keys()) <= set(keys)  # checked with every other key by test_semconv
    assert len(set(keys)) == len(keys)  # no key declared twice
    assert [(k, o) for k in keys for o in keys if o.startswith(k + ".")] == []  # no leaf is a prefix
    for name in AnnotationSpan:
        assert f"`{name.value}`" in text


def _verdict(**changes: Any) -> Attribution:
    fields: dict[str, Any] = {
        "operation": f"op:{_ROOT_TRACE}:{_ROOT_SPAN}", "trace_id": _ROOT_TRACE, "span_id": _ROOT_SPAN,
        "operation_name": "mem0.search", "category": "retrieval", "error_type": ErrorType.RETRIEVAL,
        "confidence": 0.75, "explanation": "mem0.search lost 'Lisbon': the context does not hold it.",
        "evidence_path": ["msg:D1:1@1", f"op:{_ROOT_TRACE}:{_ROOT_SPAN}"],
    }
    fields.update(changes)
    return Attribution("lineage", FailureCase("op:x:y"), **fields)


class _SuppressionSeen(SpanProcessor):
    """Records whether instrumentation was suppressed when each span started."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        self.seen.append(bool(otel_context.get_value(_SUPPRESS)))


@pytest.fixture
def sdk() -> tuple[TracerProvider, InMemorySpanExporter, _SuppressionSeen]:
    provider, exporter, seen = TracerProvider(), InMemorySpanExporter(), _SuppressionSeen()
    provider.add_span_processor(seen)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter, seen


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_both_spans_sit_under_their_parents_and_link_to_each_other(sdk: Any) -> None:
    provider, exporter, seen = sdk
    spans = write_annotations(provider.get_tracer(WRITEBACK_SCOPE), _verdict(), _EVALUATION)
    exported = exporter.get_finished_spans()
    assert [s.name for s in exported] == [AnnotationSpan.ATTRIBUTION, AnnotationSpan.ROOT_CAUSE]
    assert [s.context.span_id for s in exported] == [s.get_span_context().span_id for s in spans]
    attribution, root_cause = exported
    assert attribution.context.trace_id == _EVALUATION.trace_id
    assert attribution.parent == _EVALUATION  # a remote parent is fine: it is the evaluation span
    assert [link.context.span_id for link in attribution.links] == [int(_ROOT_SPAN, 16)]
    assert f"{root_cause.context.trace_id:032x}" == _ROOT_TRACE
    assert root_cause.parent is not None and f"{root_cause.parent.span_id:016x}" == _ROOT_SPAN
    assert [link.context for link in root_cause.links] == [_EVALUATION]
    assert seen.seen == [True, True]  # written with instrumentation suppressed,
    assert not otel_context.get_value(_SUPPRESS)  # and the caller's context is back as it was


def test_fields_are_plain_searchable_values(sdk: Any) -> None:
    provider, exporter, _ = sdk
    write_annotations(provider.get_tracer(WRITEBACK_SCOPE), _verdict(), _EVALUATION)
    for span in exporter.get_finished_spans():
        attributes = _attrs(span)
        # A str subclass (the enum) would be exported the same, but the value must be plain text.
        assert type(attributes[MemTraceAttribution.ERROR_TYPE]) is str
        assert attributes[MemTraceAttribution.ERROR_TYPE] == "RetrievalError"
        assert attributes[MemTraceAttribution.ROOT_CAUSE_TRACE_ID] == _ROOT_TRACE
        assert re.fullmatch(r"[0-9a-f]{16}", attributes[MemTraceAttribution.EVALUATION_SPAN_ID])
        assert attributes[MemTraceAttribution.ANNOTATION] == span.name
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "RetrievalError in mem0.search"
        event, evidence = span.events
        assert evidence.name == EVIDENCE_EVENT  # the path is folded away in an event, not a tag
        path = (evidence.attributes or {})[MemTraceAttribution.EVIDENCE_PATH]
        assert list(path) == _verdict().evidence_path
        assert MemTraceAttribution.EVIDENCE_PATH not in attributes
        assert dict(event.attributes or {}) == {
            GenAI.EVALUATION_NAME: ROOT_CAUSE_EVALUATION_NAME,
            GenAI.EVALUATION_SCORE_LABEL: "RetrievalError",
            GenAI.EVALUATION_SCORE_VALUE: 0.75,
            GenAI.EVALUATION_EXPLANATION: "mem0.search lost 'Lisbon': the context does not hold it.",
        }


def test_without_content_the_explanation_quotes_nothing(sdk: Any) -> None:
    provider, exporter, _ = sdk
    write_attribution_span(provider.get_tracer(WRITEBACK_SCOPE), _verdict(), _EVALUATION,
                           include_explanation=False)
    (span,) = exporter.get_finished_spans()
    explanation = _attrs(span)[MemTraceAttribution.EXPLANATION]
    assert "Lisbon" not in explanation
    assert explanation == "mem0.search (retrieval) is the root cause: RetrievalError, confidence 0.75"


def test_an_unattributed_failure_gets_one_span_that_says_why(sdk: Any) -> None:
    provider, exporter, _ = sdk
    verdict = Attribution("llm_agent", FailureCase("op:x:y"), failure_reason="malformed model output")
    spans = write_annotations(provider.get_tracer(WRITEBACK_SCOPE), verdict, _EVALUATION)
    assert len(spans) == 1
    (span,) = exporter.get_finished_spans()
    assert span.name == AnnotationSpan.ATTRIBUTION and span.links == ()
    assert span.status.status_code is StatusCode.UNSET
    assert MemTraceAttribution.ERROR_TYPE not in _attrs(span)
    assert _attrs(span)[MemTraceAttribution.FAILURE_REASON] == "malformed model output"
    assert write_root_cause_span(provider.get_tracer(WRITEBACK_SCOPE), verdict, _EVALUATION) is None


def test_a_given_root_cause_context_is_used_as_is(sdk: Any) -> None:
    provider, exporter, _ = sdk
    root = SpanContext(int(_ROOT_TRACE, 16), int(_ROOT_SPAN, 16), is_remote=False,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))
    span = write_root_cause_span(provider.get_tracer(WRITEBACK_SCOPE), _verdict(), _EVALUATION, root)
    assert span is not None
    (exported,) = exporter.get_finished_spans()
    assert exported.parent == root


@pytest.mark.parametrize("ids", [("", ""), ("zz", "00f067aa0ba902b7"), ("0" * 32, "0" * 16),
                                 ("f" * 33, "00f067aa0ba902b7"), (_ROOT_TRACE, "-1")])
def test_a_verdict_with_unusable_ids_writes_no_root_cause_span(sdk: Any, ids: tuple[str, str]) -> None:
    provider, exporter, _ = sdk
    verdict = _verdict(trace_id=ids[0], span_id=ids[1])
    spans = write_annotations(provider.get_tracer(WRITEBACK_SCOPE), verdict, _EVALUATION)
    assert [s.name for s in spans] == [AnnotationSpan.ATTRIBUTION]
    assert exporter.get_finished_spans()[0].links == ()


# -- readable in the trace UI (issue 25, item 3) ---------------------------------------------------

_T0 = 1_700_000_000_000_000_000
_MEM = f"op:{_ROOT_TRACE}:{_ROOT_SPAN}"
_EVAL = f"op:{_EVALUATION.trace_id:032x}:{_EVALUATION.span_id:016x}"


def _graph() -> nx.DiGraph:
    """message -> extract -> memory v1 -> update (blamed) -> memory v2 -> search -> ... -> judge."""
    G = nx.DiGraph()
    G.add_node("msg:D1:1@1", type="variable", name="msg:D1:1", version=1, kind="message",
               content="I moved to Lisbon")
    G.add_node("op:a:ingest", type="operation", name="ingest", span_name="ingest", start=_T0 - 60 * 10**9)
    G.add_edge("op:a:ingest", "msg:D1:1@1", role="output")
    G.add_node("op:a:extract", type="operation", name="agent.extract", span_name="create_memory tiny-memory",
               start=_T0 - 50 * 10**9, end=_T0 - 49 * 10**9)
    G.add_node("mem:1@1", type="variable", name="mem:1", version=1, kind="memory_unit",
               content="User moved to Lisbon")
    G.add_node(_MEM, type="operation", name="agent.store", span_name="update_memory tiny-memory",
               category="update", service="tiny-app", start=_T0, end=_T0 + 5_000, trace_id=_ROOT_TRACE,
               span_id=_ROOT_SPAN)
    G.add_node("mem:1@2", type="variable", name="mem:1", version=2, kind="memory_unit",
               content="User moved to Porto")
    G.add_node("op:b:generate", type="operation", name="agent.answer", span_name="chat tiny-model")
    G.add_node(_EVAL, type="operation", name="judge", span_name="judge", start=_T0 + 10**9,
               end=_T0 + 10**9 + 7_000)
    return G


def _readable_verdict() -> Attribution:
    return _verdict(
        operation=_MEM, operation_name="agent.store", category="update",
        error_type=ErrorType.UPDATE, confidence=0.9,
        explanation="agent.store lost 'Lisbon': it overwrote mem:1@1.",
        evidence_path=["msg:D1:1@1", "op:a:extract", "mem:1@1", _MEM, "mem:1@2", "op:b:generate", _EVAL],
        candidates=[Candidate(_MEM, _ROOT_SPAN, ErrorType.UPDATE, 0.9, operation_name="agent.store"),
                    Candidate("op:b:generate", "b", ErrorType.RESPONSE, 0.45, operation_name="agent.answer"),
                    *[Candidate(f"op:c:{n}", "c", ErrorType.RETRIEVAL, 0.1, operation_name=f"s{n}")
                      for n in range(4)]])


def _written(sdk: Any, quotable: bool) -> dict[str, ReadableSpan]:
    provider, exporter, _ = sdk
    verdict = _readable_verdict()
    verdict.case = FailureCase(_EVAL)
    write_annotations(provider.get_tracer(WRITEBACK_SCOPE), verdict, _EVALUATION,
                      include_explanation=quotable, graph=_graph())
    return {span.name: span for span in exporter.get_finished_spans()}


@pytest.mark.parametrize("quotable", [True, False])
def test_the_explanation_says_what_was_lost_where_and_when(sdk: Any, quotable: bool) -> None:
    spans = _written(sdk, quotable)
    for span in spans.values():
        explanation = _attrs(span)[MemTraceAttribution.EXPLANATION]
        # the blamed span as Jaeger lists it, its service and time; the memory and its versions;
        # the message the information came from and when that was recorded
        assert explanation.startswith('UpdateError in span "update_memory tiny-memory" (service tiny-app, '
                                      '2023-11-14 22:13:20 UTC)')
        assert "agent.store" not in explanation
        assert "rewrote memory unit mem:1" in explanation and "mem:1 (version 2)" in explanation
        assert "message msg:D1:1" in explanation and "recorded 2023-11-14 22:12:20 UTC" in explanation
        # contents only when they may be quoted
        assert ("Lisbon" in explanation) is quotable and ("Porto" in explanation) is quotable
        (result, _evidence) = span.events
        reasoning = (result.attributes or {})[GenAI.EVALUATION_EXPLANATION]
        assert reasoning == ("agent.store lost 'Lisbon': it overwrote mem:1@1." if quotable else explanation)


def test_the_blamed_span_and_the_alternatives_are_named_as_jaeger_shows_them(sdk: Any) -> None:
    attributes = _attrs(_written(sdk, True)[AnnotationSpan.ATTRIBUTION])
    assert attributes[MemTraceAttribution.ROOT_CAUSE_SPAN_NAME] == "update_memory tiny-memory"
    assert attributes[MemTraceAttribution.ROOT_CAUSE_OPERATION_NAME] == "agent.store"
    # runners-up short: span names where the graph has them, at most three, the rest counted
    assert attributes[MemTraceAttribution.ALTERNATIVES] == (
        '"chat tiny-model" ResponseError 0.45; "s0" RetrievalError 0.1; "s1" RetrievalError 0.1; 2 more')


def test_annotations_lie_inside_their_parents_time_range(sdk: Any) -> None:
    """Jaeger warns of clock skew on a child outside its parent when no host.* attributes say the
    two came from different hosts: every late annotation did."""
    spans = _written(sdk, True)
    attribution, root_cause = spans[AnnotationSpan.ATTRIBUTION], spans[AnnotationSpan.ROOT_CAUSE]
    evaluation, blamed = _graph().nodes[_EVAL], _graph().nodes[_MEM]
    assert evaluation["start"] <= attribution.start_time <= attribution.end_time <= evaluation["end"]
    assert blamed["start"] <= root_cause.start_time <= root_cause.end_time <= blamed["end"]
    for span in spans.values():
        assert all(span.start_time <= event.timestamp <= span.end_time for event in span.events)
