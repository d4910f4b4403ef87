"""Upload variable contents to a :class:`~memtrace_otel.content.store.RefStore`, off the application thread.

A :class:`~memtrace_otel.batch_worker.BatchWorker` (the shape of the SDK's ``BatchProcessor``)
whose export step writes texts to the store: :meth:`ContentUploader.submit` appends to a bounded
queue and returns (constant work, no I/O, never raises); one named daemon thread, woken when a
batch is ready or on its schedule, writes batches to the store (skipping texts already there).
A full queue drops the new text, counts it and warns once. :meth:`~ContentUploader.force_flush`
and :meth:`~ContentUploader.shutdown` really drain, within one deadline.
"""

from __future__ import annotations

import atexit
import logging
import weakref
from collections.abc import Callable

from memtrace_otel.batch_worker import BatchWorker
from memtrace_otel.content.store import RefStore

__all__ = ["ContentUploader"]

_logger = logging.getLogger(__name__)

_DEFAULT_MAX_QUEUE_SIZE = 8192
_DEFAULT_BATCH_SIZE = 256
_DEFAULT_SCHEDULE_DELAY_MILLIS = 1000
_DEFAULT_TIMEOUT_MILLIS = 30_000
_RECENT = 65_536  # digests submitted lately: a repeated text costs one set lookup, not a queue slot


class ContentUploader:
    """Writes submitted texts to ``store`` in batches, on its own thread.

    Parameters
    ----------
    store:
        Where texts go, each under its content hash.
    max_queue_size:
        Texts waiting at most; beyond, new ones are dropped and counted (``dropped``).
    batch_size:
        Texts the worker writes per wake-up; a full batch wakes it early.
    schedule_delay_millis:
        Longest a submitted text waits before the worker looks at the queue.

    Raises
    ------
    ValueError
        A size or delay below 1.

    Thread safety: :meth:`submit` may be called from any thread; it takes the worker's short
    lock and only sets the event when a batch is ready. The worker alone writes, and alone updates
    ``stored``, ``skipped`` and ``failed``. ``force_flush`` and ``shutdown`` may be called from
    any thread; ``shutdown`` is idempotent.
    """

    def __init__(self, store: RefStore, *, max_queue_size: int = _DEFAULT_MAX_QUEUE_SIZE,
                 batch_size: int = _DEFAULT_BATCH_SIZE,
                 schedule_delay_millis: int = _DEFAULT_SCHEDULE_DELAY_MILLIS) -> None:
        if min(max_queue_size, batch_size, schedule_delay_millis) < 1:
            raise ValueError("max_queue_size, batch_size and schedule_delay_millis must be >= 1")
        self.store = store
        self._max_queue_size = max_queue_size
        self._recent: set[str] = set()
        self._warned_full = False
        self._writer = _StoreWriter(store, self._recent.discard)
        self._worker: BatchWorker[tuple[str, str]] = BatchWorker(
            self._writer, name="memtrace-content-upload", max_queue_size=max_queue_size,
            max_batch_size=batch_size, schedule_delay_millis=schedule_delay_millis)
        atexit.register(_shutdown_at_exit, weakref.ref(self))

    @property
    def dropped(self) -> int:
        """Texts not queued: the queue was full, or the uploader shut down."""
        return self._worker.dropped_queue_full + self._worker.dropped_shutdown

    # -- application thread ------------------------------------------------
    def submit(self, digest: str, text: str) -> None:
        """Queue ``text`` for upload under ``digest``; returns at once and never raises."""
        recent = self._recent
        if digest in recent:
            return
        if self._worker.submit((digest, text)) is not None:
            self._drop()
            return
        if len(recent) >= _RECENT:
            recent.clear()  # a bound, not a cache policy: the worker skips what the store has
        recent.add(digest)

    def _drop(self) -> None:
        if not self._warned_full:
            self._warned_full = True
            _logger.warning("content upload to %s: queue full (%d texts) or shut down; dropping texts "
                            "(their references will not resolve); counted in ContentUploader.dropped",
                            self.store.url, self._max_queue_size)

    # -- flush and shutdown ----------------------------------------------------
    def force_flush(self, timeout_millis: int = _DEFAULT_TIMEOUT_MILLIS) -> bool:
        """Write everything submitted so far; False when ``timeout_millis`` passed first."""
        return self._worker.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: int = _DEFAULT_TIMEOUT_MILLIS) -> bool:
        """Drain the queue and stop the worker, within one deadline; a second call warns and does nothing.

        Returns False when the deadline passed with texts still queued.
        """
        if self._worker.closed:
            _logger.warning("ContentUploader.shutdown called twice; ignored")
        return self._worker.shutdown(timeout_millis)

    @property
    def stored(self) -> int:
        """Texts written."""
        return self._writer.stored

    @property
    def skipped(self) -> int:
        """Texts the store already had."""
        return self._writer.skipped

    @property
    def failed(self) -> int:
        """Texts whose write failed (a later submit of the same text tries again)."""
        return self._writer.failed


class _StoreWriter:
    """The uploader's export step: writes a batch of ``(digest, text)`` to the store, counting.
    Runs on the worker thread only; its counters are that thread's."""

    def __init__(self, store: RefStore, forget: Callable[[str], None]) -> None:
        self.store = store
        self._forget = forget
        self._warned = False
        self.stored = self.skipped = self.failed = 0

    def export(self, batch: list[tuple[str, str]]) -> bool:
        for digest, text in batch:
            try:
                if self.store.write(digest, text):
                    self.stored += 1
                else:
                    self.skipped += 1
            except Exception as error:  # any filesystem's failure; never kills the worker
                self.failed += 1
                self._forget(digest)  # a later submit may try again
                if not self._warned:
                    self._warned = True
                    _logger.warning("content upload to %s failed (%s: %s); counted in "
                                    "ContentUploader.failed, later failures are not logged",
                                    self.store.url, type(error).__name__, error)
        return True

    def shutdown(self) -> None:
        pass  # the store is the caller's


def _shutdown_at_exit(ref: Callable[[], ContentUploader | None]) -> None:
    # Texts queued when the interpreter exits are written, as the SDK's provider does for spans.
    uploader = ref()
    if uploader is not None and not uploader._worker.closed:
        uploader.shutdown()
