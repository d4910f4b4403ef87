"""The write-back names the model call inside the blamed operation that went wrong.

Real parts only: the SDK pipeline with the AttributionSpanProcessor registered before a
SimpleSpanProcessor feeding an InMemorySpanExporter, the real
``opentelemetry-instrumentation-openai-v2`` instrumentor, the real ``openai`` client against the
local OpenAI-compatible server (tests/openai_server.py), and, for ``memtrace serve``, the real
AttributionService (its threads, assembler and outbox) fed the same spans.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.collector.assembler import TraceAssembler
from memtrace_otel.collector.attribution_service import AttributionService
from memtrace_otel.config import ENV_CAPTURE_CONTENT
from memtrace_otel.semconv import WRITEBACK_SCOPE, AnnotationSpan, ErrorType, GenAI, MemTrace
from memtrace_otel.semconv import MemTraceAttribution as A
from memtrace_otel.spans.model import record_from_readable
from memtrace_otel.writeback import AttributionSpanProcessor

from openai_server import Reply, ScriptedOpenAIServer

instrumentation = pytest.importorskip("opentelemetry.instrumentation.openai_v2")

MESSAGE = "[8 May 2023] Caroline: I went to the LGBTQ support group on 7 May 2023. It was powerful."
SECRET = "LGBTQ support group"
LOSSY = {"facts": ["Caroline likes support groups"]}  # the model's answer lost the date


@dataclass
class Pipeline:
    provider: TracerProvider
    exporter: InMemorySpanExporter
    processor: AttributionSpanProcessor
    tracer: MemoryTracer

    def finished(self) -> tuple[ReadableSpan, ...]:
        assert self.processor.force_flush(10_000)
        return self.exporter.get_finished_spans()


@pytest.fixture
def pipeline(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], Pipeline]]:
    """``pipeline(capture)``: processor first, then the exporter; openai-v2 instrumented on it."""
    made: list[tuple[object, TracerProvider]] = []

    def make(capture: bool) -> Pipeline:
        if capture:
            monkeypatch.setenv(ENV_CAPTURE_CONTENT, "span_only")
        else:
            monkeypatch.delenv(ENV_CAPTURE_CONTENT, raising=False)
        provider, exporter = TracerProvider(), InMemorySpanExporter()
        tracer = MemoryTracer(provider)
        processor = AttributionSpanProcessor(tracer, tracer_provider=provider)
        provider.add_span_processor(processor)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrumentor = instrumentation.OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        made.append((instrumentor, provider))
        return Pipeline(provider, exporter, processor, tracer)

    yield make
    for instrumentor, provider in made:
        instrumentor.uninstrument()  # type: ignore[attr-defined]
        provider.shutdown()


def _extract(p: Pipeline, client: openai.OpenAI, *, between: bool = False) -> int:
    """One extraction whose prompt tells the model to drop dates; returns the operation's span id.

    ``between`` makes the model call under an ordinary application span inside the operation.
    """
    with p.tracer.operation("mem0.extract", Category.EXTRACTION) as op:
        op.read("msg:D1:3", content=MESSAGE, kind=VariableKind.MESSAGE)
        client.embeddings.create(model="embedder", input=MESSAGE)
        messages = [{"role": "system", "content": "You extract facts."},
                    {"role": "user", "content": f"Extract only hobbies, never dates:\n{MESSAGE}"}]
        if between:
            with p.provider.get_tracer("app").start_as_current_span("build prompt"):
                reply = client.chat.completions.create(model="m", messages=messages)
        else:
            reply = client.chat.completions.create(model="m", messages=messages)
        facts = json.loads(reply.choices[0].message.content or "{}")["facts"]
        for i, fact in enumerate(facts):
            op.write(f"mem:{i}", fact, kind=VariableKind.MEMORY_UNIT)
    return op.span_context.span_id


def _failing_question(tracer: MemoryTracer) -> None:
    with tracer.operation("search", Category.RETRIEVAL) as op:
        units = [op.read("mem:0")]
        context = op.write("context:q1", "Caroline likes support groups", kind=VariableKind.CONTEXT)
    with tracer.operation("generate", Category.GENERATION) as op:
        op.read(context)
        answer = op.write("answer:q1", "I don't know", kind=VariableKind.ANSWER)
    with tracer.operation("judge", Category.EVALUATION) as op:
        op.read(answer)
        op.record_evaluation(False, question="When did Caroline go to the LGBTQ support group?",
                             prediction="I don't know", gold="7 May 2023", evidence=["D1:3"], answer=answer)
    assert units


def _run(p: Pipeline, *, between: bool = False, outside_call: bool = False) -> int:
    """The scenario in one trace (so ``serve`` sees it whole); returns the extraction's span id."""
    replies = [Reply.text("hi")] * outside_call + [Reply.json(LOSSY)]  # embeddings are not scripted
    with ScriptedOpenAIServer(replies) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k")
        if outside_call:  # an application chat call made outside any memory operation
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        with p.provider.get_tracer("app").start_as_current_span("conversation"):
            extraction = _extract(p, client, between=between)
            _failing_question(p.tracer)
    return extraction


def _chat_call(spans: tuple[ReadableSpan, ...], parent: int) -> ReadableSpan:
    (call,) = [s for s in spans if (s.attributes or {}).get(GenAI.OPERATION_NAME) == "chat"
               and s.parent is not None and s.parent.span_id == parent]
    return call


def _annotations(spans: tuple[ReadableSpan, ...]) -> dict[str, dict]:
    return {s.name: dict(s.attributes or {}) for s in spans if _written_back(s)}


