"""A span processor that keeps finished spans until the exporter has taken them.

The SDK's ``BatchSpanProcessor`` drops a batch once its exporter gives up,
which is right for application telemetry and wrong for attribution verdicts:
an annotation computed while the trace backend is restarting would be lost
for good. :class:`OutboxSpanProcessor` retries the same batch with
exponential backoff until the backend takes it, so a backend that is down for
minutes loses nothing. What it holds is bounded (``max_spans``); past that it
drops the newest span, counts it and warns once per outage.

Thread safety: ``on_end`` appends under a lock and never blocks on I/O; one
named daemon thread exports. ``force_flush`` and ``shutdown`` share one
deadline, return ``False`` when it passes with spans still held, and
``shutdown`` is idempotent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from memtrace_otel.suppress import suppress_instrumentation

__all__ = ["OutboxSpanProcessor"]

_logger = logging.getLogger(__name__)


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
        if initial_backoff <= 0 or max_backoff < initial_backoff:
            raise ValueError("need 0 < initial_backoff <= max_backoff")
        self._exporter = exporter
        self._max_spans = max_spans
        self._batch_size = batch_size
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._queue: deque[ReadableSpan] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Condition(self._lock)
        self._stopping = False
        self._shut_down = False
        self._warned_full = False
        self.exported = 0
        self.dropped = 0
        self.failed_attempts = 0
        self._worker = threading.Thread(target=self._run, name="memtrace-outbox", daemon=True)
        self._worker.start()

    @property
    def held(self) -> int:
        with self._lock:
            return len(self._queue)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            if self._shut_down:
                return
            if len(self._queue) >= self._max_spans:
                self.dropped += 1
                if not self._warned_full:
                    self._warned_full = True
                    _logger.warning("annotation outbox full (%d spans): the trace backend has not "
                                    "accepted spans for a while; dropping new ones", self._max_spans)
                return
            self._queue.append(span)
        self._wake.set()

    def _run(self) -> None:
        backoff = self._initial_backoff
        while True:
            self._wake.wait()
            batch = self._next_batch()
            if not batch:
                if self._stopping:
                    return
                self._wake.clear()
                if self._next_batch():  # a span arrived between the check and the clear
                    self._wake.set()
                continue
            if self._export(batch):
                backoff = self._initial_backoff
                continue
            if self._stopping:
                return
            time.sleep(backoff)  # the batch stays queued: retried, never dropped
            backoff = min(backoff * 2, self._max_backoff)

    def _next_batch(self) -> list[ReadableSpan]:
        with self._lock:
            return [self._queue[i] for i in range(min(self._batch_size, len(self._queue)))]

    def _export(self, batch: Sequence[ReadableSpan]) -> bool:
        try:
            with suppress_instrumentation():
                result = self._exporter.export(batch)
        except Exception:  # an exporter must not raise; one that does is treated as a failure
            _logger.exception("annotation exporter raised")
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.failed_attempts += 1
            if self.failed_attempts == 1 or self.failed_attempts % 20 == 0:
                _logger.warning("trace backend did not accept %d annotation span(s); retrying "
                                "(%d spans held)", len(batch), self.held)
            return False
        with self._lock:
            for _ in batch:
                self._queue.popleft()
            self.exported += len(batch)
            self._warned_full = False
            if not self._queue:
                self._idle.notify_all()
        return True

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until every held span has been exported; ``False`` if the timeout passes first."""
        deadline = time.monotonic() + timeout_millis / 1000
        self._wake.set()
        with self._lock:
            while self._queue:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.1))
        return True

    def shutdown(self, timeout_millis: int = 30_000) -> bool:  # type: ignore[override]
        """Export what is held (within the timeout), then stop; a second call does nothing.

        The second call is expected, not a mistake: the service shuts its provider down when it
        stops, and the SDK's exit hook shuts the same provider down again (hence debug, not warning).
        """
        with self._lock:
            if self._shut_down:
                _logger.debug("OutboxSpanProcessor.shutdown called again; ignored")
                return True
        flushed = self.force_flush(timeout_millis)
        with self._lock:
            self._shut_down = True
            self._stopping = True
            lost = len(self._queue)
        self._wake.set()
        self._worker.join(timeout=1.0)
        if lost:
            _logger.warning("%d annotation span(s) not exported at shutdown", lost)
        self._exporter.shutdown()
        return flushed
