"""`serve`'s index of a protobuf request skips what a span's bytes show it cannot hold (issue 28, item 4).

The index (trace -> spans, holds a failed evaluation) and the problems reported must be what reading
every span through upb gives, and what decoding the spans into records gives, whatever the request
holds: parents, links good and malformed, memtrace's verdicts, evaluators' results, ids with the
tag bytes the index searches for, several resources and scopes, spans rejected for their ids.
"""

from __future__ import annotations

import random

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from memtrace_otel.collector.assembler import trace_index
from memtrace_otel.collector.otlp_proto import (
    _span_ranges,
    decode_request,
    index_body,
    index_request,
    records_from_request,
    span_count,
)
from memtrace_otel.spans.model import Problem


def _id(rng: random.Random, size: int) -> bytes:
    raw = bytes(rng.randrange(256) for _ in range(size))
    if rng.random() < 0.2:  # the parent and links tag bytes inside an id
        raw = raw[:2] + rng.choice([b"\x22", b"\x6a"]) + raw[3:]
    return raw


def _span(rng: random.Random, span: Span, traces: list[bytes]) -> None:
    span.trace_id = rng.choice(traces)
    span.span_id = _id(rng, 8)
    span.name = rng.choice(["judge", "search_memory", "j\x22\x6a", "memtrace.evaluation.passed"])
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
            kv.value.string_value = rng.choice(["false", "retrieval", "memtrace.evaluation.passed"])
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
        index, offered = index_body(body, "here", fast)
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
    assert index_body(body, "here", []) == ({"01" * 16: (1, True)}, 1)
