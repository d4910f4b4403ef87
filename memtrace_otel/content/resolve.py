"""Read contents back from a store by hash, for analysis: never fatal, said once.

A reader resolves the references spans carry (``memtrace.content_ref`` plus each
descriptor's hash) from the store the user names (``--content-store``), never from
a location named by the input: a span file must not make memtrace open an URL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from memtrace_otel.content.store import RefStore, is_digest, open_store
from memtrace_otel.wire import content_hash

__all__ = ["ContentResolver"]

_logger = logging.getLogger(__name__)
_EMPTY = content_hash("")
_DEFAULT_RETRY_SECONDS = 60.0


class ContentResolver:
    """``get(hash)`` of the texts in one store, with a small cache; analysis goes on without it.

    A store that is missing, unreadable or vanishes while being read is one line
    (logged once per outage, and kept in :meth:`messages`); from then on :meth:`get`
    answers ``None`` at once, without touching the store, until ``retry_seconds`` have
    passed: then one read tries again (a long-running ``memtrace serve`` must not lose
    its contents for good to a store that was down for a minute). A store found readable
    again is one more line (logged). Texts absent from a readable store are counted in
    ``missing`` and summed up in one line of :meth:`messages`.

    Parameters
    ----------
    store:
        The store, or its path or URL.
    cache_size:
        Texts kept after reading (least recently used go first).
    log:
        Log the store-unavailable line (once per outage) and the recovery line; off for
        callers that print :meth:`messages` themselves (the CLI's problem lines), so it is
        said once, not twice.
    retry_seconds:
        How long an unavailable store is left alone before a read tries it again
        (60 s by default); ``None`` never tries again.
    clock:
        Monotonic seconds (``time.monotonic``; tests pass their own).

    Raises
    ------
    ContentStoreError
        ``store`` is a path or URL that cannot name a store.
    ValueError
        ``retry_seconds`` is not positive.

    Thread-safe: one lock, held for cache and state operations only (never during a read);
    after the back-off, one caller probes the store while the others still answer ``None``.

    >>> from memtrace_otel.content.store import open_store
    >>> store = open_store("memory://resolver-doctest")
    >>> resolver = ContentResolver(store)
    >>> resolver.get(store.put("hello")), resolver.get("0000000000000000"), resolver.missing
    ('hello', None, 1)
    """

    def __init__(self, store: RefStore | str, *, cache_size: int = 4096, log: bool = True,
                 retry_seconds: float | None = _DEFAULT_RETRY_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if retry_seconds is not None and not retry_seconds > 0:
            raise ValueError(f"retry_seconds must be > 0 or None, not {retry_seconds!r}")
        self.store = store if isinstance(store, RefStore) else open_store(store)
        self.url = self.store.url
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._unavailable: str | None = None  # the current outage's line; None while readable
        self._first_outage: str | None = None  # what messages() says
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._retry_at = 0.0
        self._log = log
        self.found = self.missing = 0
        self.outages = 0
        """How many times the store was found unavailable (a recovery ends an outage)."""

    def get(self, digest: str) -> str | None:
        """The text stored under ``digest``, or ``None`` (absent, malformed hash, store unavailable)."""
        if digest == _EMPTY:
            return ""  # the empty text needs no store: spans with capture on say "" too
        with self._lock:
            text = self._cache.get(digest)
            if text is not None:
                self._cache.move_to_end(digest)
                return text
        if not is_digest(digest) or not self._may_read():
            return None
        text = self._read(digest)
        if text is not None:
            with self._lock:
                self._cache[digest] = text
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return text

    def _read(self, digest: str) -> str | None:
        try:
            text = self.store.read(digest)
        except FileNotFoundError:
            if self._store_gone():
                return None
            self.missing += 1
            return None
        except Exception as error:  # any filesystem's failure means "no content"
            self._give_up(f"{type(error).__name__}: {error}")
            return None
        self._recovered()
        self.found += 1
        return text

    def _may_read(self) -> bool:
        """Whether to read: the store is thought readable, or its back-off is over (claimed here)."""
        with self._lock:
            if self._unavailable is None:
                return True
            now = self._clock()
            if self._retry_seconds is None or now < self._retry_at:
                return False
            self._retry_at = now + self._retry_seconds  # this caller probes; the others wait
            return True

    def _recovered(self) -> None:
        with self._lock:
            if self._unavailable is None:
                return
            self._unavailable = None
        if self._log:  # at the outage line's level: whoever saw the outage begin sees it end
            _logger.warning("content store %s: readable again; contents are resolved again", self.url)

    def _store_gone(self) -> bool:
        try:
            if self.store.available():
                self._recovered()
                return False
            reason = "no such directory or bucket"
        except Exception as error:
            reason = f"{type(error).__name__}: {error}"
        self._give_up(reason)
        return True

    def _give_up(self, reason: str) -> None:
        with self._lock:
            self._retry_at = self._clock() + (self._retry_seconds or 0.0)
            if self._unavailable is not None:
                return  # a retry that failed: the same outage, said already
            self._unavailable = (f"content store {self.url}: cannot be read ({reason[:300]}); "
                                 "analysis goes on without the contents it holds")
            self._first_outage = self._first_outage or self._unavailable
            self.outages += 1
        if self._log:
            _logger.warning("%s", self._unavailable)

    @property
    def unavailable(self) -> bool:
        """Whether the store is, as far as the last read knows, missing or unreadable."""
        return self._unavailable is not None

    def messages(self) -> list[str]:
        """One line per thing worth saying: the store unavailable (the first outage's line, however
        many there were, since then), texts it lacks."""
        lines = [self._first_outage] if self._first_outage is not None else []
        if self.outages > 1:
            lines.append(f"content store {self.url}: unavailable {self.outages} times in all")
        if self.missing:
            lines.append(f"content store {self.url}: {self.missing} referenced text(s) not found "
                         "(their variables have no content)")
        return lines
