"""`memtrace serve`'s OTLP receivers over real sockets: good, malformed, oversized and overloaded input."""

from __future__ import annotations

import gzip
import http.client
import json
import socket

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.collector.grpc_receiver import OTLPGrpcReceiver
from memtrace_otel.collector.http_receiver import OTLPHttpReceiver
from memtrace_otel.collector.otlp_proto import TakeFailed
from memtrace_otel.spans.model import SpanRecord

from scenario import run_pipeline

_PB = "application/x-protobuf"


class Sink:
    """What the receivers hand over; ``accept`` False plays an overloaded service."""

    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []
        self.accept = True

    def __call__(self, spans: list[SpanRecord], wire_bytes: int) -> bool:
        if not self.accept:
            return False
        self.spans.extend(spans)
        return True


@pytest.fixture
def http_receiver():
    sink = Sink()
    receiver = OTLPHttpReceiver(sink, port=0, max_body_bytes=1 << 20, store_bodies=False)
    receiver.start()
    yield receiver, sink
    receiver.stop()


@pytest.fixture
def grpc_receiver():
    sink = Sink()
    receiver = OTLPGrpcReceiver(sink, port=0, max_message_bytes=1 << 20, store_bodies=False)
    receiver.start()
    yield receiver, sink
    receiver.stop()


