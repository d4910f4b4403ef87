"""The parts of `memtrace serve`: the trace assembler and the annotation outbox."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider

from memtrace_otel.collector.assembler import TraceAssembler
from memtrace_otel.collector.http_receiver import OTLPHttpReceiver
from memtrace_otel.collector.outbox import OutboxSpanProcessor
from memtrace_otel.spans.model import SpanRecord


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _span(trace: int, span: int) -> SpanRecord:
    return SpanRecord(f"{trace:032x}", f"{span:016x}", f"s{span}")


def test_a_trace_is_released_only_after_it_settles() -> None:
    clock = Clock()
    assembler = TraceAssembler(settle_seconds=5, clock=clock)
    assert assembler.offer([_span(1, 1), _span(2, 2)], 200)
    clock.now = 4
    assert assembler.offer([_span(1, 3)], 100)  # trace 1 is busy again
    clock.now = 6
    assert [t.trace_id for t in assembler.settled()] == [f"{2:032x}"]
    clock.now = 8.9
    assert assembler.settled() == []
    clock.now = 9
    (trace,) = assembler.settled()
    assert [s.span_id for s in trace.spans] == [f"{1:016x}", f"{3:016x}"]
    assert assembler.held_bytes == 0 and assembler.held_traces == 0


def test_the_byte_ceiling_refuses_whole_batches_and_frees_on_release() -> None:
    clock = Clock()
    assembler = TraceAssembler(settle_seconds=1, max_bytes=10_000, clock=clock)
    assert assembler.offer([_span(1, i) for i in range(1, 5)], 800)  # 4 x (600 + 4 x 200) bytes
    assert assembler.held_bytes == 5600
    assert not assembler.offer([_span(2, i) for i in range(9, 13)], 800)
    assert assembler.held_traces == 1  # nothing of the refused batch was kept
    clock.now = 2
    assert len(assembler.settled()) == 1
    assert assembler.offer([_span(2, i) for i in range(9, 13)], 800)


def test_a_huge_trace_keeps_its_first_spans_and_counts_the_rest() -> None:
    assembler = TraceAssembler(settle_seconds=0, max_trace_spans=3)
    assert assembler.offer([_span(1, i) for i in range(1, 11)], 1000)
    (trace,) = assembler.drain()
    assert len(trace.spans) == 3 and trace.dropped == 7 and assembler.dropped_spans == 7


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_outbox_holds_annotations_while_the_backend_is_down_and_loses_none() -> None:
    port = _free_port()  # nothing listens there yet: the backend is down
    received: list[SpanRecord] = []
    got_all = threading.Event()

    def ingest(spans: list[SpanRecord], _bytes: int) -> bool:
        received.extend(spans)
        if len(received) >= 25:
            got_all.set()
        return True

    outbox = OutboxSpanProcessor(HttpExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=1),
                                 batch_size=10, initial_backoff=0.05, max_backoff=0.2)
    provider = TracerProvider()
    provider.add_span_processor(outbox)
    tracer = provider.get_tracer("test")
    for number in range(25):
        tracer.start_span(f"annotation-{number}").end()
    assert not outbox.force_flush(300)  # still down: nothing exported, nothing dropped
    deadline = time.monotonic() + 30
    while outbox.failed_attempts < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # the exporter's own retries take up to its 1 s timeout per attempt
    assert outbox.held == 25 and outbox.dropped == 0 and outbox.failed_attempts >= 2
    backend = OTLPHttpReceiver(ingest, port=port)
    backend.start()
    try:
        assert outbox.force_flush(20_000)
        assert got_all.wait(5)
    finally:
        backend.stop()
    assert sorted(span.name for span in received) == sorted(f"annotation-{n}" for n in range(25))
    assert outbox.exported == 25 and outbox.held == 0
    provider.shutdown()


def test_outbox_bound_drops_newest_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    class Refusing:
        def export(self, spans):  # the SpanExporter shape
            from opentelemetry.sdk.trace.export import SpanExportResult

            return SpanExportResult.FAILURE

        def shutdown(self) -> None:
            pass

    outbox = OutboxSpanProcessor(Refusing(), max_spans=5, initial_backoff=0.01, max_backoff=0.02)  # type: ignore[arg-type]
    provider = TracerProvider()
    provider.add_span_processor(outbox)
    for number in range(8):
        provider.get_tracer("t").start_span(f"s{number}").end()
    assert outbox.held == 5 and outbox.dropped == 3
    assert sum("outbox full" in r.message for r in caplog.records) == 1
    outbox.shutdown(timeout_millis=100)  # the SDK's signature: returns None, says what it lost
    assert outbox.unexported_at_shutdown == 5
    outbox.shutdown()  # second call: a debug line, nothing else
    assert outbox.unexported_at_shutdown == 5


def test_memory_guard_refuses_over_the_soft_limit_and_caches_its_reading() -> None:
    from memtrace_otel.collector.memory import MemoryGuard

    clock = Clock()
    resident = MemoryGuard(1 << 40).resident_bytes()
    assert resident > 0  # /proc is there on the machines this runs on
    roomy = MemoryGuard(resident * 4, clock=clock)
    assert not roomy.over()
    tight = MemoryGuard(resident, spike=0.2, clock=clock)  # soft limit: 80% of what we hold
    assert tight.over() and tight.refusals == 1
    tight.limit_bytes = tight.soft_limit_bytes = resident * 4  # within the interval: the reading stands
    assert tight.over()
    clock.now = 1.0
    assert not tight.over()
