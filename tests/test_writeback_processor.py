"""AttributionSpanProcessor on the real SDK pipeline: live attribution written back as spans.

Every test runs a real TracerProvider with the processor registered before an
exporter's processor (SimpleSpanProcessor or BatchSpanProcessor feeding an
InMemorySpanExporter), and a real memory scenario with content capture off.
Threads are sequenced with events; nothing sleeps.
"""

from __future__ import annotations

import gc
import json
import logging
import random
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanContext, StatusCode

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.attribution import Attribution, Engine, FailureCase
from memtrace_otel.graph import build_graph
from memtrace_otel.semconv import (
    ROOT_CAUSE_EVALUATION_NAME,
    WRITEBACK_SCOPE,
    AnnotationSpan,
    ErrorType,
    GenAI,
    GenAIEvent,
    MemTrace,
    MemTraceAttribution,
)
from memtrace_otel.spans.model import record_from_readable
from memtrace_otel.writeback import AttributionSpanProcessor

from scenario import run_pipeline

_LOGGER = "memtrace_otel.writeback.processor"


class _MainThreadIds(IdGenerator):
    """Sequential ids on the test's thread, random ones elsewhere (the worker's annotation spans).

    Two runs of one scenario then give the application spans the same ids, so they can be
    compared whole, whatever the worker did in between.
    """

    def __init__(self) -> None:
        self._main, self._next = threading.get_ident(), 0

    def _id(self, bits: int) -> int:
        if threading.get_ident() != self._main:
            return random.getrandbits(bits) or 1
        self._next += 1
        return self._next

    def generate_span_id(self) -> int:
        return self._id(64)

    def generate_trace_id(self) -> int:
        return self._id(128)


@dataclass
class Pipeline:
    provider: TracerProvider
    exporter: InMemorySpanExporter
    memory: MemoryTracer
    processor: AttributionSpanProcessor | None

    def annotations(self) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if _is_annotation(s)]

    def application(self) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if not _is_annotation(s)]


def _is_annotation(span: ReadableSpan) -> bool:
    return span.instrumentation_scope is not None and span.instrumentation_scope.name == WRITEBACK_SCOPE


def _pipeline(*, attribution: bool = True, batch: bool = False, capture_content: bool = False,
              **options: Any) -> Pipeline:
    provider = TracerProvider(id_generator=_MainThreadIds())
    exporter = InMemorySpanExporter()
    memory = MemoryTracer(provider, capture_content=capture_content)
    processor = None
    if attribution:  # registered first, as documented: flush/shutdown drain it before the exporter
        processor = AttributionSpanProcessor(memory, tracer_provider=provider, **options)
        provider.add_span_processor(processor)
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    return Pipeline(provider, exporter, memory, processor)


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    made = _pipeline()
    yield made
    made.provider.shutdown()


@dataclass
class Scenario:
    ingestion: SpanContext
    deletion: SpanContext
    judge: SpanContext