def _post(address: tuple[str, int], body: bytes,
          headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(*address, timeout=10)
    try:
        connection.request("POST", "/v1/traces", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def _one_span_request() -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "ok"
    return request


def test_sdk_exporters_deliver_every_span(http_receiver, grpc_receiver) -> None:
    (http_rx, http_sink), (grpc_rx, grpc_sink) = http_receiver, grpc_receiver
    exporters = ((HttpExporter(endpoint=f"http://127.0.0.1:{http_rx.address[1]}/v1/traces"), http_sink),
                 (GrpcExporter(endpoint=f"127.0.0.1:{grpc_rx.address[1]}", insecure=True), grpc_sink))
    for exporter, sink in exporters:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        run_pipeline(provider, capture_content=False)
        provider.shutdown()
        names = {span.name for span in sink.spans}
        assert {"ingest", "judge", "search_memory"} <= names
        assert len(sink.spans) == 18
        search = next(span for span in sink.spans if span.name == "search_memory")
        assert (search.kind, search.scope_name) == ("CLIENT", "memtrace_otel")
        assert "service.name" in search.resource_attributes
        sink.spans.clear()


def test_json_body_and_gzip_are_accepted(http_receiver) -> None:
    receiver, sink = http_receiver
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "01" * 16, "spanId": "02" * 8, "name": "json-span"}]}]}]}
    status, headers, body = _post(receiver.address, gzip.compress(json.dumps(document).encode()),
                                  {"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {}
    assert [span.name for span in sink.spans] == ["json-span"]


@pytest.mark.parametrize(("body", "headers", "status"), [
    (b"\xff\x00garbage", {"Content-Type": "application/x-protobuf"}, 400),
    (b"{not json", {"Content-Type": "application/json"}, 400),
    (b'{"data": []}', {"Content-Type": "application/json"}, 400),
    (b"x", {"Content-Type": "text/plain"}, 415),
    (gzip.compress(b"\0" * (2 << 20)), {"Content-Type": _PB, "Content-Encoding": "gzip"}, 413),
    (b"\x1f\x8b truncated gzip", {"Content-Type": _PB, "Content-Encoding": "gzip"}, 400),
])
def test_bad_requests_get_an_error_and_the_receiver_keeps_serving(http_receiver, body, headers,
                                                                  status) -> None:
    receiver, sink = http_receiver
    assert _post(receiver.address, body, headers)[0] == status
    good = _one_span_request().SerializeToString()
    assert _post(receiver.address, good, {"Content-Type": "application/x-protobuf"})[0] == 200
    assert [span.name for span in sink.spans] == ["ok"]


def test_oversized_body_is_refused_before_it_is_read(http_receiver) -> None:
    receiver, _ = http_receiver
    connection = http.client.HTTPConnection(*receiver.address, timeout=10)
    connection.putrequest("POST", "/v1/traces")
    connection.putheader("Content-Type", "application/x-protobuf")
    connection.putheader("Content-Length", str(64 << 20))
    connection.endheaders()
    assert connection.getresponse().status == 413
    connection.close()


def test_malformed_spans_are_counted_in_partial_success(http_receiver, grpc_receiver) -> None:
    request = _one_span_request()
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.trace_id, bad.span_id, bad.name = b"\x00" * 16, b"\x03" * 8, "zero-trace"
    receiver, sink = http_receiver
    status, _, body = _post(receiver.address, request.SerializeToString(),
                            {"Content-Type": "application/x-protobuf"})
    response = ExportTraceServiceResponse.FromString(body)
    assert status == 200 and response.partial_success.rejected_spans == 1
    assert [span.name for span in sink.spans] == ["ok"]
    grpc_rx, grpc_sink = grpc_receiver
    with grpc.insecure_channel(f"127.0.0.1:{grpc_rx.address[1]}") as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=10)
    assert reply.partial_success.rejected_spans == 1 and len(grpc_sink.spans) == 1


def test_overload_answers_retryable(http_receiver, grpc_receiver) -> None:
    receiver, sink = http_receiver
    sink.accept = False
    status, headers, _ = _post(receiver.address, _one_span_request().SerializeToString(),
                               {"Content-Type": "application/x-protobuf"})
    assert status == 503 and headers["Retry-After"].isdigit()
    grpc_rx, grpc_sink = grpc_receiver
    grpc_sink.accept = False
    with grpc.insecure_channel(f"127.0.0.1:{grpc_rx.address[1]}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.Export(_one_span_request(), timeout=10)
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE


def test_grpc_message_over_the_limit_is_refused(grpc_receiver) -> None:
    receiver, sink = grpc_receiver
    request = _one_span_request()
    request.resource_spans[0].scope_spans[0].spans[0].name = "x" * (2 << 20)
    with grpc.insecure_channel(f"127.0.0.1:{receiver.address[1]}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.Export(request, timeout=10)
        assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert stub.Export(_one_span_request(), timeout=10) is not None
    assert [span.name for span in sink.spans] == ["ok"]


def test_grpc_body_that_is_not_an_export_request_is_invalid_argument(grpc_receiver) -> None:
    receiver, sink = grpc_receiver
    with grpc.insecure_channel(f"127.0.0.1:{receiver.address[1]}") as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                     request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as raised:
            export(b"\xff\x00garbage", timeout=10)
        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert export(_one_span_request().SerializeToString(), timeout=10) is not None
    assert [span.name for span in sink.spans] == ["ok"]


def test_a_client_still_sending_an_oversized_body_reads_the_413(http_receiver) -> None:
    receiver, sink = http_receiver
    with socket.create_connection(receiver.address, timeout=10) as client:
        client.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                       b"Content-Length: 67108864\r\n\r\n")
        client.sendall(b"\0" * (4 << 20))  # the body keeps coming while the server answers
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413"), answer[:80]
    assert sink.spans == []


class BodySink:
    """The default (durable) call: each request's trace index and its bytes, as received."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, tuple[int, bool]], bytes, int]] = []
        self.failed: list[dict[str, list[SpanRecord]]] = []

    def __call__(self, index: dict[str, tuple[int, bool]], body: bytes, kind: int,
                 take_failed: TakeFailed | None) -> bool:
        self.requests.append((index, body, kind))
        wanted = [trace_id for trace_id, (_, failed) in index.items() if failed]
        self.failed.append(take_failed(wanted) if take_failed is not None else {})
        return True


def test_by_default_the_receivers_hand_over_the_request_to_store() -> None:
    """What a receiver acknowledges is the bytes it was sent: by default nothing is decoded into
    memory only, the request goes to ``ingest`` to be stored (``store_bodies=False`` is the other path)."""
    http_sink, grpc_sink = BodySink(), BodySink()
    receivers = [OTLPHttpReceiver(http_sink, port=0), OTLPGrpcReceiver(grpc_sink, port=0)]
    for receiver in receivers:
        receiver.start()
    try:
        body = _one_span_request().SerializeToString()
        status, _, _ = _post(receivers[0].address, body, {"Content-Type": _PB})
        assert status == 200
        host, port = receivers[1].address
        with grpc.insecure_channel(f"{host}:{port}") as channel:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(_one_span_request(), timeout=10)
    finally:
        for receiver in receivers:
            receiver.stop()
    for sink in (http_sink, grpc_sink):
        ((index, stored, _kind),) = sink.requests
        assert stored == body
        assert index == {"01" * 16: (1, False)}
        assert sink.failed == [{}]  # no failed trace: nothing decoded
