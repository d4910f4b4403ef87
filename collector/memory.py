"""When ``memtrace serve`` must stop taking spans: its resident memory against the configured limit.

Like the Collector's ``memory_limiter``, the decision is made from what the
process really holds, checked at most every ``interval`` seconds (reading
``/proc/self/statm`` costs a few microseconds), against a soft limit: the
hard limit less a spike allowance (20% by default, the ``memory_limiter``'s
default), room for the requests already admitted between two checks. Python's allocator keeps the
arenas of freed objects, so after a burst of settled traces has been released
the resident size would stay high and the service would refuse spans it has
room for: when over the limit, the guard first collects garbage and asks
glibc to return free pages (``malloc_trim``), and refuses only if still over.

Thread safety: one lock; receivers on any thread may ask.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import threading
import time
from collections.abc import Callable

__all__ = ["Admission", "MemoryGuard", "bound_allocator"]

_logger = logging.getLogger(__name__)


_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def bound_allocator() -> bool:
    """Make glibc give large blocks back to the system when they are freed; ``False`` if not glibc.

    A request body and its parsed message are blocks of megabytes. glibc serves blocks over its
    mmap threshold (128 KiB) with their own mappings, returned on free, but raises that threshold
    to the size of each such block freed (up to 32 MiB), after which the next ones come from the
    heap and stay resident after they are freed, in one heap per thread: under a flood of 15 MiB
    requests the process held several times the memory it was using. A fixed threshold and two
    arenas keep the resident size close to what is really held.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 128 << 10)) and bool(mallopt(_M_ARENA_MAX, 2))


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc: the collection alone has to do
        return None


class MemoryGuard:
    """``over()`` is true while resident memory exceeds the soft limit after giving free memory back.

    The soft limit is ``limit_bytes * (1 - spike)``.
    """

    def __init__(self, limit_bytes: int, *, spike: float = 0.2, interval: float = 0.1,
                 clock: Callable[[], float] = time.monotonic,
                 resident: Callable[[], int] | None = None) -> None:
        if limit_bytes < 1 or interval <= 0 or not 0 <= spike < 1:
            raise ValueError("limit_bytes must be >= 1, interval > 0 and 0 <= spike < 1")
        self.limit_bytes = limit_bytes
        self.soft_limit_bytes = int(limit_bytes * (1 - spike))
        self._interval = interval
        self._clock = clock
        # The reading is injectable: a test of the guard's decisions must not depend on what the
        # process it runs in happens to hold at that moment.
        self._resident = resident if resident is not None else self.resident_bytes
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._trim = _malloc_trim()
        self._checked = -interval
        self._over = False
        self._lock = threading.Lock()
        self.refusals = 0

    def over(self) -> bool:
        now = self._clock()
        with self._lock:
            if now - self._checked >= self._interval:
                self._checked = now
                self._over = self._check()
            if self._over:
                self.refusals += 1
            return self._over

    def _check(self) -> bool:
        if self._resident() <= self.soft_limit_bytes:
            return False
        gc.collect()
        if self._trim is not None:
            self._trim(0)
        over = self._resident() > self.soft_limit_bytes
        if over and self.refusals == 0:
            _logger.warning("memory limit of %d MiB reached: answering 'retry later' until traces settle",
                            self.limit_bytes >> 20)
        return over

    def resident_bytes(self) -> int:
        """Resident set size of this process; 0 where ``/proc`` is not there (the assembler's
        byte ceiling still holds)."""
        try:
            with open("/proc/self/statm", "rb") as statm:
                return int(statm.read().split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            return 0


class Admission:
    """Requests and bytes in flight (received, not yet stored), bounded before anything is decoded.

    Decoding is where memory goes: an attribute-dense request takes many times its wire size as
    Python objects, and eight concurrent 15 MiB ones once took a 512 MiB service to 2 GiB. A
    request is admitted only if fewer than ``max_requests`` are being handled and its bytes fit
    in ``max_bytes`` with those already admitted (one request alone is always admitted when
    nothing else is in flight, or a request as large as the limit would never get in), and only
    while the :class:`MemoryGuard` says the process is under its limit. Otherwise the receiver
    refuses at once with the retryable 503 / ``RESOURCE_EXHAUSTED``, before reading the body
    (HTTP) or decoding it (gRPC).

    Thread safety: one lock.
    """

    def __init__(self, guard: MemoryGuard | None, *, max_bytes: int, max_requests: int) -> None:
        if max_bytes < 1 or max_requests < 1:
            raise ValueError("max_bytes and max_requests must be >= 1")
        self.guard = guard
        self.max_bytes = max_bytes
        self.max_requests = max_requests
        self._bytes = 0
        self._requests = 0
        self._lock = threading.Lock()
        self.refused = 0

    def take(self, size: int) -> bool:
        """Admit a request of ``size`` bytes; ``False``: refuse it (retryable). Pair with :meth:`give`."""
        with self._lock:
            fits = self._requests == 0 or (self._requests < self.max_requests
                                           and self._bytes + size <= self.max_bytes)
            if fits and (self.guard is None or not self.guard.over()):
                self._bytes += size
                self._requests += 1
                return True
            self.refused += 1
            return False

    def wait(self, size: int, timeout: float = 30.0) -> None:
        """Take ``size`` bytes for work that must be done (reading a stored request back), waiting
        while the receivers' requests use the budget; after ``timeout`` it is taken anyway (the
        receivers refuse meanwhile, so the overdraft is short). Pair with :meth:`give`."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if self._requests == 0 or self._bytes + size <= self.max_bytes or time.monotonic() > deadline:
                    self._bytes += size
                    self._requests += 1
                    return
            time.sleep(0.01)

    def give(self, size: int) -> None:
        """The request of ``size`` bytes is done (stored or refused)."""
        with self._lock:
            self._bytes -= size
            self._requests -= 1

    @property
    def in_flight(self) -> tuple[int, int]:
        """``(requests, bytes)`` admitted and not yet given back."""
        return self._requests, self._bytes
