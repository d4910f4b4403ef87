"""Upload variable contents to a :class:`~memtrace_otel.content.store.RefStore`, off the application thread.

The shape of the SDK's ``BatchSpanProcessor``: :meth:`ContentUploader.submit` appends
to a bounded queue and returns (constant work, no I/O, never raises); one named
daemon thread, woken by an ``Event`` when a batch is ready or on its schedule, writes
batches to the store (skipping texts already there). A full queue drops the new
text, counts it and warns once. :meth:`~ContentUploader.force_flush` and
:meth:`~ContentUploader.shutdown` really drain, within one deadline.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
import weakref
from collections.abc import Callable

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

    Thread safety: :meth:`submit` may be called from any thread; it takes no lock
    (``deque.append`` is atomic) and only sets the event when a batch is ready. The
    worker alone writes. ``force_flush`` and ``shutdown`` may be called from any
    thread; ``shutdown`` is idempotent.
    """

    def __init__(self, store: RefStore, *, max_queue_size: int = _DEFAULT_MAX_QUEUE_SIZE,
                 batch_size: int = _DEFAULT_BATCH_SIZE,
                 schedule_delay_millis: int = _DEFAULT_SCHEDULE_DELAY_MILLIS) -> None:
        if min(max_queue_size, batch_size, schedule_delay_millis) < 1:
            raise ValueError("max_queue_size, batch_size and schedule_delay_millis must be >= 1")
        self.store = store
        self._queue: collections.deque[tuple[str, str]] = collections.deque()
        self._max_queue_size, self._batch_size = max_queue_size, batch_size
        self._delay = schedule_delay_millis / 1000
        self._recent: set[str] = set()
        self._wake = threading.Event()
        self._flushes: list[threading.Event] = []  # flush requests the worker answers once drained
        self._lock = threading.Lock()  # guards _flushes and the shutdown flag
        self._shutdown = False
        self._warned_full = self._warned_failed = False
        self.stored = self.skipped = self.dropped = self.failed = 0
        self._worker = threading.Thread(target=self._run, name="memtrace-content-upload", daemon=True)
        self._worker.start()
        atexit.register(_shutdown_at_exit, weakref.ref(self))

    # -- application thread ------------------------------------------------
    def submit(self, digest: str, text: str) -> None:
        """Queue ``text`` for upload under ``digest``; returns at once and never raises."""
        recent = self._recent
        if digest in recent:
            return
        if len(self._queue) >= self._max_queue_size or self._shutdown:
            self._drop(digest)
            return
        if len(recent) >= _RECENT:
            recent.clear()  # a bound, not a cache policy: the worker skips what the store has
        recent.add(digest)
        self._queue.append((digest, text))
        if len(self._queue) >= self._batch_size:
            self._wake.set()

    def _drop(self, digest: str) -> None:
        self.dropped += 1
        if not self._warned_full:
            self._warned_full = True
            _logger.warning("content upload to %s: queue full (%d texts) or shut down; dropping texts "
                            "(their references will not resolve); counted in ContentUploader.dropped",
                            self.store.url, self._max_queue_size)

    # -- flush and shutdown ----------------------------------------------------
    def force_flush(self, timeout_millis: int = _DEFAULT_TIMEOUT_MILLIS) -> bool:
        """Write everything submitted so far; False when ``timeout_millis`` passed first."""
        done = threading.Event()
        with self._lock:
            if self._shutdown:
                return not self._queue
            self._flushes.append(done)
        self._wake.set()
        return done.wait(timeout_millis / 1000)

    def shutdown(self, timeout_millis: int = _DEFAULT_TIMEOUT_MILLIS) -> bool:
        """Drain the queue and stop the worker, within one deadline; a second call warns and does nothing.

        Returns False when the deadline passed with texts still queued.
        """
        with self._lock:
            if self._shutdown:
                _logger.warning("ContentUploader.shutdown called twice; ignored")
                return not self._queue
            self._shutdown = True
        deadline = time.monotonic() + timeout_millis / 1000
        self._wake.set()
        self._worker.join(max(0.0, deadline - time.monotonic()))
        return not self._worker.is_alive() and not self._queue

    # -- worker ----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay)
            self._wake.clear()
            stopping = self._shutdown
            # Requests taken before draining: whatever was submitted before them is queued by now.
            with self._lock:
                flushes, self._flushes = self._flushes, []
            self._drain()
            for done in flushes:
                done.set()
            if stopping:
                return

    def _drain(self) -> None:
        queue = self._queue
        while queue:
            batch = [queue.popleft() for _ in range(min(self._batch_size, len(queue)))]
            self._write(batch)

    def _write(self, batch: list[tuple[str, str]]) -> None:
        for digest, text in batch:
            try:
                if self.store.write(digest, text):
                    self.stored += 1
                else:
                    self.skipped += 1
            except Exception as error:  # any filesystem's failure; never kills the worker
                self.failed += 1
                self._recent.discard(digest)  # a later submit may try again
                if not self._warned_failed:
                    self._warned_failed = True
                    _logger.warning("content upload to %s failed (%s: %s); counted in "
                                    "ContentUploader.failed, later failures are not logged",
                                    self.store.url, type(error).__name__, error)


def _shutdown_at_exit(ref: Callable[[], ContentUploader | None]) -> None:
    # Texts queued when the interpreter exits are written, as the SDK's provider does for spans.
    uploader = ref()
    if uploader is not None and not uploader._shutdown:
        uploader.shutdown()
