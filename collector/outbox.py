"""A span processor that keeps finished spans until the exporter has taken them.

The SDK's ``BatchSpanProcessor`` drops a batch once its exporter gives up,
which is right for application telemetry and wrong for attribution verdicts:
an annotation computed while the trace backend is restarting would be lost
for good. :class:`OutboxSpanProcessor` is a :class:`~memtrace_otel.batch_worker.BatchWorker`
whose export step is the span exporter wrapped in a
:class:`~memtrace_otel.batch_worker.RetryingExporter`: the same batch is retried with
exponential backoff until the backend takes it, so a backend that is down for
minutes loses nothing. What it holds is bounded (``max_spans``); past that it
drops the newest span, counts it and warns once per outage.

Thread safety: ``on_end`` appends under the worker's short lock and never blocks on I/O; one
named daemon thread exports. ``force_flush`` and ``shutdown`` share one deadline; ``shutdown``
has the SDK's signature (a timeout may be given), logs what it could not export and is idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from memtrace_otel.batch_worker import DROPPED_QUEUE_FULL, BatchWorker, RetryingExporter

__all__ = ["OutboxSpanProcessor", "SpanExportStep"]

_logger = logging.getLogger(__name__)


class SpanExportStep:
    """A :class:`SpanExporter` as a :class:`~memtrace_otel.batch_worker.BatchExporter`: accepted
    means ``SUCCESS``. Called on the worker thread only."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter

    def export(self, batch: Sequence[ReadableSpan]) -> bool:
        try:
            return self.exporter.export(batch) is SpanExportResult.SUCCESS
        except Exception:  # an exporter must not raise; one that does is treated as a failure
            _logger.exception("annotation exporter raised")
            return False

    def shutdown(self) -> None:
        self.exporter.shutdown()


class OutboxSpanProcessor(SpanProcessor):
    """Export finished spans in batches, retrying each batch until it is accepted.

    Parameters
    ----------
    exporter:
        Where the spans go (an OTLP exporter to the trace backend).
    max_spans:
        Spans held at most while the exporter fails.
    batch_size:
        Spans per export call.
    initial_backoff, max_backoff:
        Seconds to wait after the first failure, doubling up to the maximum.
    """

    def __init__(self, exporter: SpanExporter, *, max_spans: int = 100_000, batch_size: int = 512,
                 initial_backoff: float = 0.5, max_backoff: float = 30.0) -> None:
        if max_spans < 1 or batch_size < 1:
            raise ValueError("max_spans and batch_size must be >= 1")
        self._retrying: RetryingExporter[ReadableSpan] = RetryingExporter(
            SpanExportStep(exporter), initial_backoff=initial_backoff, max_backoff=max_backoff,
            on_refused=self._refused)
        self._max_spans = max_spans
        self._warned_at = -1  # spans exported when the outbox last said it was full: once per outage
        # wake_at=1: an annotation goes out as soon as it ends (batches form while the backend is slow).
        self._worker: BatchWorker[ReadableSpan] = BatchWorker(
            self._retrying, name="memtrace-outbox", max_queue_size=max_spans, max_batch_size=batch_size,
            wake_at=1, bound_in_flight=True)

    @property
    def held(self) -> int:
        """Spans not exported yet (queued, or in the batch being retried)."""
        return self._worker.held

    @property
    def exported(self) -> int:
        return self._worker.exported

    @property
    def dropped(self) -> int:
        """Spans dropped because the outbox was full (or ended after shutdown)."""
        return self._worker.dropped_queue_full + self._worker.dropped_shutdown

    @property
    def failed_attempts(self) -> int:
        """Export calls the backend refused."""
        return self._retrying.failed_attempts

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._worker.submit(span) == DROPPED_QUEUE_FULL and self._warned_at != self._worker.exported:
            self._warned_at = self._worker.exported
            _logger.warning("annotation outbox full (%d spans): the trace backend has not "
                            "accepted spans for a while; dropping new ones", self._max_spans)

    def _refused(self, attempts: int, batch: list[ReadableSpan]) -> None:
        if attempts == 1 or attempts % 20 == 0:
            _logger.warning("trace backend did not accept %d annotation span(s); retrying "
                            "(%d spans held)", len(batch), self.held)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until every held span has been exported; ``False`` if the timeout passes first."""
        return self._worker.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Export what is held (within the timeout), then stop; a second call does nothing.

        What could not be exported is logged and counted (``unexported_at_shutdown``). The second
        call is expected, not a mistake: the service shuts its provider down when it stops, and the
        SDK's exit hook shuts the same provider down again (hence debug, not warning).
        """
        if self._worker.closed:
            _logger.debug("OutboxSpanProcessor.shutdown called again; ignored")
            return
        if not self._worker.shutdown(timeout_millis):
            _logger.warning("%d annotation span(s) not exported at shutdown", self.unexported_at_shutdown)

    @property
    def unexported_at_shutdown(self) -> int:
        return self._worker.unexported_at_shutdown
