"""The built OpenTelemetry Collector with the configs in ``collector/``, against a real Jaeger.

A span goes by OTLP/HTTP into the Collector; the tee config must deliver it both to
Jaeger (read back from its query API) and to a stand-in for ``memtrace serve`` (a
tiny OTLP receiver on 127.0.0.1 that records what it is sent), and keep delivering
to Jaeger when the memtrace side is down. The scale-out config must route every
trace whole to one of two receivers, and still give Jaeger every span.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import jaeger_harness
import otelcol_harness
from jaeger_harness import JaegerEndpoints

jaeger = jaeger_harness.jaeger  # the session fixture, visible to this module's tests

_POLL_SECONDS = 30.0
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_MARK = "otelcol.test.mark"


class SpanSink:
    """What OTLP receivers were sent: ``(receiver, trace id hex, span name)``; thread-safe.

    One sink can be shared by several receivers (``receiver`` tells them apart), so a test
    can wait for spans wherever they land.
    """

    def __init__(self) -> None:
        self._arrived = threading.Condition()
        self._spans: list[tuple[str, str, str]] = []

    def record(self, receiver: str, body: bytes) -> None:
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        spans = [(receiver, span.trace_id.hex(), span.name) for resource in request.resource_spans
                 for scope in resource.scope_spans for span in scope.spans]
        with self._arrived:
            self._spans.extend(spans)
            self._arrived.notify_all()

    def spans(self) -> list[tuple[str, str, str]]:
        with self._arrived:
            return list(self._spans)

    def trace_ids(self, receiver: str) -> set[str]:
        return {trace_id for where, trace_id, _ in self.spans() if where == receiver}

    def wait_for(self, trace_ids: set[str], timeout: float = _POLL_SECONDS) -> set[str]:
        """The subset of ``trace_ids`` received (anywhere) once all came or ``timeout`` passed."""
        with self._arrived:
            self._arrived.wait_for(lambda: trace_ids <= {tid for _, tid, _ in self._spans}, timeout)
            return trace_ids & {tid for _, tid, _ in self._spans}


def _http_sink_handler(sink: SpanSink) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(404 if self.path != "/v1/traces" else 415)
                return
            sink.record("http", body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")  # an empty ExportTraceServiceResponse
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
            pass

    return Handler


@pytest.fixture
def http_sink() -> Iterator[tuple[str, SpanSink]]:
    """An OTLP/HTTP (protobuf) receiver on 127.0.0.1: its base URL and what it got."""
    sink = SpanSink()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _http_sink_handler(sink))
    thread = threading.Thread(target=server.serve_forever, name="otlp-http-sink", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", sink
    finally:
        server.shutdown()
        server.server_close()


class _GrpcSink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: SpanSink, receiver: str) -> None:
        self._sink, self._receiver = sink, receiver

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest,
               context: grpc.ServicerContext) -> trace_service_pb2.ExportTraceServiceResponse:
        self._sink.record(self._receiver, request.SerializeToString())
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def grpc_sinks() -> Iterator[tuple[list[str], SpanSink]]:
    """Two OTLP/gRPC receivers on 127.0.0.1 (stand-ins for two serve instances): their
    ``host:port`` endpoints, and the sink both record into (receiver = endpoint)."""
    sink, servers, endpoints = SpanSink(), [], []
    try:
        for index in range(2):
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
            servers.append(server)
            port = server.add_insecure_port("127.0.0.1:0")
            endpoints.append(f"127.0.0.1:{port}")
            servicer = _GrpcSink(sink, endpoints[index])
            trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
            server.start()
        yield endpoints, sink
    finally:
        for server in servers:
            server.stop(grace=None)


def _send_traces(endpoint: str, names: list[str]) -> list[str]:
    """One span per name, each its own trace, sent by OTLP/HTTP; their trace ids (hex)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "otelcol-test"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10)))
    tracer = provider.get_tracer(__name__)
    trace_ids = []
    for name in names:
        with tracer.start_as_current_span(name) as span:
            span.set_attribute(_MARK, name)
            trace_ids.append(format(span.get_span_context().trace_id, "032x"))
    provider.shutdown()
    return trace_ids


