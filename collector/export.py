"""Annotation spans out of ``memtrace serve``: encoded once, held on disk, sent as the Collector retries.

Annotations are encoded as an OTLP ``ExportTraceServiceRequest`` when they are made
(:mod:`~memtrace_otel.collector.otlp_encode`) and kept
in the write-ahead store's outbox (:mod:`~memtrace_otel.collector.durable`) until the backend
answers. Senders post those bytes and say what the answer means, as the Collector's
``exporterhelper`` does:

* accepted (HTTP 2xx, gRPC OK): the rows sent are deleted;
* retryable (HTTP 429, 502, 503, 504; gRPC UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, CANCELLED,
  OUT_OF_RANGE, DATA_LOSS, RESOURCE_EXHAUSTED; a connection error or timeout): retried with
  exponential backoff, the rows behind them waiting (the backend is down for them too);
* anything else is permanent: the row is dropped with a counted, logged reason, so one poison
  row cannot stall every later annotation.

Rows waiting together (a backlog of failures, a backend that was down) go as one request, their
bytes joined (joined export requests are one request holding all their spans), up to 256 rows and
1 MiB; a request of several rows not taken is sent again a row at a time, so that only a refused
row is dropped and a join the backend cannot take (too large for it) does not stall the rows. The
rows' sizes are read first and their bodies a request at a time, so a batch holds one request's
bytes, not its 256 rows'; the spans a refusal logs are summed by the store, not read from the bodies.

:class:`DurableOutbox` is a :class:`~memtrace_otel.batch_worker.BatchWorker` over outbox row ids
whose export step is wrapped in a :class:`~memtrace_otel.batch_worker.RetryingExporter`.

Thread safety: senders are used by the outbox's one worker thread; ``DurableOutbox.add`` may be
called from any thread.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from urllib.parse import urlsplit

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from memtrace_otel.batch_worker import BatchWorker, RetryingExporter
from memtrace_otel.collector.durable import DurableStore
from memtrace_otel.collector.otlp_proto import attributes_of

__all__ = ["Answer", "DurableOutbox", "Sender", "SpanExporterSender", "otlp_sender"]

_logger = logging.getLogger(__name__)
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_RETRY_HTTP = frozenset({429, 502, 503, 504})


class Answer(enum.Enum):
    ACCEPTED = "accepted"
    RETRY = "retry"
    PERMANENT = "permanent"


class Sender:
    """Posts one encoded request; ``(answer, reason)``. Never raises."""

    name = "backend"

    def send(self, body: bytes) -> tuple[Answer, str]:
        raise NotImplementedError

    def shutdown(self) -> None:
        pass


class OtlpHttpSender(Sender):
    """OTLP/HTTP protobuf to ``url`` (``.../v1/traces``)."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        import requests

        self.name = url
        self._url = url
        self._timeout = timeout
        self._session = requests.Session()

    def send(self, body: bytes) -> tuple[Answer, str]:
        import requests

        try:
            answer = self._session.post(self._url, data=body, timeout=self._timeout,
                                        headers={"Content-Type": "application/x-protobuf"})
        except requests.RequestException as error:  # refused, reset, timed out: the backend is away
            return Answer.RETRY, f"{type(error).__name__}"
        if 200 <= answer.status_code < 300:
            return Answer.ACCEPTED, ""
        reason = f"HTTP {answer.status_code} {answer.text[:200]!r}"
        return (Answer.RETRY if answer.status_code in _RETRY_HTTP else Answer.PERMANENT), reason

    def shutdown(self) -> None:
        self._session.close()


class OtlpGrpcSender(Sender):
    """OTLP/gRPC ``TraceService/Export`` to ``host:port``."""

    def __init__(self, target: str, *, secure: bool = False, timeout: float = 5.0) -> None:
        import grpc

        self.name = target
        self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials()) if secure \
            else grpc.insecure_channel(target)
        self._export = self._channel.unary_unary(_EXPORT, request_serializer=None, response_deserializer=None)
        self._timeout = timeout
        codes = grpc.StatusCode
        self._retry = {codes.UNAVAILABLE, codes.DEADLINE_EXCEEDED, codes.ABORTED, codes.CANCELLED,
                       codes.OUT_OF_RANGE, codes.DATA_LOSS, codes.RESOURCE_EXHAUSTED}

    def send(self, body: bytes) -> tuple[Answer, str]:
        import grpc

        try:
            self._export(body, timeout=self._timeout)
        except grpc.RpcError as error:
            code = error.code()  # type: ignore[attr-defined]
            reason = f"gRPC {code.name if code else '?'} {str(error.details())[:200]!r}"  # type: ignore[attr-defined]
            return (Answer.RETRY if code in self._retry else Answer.PERMANENT), reason
        return Answer.ACCEPTED, ""

    def shutdown(self) -> None:
        self._channel.close()


