"""The write-back span format: what memtrace.attribution and memtrace.root_cause spans carry."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, StatusCode, TraceFlags

from memtrace_otel.attribution import Attribution, FailureCase
from memtrace_otel.semconv import (
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
        (event,) = span.events
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
