"""Failure signals from other tools (issue 26, item 3).

An evaluator's failing ``gen_ai.evaluation.result`` event on an answer's span, and a verdict recorded
later, from another request or process, against the answer's span context (``record_feedback``),
are failures to attribute: in the graph (``memtrace analyze``), in the in-process processor and in
``memtrace serve``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.attribution import create_engine
from memtrace_otel.attribution.runner import attribute_failures
from memtrace_otel.feedback import parse_traceparent, record_feedback, traceparent
from memtrace_otel.graph import build_graph, failed_evaluations
from memtrace_otel.graph.verdicts import evaluator_node_id
from memtrace_otel.semconv import AnnotationSpan, ErrorType, MemTraceAttribution, MemTraceMetric
from memtrace_otel.signals import FailureRule, failing_verdict, is_failing
from memtrace_otel.spans.backend import BackendFetch
from memtrace_otel.spans.model import SpanEvent, SpanRecord, record_from_readable
from memtrace_otel.writeback import AttributionSpanProcessor
from memtrace_otel.writeback.metrics import AttributionMetrics

EVENT = "gen_ai.evaluation.result"
INCORRECT = {"gen_ai.evaluation.name": "correctness", "gen_ai.evaluation.score.label": "incorrect",
             "gen_ai.evaluation.explanation": "the user said Lisbon"}


# -- the rule ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("event", "fails"), [
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.label": "FAIL"}, True),
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.label": "Not Relevant"}, True),
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.label": "not-relevant"}, True),
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.label": "pass",
      "gen_ai.evaluation.score.value": 0.1}, False),  # a recognised label decides over the score
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.value": 0.49}, True),
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.value": 0.5}, False),
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.label": "medium",
      "gen_ai.evaluation.score.value": 0.2}, True),  # an unknown label: the score decides
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.label": "medium"}, False),
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.value": True}, False),  # not a number
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.value": float("nan")}, False),
    ({"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.label": "fail",
      "error.type": "TimeoutError"}, False),  # the evaluator failed, not the answer
    ({"gen_ai.evaluation.score.label": "fail"}, False),  # no name: not a conventions' result
    ({"gen_ai.evaluation.name": "memtrace.root_cause", "gen_ai.evaluation.score.value": 0.1}, False),
])
def test_the_default_rule(event: dict[str, object], fails: bool) -> None:
    assert FailureRule(fail_below=0.5).fails(event) is fails


def test_thresholds_names_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    score = {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 3}
    assert FailureRule(fail_below=4).fails(score) and not FailureRule(fail_below=3).fails(score)
    assert not FailureRule(fail_below=None).fails(score)
    assert not FailureRule(fail_below=4, names=frozenset({"faithfulness"})).fails(score)
    monkeypatch.setenv("MEMTRACE_EVALUATION_FAIL_BELOW", "off")
    assert FailureRule().fail_below is None
    monkeypatch.setenv("MEMTRACE_EVALUATION_FAIL_BELOW", "3.5")
    assert FailureRule().fail_below == 3.5
    monkeypatch.setenv("MEMTRACE_EVALUATION_FAIL_BELOW", "lots")  # one warning line, the default
    assert FailureRule().fail_below == 0.5


def test_memtraces_own_verdicts_and_annotations_are_not_read_as_evaluator_results() -> None:
    failing = SpanEvent(EVENT, 1, {"gen_ai.evaluation.name": "x", "gen_ai.evaluation.score.label": "fail"})
    own = SpanRecord("a" * 32, "b" * 16, "judge", attributes={"memtrace.evaluation.passed": True},
                     events=[failing])
    annotation = SpanRecord("a" * 32, "c" * 16, "memtrace.attribution", events=[failing],
                            scope_name="memtrace_otel.writeback")
    other = SpanRecord("a" * 32, "d" * 16, "chat", events=[failing])
    assert failing_verdict(own) is None and not is_failing(own)
    assert failing_verdict(annotation) is None
    assert failing_verdict(other) is not None and is_failing(other)


# -- a small memory pipeline: the update overwrote the fact the question needs ----------------------

def _pipeline(provider: TracerProvider, *, event_on: str | None = None,
              judge: bool = False) -> tuple[MemoryTracer, str]:
    """Ingest, extract, a faulty update, then a question answered wrong; returns the tracer and the
    question request span's traceparent. ``event_on``: ``generate`` or ``request`` gets an evaluator's
    failing result; ``judge``: the application records the same verdict itself (no gold)."""
    mt = MemoryTracer(provider, capture_content=True)
    app = provider.get_tracer("app")
    with mt.operation("ingest", Category.INGEST) as op:
        message = op.write("msg:D1:1", "I moved to Lisbon last year", kind=VariableKind.MESSAGE)
    with mt.operation("extract", Category.EXTRACTION) as op:
        op.read(message)
        unit = op.write("mem:1", "User moved to Lisbon last year", kind=VariableKind.MEMORY_UNIT)
    with mt.operation("update", Category.UPDATE) as op:
        op.read(unit)
        unit = op.update(unit, "User moved to Porto")
    with app.start_as_current_span("question") as request:
        with mt.operation("search", Category.RETRIEVAL) as op:
            query = op.write("query:q1", "Where did the user move last year?", kind=VariableKind.QUERY)
            op.read(unit)
            context = op.write("context:q1", "User moved to Porto", kind=VariableKind.CONTEXT)
        with mt.operation("generate", Category.GENERATION) as op:
            op.read(query)
            op.read(context)
            answer = op.write("answer:q1", "Porto", kind=VariableKind.ANSWER)
            if event_on == "generate":
                op.span.add_event(EVENT, INCORRECT)
        if judge:
            with mt.operation("judge", Category.EVALUATION) as op:
                op.read(answer)
                op.record_evaluation(False, signal="judge", question="Where did the user move last year?",
                                     prediction="Porto", explanation="the user said Lisbon", answer=answer)
        if event_on == "request":
            request.add_event(EVENT, INCORRECT)
        handle = traceparent(request)
    return mt, handle


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _records(spans: Sequence[ReadableSpan]) -> list[SpanRecord]:
    return [record_from_readable(s) for s in spans]


def _verdict(records: list[SpanRecord]):  # type: ignore[no-untyped-def]
    G = build_graph(records)
    (failure,) = failed_evaluations(G)
    (verdict,) = attribute_failures(G, create_engine("lineage"))
    return G, failure, verdict


@pytest.mark.parametrize("event_on", ["generate", "request"])
def test_an_evaluators_result_is_a_failure_attributed_as_the_judge_signal(event_on: str) -> None:
    provider, exporter = _provider()
    _pipeline(provider, event_on=event_on)
    spans = exporter.get_finished_spans()
    G, failure, verdict = _verdict(_records(spans))
    (judged,) = [s for s in spans if s.name == ("question" if event_on == "request" else "generate")]
    assert failure == evaluator_node_id(f"{judged.context.trace_id:032x}", f"{judged.context.span_id:016x}")
    data = G.nodes[failure]
    # The answer the judged span stands for (its own, or the one written below it), and what the
    # verdict did not say filled in from the graph.
    assert (data["answer"], data["signal"], data["question"], data["prediction"], data["explanation"]) == (
        "answer:q1@1", "judge", "Where did the user move last year?", "Porto", "the user said Lisbon")
    assert "answer:q1@1" in G.predecessors(failure)

    # The same verdict recorded by the application itself, without a gold answer: the same blame.
    provider, exporter = _provider()
    _pipeline(provider, judge=True)
    _, _, own = _verdict(_records(exporter.get_finished_spans()))
    assert (verdict.operation_name, verdict.error_type) == (own.operation_name, own.error_type)
    assert verdict.error_type is not None


def test_a_passing_result_and_memtraces_own_event_add_no_failure() -> None:
    provider, exporter = _provider()
    mt = MemoryTracer(provider, capture_content=True)
    with mt.operation("generate", Category.GENERATION) as op:
        op.write("answer:q1", "Porto", kind=VariableKind.ANSWER)
        op.span.add_event(EVENT, {"gen_ai.evaluation.name": "correctness",
                                  "gen_ai.evaluation.score.value": 0.9})
    with mt.operation("judge", Category.EVALUATION) as op:
        op.record_evaluation(False, gold="Lisbon")  # writes its own gen_ai.evaluation.result too
    G = build_graph(_records(exporter.get_finished_spans()))
    (failure,) = failed_evaluations(G)
    assert G.nodes[failure]["name"] == "judge"


# -- a verdict recorded later, against the answer's span context ------------------------------------

def test_feedback_names_the_answer_by_traceparent() -> None:
    provider, exporter = _provider()
    mt, handle = _pipeline(provider)
    context = record_feedback(handle, correction="Lisbon", tracer=mt)
    spans = exporter.get_finished_spans()
    (feedback,) = [s for s in spans if s.context.span_id == context.span_id]
    assert feedback.context.trace_id != parse_traceparent(handle).trace_id  # its own request's trace
    (link,) = feedback.links
    assert link.context.span_id == parse_traceparent(handle).span_id
    G, failure, verdict = _verdict(_records(spans))
    assert G.nodes[failure]["signal"] == "correction" and G.nodes[failure]["gold"] == "Lisbon"
    assert G.nodes[failure]["answer"] == "answer:q1@1" and G.graph["missing_traces"] == set()
    assert (verdict.operation_name, verdict.error_type) == ("update", ErrorType.UPDATE)


def test_bad_targets_say_what_in_one_line() -> None:
    with pytest.raises(ValueError, match="is not a W3C traceparent"):
        record_feedback("00-xyz")
    with pytest.raises(ValueError, match="valid span context"):
        record_feedback(42)  # type: ignore[arg-type]


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[3])
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
    from test_evaluator_signals import _pipeline
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(sys.argv[1])))
    _, handle = _pipeline(provider)
    provider.shutdown()
    open(sys.argv[2], "w").write(handle)
""")