def _hex(context: SpanContext) -> tuple[str, str]:
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def deletion_scenario(memory: MemoryTracer, provider: TracerProvider) -> Scenario:
    """Three traces: facts are stored, a clean-up deletes the wrong one, a question then fails."""
    app = provider.get_tracer("deletion-app")
    records: dict[str, tuple[dict[str, object], str]] = {}
    with app.start_as_current_span("ingestion") as ingestion:
        for dia_id, text in (("D1:1", "I sold my bike"), ("D1:2", "I have a cat named Tom")):
            with memory.operation("extract", Category.EXTRACTION, gen_ai_operation="create_memory",
                                  store_id="s") as op:
                op.read(f"msg:{dia_id}", content=text, kind=VariableKind.MESSAGE)
                unit = op.write(f"mem:{dia_id}", text.replace("I ", "User "), kind=VariableKind.MEMORY_UNIT)
                records[dia_id] = (dict(op.lineage_metadata(unit)), str(unit.content))
    with app.start_as_current_span("maintenance"), memory.operation(
            "forget", Category.DELETION, gen_ai_operation="delete_memory", store_id="s") as deletion:
        deletion.delete(deletion.read_record(records["D1:1"][0], content=records["D1:1"][1]))
    with app.start_as_current_span("question q1"):
        with memory.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                              store_id="s") as op:
            query = op.write("query:q1", "What did the user sell?", kind=VariableKind.QUERY)
            unit = op.read_record(records["D1:2"][0], content=records["D1:2"][1])  # all that is left
            context = op.write("context:q1", str(unit.content), kind=VariableKind.CONTEXT)
        with memory.operation("generate", Category.GENERATION) as op:
            op.read(query)
            op.read(context)
            answer = op.write("answer:q1", "I don't know", kind=VariableKind.ANSWER)
        with memory.operation("judge", Category.EVALUATION) as judge:
            judge.read(answer)
            judge.record_evaluation(False, score=0.0, question="What did the user sell?",
                                    prediction="I don't know", gold="bike", evidence=["D1:1"],
                                    answer=answer, case_id="q1")
    return Scenario(ingestion.get_span_context(), deletion.span_context, judge.span_context)


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_a_deletion_failure_is_written_back_into_both_traces(pipeline: Pipeline) -> None:
    ids = deletion_scenario(pipeline.memory, pipeline.provider)
    assert pipeline.provider.force_flush(10_000)
    by_name = {s.name: s for s in pipeline.annotations()}
    assert sorted(by_name) == [AnnotationSpan.ATTRIBUTION, AnnotationSpan.ROOT_CAUSE]

    attribution = by_name[AnnotationSpan.ATTRIBUTION]
    assert attribution.context.trace_id == ids.judge.trace_id  # in the failed trace,
    assert attribution.parent is not None and attribution.parent.span_id == ids.judge.span_id  # judge's child
    assert [(link.context.trace_id, link.context.span_id) for link in attribution.links] == [
        (ids.deletion.trace_id, ids.deletion.span_id)]
    expected = {
        MemTraceAttribution.ERROR_TYPE: ErrorType.DELETION.value,
        MemTraceAttribution.ROOT_CAUSE_OPERATION_NAME: "forget",
        MemTraceAttribution.ROOT_CAUSE_OPERATION_CATEGORY: Category.DELETION.value,
        MemTraceAttribution.ROOT_CAUSE_TRACE_ID: _hex(ids.deletion)[0],
        MemTraceAttribution.ROOT_CAUSE_SPAN_ID: _hex(ids.deletion)[1],
        MemTraceAttribution.EVALUATION_TRACE_ID: _hex(ids.judge)[0],
        MemTraceAttribution.EVALUATION_SPAN_ID: _hex(ids.judge)[1],
        MemTraceAttribution.ENGINE: "lineage",
    }
    assert _attrs(attribution).items() >= expected.items()
    assert 0 < _attrs(attribution)[MemTraceAttribution.CONFIDENCE] <= 1
    assert attribution.status.status_code is StatusCode.ERROR
    assert attribution.status.description == "DeletionError in forget"
    (event,) = [e for e in attribution.events if e.name == GenAIEvent.EVALUATION_RESULT]
    assert dict(event.attributes or {}).items() >= {
        GenAI.EVALUATION_NAME: ROOT_CAUSE_EVALUATION_NAME,
        GenAI.EVALUATION_SCORE_LABEL: ErrorType.DELETION.value}.items()
    # the span's explanation is in plain words, naming the blamed span; the event has the engine's
    explanation = _attrs(attribution)[MemTraceAttribution.EXPLANATION]
    assert explanation.startswith("DeletionError in span ")
    assert event.attributes is not None and event.attributes[GenAI.EVALUATION_EXPLANATION]

    root_cause = by_name[AnnotationSpan.ROOT_CAUSE]
    assert root_cause.context.trace_id == ids.deletion.trace_id != ids.judge.trace_id  # the older trace
    assert root_cause.parent is not None and root_cause.parent.span_id == ids.deletion.span_id
    assert [(link.context.trace_id, link.context.span_id) for link in root_cause.links] == [
        (ids.judge.trace_id, ids.judge.span_id)]
    assert _attrs(root_cause).items() >= expected.items()
    assert _attrs(root_cause)[MemTraceAttribution.ANNOTATION] == AnnotationSpan.ROOT_CAUSE.value
    assert pipeline.processor is not None
    stats = pipeline.processor.stats()
    assert (stats["attributed"], stats["annotation_spans"], stats["jobs_queued"]) == (1, 2, 1)


