"""OTLP/gRPC trace receiver (``opentelemetry.proto.collector.trace.v1.TraceService/Export``).

Status codes follow the OTLP specification: ``UNAVAILABLE`` when the service
is over its memory ceiling (the sender retries with backoff, holding the
spans in its queue), ``INVALID_ARGUMENT`` for a body that is not an export
request (not retried), and malformed spans inside a request are counted in
``partial_success``. Messages over ``max_message_bytes`` are refused by
gRPC itself with ``RESOURCE_EXHAUSTED``.

Memory: at most ``workers`` requests are handled at once (``maximum_concurrent_rpcs``: gRPC answers
``RESOURCE_EXHAUSTED`` beyond, before reading them), and an ``admission`` checks the bytes and
requests in flight and the process's memory before a request is decoded (``UNAVAILABLE``, retried
by the sender, when it says no).

Binds 127.0.0.1 by default. Thread safety: gRPC runs handlers on a bounded
thread pool; shared state is behind the service's locks.
"""

from __future__ import annotations

import logging
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from memtrace_otel.collector.durable import KIND_PROTOBUF
from memtrace_otel.collector.memory import Admission
from memtrace_otel.collector.otlp_proto import (
    TakeFailed,
    decode_request,
    index_body,
    records_from_request,
    span_count,
)
from memtrace_otel.spans.model import Problem

__all__ = ["OTLPGrpcReceiver"]

_logger = logging.getLogger(__name__)


def _export_handler(ingest: Any, admission: Admission | None, store_bodies: bool) -> grpc.GenericRpcHandler:
    # The request is decoded here rather than by gRPC: a body that is not an export request is
    # the client's error (INVALID_ARGUMENT, not retried), where gRPC's own deserializer would
    # answer INTERNAL, which OTLP exporters do not treat as final.
    def export(body: bytes, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        if admission is not None and not admission.take(len(body)):
            context.abort(grpc.StatusCode.UNAVAILABLE, "memtrace serve is at its memory limit; retry")
        try:
            return admitted(body, context)
        finally:
            if admission is not None:
                admission.give(len(body))

    def admitted(body: bytes, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        problems: list[Problem] = []
        take_failed: TakeFailed | None = None
        where = f"{context.peer()} Export"
        try:
            if store_bodies:  # stored as received: only the trace index is read now
                indexed = index_body(body, where, problems)
                index, offered, take_failed = indexed.index, indexed.offered, indexed.take_failed
                kept = sum(count for count, _ in index.values())
            else:
                request = decode_request(body)
                spans, offered = records_from_request(request, where, problems), span_count(request)
                kept = len(spans)
        except ValueError as error:
            _logger.warning("rejected an Export from %s: %s", context.peer(), error)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        accepted = (ingest(index, body, KIND_PROTOBUF, take_failed) if store_bodies
                    else ingest(spans, len(body)))
        if not accepted:
            context.abort(grpc.StatusCode.UNAVAILABLE, "memtrace serve is over its memory ceiling; retry")
        response = ExportTraceServiceResponse()
        if problems:  # rejected_spans 0 with a message: OTLP's warning (kept spans were repaired)
            rejected = offered - kept
            _logger.warning("%d span(s) rejected from %s, %d problem(s): %s", rejected, context.peer(),
                            len(problems), problems[0].message)
            response.partial_success.rejected_spans = rejected
            response.partial_success.error_message = problems[0].message[:500]
        return response

    handler = grpc.unary_unary_rpc_method_handler(
        export, request_deserializer=None, response_serializer=ExportTraceServiceResponse.SerializeToString)
    return grpc.method_handlers_generic_handler("opentelemetry.proto.collector.trace.v1.TraceService",
                                                {"Export": handler})


class OTLPGrpcReceiver:
    """Serves OTLP/gRPC on ``host:port`` (port 0 picks a free one) and hands requests to ``ingest``.

    ``ingest(index, body, kind, take_failed) -> bool``: the request's trace index and its bytes, to be
    stored before the answer (what is acknowledged is kept: ``memtrace serve``'s path), and what decodes
    the records of its failed traces from the same parse, when the service has room for them
    (``otlp_proto.IndexedRequest.take_failed``). With ``store_bodies=False``,
    ``ingest(spans, wire_bytes)`` gets the decoded spans and nothing is stored (test backends).
    ``False`` from ``ingest`` answers ``UNAVAILABLE`` (retryable).
    """

    def __init__(self, ingest: Any, *, host: str = "127.0.0.1", port: int = 14317,
                 max_message_bytes: int = 16 << 20, workers: int = 4, admission: Admission | None = None,
                 store_bodies: bool = True) -> None:
        if max_message_bytes < 1 or workers < 1:
            raise ValueError("max_message_bytes and workers must be >= 1")
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memtrace-otlp-grpc"),
            options=[("grpc.max_receive_message_length", max_message_bytes)],
            maximum_concurrent_rpcs=workers,
        )
        self._server.add_generic_rpc_handlers((_export_handler(ingest, admission, store_bodies),))
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._port = self._server.add_insecure_port(target)
        if self._port == 0:
            raise OSError(f"cannot listen for OTLP/gRPC on {target}")
        self._host = host

    @property
    def address(self) -> tuple[str, int]:
        return self._host, self._port

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float = 1.0) -> None:
        self._server.stop(grace).wait()