def _jaeger_spans(jaeger: JaegerEndpoints, trace_id: str) -> list[dict]:
    """The trace's spans in Jaeger, waiting for them to be stored ([] if they never were)."""
    deadline = time.monotonic() + _POLL_SECONDS
    while time.monotonic() < deadline:
        jaeger.assert_alive()
        try:
            with _DIRECT.open(f"{jaeger.query_url}/api/traces/{trace_id}", timeout=5) as response:
                data = json.load(response).get("data") or []
            if data and data[0].get("spans"):
                return data[0]["spans"]
        except urllib.error.HTTPError as error:
            if error.code != 404:  # 404: not stored (yet)
                raise
        time.sleep(0.2)
    return []


def _mark_of(span: dict) -> str | None:
    return next((tag["value"] for tag in span["tags"] if tag["key"] == _MARK), None)


@pytest.fixture(scope="session")
def otelcol_bin() -> Path:
    """The built Collector; asked first so a missing one skips before Jaeger is started."""
    return otelcol_harness.require_otelcol_binary()


def test_tee_delivers_a_span_to_the_backend_and_to_memtrace(
    otelcol_bin: Path, jaeger: JaegerEndpoints, http_sink: tuple[str, SpanSink], tmp_path: Path
) -> None:
    sink_url, sink = http_sink
    env = {"MEMTRACE_BACKEND_OTLP": jaeger.otlp_grpc, "MEMTRACE_SERVE_OTLP": sink_url}
    with otelcol_harness.run_otelcol(otelcol_bin, otelcol_harness.TEE_CONFIG, tmp_path, env=env) as collector:
        (trace_id,) = _send_traces(collector.otlp_http_traces, ["tee-both"])
        got = sink.wait_for({trace_id})
        spans = _jaeger_spans(jaeger, trace_id)
        assert got == {trace_id}, f"memtrace side got {sink.spans()}; log:\n{collector.log_tail()}"
        assert ("http", trace_id, "tee-both") in sink.spans()
        assert [(s["operationName"], _mark_of(s)) for s in spans] == [("tee-both", "tee-both")], \
            collector.log_tail()


def test_tee_keeps_feeding_the_backend_while_memtrace_is_down(
    otelcol_bin: Path, jaeger: JaegerEndpoints, tmp_path: Path
) -> None:
    (closed_port,) = otelcol_harness.free_ports(1)  # nothing listens there
    env = {"MEMTRACE_BACKEND_OTLP": jaeger.otlp_grpc, "MEMTRACE_SERVE_OTLP": f"http://127.0.0.1:{closed_port}"}
    with otelcol_harness.run_otelcol(otelcol_bin, otelcol_harness.TEE_CONFIG, tmp_path, env=env) as collector:
        trace_ids = _send_traces(collector.otlp_http_traces, [f"serve-down-{i}" for i in range(3)])
        for index, trace_id in enumerate(trace_ids):
            spans = _jaeger_spans(jaeger, trace_id)
            assert [s["operationName"] for s in spans] == [f"serve-down-{index}"], collector.log_tail()
        assert "otlphttp/memtrace" in collector.log_tail(200)  # the memtrace side really failed


def test_loadbalance_routes_each_trace_whole_to_one_instance(
    otelcol_bin: Path, jaeger: JaegerEndpoints, grpc_sinks: tuple[list[str], SpanSink], tmp_path: Path
) -> None:
    instances, sink = grpc_sinks
    env = {"MEMTRACE_BACKEND_OTLP": jaeger.otlp_grpc, "MEMTRACE_SERVE_OTLP_ENDPOINTS": ",".join(instances)}
    with otelcol_harness.run_otelcol(otelcol_bin, otelcol_harness.LOADBALANCE_CONFIG, tmp_path,
                                     env=env) as collector:
        trace_ids = _send_traces(collector.otlp_http_traces, [f"lb-{i}" for i in range(24)])
        expected = set(trace_ids)
        assert sink.wait_for(expected) == expected, collector.log_tail()
        first, second = (sink.trace_ids(instance) for instance in instances)
        assert not first & second, f"traces sent to both instances: {first & second}"
        assert first and second, f"one instance got every trace: {len(first)} / {len(second)}"
        for trace_id in trace_ids:
            assert len(_jaeger_spans(jaeger, trace_id)) == 1, collector.log_tail()
