"""The offline memory agent exporting to Jaeger by OTLP, with its failures attributed live.

The agent of ``offline_memory_agent.py`` (a Mem0-shaped memory that gets some
answers wrong) runs with content capture off and an
:class:`~memtrace_otel.writeback.AttributionSpanProcessor` beside the OTLP
exporter: each failed answer gets a ``memtrace.attribution`` span in its own
trace and a ``memtrace.root_cause`` span in the trace of the operation to
blame. ``docs/jaeger.md`` walks through it::

    python examples/jaeger_writeback.py --endpoint http://127.0.0.1:4318/v1/traces
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from offline_memory_agent import QUESTIONS, SESSIONS, TinyMemory  # same folder
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import format_trace_id

from memtrace_otel import MemoryTracer
from memtrace_otel.extras import missing_extra
from memtrace_otel.writeback import AttributionSpanProcessor

__all__ = ["Pipeline", "ask", "ingest", "instrumented_provider", "new_agent"]


@dataclass
class Pipeline:
    provider: TracerProvider
    memory_tracer: MemoryTracer
    attribution: AttributionSpanProcessor


def instrumented_provider(exporter: SpanExporter, service: str = "memory-agent") -> Pipeline:
    """The application's provider: attribution first, then the exporter it already had.

    Attribution goes first so that ``provider.force_flush()`` and ``shutdown()``
    drain it before the exporter's processor flushes (see the processor's docs).
    """
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    memory_tracer = MemoryTracer(provider, capture_content=False)
    attribution = AttributionSpanProcessor(memory_tracer, tracer_provider=provider)
    provider.add_span_processor(attribution)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Pipeline(provider, memory_tracer, attribution)


def new_agent(pipeline: Pipeline) -> TinyMemory:
    return TinyMemory(pipeline.memory_tracer, pipeline.provider.get_tracer("memory-agent"))


def ingest(agent: TinyMemory) -> list[str]:
    """Ingest the chat, one trace per session; returns the session trace ids."""
    traces = []
    for number, session in enumerate(SESSIONS, start=1):
        with agent.app_tracer.start_as_current_span(f"session {number}") as span:
            for dia_id, text in session:
                agent.ingest(dia_id, text)
        traces.append(format_trace_id(span.get_span_context().trace_id))
    return traces


def ask(agent: TinyMemory) -> dict[str, bool]:
    """Answer the questions, one trace each; returns which were right."""
    return {case_id: agent.answer(case_id, question, gold, evidence)
            for case_id, question, gold, evidence in QUESTIONS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="http://127.0.0.1:4318/v1/traces",
                        help="OTLP/HTTP traces endpoint (Jaeger's OTLP receiver)")
    parser.add_argument("--service", default="memory-agent", help="service.name of the spans")
    args = parser.parse_args()
    try:  # the [serve] extra brings the OTLP/HTTP exporter; the rest of this module needs none
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise SystemExit(missing_extra("examples/jaeger_writeback.py (the OTLP/HTTP span exporter)",
                                       "serve")) from None
    pipeline = instrumented_provider(OTLPSpanExporter(endpoint=args.endpoint), args.service)
    agent = new_agent(pipeline)
    for number, trace_id in enumerate(ingest(agent), start=1):
        print(f"session {number}: trace {trace_id}")
    # Memory is usually written long before it is read: these traces are stored in Jaeger before
    # any question is asked, and the root-cause spans arrive in them later.
    pipeline.provider.force_flush()
    answers = ask(agent)
    pipeline.provider.shutdown()  # drains the attribution worker, then exports everything
    stats = pipeline.attribution.stats()
    print(f"answered {sum(answers.values())}/{len(answers)} right; "
          f"{stats['attributed']} failure(s) attributed, {stats['annotation_spans']} annotation span(s) "
          f"exported to {args.endpoint} as service {args.service!r}")


if __name__ == "__main__":
    main()
