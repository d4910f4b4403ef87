"""``memtrace serve`` assembled: configuration, the service, its receivers and its exporter.

:class:`ServeConfig` (``serve_config.py``) is the whole configuration (the CLI's options and
the environment variables are built from its fields); :func:`build_server` wires the parts without
binding anything until :meth:`MemtraceServer.start`, so the wiring can be
tested without sockets.
"""

from __future__ import annotations

import logging

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter

from memtrace_otel.collector.assembler import TraceAssembler
from memtrace_otel.collector.attribution_service import AttributionService
from memtrace_otel.collector.budget import Budget
from memtrace_otel.collector.durable import DurableStore
from memtrace_otel.collector.export import Answer, Sender, otlp_sender
from memtrace_otel.collector.memory import Admission, MemoryGuard, bound_allocator
from memtrace_otel.collector.otlp_proto import TakeFailed
from memtrace_otel.collector.serve_config import ServeConfig
from memtrace_otel.config import env_millis
from memtrace_otel.content.resolve import ContentResolver
from memtrace_otel.graph.build import ContentLookup
from memtrace_otel.semconv import MemTraceAttribution
from memtrace_otel.spans.backend import TraceBackend
from memtrace_otel.spans.gather import open_backend
from memtrace_otel.writeback.metrics import AttributionMetrics

__all__ = ["MemtraceServer", "ServeConfig", "VerdictLogSender", "build_server", "otlp_exporter"]

_logger = logging.getLogger(__name__)
_MIB = 1 << 20
_DECODE_FACTOR = 20
_RECEIVER_WORKERS = 4
_METRICS_INTERVAL_MILLIS = 10_000.0  # sooner than the SDK's 60 s: an attribution is rare and worth seeing
_ENV_METRICS_INTERVAL = "OTEL_METRIC_EXPORT_INTERVAL"  # the SDK's own variable, in milliseconds


def otlp_exporter(endpoint: str | None, protocol: str) -> Sender:
    """Where annotations leave by (``endpoint`` is the backend's OTLP base URL; ``None``: the log)."""
    if endpoint is None:
        _logger.warning("no --backend-otlp endpoint: verdicts are printed on stderr, not written back to a "
                        "trace backend")
        return VerdictLogSender()
    return otlp_sender(endpoint, protocol)


class VerdictLogSender(Sender):
    """Writes one line per verdict to the log instead of a backend (``serve`` without ``--backend-otlp``).

    It reads the two fields it prints from the encoded request: rebuilding every annotation as an
    SDK span to print a line cost as much as the rest of the write-back.
    """

    name = "the log"

    def send(self, body: bytes) -> tuple[Answer, str]:
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)  # encoded by this process (collector/otlp_encode.py)
        except DecodeError as error:  # a row that does not parse never will: not retried
            return Answer.PERMANENT, f"not an OTLP export request: {error}"
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    if not span.parent_span_id:
                        continue
                    fields = {kv.key: kv.value.string_value for kv in span.attributes if kv.key in _PRINTED}
                    if MemTraceAttribution.ERROR_TYPE in fields:
                        _logger.warning("trace %s: %s at %s", span.trace_id.hex(),
                                        fields[MemTraceAttribution.ERROR_TYPE],
                                        fields.get(MemTraceAttribution.ROOT_CAUSE_OPERATION_NAME, "?"))
        return Answer.ACCEPTED, ""


_PRINTED = frozenset({MemTraceAttribution.ERROR_TYPE, MemTraceAttribution.ROOT_CAUSE_OPERATION_NAME})


def _backend(config: ServeConfig) -> TraceBackend | None:
    backend = open_backend(config.jaeger_url, config.tempo_url)
    if backend is None:
        _logger.warning("no --jaeger/--tempo query URL: memory written in other traces cannot be fetched, so "
                        "failures are attributed from their own trace only")
    return backend


