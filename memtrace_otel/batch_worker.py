"""One bounded queue and one daemon thread that hands batches to an export step.

The shape of opentelemetry-python's ``BatchProcessor`` (``opentelemetry.sdk._shared_internal``),
which the SDK uses for spans and logs: producers :meth:`BatchWorker.submit` items to a bounded
queue and return at once; one named daemon thread, woken when a batch is ready, on its schedule
or by a flush, gives the queued items in batches to an export step; a full queue drops the new
item and counts it. :meth:`~BatchWorker.force_flush` and :meth:`~BatchWorker.shutdown` share
one deadline and really drain: they return once everything queued before them was exported,
or ``False`` when the deadline passed first.

Four parts of memtrace use it: the content uploader (``content/upload.py``), the in-process
attribution processor (``writeback/processor.py``), ``memtrace serve``'s annotation outbox
(``collector/export.py``, over the write-ahead store's row ids) and its attribution jobs
(``collector/attribution_service.py``). What differs between them
is their export step, so that is the one thing each supplies (:class:`BatchExporter`). Retrying
is not the worker's business either: :class:`RetryingExporter` wraps an export step, as the
Collector's ``exporterhelper`` wraps an exporter, so a durable step (a write-ahead store) or a
different retry policy can be put in without touching the worker.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from memtrace_otel.suppress import suppress_instrumentation

__all__ = ["BatchExporter", "BatchWorker", "RetryingExporter"]

_logger = logging.getLogger(__name__)

T = TypeVar("T")

DROPPED_QUEUE_FULL = "queue_full"
DROPPED_SHUTDOWN = "shutdown"


class BatchExporter(Protocol[T]):
    """An export step: takes one batch, says whether it was accepted.

    ``export`` runs on the worker's thread only (with OpenTelemetry instrumentation suppressed);
    it should not raise (one that does counts as a failed batch and is logged). ``shutdown`` is
    called once, from :meth:`BatchWorker.shutdown`, possibly while ``export`` is still running
    (after the deadline passed): a step that waits (retries) must return from it soon then.
    """

    def export(self, batch: list[T]) -> bool: ...

    def shutdown(self) -> None: ...


class BatchWorker(Generic[T]):
    """A bounded queue of ``T`` drained by one daemon thread through ``exporter``.

    Parameters
    ----------
    exporter:
        The export step (:class:`BatchExporter`).
    name:
        The thread's name (shows in thread dumps and ``py-spy``).
    max_queue_size:
        Items queued at most; :meth:`submit` drops beyond it (counted in ``dropped_queue_full``).
    max_batch_size:
        Items per ``export`` call.
    schedule_delay_millis:
        Longest an item waits before the worker looks at the queue; ``None``: only a wake-up
        (a ready batch, :meth:`wake`, a flush, shutdown) starts a drain.
    wake_at:
        Queued items that wake the worker early (default: ``max_batch_size``; 1 hands each item
        over at once).
    export_empty:
        Call ``exporter.export([])`` at the end of every drain, also when nothing was queued
        (the processor indexes the spans waiting in its inbox then).
    bound_in_flight:
        The batch being exported counts against ``max_queue_size`` too (the outbox: its bound is
        on spans held, and a refused batch is held while it is retried).

    Raises
    ------
    ValueError
        A size or delay below 1.

    Thread safety: :meth:`submit`, :meth:`wake`, :meth:`force_flush` and :meth:`shutdown` may be
    called from any thread but the worker's own; :meth:`submit` takes one short lock (no I/O,
    never blocks on the worker) and never raises. Only the worker thread calls ``export``. The
    counters are written under the same lock and may be read at any time (a moment old at worst).
    A forked child gets a new worker thread and an empty queue (the parent exports its own).
    """

    def __init__(self, exporter: BatchExporter[T], *, name: str, max_queue_size: int, max_batch_size: int,
                 schedule_delay_millis: float | None = None, wake_at: int | None = None,
                 export_empty: bool = False, bound_in_flight: bool = False) -> None:
        if min(max_queue_size, max_batch_size, wake_at or 1) < 1 or (
                schedule_delay_millis is not None and schedule_delay_millis < 1):
            raise ValueError("max_queue_size, max_batch_size, wake_at and schedule_delay_millis must be >= 1")
        self._exporter = exporter
        self._name = name
        self._max_queue_size = max_queue_size
        self._max_batch_size = max_batch_size
        self._delay = None if schedule_delay_millis is None else schedule_delay_millis / 1000
        self._wake_at = wake_at or max_batch_size
        self._export_empty = export_empty
        self._bound_in_flight = bound_in_flight
        self._queue: deque[T] = deque()
        self.exported = 0
        """Items in batches the export step accepted."""
        self.failed = 0
        """Items in batches it refused (or raised on)."""
        self.dropped_queue_full = 0
        self.dropped_shutdown = 0
        """Items submitted after :meth:`shutdown`."""
        self.unexported_at_shutdown = 0
        """Items still queued, or in a refused batch, when :meth:`shutdown` gave up."""
        self._closed = False  # no more submits (shutdown began)
        self._drained_at_shutdown = True
        self._init_thread()
        if hasattr(os, "register_at_fork"):  # the SDK's habit: a forked child gets its own worker
            reinit = weakref.WeakMethod(self._init_thread)

            def after_in_child() -> None:
                method = reinit()
                if method is not None:
                    method()

            os.register_at_fork(after_in_child=after_in_child)

    def _init_thread(self) -> None:
        self._lock = threading.Lock()  # guards the queue's length checks, flags, counters, flushes
        self._queue.clear()
        self._in_flight = 0
        self._flushes: list[threading.Event] = []  # answered by the worker once drained
        self._stopping = False  # the worker exits after its next drain
        self._abandoned = False  # the deadline passed: export nothing more
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    # -- producers ---------------------------------------------------------------------------------
    def submit(self, item: T) -> str | None:
        """Queue ``item``; ``None`` when queued, else why it was dropped (``"queue_full"``,
        ``"shutdown"``; counted). Constant work, never raises."""
        with self._lock:
            if self._closed:
                self.dropped_shutdown += 1
                return DROPPED_SHUTDOWN
            queue = self._queue
            if len(queue) + (self._in_flight if self._bound_in_flight else 0) >= self._max_queue_size:
                self.dropped_queue_full += 1
                return DROPPED_QUEUE_FULL
            queue.append(item)
            ready = len(queue) >= self._wake_at
        if ready and not self._wake.is_set():
            self._wake.set()
        return None

    def wake(self) -> None:
        """Start a drain now (with ``export_empty``, an export of an empty batch at least)."""
        if not self._wake.is_set():  # a producer may call this per item: setting takes a lock
            self._wake.set()

    @property
    def queued(self) -> int:
        """Items waiting for the worker."""
        return len(self._queue)

    @property
    def held(self) -> int:
        """Items not yet exported: queued, or in the batch being exported."""
        with self._lock:
            return len(self._queue) + self._in_flight

    @property
    def closed(self) -> bool:
        """Whether :meth:`shutdown` was called."""
        return self._closed

    # -- flush and shutdown ------------------------------------------------------------------------
    def force_flush(self, timeout_millis: float = 30_000) -> bool:
        """Export everything submitted so far; ``False`` when ``timeout_millis`` passed first
        (the worker goes on with it). After :meth:`shutdown`, waits for its drain instead."""
        done = threading.Event()
        with self._lock:
            closed = self._closed
            if not closed:
                self._flushes.append(done)
        if closed:
            self._thread.join(max(timeout_millis, 0) / 1000)
            return not self._thread.is_alive() and not self.held
        self._wake.set()
        return done.wait(max(timeout_millis, 0) / 1000)

    def shutdown(self, timeout_millis: float = 30_000) -> bool:
        """Refuse new items, export what is queued, stop the worker and the export step: one deadline.

        Returns ``False`` when the deadline passed with items unexported; those are counted in
        ``unexported_at_shutdown`` and given up (the export step's ``shutdown`` makes a retrying
        step return). A second call does nothing and returns what the first did.
        """
        deadline = time.monotonic() + max(timeout_millis, 0) / 1000
        done = threading.Event()
        with self._lock:
            if self._closed:
                return self._drained_at_shutdown
            self._closed = True
            self._flushes.append(done)
        self._wake.set()
        drained = done.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._stopping = True
            self._abandoned = not drained
            failed_before = self.failed
        self._wake.set()
        if not drained:
            self._exporter.shutdown()  # a retrying step stops waiting; an export in progress returns
        # At least a moment to let a step that was told to stop return, when the deadline is spent.
        self._thread.join(max(deadline - time.monotonic(), 0.0 if drained else 1.0))
        with self._lock:
            lost = len(self._queue) + self._in_flight + (self.failed - failed_before)
            self.unexported_at_shutdown = lost
            self._drained_at_shutdown = drained and not lost
        if drained:
            self._exporter.shutdown()
        return self._drained_at_shutdown

    # -- worker ------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay)
            self._wake.clear()
            # Requests taken before draining: whatever was submitted before them is queued by now.
            with self._lock:
                flushes, self._flushes = self._flushes, []
                stopping = self._stopping
            self._drain()
            for done in flushes:
                done.set()
            if stopping:
                return

    def _drain(self) -> None:
        queue = self._queue
        while True:
            with self._lock:
                if self._abandoned:
                    return
                batch = [queue.popleft() for _ in range(min(self._max_batch_size, len(queue)))]
                self._in_flight = len(batch)
            if batch or self._export_empty:
                accepted = self._export(batch)
                with self._lock:
                    self._in_flight = 0
                    if accepted:
                        self.exported += len(batch)
                    else:
                        self.failed += len(batch)
            if not batch:
                return

    def _export(self, batch: list[T]) -> bool:
        try:
            with suppress_instrumentation():  # memtrace never traces its own work
                return bool(self._exporter.export(batch))
        except Exception:  # the worker must outlive any bug, or flush and shutdown would hang
            _logger.exception("%s: the export step raised; %d item(s) lost", self._name, len(batch))
            return False


class RetryingExporter(Generic[T]):
    """Retries a refused batch with exponential backoff until it is accepted or the step is shut down.

    The Collector's ``exporterhelper`` retry, as a wrapper around an export step: the worker
    stays simple, and the policy can change alone. A step that must drop what cannot succeed (issue
    24: permanent errors dropped rather than retried) does so itself and refuses only what may
    (``serve``'s outbox, ``collector/export.py``).

    Parameters
    ----------
    exporter:
        The step that may refuse (``False``).
    initial_backoff, max_backoff:
        Seconds to wait after the first refusal, doubling up to the maximum.
    on_refused:
        Called with ``(attempts, batch)`` after each refusal (the outbox logs from it).

    Thread safety: ``export`` runs on one thread (the worker's); ``shutdown`` may come from any
    other and interrupts a backoff wait at once.
    """

    def __init__(self, exporter: BatchExporter[T], *, initial_backoff: float = 0.5, max_backoff: float = 30.0,
                 on_refused: Callable[[int, list[T]], None] | None = None) -> None:
        if initial_backoff <= 0 or max_backoff < initial_backoff:
            raise ValueError("need 0 < initial_backoff <= max_backoff")
        self._exporter = exporter
        self._initial_backoff, self._max_backoff = initial_backoff, max_backoff
        self._on_refused = on_refused
        self._stop = threading.Event()
        self.failed_attempts = 0

    def export(self, batch: list[T]) -> bool:
        backoff = self._initial_backoff
        while not self._stop.is_set():
            try:
                if self._exporter.export(batch):
                    return True
            except Exception:  # an exporter must not raise; one that does is treated as a refusal
                _logger.exception("export step raised")
            self.failed_attempts += 1
            if self._on_refused is not None:
                self._on_refused(self.failed_attempts, batch)
            if self._stop.wait(backoff):  # the batch stays with the worker: retried, never dropped
                break
            backoff = min(backoff * 2, self._max_backoff)
        return False

    def shutdown(self) -> None:
        self._stop.set()
        self._exporter.shutdown()