def test_annotation_spans_stay_out_of_the_memory_graph(pipeline: Pipeline) -> None:
    # Read back later (a span file, a Jaeger trace), the write-back spans must not become operations.
    deletion_scenario(pipeline.memory, pipeline.provider)
    assert pipeline.provider.force_flush(10_000) and pipeline.annotations()
    every = build_graph([record_from_readable(s) for s in pipeline.exporter.get_finished_spans()])
    application = build_graph([record_from_readable(s) for s in pipeline.application()])
    assert dict(every.nodes(data=True)) == dict(application.nodes(data=True))
    assert set(every.edges) == set(application.edges)
    assert every.graph["missing_traces"] == application.graph["missing_traces"]


def test_content_capture_off_keeps_content_off_the_annotations(pipeline: Pipeline) -> None:
    deletion_scenario(pipeline.memory, pipeline.provider)
    assert pipeline.provider.force_flush(10_000)
    # The application spans carry no contents, yet the in-process store let the engine see them.
    assert not any(MemTrace.VARIABLE_CONTENTS in _attrs(s) for s in pipeline.application())
    for span in pipeline.annotations():
        text = json.dumps(_attrs(span)) + json.dumps([dict(e.attributes or {}) for e in span.events])
        assert "bike" not in text and "sell" not in text


def test_content_capture_on_writes_the_engines_explanation() -> None:
    made = _pipeline(capture_content=True)
    deletion_scenario(made.memory, made.provider)
    assert made.provider.force_flush(10_000)
    # the engine's own words are the gen_ai.evaluation.result event's explanation (the span's is plain words)
    explanations = {(e.attributes or {})[GenAI.EVALUATION_EXPLANATION] for s in made.annotations()
                    for e in s.events if e.name == GenAIEvent.EVALUATION_RESULT}
    made.provider.shutdown()
    (explanation,) = explanations
    assert "'bike'" in explanation and explanation.startswith("forget (deletion)")


def _comparable(span: ReadableSpan) -> dict[str, Any]:
    # Everything the exporter would send but the clock: ids are deterministic (_MainThreadIds).
    data = json.loads(span.to_json())
    for key in ("start_time", "end_time"):
        data.pop(key)
    for event in data["events"]:
        event.pop("timestamp")
    data["resource"]["attributes"].pop("service.instance.id", None)
    return data


def test_application_spans_reach_the_exporter_unchanged() -> None:
    runs = []
    for attribution in (False, True):
        made = _pipeline(attribution=attribution, batch=True)
        deletion_scenario(made.memory, made.provider)
        deletion_scenario(made.memory, made.provider)  # the same again: new versions, a second failure
        run_pipeline(made.provider, capture_content=False)  # another tracer, the shared scenario
        made.provider.shutdown()
        runs.append(made)
    bare, attributed = runs
    failed = [s for s in bare.application() if _attrs(s).get(MemTrace.EVALUATION_PASSED) is False]
    assert bare.annotations() == [] and len(failed) == 3
    assert _names(attributed.annotations()).count(AnnotationSpan.ATTRIBUTION) == len(failed)
    assert [_comparable(s) for s in attributed.application()] == [_comparable(s) for s in bare.application()]


def test_provider_shutdown_alone_drains_into_a_batch_exporter() -> None:
    made = _pipeline(batch=True)
    deletion_scenario(made.memory, made.provider)
    made.provider.shutdown()  # no force_flush: shutdown must attribute and export what is queued
    assert sorted(_names(made.annotations())) == [AnnotationSpan.ATTRIBUTION, AnnotationSpan.ROOT_CAUSE]


class _GatedEngine(Engine):
    """Blocks in ``attribute`` until released, so a test controls when the worker is busy."""

    name = "gated"

    def __init__(self) -> None:
        self.entered, self.release, self.calls = threading.Event(), threading.Event(), 0

    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        self.calls += 1
        self.entered.set()
        self.release.wait()
        result.failure_reason = "gated engine blames nobody"