class MemtraceServer:
    """The service and its receivers; :meth:`start` binds, :meth:`stop` drains and closes."""

    def __init__(self, config: ServeConfig, service: AttributionService,
                 meter_provider: MeterProvider | None = None) -> None:
        self.config = config
        self.service = service
        self.meter_provider = meter_provider  # --metrics-otlp's: its last export happens at stop
        self.memory = service.memory_guard or MemoryGuard(config.memory_limit_mib * _MIB)
        self.admission = service.admission
        self.receivers: list[object] = []

    def ingest(self, index: dict[str, tuple[int, bool]], body: bytes, kind: int,
               take_failed: TakeFailed | None = None) -> bool:
        """A received request, stored as it came (the receivers' default call)."""
        return self.service.ingest_request(index, body, kind, take_failed)

    def start(self) -> None:
        from memtrace_otel.collector.grpc_receiver import OTLPGrpcReceiver
        from memtrace_otel.collector.http_receiver import OTLPHttpReceiver

        limit = self.config.max_request_mib * _MIB
        if self.config.grpc_port is not None:
            self.receivers.append(OTLPGrpcReceiver(self.ingest, host=self.config.host,
                                                   port=self.config.grpc_port,
                                                   max_message_bytes=limit, workers=_RECEIVER_WORKERS,
                                                   admission=self.admission))
        if self.config.http_port is not None:
            self.receivers.append(OTLPHttpReceiver(self.ingest, host=self.config.host,
                                                   port=self.config.http_port,
                                                   max_body_bytes=limit, workers=_RECEIVER_WORKERS,
                                                   admission=self.admission))
        self.service.start()
        for receiver in self.receivers:
            receiver.start()  # type: ignore[attr-defined]

    def stop(self, timeout: float = 30.0) -> bool:
        for receiver in self.receivers:
            receiver.stop()  # type: ignore[attr-defined]
        stopped = self.service.stop(timeout)
        if self.meter_provider is not None:
            self.meter_provider.shutdown()  # exports what the last failures counted
        return stopped


def _content_by_hash(config: ServeConfig) -> ContentLookup | None:
    # One resolver for the service's life: its cache serves every trace; a store that cannot
    # be read is logged once and attribution goes on without content.
    return ContentResolver(config.content_store).get if config.content_store else None


def _meter_provider(config: ServeConfig) -> MeterProvider | None:
    """``--metrics-otlp``: the attribution metrics exported by OTLP/HTTP every 10 s (and at stop)."""
    if config.metrics_otlp is None:
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    exporter = OTLPMetricExporter(endpoint=config.metrics_otlp.rstrip("/") + "/v1/metrics")
    return MeterProvider(resource=Resource.create({"service.name": "memtrace"}),
                         metric_readers=[PeriodicExportingMetricReader(
                             exporter, env_millis(_ENV_METRICS_INTERVAL, _METRICS_INTERVAL_MILLIS))])


def build_server(config: ServeConfig, *, exporter: SpanExporter | Sender | None = None) -> MemtraceServer:
    """Wire a server from ``config`` (``ValueError`` on a bad setting, ``OSError`` when the data
    directory cannot be used); binds nothing yet, but opens the data directory and replays it."""
    config.validate()
    assembler = TraceAssembler(settle_seconds=config.settle_seconds)
    sender = exporter or otlp_exporter(config.backend_otlp, config.backend_protocol)
    budget = Budget(max_traces=config.failure_max_traces, max_searches=config.failure_max_searches,
                    seconds=config.failure_seconds, rate=config.backend_rate)
    bound_allocator()
    guard = MemoryGuard(config.memory_limit_mib * _MIB)
    # Bytes being decoded at once (receivers and workers reading back), in wire bytes: a parsed
    # request takes ~4.3x its wire size besides its body and the store's copy, about 6.3x in all
    # (benchmarks/performance/serve_flood.py's attribute-dense requests), so a twentieth of the limit keeps
    # decoding under a third of it; one request is always admitted.
    admission = Admission(guard, max_bytes=config.memory_limit_mib * _MIB // _DECODE_FACTOR,
                          max_requests=_RECEIVER_WORKERS)
    store = DurableStore(config.data_dir, max_bytes=config.data_limit_mib * _MIB)
    meters = _meter_provider(config)
    try:
        service = AttributionService(sender, backend=_backend(config), assembler=assembler,
                                     engine=config.engine, content_by_hash=_content_by_hash(config),
                                     store_lookback=config.store_lookback,
                                     store=store, workers=config.workers, budget=budget,
                                     redo_seconds=config.redo_seconds, admission=admission,
                                     metrics=AttributionMetrics(meters, source="serve"))
    except BaseException:
        store.close()
        raise
    return MemtraceServer(config, service, meters)
