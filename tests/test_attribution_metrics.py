"""Attribution outcomes as OTel metrics (issue 26, item 4): ``memtrace serve --metrics-otlp`` over real
OTLP/HTTP to a local receiver, and what the instruments say. (The processor's metrics and serve's
service-level counting are in ``tests/test_evaluator_signals.py``.)"""

from __future__ import annotations

import http.server
import threading
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_evaluator_signals import _pipeline, _provider

from memtrace_otel.semconv import MemTraceMetric
from memtrace_otel.spans.model import record_from_readable

from loopback_http import LoopbackServers

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="memtrace serve needs the [serve] extra")


class _Received:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.bodies: list[tuple[str, bytes]] = []


class _MetricsReceiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP metrics receiver: keeps each request's path and body, answers 200."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.received.bodies.append((self.path, body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_serve_exports_attribution_metrics_by_otlp(tmp_path) -> None:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    from memtrace_otel.collector.serve import ServeConfig, build_server

    servers, received = LoopbackServers("metrics-receiver"), _Received()
    try:
        url = servers.start(_MetricsReceiver, "received", received)
        server = build_server(ServeConfig(grpc_port=None, http_port=0, settle_seconds=0.0,
                                          data_dir=str(tmp_path / "serve"), metrics_otlp=url),
                              exporter=InMemorySpanExporter())
        provider, exporter = _provider()
        _pipeline(provider, event_on="generate")  # an evaluator failed the answer: one failure
        spans = [record_from_readable(s) for s in exporter.get_finished_spans()]
        server.service.start()
        assert server.service.ingest(spans, wire_bytes=1000)
        assert server.stop(timeout=30.0)  # the last export happens at stop
    finally:
        servers.close()
    assert received.bodies and {path for path, _ in received.bodies} == {"/v1/metrics"}
    points: dict[str, list[tuple[dict[str, str], Any]]] = {}
    for _, body in received.bodies:
        request = ExportMetricsServiceRequest.FromString(body)
        for resource in request.resource_metrics:
            service = {kv.key: kv.value.string_value for kv in resource.resource.attributes}["service.name"]
            assert service == "memtrace"
            for scope in resource.scope_metrics:
                assert scope.scope.name == "memtrace_otel.writeback"
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        attributes = {kv.key: kv.value.string_value for kv in point.attributes}
                        value = point.count if kind == "histogram" else point.as_int
                        points.setdefault(metric.name, []).append((attributes, value))
                    if metric.name == MemTraceMetric.DURATION:
                        assert metric.unit == "s"
    ((attributes, count),) = points[MemTraceMetric.FAILURES]
    assert count == 1 and attributes["memtrace.attribution.source"] == "serve"
    assert attributes["memtrace.error_type"] in {"UpdateError", "ResponseError", "RetrievalError",
                                                 "ExtractionError", "DeletionError"}
    assert attributes["service.name"] == "shop"  # the blamed span's service, as sent
    ((_, histogram_count),) = points[MemTraceMetric.DURATION]
    assert histogram_count == 1


def test_a_bad_metrics_endpoint_is_one_line() -> None:
    from memtrace_otel.cli import main

    result = CliRunner().invoke(main, ["serve", "--metrics-otlp", "ftp://x"])
    assert result.exit_code == 1 and "metrics endpoint 'ftp://x'" in result.output
    assert "Traceback" not in result.output