def _fail(memory: MemoryTracer, case_id: str) -> None:
    with memory.operation("judge", Category.EVALUATION) as op:
        op.record_evaluation(False, score=0.0, case_id=case_id)


def test_overload_drops_jobs_with_one_warning_and_a_count(caplog: pytest.LogCaptureFixture) -> None:
    engine = _GatedEngine()
    made = _pipeline(engine=engine, max_queue=1)
    assert made.processor is not None
    _fail(made.memory, "busy")
    assert engine.entered.wait(10)  # the worker holds the first failure
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        for number in range(4):  # one fits the queue, three do not
            _fail(made.memory, f"q{number}")
    assert made.processor.stats()["jobs_dropped_queue_full"] == 3
    assert len([r for r in caplog.records if "queue full" in r.getMessage()]) == 1
    assert len(made.application()) == 5  # the application's spans all went on regardless
    assert not made.processor.force_flush(timeout_millis=50)  # the worker is still held: a timeout
    engine.release.set()
    assert made.processor.force_flush(10_000)
    stats = made.processor.stats()
    assert (engine.calls, stats["unattributed"], stats["annotation_spans"]) == (2, 2, 2)
    assert all(MemTraceAttribution.FAILURE_REASON in _attrs(s) and not s.links for s in made.annotations())
    made.provider.shutdown()


class _BrokenEngine(Engine):
    """Breaks the engines' never-raise contract, as a third-party engine might."""

    name = "broken"

    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        raise AssertionError("not reached: attribute is overridden")

    def attribute(self, G: nx.DiGraph, case: FailureCase) -> Attribution:  # type: ignore[misc]
        raise RuntimeError("engine bug")


def test_engine_errors_are_logged_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    made = _pipeline(engine=_BrokenEngine())
    assert made.processor is not None
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        _fail(made.memory, "a")
        _fail(made.memory, "b")
        assert made.provider.force_flush(10_000)
    assert made.processor.stats()["engine_errors"] == 2
    assert len([r for r in caplog.records if "engine broken raised" in r.getMessage()]) == 1
    assert made.annotations() == [] and len(made.application()) == 2
    made.provider.shutdown()


def test_shutdown_is_idempotent_and_later_failures_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    made = _pipeline()
    processor = made.processor
    assert processor is not None
    deletion_scenario(made.memory, made.provider)
    processor.shutdown()  # the SDK's signature: returns None
    assert processor.stats()["attributed"] == 1  # drained before it returned
    assert processor.stats()["jobs_unattributed_shutdown"] == 0
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        processor.shutdown()
    assert [r.getMessage() for r in caplog.records] == [
        "AttributionSpanProcessor.shutdown called more than once; ignored"]
    _fail(made.memory, "late")  # the provider still runs; this processor only counts
    assert processor.stats()["jobs_dropped_shutdown"] == 1
    assert processor.force_flush(1_000)
    assert len(made.annotations()) == 2
    made.provider.shutdown()


def test_own_annotation_spans_are_ignored(pipeline: Pipeline) -> None:
    # Even a write-back-scope span that looks like a failed evaluation is neither indexed nor queued.
    tracer = pipeline.provider.get_tracer(WRITEBACK_SCOPE)
    with tracer.start_as_current_span("judge", attributes={MemTrace.OPERATION_CATEGORY: "evaluation",
                                                            MemTrace.EVALUATION_PASSED: False}):
        pass
    assert pipeline.processor is not None and pipeline.processor.force_flush(10_000)
    stats = pipeline.processor.stats()
    assert (stats["indexed"], stats["waiting"], stats["jobs_queued"]) == (0, 0, 0)


def test_ordinary_spans_stay_out_of_the_index(pipeline: Pipeline) -> None:
    app = pipeline.provider.get_tracer("app")
    for _ in range(3):
        with app.start_as_current_span("http request"):
            pass
    with pipeline.memory.operation("extract", Category.EXTRACTION):
        pass
    assert pipeline.processor is not None
    assert pipeline.processor.force_flush(10_000)
    # Held, not converted yet: the worker converts spans when a failure needs a graph.
    assert (pipeline.processor.stats()["indexed"], pipeline.processor.stats()["waiting"]) == (1, 1)


