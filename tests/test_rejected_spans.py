"""``partial_success.rejected_spans`` counts the spans not kept, not the problems (issue 24, item 10).

A span kept with a repair (a link dropped, an over-long attribute truncated) is a problem worth
a message but no rejection: a sender that counts rejections as lost data must not see it as lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from test_serve_receivers import Sink, _post, grpc_receiver, http_receiver  # noqa: F401  (fixtures)

from memtrace_otel.collector.http_receiver import OTLPHttpReceiver
from memtrace_otel.spans.otlp_json import MAX_ATTRIBUTE_CHARS


def _request() -> ExportTraceServiceRequest:
    """A good span, a span kept without its malformed link, and a span rejected (zero trace id)."""
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    good = spans.add()
    good.trace_id, good.span_id, good.name = b"\x01" * 16, b"\x02" * 8, "good"
    linked = spans.add()
    linked.trace_id, linked.span_id, linked.name = b"\x01" * 16, b"\x04" * 8, "kept, link dropped"
    link = linked.links.add()
    link.trace_id, link.span_id = b"\x05" * 3, b"\x06" * 8  # a 3-byte trace id: the link is dropped
    bad = spans.add()
    bad.trace_id, bad.span_id, bad.name = b"\x00" * 16, b"\x03" * 8, "zero-trace"
    return request


def test_protobuf_over_http_and_grpc_count_only_the_rejected_span(http_receiver, grpc_receiver) -> None:  # noqa: F811
    receiver, sink = http_receiver
    status, _, body = _post(receiver.address, _request().SerializeToString(),
                            {"Content-Type": "application/x-protobuf"})
    response = ExportTraceServiceResponse.FromString(body)
    assert status == 200 and response.partial_success.rejected_spans == 1
    assert sorted(span.name for span in sink.spans) == ["good", "kept, link dropped"]
    grpc_rx, grpc_sink = grpc_receiver
    with grpc.insecure_channel(f"127.0.0.1:{grpc_rx.address[1]}") as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(_request(), timeout=10)
    assert reply.partial_success.rejected_spans == 1 and len(grpc_sink.spans) == 2


@pytest.fixture
def roomy_receiver() -> Iterator[tuple[OTLPHttpReceiver, Sink]]:
    sink = Sink()
    receiver = OTLPHttpReceiver(sink, port=0, max_body_bytes=4 * MAX_ATTRIBUTE_CHARS, store_bodies=False)
    receiver.start()
    yield receiver, sink
    receiver.stop()


def test_json_truncated_attribute_is_kept_and_not_counted_as_rejected(roomy_receiver) -> None:
    receiver, sink = roomy_receiver
    long_value = "x" * (MAX_ATTRIBUTE_CHARS + 10)
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "01" * 16, "spanId": "02" * 8, "name": "truncated",
         "attributes": [{"key": "big", "value": {"stringValue": long_value}}]},
        {"traceId": "01" * 16, "spanId": "03" * 8, "name": "good"},
    ]}]}]}
    status, _, body = _post(receiver.address, json.dumps(document).encode(),
                            {"Content-Type": "application/json"})
    answer = json.loads(body)
    assert status == 200
    assert int(answer["partialSuccess"].get("rejectedSpans", 0)) == 0  # a warning, nothing rejected
    assert "truncated" in answer["partialSuccess"]["errorMessage"]
    assert sorted(span.name for span in sink.spans) == ["good", "truncated"]
    assert len(next(s for s in sink.spans if s.name == "truncated").attributes["big"]) < len(long_value)
