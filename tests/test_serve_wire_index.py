"""`serve`'s index of a protobuf request skips what a span's bytes show it cannot hold (issue 28, item 4).

The index (trace -> spans, holds a failed evaluation) and the problems reported must be what reading
every span through upb gives, and what decoding the spans into records gives, whatever the request
holds: parents, links good and malformed, memtrace's verdicts, evaluators' results, ids with the
tag bytes the index searches for, several resources and scopes, spans rejected for their ids.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.collector.assembler import TraceAssembler, trace_index
from memtrace_otel.collector.attribution_service import AttributionService, _decode_stored, _ReadBack
from memtrace_otel.collector.durable import KIND_PROTOBUF, DurableStore
from memtrace_otel.collector.export import SpanExporterSender
from memtrace_otel.collector.http_receiver import OTLPHttpReceiver
from memtrace_otel.collector.otlp_proto import (
    _PASSED_TRUE,
    TakeFailed,
    _span_ranges,
    decode_request,
    index_body,
    index_request,
    records_from_request,
    span_count,
)
from memtrace_otel.spans.model import Problem, SpanRecord

from serve_harness import post_protobuf

# The bytes of the attribute memtrace.evaluation.passed = true, inside a name or a string value: the index
# takes a span whose only verdict bytes are these for one without a failing verdict of its own.
_PASSED_TRUE_TEXT = _PASSED_TRUE.decode()


def _id(rng: random.Random, size: int) -> bytes:
    raw = bytes(rng.randrange(256) for _ in range(size))
    if rng.random() < 0.2:  # the parent and links tag bytes inside an id
        raw = raw[:2] + rng.choice([b"\x22", b"\x6a"]) + raw[3:]
    return raw


def _span(rng: random.Random, span: Span, traces: list[bytes]) -> None:
    span.trace_id = rng.choice(traces)
    span.span_id = _id(rng, 8)
    span.name = rng.choice(["judge", "search_memory", "j\x22\x6a", "memtrace.evaluation.passed",
                            _PASSED_TRUE_TEXT])
    if rng.random() < 0.5:
        span.parent_span_id = _id(rng, 8)
    roll = rng.random()
    if roll < 0.03:
        span.trace_id = bytes(16)  # rejected
    elif roll < 0.06:
        span.span_id = b"\x01\x02\x03"  # rejected
    elif roll < 0.09:
        span.parent_span_id = bytes(8)  # rejected
    for _ in range(rng.choice([0, 0, 1, 2])):
        link = span.links.add()
        link.trace_id = _id(rng, 16) if rng.random() < 0.8 else b"\x05" * 3
        link.span_id = _id(rng, 8)
    for _ in range(rng.randrange(4)):
        kv = span.attributes.add()
        kv.key = rng.choice(["memtrace.operation.category", "memtrace.inputs", "memtrace.evaluation.passed"])
        choice = rng.random()
        if choice < 0.4:
            kv.value.bool_value = rng.random() < 0.7
        elif choice < 0.8:
            kv.value.string_value = rng.choice(["false", "retrieval", "memtrace.evaluation.passed",
                                                _PASSED_TRUE_TEXT])
        else:
            kv.value.int_value = 0
    for _ in range(rng.choice([0, 0, 1])):
        event = span.events.add()
        event.name = rng.choice(["gen_ai.evaluation.result", "exception"])
        name = event.attributes.add()
        name.key, name.value.string_value = "gen_ai.evaluation.name", "faithfulness"
        score = event.attributes.add()
        score.key, score.value.double_value = "gen_ai.evaluation.score.value", rng.choice([0.1, 0.9])


def _request(rng: random.Random) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    traces = [_id(rng, 16) for _ in range(rng.randrange(1, 8))]
    for _ in range(rng.randrange(1, 3)):
        resource = request.resource_spans.add()
        resource.resource.attributes.add(key="service.name").value.string_value = "app"
        for _ in range(rng.randrange(1, 3)):
            scope = resource.scope_spans.add()
            scope.scope.name = "memtrace_otel"
            for _ in range(rng.randrange(0, 12)):
                _span(rng, scope.spans.add(), traces)
    return request


def test_the_index_from_the_bytes_is_the_index_of_every_span_read() -> None:
    rng = random.Random(28)
    failed_seen = rejected_seen = 0
    for _ in range(300):
        body = _request(rng).SerializeToString()
        fast: list[Problem] = []
        indexed = index_body(body, "here", fast)  # as the receivers index a request
        index, offered = indexed.index, indexed.offered
        request = decode_request(body)
        full: list[Problem] = []
        assert index == index_request(request, "here", full)  # without the body: every span read
        assert [p.message for p in fast] == [p.message for p in full]
        decoded: list[Problem] = []
        records = records_from_request(request, "here", decoded)
        assert index == trace_index(records)
        assert offered == span_count(request) == len(records) + sum("rejected" in p.message for p in full)
        ranges = _span_ranges(body)
        assert ranges is not None and len(ranges) == offered
        failed_seen += sum(failed for _, failed in index.values())
        rejected_seen += sum("rejected" in p.message for p in full)
    assert failed_seen > 50 and rejected_seen > 50  # the cases above did occur


def test_a_wire_it_cannot_follow_falls_back_to_reading_every_span() -> None:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = b"\x01" * 16, b"\x02" * 8
    verdict = span.attributes.add()
    verdict.key, verdict.value.bool_value = "memtrace.evaluation.passed", False
    # An unknown field of the group wire type (start and end group, field 15) after the request's spans.
    body = request.SerializeToString() + b"\x7b\x7c"
    assert _span_ranges(body) is None
    indexed = index_body(body, "here", [])
    assert (indexed.index, indexed.offered) == ({"01" * 16: (1, True)}, 1)


def test_the_failed_traces_decoded_with_the_index_are_the_spans_a_read_back_gives() -> None:
    rng = random.Random(46)
    failed_seen = 0
    for _ in range(200):
        body = _request(rng).SerializeToString()
        indexed = index_body(body, "here", [])
        wanted = sorted(trace_id for trace_id, (_, has_failed) in indexed.index.items() if has_failed)
        failed = indexed.take_failed(wanted)
        assert sorted(failed) == wanted
        assert failed == _decode_stored(KIND_PROTOBUF, body, wanted)
        failed_seen += len(wanted)
    assert failed_seen > 50


def test_serve_attributes_from_the_spans_decoded_at_ingest_without_reading_the_request_back(tmp_path) -> None:
    rng = random.Random(7)
    bodies = [_request(rng).SerializeToString() for _ in range(40)]
    service = AttributionService(SpanExporterSender(InMemorySpanExporter()),
                                 assembler=TraceAssembler(settle_seconds=1000), store=DurableStore(tmp_path))
    reads: list[int] = []
    read, append = service.store.request, service.store.append

    def counted_read(row: int) -> Any:
        reads.append(row)
        return read(row)

    service.store.request = counted_read  # type: ignore[method-assign]
    handed_over: set[int] = set()

    def append_handed_over(*args: Any) -> int:
        row = append(*args)
        handed_over.add(row)
        return row

    expected: dict[str, list[SpanRecord]] = {}
    for number, body in enumerate(bodies):
        indexed = index_body(body, "here", [])
        # half handed over with their failed traces' spans, half to be read back from the store
        service.store.append = append_handed_over if number % 2 else append  # type: ignore[method-assign]
        assert service.ingest_request(indexed.index, body, KIND_PROTOBUF,
                                      indexed.take_failed if number % 2 else None)
        failed = sorted(trace_id for trace_id, (_, has_failed) in indexed.index.items() if has_failed)
        for trace_id, spans in _decode_stored(KIND_PROTOBUF, body, failed).items():
            expected.setdefault(trace_id, []).extend(spans)
    try:
        assert len(expected) > 10
        read_back = {trace_id: service._read_back.spans_of(trace_id) for trace_id in expected}
        assert read_back == expected
        # only the requests handed over without their failed traces' spans were read back
        assert reads and handed_over and not handed_over & set(reads)
    finally:
        service.stop(5)


def test_spans_kept_at_receive_and_read_back_again_by_another_trace_are_counted_once(tmp_path) -> None:
    """The cap let one failed trace of a request in at receive; another failed trace's job read the request
    back first, which keeps the first trace's spans again: counted twice, the count never came back down
    and the cap shrank for good."""
    rng = random.Random(3)
    while True:
        body = _request(rng).SerializeToString()
        indexed = index_body(body, "here", [])
        index = indexed.index
        failed = indexed.take_failed([trace_id for trace_id, (_, has_failed) in index.items() if has_failed])
        if len(failed) == 2:
            break
    store = DurableStore(tmp_path)
    request_id = store.append(KIND_PROTOBUF, body, index)
    first, second = sorted(failed)
    read_back = _ReadBack(store, None)
    read_back.keep(request_id, {first: failed[first]})
    assert read_back.spans_of(second) == failed[second]  # read back: keeps the first trace's spans again
    assert read_back.spans_of(first) == failed[first]
    assert read_back._kept_spans == 0 and read_back._kept == {}
    store.close()


def test_serve_decodes_a_requests_failed_traces_only_once_it_has_room_for_them(tmp_path) -> None:
    """Over a real socket: a request refused with a 503 (the backlog full) has none of its failed traces
    decoded (the sender retries it; the work would be thrown away), and of an accepted one only the failed
    traces whose spans fit under the cap on spans kept are: the others are read back from the store."""
    rng = random.Random(11)
    while True:
        body = _request(rng).SerializeToString()
        index = index_body(body, "here", []).index
        failed = [trace_id for trace_id, (_, has_failed) in index.items() if has_failed]  # in request order
        if len(failed) >= 2:
            break
    service = AttributionService(SpanExporterSender(InMemorySpanExporter()),
                                 assembler=TraceAssembler(settle_seconds=1000), store=DurableStore(tmp_path))
    decoded: list[list[str]] = []

    def ingest(index: dict[str, tuple[int, bool]], body: bytes, kind: int, take_failed: TakeFailed) -> bool:
        def counted(trace_ids: Collection[str]) -> dict[str, list[SpanRecord]]:
            decoded.append(sorted(trace_ids))
            return take_failed(trace_ids)

        return service.ingest_request(index, body, kind, counted)

    receiver = OTLPHttpReceiver(ingest, port=0)
    receiver.start()
    try:
        service.max_backlog = 0  # every request refused, retryable
        assert post_protobuf(receiver.address[1], body) == 503
        assert decoded == [] and service.stats.spans_refused > 0
        service.max_backlog = 1000
        first = index[failed[0]][0]
        service._read_back._MAX_KEPT_SPANS = first  # room for the first failed trace only
        assert post_protobuf(receiver.address[1], body) == 200
        assert decoded == [[failed[0]]]
        expected = _decode_stored(KIND_PROTOBUF, body, failed)
        assert {trace_id: service._read_back.spans_of(trace_id) for trace_id in failed} == expected
    finally:
        receiver.stop()
        service.stop(5)


def test_verdicts_that_say_passed_are_known_from_the_bytes_and_any_other_is_read() -> None:
    """The SDK writes memtrace.evaluation.passed = true as the bytes the index looks for: a request whose
    every verdict is those bytes has no failed trace without reading an attribute; those bytes inside a
    name are no verdict (the span's evaluator result decides), and a false verdict is found among them."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider, sent = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(sent))
    tracer = provider.get_tracer("t")
    failing_result = {"gen_ai.evaluation.name": "faithfulness", "gen_ai.evaluation.score.value": 0.1}

    def index_of(*spans: tuple[str, dict[str, Any], bool]) -> list[bool]:
        sent.clear()
        for name, attributes, evaluator_failed in spans:
            span = tracer.start_span(name, attributes=attributes)  # each its own trace
            if evaluator_failed:
                span.add_event("gen_ai.evaluation.result", failing_result)
            span.end()
        body = encode_spans(sent.get_finished_spans()).SerializeToString()
        assert _PASSED_TRUE in body or not any(a.get("memtrace.evaluation.passed") for _, a, _ in spans)
        index = index_body(body, "here", []).index
        assert index == index_request(decode_request(body), "here", [])  # every span read
        return [failed for _, failed in index.values()]

    passed = {"memtrace.evaluation.passed": True}
    assert index_of(("judge", passed, False), ("judge", passed, False)) == [False, False]
    assert index_of(("judge", passed, False), ("judge", {"memtrace.evaluation.passed": False}, False),
                    ("judge", passed, False)) == [False, True, False]
    assert index_of(("judge", passed, True), (_PASSED_TRUE_TEXT, {}, True), (_PASSED_TRUE_TEXT, {}, False),
                    ("judge", {"note": _PASSED_TRUE_TEXT}, True)) == [False, True, False, True]