def test_the_index_is_bounded_by_size_and_age() -> None:
    made = _pipeline(max_spans=3, max_age_seconds=10)
    assert made.processor is not None
    tracer = made.provider.get_tracer("app")
    now = time.time_ns()

    def operations(*ends: int) -> tuple[int, int, int]:
        for end in ends:
            span = tracer.start_span("extract", attributes={MemTrace.OPERATION_CATEGORY: "extraction"},
                                     start_time=end - 1000)
            span.end(end_time=end)
            # Indexed one by one: the inbox of a three-span index holds one span while the worker is away.
            assert made.processor is not None and made.processor.force_flush(10_000)
        stats = made.processor.stats()
        return stats["indexed"], stats["evicted_size"], stats["evicted_age"]

    assert operations(now - 30 * 10**9, now - 20 * 10**9, now) == (1, 0, 2)  # two beyond 10 s
    assert operations(now, now, now, now) == (3, 2, 2)  # five in a three-span index
    made.provider.shutdown()


def _operations(made: Pipeline, count: int) -> None:
    tracer = made.provider.get_tracer("app")
    for _ in range(count):
        tracer.start_span("extract", attributes={MemTrace.OPERATION_CATEGORY: "extraction"}).end()


class _Discarding(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class _Watcher(SpanProcessor):
    """Keeps a weak reference to each ended span (the object every processor's on_end gets)."""

    def __init__(self) -> None:
        self.ended: list[weakref.ref[ReadableSpan]] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(weakref.ref(span))

    def alive(self) -> int:
        gc.collect()
        return sum(ref() is not None for ref in self.ended)


def test_spans_held_stay_within_max_spans_while_the_worker_is_busy() -> None:
    """max_spans at most, as documented (the old inbox held max_spans more while the worker was busy)."""
    engine = _GatedEngine()
    provider = TracerProvider()
    memory = MemoryTracer(provider, capture_content=False)
    processor = AttributionSpanProcessor(memory, tracer_provider=provider, engine=engine, max_spans=40)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(_Discarding()))  # keeps no span alive
    watcher = _Watcher()
    provider.add_span_processor(watcher)
    made = Pipeline(provider, InMemorySpanExporter(), memory, processor)
    _operations(made, 40)
    assert processor.force_flush(10_000) and processor.stats()["indexed"] == 40
    _fail(made.memory, "busy")
    assert engine.entered.wait(10)  # the worker is held: it indexes nothing, evicts nothing
    _operations(made, 100)
    assert watcher.alive() == 40 + 1  # the index, and the busy failure's span in the worker's batch
    stats = processor.stats()
    assert stats["indexed"] == 40
    assert stats["evicted_size"] == 1 + 100  # every span let go is counted
    engine.release.set()
    assert processor.force_flush(10_000)
    assert watcher.alive() == 40  # the worker's records did not keep the evicted spans alive
    provider.shutdown()


def test_a_failure_whose_span_left_the_index_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    engine = _GatedEngine()
    made = _pipeline(engine=engine, max_spans=8)
    processor = made.processor
    assert processor is not None
    _fail(made.memory, "busy")
    assert engine.entered.wait(10)
    _fail(made.memory, "late")  # queued; its span waits in the inbox ...
    _operations(made, 10)  # ... and is pushed out before the worker gets to it
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        engine.release.set()
        assert processor.force_flush(10_000)
    assert processor.stats()["jobs_evicted"] == 1 and engine.calls == 1
    assert len([r for r in caplog.records if "left the index" in r.getMessage()]) == 1
    made.provider.shutdown()


class _BusyEngine(Engine):
    """Uses a fixed amount of this thread's CPU per case, as a costly attribution does."""

    name = "busy"

    def __init__(self, cpu_seconds: float) -> None:
        self.cpu_seconds, self.calls = cpu_seconds, 0

    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        self.calls += 1
        until = time.thread_time() + self.cpu_seconds
        while time.thread_time() < until:
            pass
        result.failure_reason = "busy engine blames nobody"