FEEDBACK = textwrap.dedent("""
    import sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from memtrace_otel import MemoryTracer
    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
    from memtrace_otel.feedback import record_feedback
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(sys.argv[1])))
    record_feedback(open(sys.argv[2]).read(), correction="Lisbon",
                    tracer=MemoryTracer(provider, capture_content=True))
    provider.shutdown()
""")


def test_feedback_from_another_process_is_attributed_by_memtrace_analyze(tmp_path: Path) -> None:
    answers, feedback, handle = tmp_path / "answers.jsonl", tmp_path / "feedback.jsonl", tmp_path / "tp"
    here = str(Path(__file__).parent)
    subprocess.run([sys.executable, "-c", WRITER, str(answers), str(handle), here], check=True)
    subprocess.run([sys.executable, "-c", FEEDBACK, str(feedback), str(handle)], check=True)
    memtrace = [sys.executable, "-m", "memtrace_otel", "analyze", "--json"]
    both = subprocess.run([*memtrace, str(answers), str(feedback)], capture_output=True, text=True)
    assert both.returncode == 0, both.stderr
    (found,) = json.loads(both.stdout)["failures"]
    assert (found["error_type"], found["operation_name"]) == ("UpdateError", "update")
    # The feedback alone: its answer's trace is missing, and analyze says so (exit 3).
    alone = subprocess.run([*memtrace, str(feedback)], capture_output=True, text=True)
    assert alone.returncode == 3 and "trace" in alone.stderr