def _written_back(span: ReadableSpan) -> bool:
    return span.instrumentation_scope is not None and span.instrumentation_scope.name == WRITEBACK_SCOPE


def _assert_names_the_step(annotations: dict[str, dict], extraction: int, call: ReadableSpan) -> None:
    assert set(annotations) == {AnnotationSpan.ATTRIBUTION, AnnotationSpan.ROOT_CAUSE}
    for attributes in annotations.values():
        assert attributes[A.ERROR_TYPE] == ErrorType.EXTRACTION.value
        assert attributes[A.ROOT_CAUSE_SPAN_ID] == f"{extraction:016x}"  # the memory operation is blamed
        assert attributes[A.STEP_SPAN_ID] == f"{call.context.span_id:016x}"  # ... and its chat call named
        assert attributes[A.STEP_NAME] == call.name


# -- in process -----------------------------------------------------------------------------------

def test_the_annotation_names_the_model_call_that_lost_the_fact(pipeline) -> None:
    p = pipeline(True)
    extraction = _run(p)
    spans = p.finished()
    call = _chat_call(spans, extraction)
    annotations = _annotations(spans)
    _assert_names_the_step(annotations, extraction, call)
    explanation = annotations[AnnotationSpan.ATTRIBUTION][A.EXPLANATION]
    assert f'model call "{call.name}" (span {call.context.span_id:016x})' in explanation


def test_calls_under_spans_in_between_are_kept_and_calls_outside_operations_are_not(pipeline) -> None:
    p = pipeline(True)
    extraction = _run(p, between=True, outside_call=True)
    spans = p.finished()
    (between,) = [s for s in spans if s.name == "build prompt"]
    assert between.parent is not None and between.parent.span_id == extraction
    _assert_names_the_step(_annotations(spans), extraction, _chat_call(spans, between.context.span_id))
    # Indexed: the memory operations, the two calls inside the extraction and the span between,
    # not the call made outside any operation nor the other application spans.
    memory = [s for s in spans if MemTrace.OPERATION_CATEGORY in (s.attributes or {})]
    calls = [s for s in spans if GenAI.OPERATION_NAME in (s.attributes or {}) and s not in memory]
    assert len(calls) == 3
    stats = p.processor.stats()
    assert stats["indexed"] == len(memory) + 3
    assert stats["step_parents_dropped"] == 0 and stats["on_end_errors"] == 0


def test_with_capture_off_the_step_is_named_without_content(pipeline) -> None:
    p = pipeline(False)
    extraction = _run(p)
    spans = p.finished()
    call = _chat_call(spans, extraction)
    annotations = _annotations(spans)
    _assert_names_the_step(annotations, extraction, call)  # untested: the last text-answering call
    explanation = annotations[AnnotationSpan.ATTRIBUTION][A.EXPLANATION]
    assert f'model call "{call.name}" (span {call.context.span_id:016x})' in explanation
    assert SECRET not in json.dumps(list(annotations.values()))


def test_an_operation_without_model_calls_gets_no_step_keys(pipeline) -> None:
    p = pipeline(True)
    with p.provider.get_tracer("app").start_as_current_span("conversation"):
        with p.tracer.operation("ingest", Category.EXTRACTION) as op:
            op.read("msg:D1:3", content=MESSAGE, kind=VariableKind.MESSAGE)
            op.write("mem:0", "Caroline likes support groups", kind=VariableKind.MEMORY_UNIT)
        _failing_question(p.tracer)
    annotations = _annotations(p.finished())
    assert annotations[AnnotationSpan.ATTRIBUTION][A.ERROR_TYPE] == ErrorType.EXTRACTION.value
    for attributes in annotations.values():
        assert A.STEP_SPAN_ID not in attributes and A.STEP_NAME not in attributes


# -- memtrace serve -------------------------------------------------------------------------------

def test_serve_names_the_step_too(pipeline) -> None:
    p = pipeline(True)  # serve sees only what the spans carry: contents, and every span in between
    extraction = _run(p, between=True)
    spans = [s for s in p.finished() if not _written_back(s)]
    exporter = InMemorySpanExporter()
    service = AttributionService(exporter, assembler=TraceAssembler(settle_seconds=0.0))
    service.start()
    try:
        assert service.ingest([record_from_readable(s) for s in spans], wire_bytes=1000 * len(spans))
    finally:
        assert service.stop(timeout=30.0)
    assert service.stats.attributions == 1
    (between,) = [s for s in spans if s.name == "build prompt"]
    _assert_names_the_step(_annotations(exporter.get_finished_spans()), extraction,
                           _chat_call(tuple(spans), between.context.span_id))


def test_parents_that_never_end_here_are_waited_for_boundedly(pipeline) -> None:
    p = pipeline(False)
    app = p.provider.get_tracer("app")
    with p.tracer.operation("mem0.extract", Category.EXTRACTION) as op:
        context = trace.set_span_in_context(op.span)
        open_spans = [app.start_span(f"open {i}", context=context) for i in range(1100)]
        for parent in open_spans:  # a model call under each of 1100 spans that never end
            app.start_span("chat m", context=trace.set_span_in_context(parent),
                           attributes={GenAI.OPERATION_NAME: "chat"}).end()
    stats = p.processor.stats()
    assert stats["step_parents_dropped"] == 1100 - 1024 and stats["on_end_errors"] == 0
    assert len(p.processor._waiting) == 1024  # bounded (private: nothing public shows the waiting parents)
    for parent in open_spans[-3:]:
        parent.end()  # the newest are still waited for, and kept when they end
    stats = p.processor.stats()
    assert stats["indexed"] == 1100 + 1 + 3  # the calls, the operation, those three