def test_failures_beyond_the_cpu_budget_are_skipped_counted_and_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    engine = _BusyEngine(0.3)  # the quarter-CPU-second burst pays for one case: it overdraws
    made = _pipeline(engine=engine, cpu_budget=0.001)  # refills 0.03 CPU-s in 30 s: next to nothing
    processor = made.processor
    assert processor is not None
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        for number in range(10):
            _fail(made.memory, f"q{number}")
        assert processor.force_flush(30_000)
    stats = processor.stats()
    assert engine.calls == 1
    assert stats["jobs_skipped_budget"] == 10 - engine.calls == 10 - stats["unattributed"]
    assert len([r for r in caplog.records if "CPU budget" in r.getMessage()]) == 1
    assert len(made.application()) == 10  # the application's spans all went on
    made.provider.shutdown()


def test_without_a_cpu_budget_every_failure_is_attributed() -> None:
    engine = _BusyEngine(0.3)
    made = _pipeline(engine=engine, cpu_budget=None)
    assert made.processor is not None
    for number in range(5):
        _fail(made.memory, f"q{number}")
    assert made.processor.force_flush(30_000)
    assert (engine.calls, made.processor.stats()["jobs_skipped_budget"]) == (5, 0)
    made.provider.shutdown()


class _BrokenSpan(ReadableSpan):
    @property
    def attributes(self) -> Any:
        raise RuntimeError("broken span")


def test_on_end_never_raises(pipeline: Pipeline, caplog: pytest.LogCaptureFixture) -> None:
    assert pipeline.processor is not None
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        pipeline.processor.on_end(_BrokenSpan("broken"))
        pipeline.processor.on_end(_BrokenSpan("broken"))
    assert pipeline.processor.stats()["on_end_errors"] == 2
    assert len(caplog.records) == 1


@pytest.mark.parametrize("options", [
    {"max_spans": 0}, {"max_spans": True}, {"max_spans": 2.5}, {"max_queue": 0}, {"max_queue": "9"},
    {"cpu_budget": 0}, {"cpu_budget": 1.5}, {"cpu_budget": True}, {"cpu_budget": "0.1"},
    {"max_age_seconds": 0}, {"max_age_seconds": -1.0}, {"max_age_seconds": float("nan")},
    {"max_age_seconds": float("inf")}, {"max_age_seconds": "60"}, {"engine": "no-such-engine"},
    {"engine": 3},
])
def test_bad_configuration_is_a_value_error(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        AttributionSpanProcessor(MemoryTracer(TracerProvider()), **options)


def test_a_tracer_that_is_not_a_memory_tracer_is_a_value_error() -> None:
    provider = TracerProvider()
    with pytest.raises(ValueError, match="MemoryTracer"):
        AttributionSpanProcessor(provider.get_tracer("x"))  # type: ignore[arg-type]


def _names(spans: Sequence[ReadableSpan]) -> list[str]:
    return [s.name for s in spans]


def test_registered_after_a_simple_exporter_it_still_writes_back() -> None:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    memory = MemoryTracer(provider, capture_content=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    processor = AttributionSpanProcessor(memory, tracer_provider=provider)
    provider.add_span_processor(processor)
    deletion_scenario(memory, provider)
    assert provider.force_flush(10_000)  # a simple processor exports each span as it ends
    assert _names(exporter.get_finished_spans()).count(AnnotationSpan.ATTRIBUTION) == 1
    provider.shutdown()


def test_concurrent_failures_are_each_attributed_once() -> None:
    made = _pipeline(max_spans=100)  # 72 spans fit; the worker indexes every 25 while threads write
    assert made.processor is not None
    start, errors = threading.Barrier(4), []

    def application_thread() -> None:
        try:
            start.wait()
            for _ in range(3):
                deletion_scenario(made.memory, made.provider)
        except Exception as error:  # surfaced below: a thread's exception would be lost
            errors.append(error)

    threads = [threading.Thread(target=application_thread) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and made.processor.force_flush(30_000)
    stats = made.processor.stats()
    done = stats["attributed"] + stats["unattributed"]
    assert (stats["jobs_queued"], done, stats["on_end_errors"], stats["indexed"]) == (12, 12, 0, 72)
    annotations = _names(made.annotations())
    assert annotations.count(AnnotationSpan.ATTRIBUTION) == 12
    assert annotations.count(AnnotationSpan.ROOT_CAUSE) == stats["attributed"]
    made.provider.shutdown()