class SpanExporterSender(Sender):
    """A :class:`SpanExporter` behind the outbox (the log of verdicts, tests): the bytes are decoded
    back into spans. A refusal is retried (a ``SpanExporter`` does not say why it refused)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.name = type(exporter).__name__

    def send(self, body: bytes) -> tuple[Answer, str]:
        try:
            result = self.exporter.export(decode_spans(body))
        except Exception as error:  # an exporter must not raise; one that does is a refusal
            return Answer.RETRY, f"{type(error).__name__}: {error}"[:200]
        return (Answer.ACCEPTED, "") if result is SpanExportResult.SUCCESS else (Answer.RETRY, "refused")

    def shutdown(self) -> None:
        self.exporter.shutdown()


def otlp_sender(endpoint: str, protocol: str) -> Sender:
    """The sender for ``--backend-otlp`` (the backend's OTLP base URL) and ``--backend-protocol``.

    Raises
    ------
    ValueError
        ``endpoint`` is not ``http(s)://host:port``.
    """
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"backend OTLP endpoint {endpoint!r} is not http(s)://host:port")
    if protocol == "grpc":
        return OtlpGrpcSender(f"{parts.hostname}:{parts.port or 4317}", secure=parts.scheme == "https")
    path = parts.path.rstrip("/") or ""
    return OtlpHttpSender(f"{parts.scheme}://{parts.netloc}"
                          f"{path if path.endswith('/v1/traces') else path + '/v1/traces'}")


def _context(trace_id: bytes, span_id: bytes) -> SpanContext:
    return SpanContext(int.from_bytes(trace_id, "big"), int.from_bytes(span_id, "big"), is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))


def decode_spans(body: bytes) -> list[ReadableSpan]:
    """An encoded request back into SDK spans (for a :class:`SpanExporter`)."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = Resource(attributes_of(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            scope = InstrumentationScope(scope_spans.scope.name, scope_spans.scope.version or None)
            for span in scope_spans.spans:
                spans.append(ReadableSpan(
                    name=span.name, context=_context(span.trace_id, span.span_id),
                    parent=_context(span.trace_id, span.parent_span_id) if span.parent_span_id else None,
                    resource=resource, attributes=attributes_of(span.attributes),
                    events=[Event(e.name, attributes_of(e.attributes), e.time_unix_nano)
                            for e in span.events],
                    links=[Link(_context(link.trace_id, link.span_id), attributes_of(link.attributes))
                           for link in span.links],
                    kind=SpanKind(max(0, min(4, span.kind - 1))),
                    status=Status(StatusCode(span.status.code if span.status.code in (0, 1, 2) else 0),
                                  span.status.message or None),
                    start_time=span.start_time_unix_nano, end_time=span.end_time_unix_nano,
                    instrumentation_scope=scope))
    return spans


_BATCH_ROWS = 256
_BATCH_BYTES = 1 << 20  # well under the 4 MiB an OTLP/gRPC receiver takes by default


def _requests(rows: list[tuple[int, int, int]]) -> list[list[int]]:
    """The ids of consecutive rows ``(row id, spans, body's bytes)`` grouped into requests of at most
    :data:`_BATCH_BYTES` (a larger row alone)."""
    groups: list[list[int]] = []
    size = 0
    for row_id, _, length in rows:
        if not groups or size + length > _BATCH_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(row_id)
        size += length
    return groups


class _OutboxStep:
    """Exports the outbox rows of a batch, those waiting together as one request (an export request's
    bytes joined are one request holding all their spans); ``False`` when the backend asked for a retry.

    A row is deleted only once the backend took it, or refused it for good. A request of several rows
    that the backend does not take is sent again a row at a time: refused for good, only the row the
    backend refuses is dropped; refused for now, the join itself may be what it refused (a receiver
    limit under the request's size, a timeout on a large request), so the rows go alone until one of
    them is refused for now too (the backend is down for all: the rows not taken are retried
    together, those taken are gone from the store and not sent again).
    """

    def __init__(self, store: DurableStore, sender: Sender) -> None:
        self._store = store
        self._sender = sender
        self.last_reason = ""
        self.exported_spans = 0
        self.dropped_spans = 0
        """Spans the backend refused for good (permanent answers)."""
        self.requests = 0
        """Requests sent (a request holds the rows that were waiting together)."""

    def export(self, batch: list[int]) -> bool:
        # Rows dropped while the store was full are not there any more: counted there. Grouped by their
        # sizes, each request's bodies read only when it goes: one request's bytes held, not the batch's.
        for group in [batch] if len(batch) == 1 else _requests(self._store.outbox_sizes(batch)):
            rows = self._store.outbox_rows(group)
            if not rows:
                continue
            answer, reason = self._send(rows)
            if answer is not Answer.ACCEPTED and len(rows) > 1:
                for row in rows:  # which one is refused, or whether the join was: each alone
                    answer, reason = self._send([row])
                    if answer is Answer.RETRY:
                        break
            if answer is Answer.RETRY:
                self.last_reason = reason
                return False
        return True

    def _send(self, rows: list[tuple[int, int, bytes]]) -> tuple[Answer, str]:
        """One request of ``rows``; deleted from the store when taken, or (one row) refused for good."""
        self.requests += 1
        answer, reason = self._sender.send(rows[0][2] if len(rows) == 1 else b"".join(row[2] for row in rows))
        spans = sum(row[1] for row in rows)
        if answer is Answer.ACCEPTED:
            self._store.exported([row[0] for row in rows])
            self.exported_spans += spans
        elif answer is Answer.PERMANENT and len(rows) == 1:
            self._store.exported([rows[0][0]])
            self.dropped_spans += spans
            _logger.warning("trace backend %s refused %d annotation span(s) for good; dropped (%d so far): "
                            "%s", self._sender.name, spans, self.dropped_spans, reason)
        return answer, reason

    def shutdown(self) -> None:
        self._sender.shutdown()


class DurableOutbox:
    """Sends the store's outbox rows in order, retrying retryable refusals; replays what a previous
    process left on construction.

    Parameters
    ----------
    store:
        The write-ahead store holding the rows.
    sender:
        Where they go.
    initial_backoff, max_backoff:
        Seconds to wait after the first retryable refusal, doubling up to the maximum.
    """

    def __init__(self, store: DurableStore, sender: Sender, *, initial_backoff: float = 0.5,
                 max_backoff: float = 30.0) -> None:
        self._store = store
        self.held_at_stop = 0
        """Annotation spans left in the store when the service stopped (sent on the next start)."""
        self._step = _OutboxStep(store, sender)
        self._retrying: RetryingExporter[int] = RetryingExporter(
            self._step, initial_backoff=initial_backoff, max_backoff=max_backoff, on_refused=self._refused)
        # Row ids are a few bytes each; the store's size bound is what limits what is held.
        self._worker: BatchWorker[int] = BatchWorker(self._retrying, name="memtrace-outbox",
                                                     max_queue_size=1 << 24, max_batch_size=_BATCH_ROWS,
                                                     wake_at=1)
        replayed = store.outbox_ids()
        for row_id in replayed:
            self._worker.submit(row_id)
        if replayed:
            _logger.warning("replaying %d annotation batch(es) a previous run left in the data directory",
                            len(replayed))

    def add(self, row_ids: Sequence[int]) -> None:
        for row_id in row_ids:
            self._worker.submit(row_id)

    def _refused(self, attempts: int, batch: list[int]) -> None:
        if attempts == 1 or attempts % 20 == 0:
            _logger.warning("trace backend did not accept %d annotation span(s) (%s); retrying, "
                            "%d span(s) held", self._store.outbox_spans_of(batch),
                            self._step.last_reason, self.held)

    @property
    def held(self) -> int:
        """Annotation spans not yet accepted (held in the store, also across restarts)."""
        return self._store.outbox_spans

    @property
    def exported(self) -> int:
        """Annotation spans the backend accepted."""
        return self._step.exported_spans

    @property
    def dropped(self) -> int:
        """Annotation spans dropped: refused for good, or dropped from a full store (batches
        counted as their spans are unknown once gone)."""
        return self._step.dropped_spans

    @property
    def failed_attempts(self) -> int:
        return self._retrying.failed_attempts

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until every row submitted so far was sent (or dropped); ``False`` on timeout."""
        return self._worker.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: int = 30_000) -> bool:
        """Send what it can within the timeout; the rest stays in the store for the next start."""
        return self._worker.shutdown(timeout_millis)