# -- the in-process processor, with its metrics ------------------------------------------------------

def _processor_setup() -> tuple[TracerProvider, InMemorySpanExporter, InMemoryMetricReader,
                                AttributionSpanProcessor, MemoryTracer]:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    mt = MemoryTracer(provider, capture_content=True)
    processor = AttributionSpanProcessor(mt, tracer_provider=provider, cpu_budget=None,
                                         meter_provider=MeterProvider(metric_readers=[reader]))
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter, reader, processor, mt


def _points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, object], object]]]:
    found: dict[str, list[tuple[dict[str, object], object]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    found.setdefault(metric.name, []).append(
                        (dict(point.attributes or {}), value if value is not None else point.count))
    return found


def _annotations(spans: Sequence[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans if s.name in {AnnotationSpan.ATTRIBUTION, AnnotationSpan.ROOT_CAUSE}}


def test_the_processor_attributes_an_evaluators_result_once_and_counts_it() -> None:
    provider, exporter, reader, processor, _ = _processor_setup()
    _pipeline(provider, event_on="generate")
    assert processor.force_flush()
    stats = processor.stats()
    assert (stats["jobs_queued"], stats["attributed"]) == (1, 1)  # the annotations' own event is no failure
    spans = exporter.get_finished_spans()
    (generate,) = [s for s in spans if s.name == "generate"]
    attribution = _annotations(spans)[AnnotationSpan.ATTRIBUTION]
    assert attribution.parent is not None and attribution.parent.span_id == generate.context.span_id
    error_type = attribution.attributes[MemTraceAttribution.ERROR_TYPE]
    points = _points(reader)
    assert points[MemTraceMetric.FAILURES] == [({
        "memtrace.error_type": error_type, "memtrace.root_cause.operation.name":
            attribution.attributes[MemTraceAttribution.ROOT_CAUSE_OPERATION_NAME],
        "service.name": "shop", "memtrace.attribution.source": "processor"}, 1)]
    ((attributes, count),) = points[MemTraceMetric.DURATION]
    assert count == 1 and attributes["memtrace.error_type"] == error_type
    provider.shutdown()


def test_the_processor_attributes_later_feedback_and_counts_drops() -> None:
    provider, exporter, reader, processor, mt = _processor_setup()
    _, handle = _pipeline(provider)
    assert processor.force_flush() and processor.stats()["jobs_queued"] == 0  # no failure yet
    record_feedback(handle, correction="Lisbon", tracer=mt)  # another request, same process
    assert processor.force_flush()
    attribution = _annotations(exporter.get_finished_spans())[AnnotationSpan.ATTRIBUTION]
    assert attribution.attributes[MemTraceAttribution.ERROR_TYPE] == "UpdateError"
    assert [p[0]["memtrace.error_type"] for p in _points(reader)[MemTraceMetric.FAILURES]] == ["UpdateError"]
    provider.shutdown()
    record_feedback(handle, correction="Lisbon", tracer=mt)  # after shutdown: dropped, counted
    ((attributes, count),) = _points(reader)[MemTraceMetric.DROPPED]
    assert (attributes["memtrace.drop.reason"], count) == ("shutdown", 1)


# -- memtrace serve -------------------------------------------------------------------------------

class _Backend:
    """A trace backend holding the answer's trace (what Jaeger or Tempo would give serve)."""

    name = "test backend"

    def __init__(self, spans: list[SpanRecord]) -> None:
        self.spans, self.asked = spans, []

    def fetch_traces(self, trace_ids: Sequence[str]) -> BackendFetch:
        self.asked.extend(trace_ids)
        found = [s for s in self.spans if s.trace_id in set(trace_ids)]
        return BackendFetch(found, {s.trace_id for s in found})


def test_serve_fetches_the_judged_trace_of_late_feedback_and_counts_it() -> None:
    pytest.importorskip("opentelemetry.proto", reason="memtrace serve needs the [serve] extra")
    from memtrace_otel.collector.assembler import TraceAssembler
    from memtrace_otel.collector.attribution_service import AttributionService

    provider, exporter = _provider()
    mt, handle = _pipeline(provider)
    answer_spans = _records(exporter.get_finished_spans())
    exporter.clear()
    record_feedback(handle, correction="Lisbon", tracer=mt)
    feedback_spans = _records(exporter.get_finished_spans())
    backend, reader = _Backend(answer_spans), InMemoryMetricReader()
    annotations = InMemorySpanExporter()
    service = AttributionService(annotations, backend=backend, assembler=TraceAssembler(settle_seconds=0.0),
                                 store_lookback=0, metrics=AttributionMetrics(
                                     MeterProvider(metric_readers=[reader]), source="serve"))
    service.start()
    try:  # serve gets only the feedback request's trace
        assert service.ingest(feedback_spans, wire_bytes=1000)
    finally:
        assert service.stop(timeout=30.0)
    assert parse_traceparent(handle).trace_id == int(backend.asked[0], 16)
    assert service.stats.attributions == 1
    attribution = _annotations(annotations.get_finished_spans())[AnnotationSpan.ATTRIBUTION]
    assert attribution.attributes[MemTraceAttribution.ERROR_TYPE] == "UpdateError"
    ((attributes, count),) = _points(reader)[MemTraceMetric.FAILURES]
    assert (attributes["memtrace.error_type"], attributes["memtrace.attribution.source"], count) == (
        "UpdateError", "serve", 1)


def test_serves_wire_index_sees_an_evaluators_failing_result() -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.common", reason="needs the [serve] extra")
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from memtrace_otel.collector.otlp_proto import index_request

    for event_on, failed in (("generate", True), (None, False)):
        provider, exporter = _provider()
        _pipeline(provider, event_on=event_on)
        index = index_request(encode_spans(exporter.get_finished_spans()), "test", [])
        question_trace = [trace for trace, (count, _) in index.items() if count > 1]
        assert [index[trace][1] for trace in question_trace] == [failed]


def test_docs_list_the_rules_labels_and_the_metrics() -> None:
    from memtrace_otel.signals import DEFAULT_FAIL_LABELS, DEFAULT_PASS_LABELS

    text = (Path(__file__).resolve().parents[1] / "docs" / "signals.md").read_text(encoding="utf-8")
    failing = text.split("Failing: ", 1)[1].split(". Passing: ", 1)
    passing = failing[1].split(". Case", 1)[0]
    assert set(re.findall(r"`([a-z_]+)`", failing[0])) == DEFAULT_FAIL_LABELS
    assert set(re.findall(r"`([a-z_]+)`", passing)) == DEFAULT_PASS_LABELS
    assert "below 0.5" in text and FailureRule(fail_below=0.5) == FailureRule()
    for name in (MemTraceMetric.FAILURES, MemTraceMetric.DURATION, MemTraceMetric.DROPPED):
        assert f"| `{name}` |" in text


def test_an_evaluators_result_as_a_log_record_is_read_from_files(tmp_path: Path) -> None:
    """The SDKs emit events as log records now: a logs pipeline's OTLP/JSON lines are read too."""
    from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context

    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

    spans_file, logs_file = tmp_path / "spans.jsonl", tmp_path / "logs.jsonl"
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(spans_file)))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    _pipeline(provider)
    provider.shutdown()
    (generate,) = [s for s in memory.get_finished_spans() if s.name == "generate"]
    judged = set_span_in_context(NonRecordingSpan(generate.context))  # what the evaluator correlates to
    logs = LoggerProvider()
    logs.add_log_record_processor(SimpleLogRecordProcessor(FileLogExporter(str(logs_file))))
    evaluator = logs.get_logger("an-evaluator")
    evaluator.emit(event_name=EVENT, context=judged, attributes=INCORRECT)
    evaluator.emit(event_name=EVENT, context=judged,
                   attributes={"gen_ai.evaluation.name": "tone", "gen_ai.evaluation.score.value": 0.9})
    evaluator.emit(body="an ordinary log line", context=judged)
    logs.shutdown()

    memtrace = [sys.executable, "-m", "memtrace_otel", "analyze", "--json"]
    both = subprocess.run([*memtrace, str(spans_file), str(logs_file)], capture_output=True, text=True)
    assert both.returncode == 0, both.stderr
    (found,) = json.loads(both.stdout)["failures"]  # the failing result only; the rest are no spans
    # As the same result on the span itself (a span event) is attributed.
    provider, exporter = _provider()
    _pipeline(provider, event_on="generate")
    _, _, as_event = _verdict(_records(exporter.get_finished_spans()))
    assert (found["operation_name"], found["error_type"]) == (as_event.operation_name,
                                                              as_event.error_type.value)
    alone = subprocess.run([*memtrace, str(logs_file)], capture_output=True, text=True)
    assert alone.returncode == 3 and "Traceback" not in alone.stderr  # the judged trace is missing
    assert json.loads(alone.stdout)["missing_traces"] == [f"{generate.context.trace_id:032x}"]
