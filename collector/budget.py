"""What one failure may ask of the trace backend: caps per failure and a rate limit per backend.

One trace with thousands of links or hundreds of memory stores once made thousands of backend
requests and held the attribution worker for over a minute. :class:`BudgetedBackend` wraps the
backend for one failure: it fetches at most ``max_traces`` traces and runs at most
``max_searches`` store searches (the rest are problems the verdict is made without, counted), all
within ``seconds``, and every request waits its turn at the backend's :class:`RateLimiter`,
shared by every worker so the backend sees a bounded request rate whatever the failures ask.

It also notes whether the backend *failed* (could not be reached, timed out, answered 429/5xx),
as opposed to not having a trace: a verdict made while it failed is judged again later
(``attribution_service.py``'s redo).

Thread safety: a :class:`RateLimiter` is shared (one lock); a :class:`BudgetedBackend` belongs to
one failure and one thread, while the backend it wraps may be shared.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memtrace_otel.spans.backend import BackendFetch, TraceBackend, TraceSearch
from memtrace_otel.spans.model import Problem

__all__ = ["Budget", "BudgetedBackend", "RateLimiter", "budgeted"]

_BACKEND_FAILED = re.compile(r"cannot connect|no complete answer|timed out|deadline|HTTP (?:429|5\d\d)")


@dataclass(frozen=True, slots=True)
class Budget:
    """Per failure: traces fetched, store searches, seconds of backend work; per backend: requests/s."""

    max_traces: int = 200
    max_searches: int = 20
    seconds: float = 30.0
    rate: float = 50.0

    def __post_init__(self) -> None:
        if self.max_traces < 0 or self.max_searches < 0 or self.seconds <= 0 or self.rate <= 0:
            raise ValueError("budget: traces and searches must be >= 0, seconds and rate > 0")


class RateLimiter:
    """A token bucket: ``rate`` requests per second, bursts of up to ``rate``.

    :meth:`take` waits (up to a deadline) rather than refusing, so work is spread out, not lost.
    """

    def __init__(self, rate: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.rate = rate
        self._clock, self._sleep = clock, sleep
        self._tokens = rate
        self._at = clock()
        self._lock = threading.Lock()
        self.waited = 0.0
        """Seconds callers spent waiting their turn (a measure of how hard the limit bit)."""

    def take(self, count: int, deadline: float) -> bool:
        """Take ``count`` tokens, waiting for them until ``deadline`` (monotonic); ``False`` if they
        would come after it (nothing taken)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
            self._at = now
            wait = max(0.0, (count - self._tokens) / self.rate)
            if now + wait > deadline:
                return False
            self._tokens -= count  # may go below zero: the debt is what later callers wait for
            self.waited += wait
        if wait:
            self._sleep(wait)
        return True


class BudgetedBackend:
    """``backend`` for one failure, within ``budget`` and at ``limiter``'s rate."""

    def __init__(self, backend: TraceBackend, budget: Budget, limiter: RateLimiter, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = backend.name
        self._backend = backend
        self._budget = budget
        self._limiter = limiter
        self._clock = clock
        self._deadline = clock() + budget.seconds
        self.traces_left = budget.max_traces
        self.searches_left = budget.max_searches
        self.traces_capped = 0
        """Trace fetches not made because the failure's budget was spent."""
        self.searches_capped = 0
        self.failed = False
        """Whether the backend failed (down, timed out, 429/5xx) for any request of this failure."""

    def _note(self, fetch: BackendFetch) -> BackendFetch:
        if any(_BACKEND_FAILED.search(problem.message) for problem in fetch.problems):
            self.failed = True
        return fetch

    def fetch_traces(self, trace_ids: Sequence[str]) -> BackendFetch:
        wanted = list(dict.fromkeys(trace_ids))
        allowed, capped = wanted[:self.traces_left], wanted[self.traces_left:]
        fetch = BackendFetch()
        if capped:
            self.traces_capped += len(capped)
            fetch.problems.append(Problem(self.name, f"{len(capped)} trace(s) not fetched: this failure's "
                                                     f"budget of {self._budget.max_traces} traces is spent"))
        if not allowed:
            return fetch
        if not self._limiter.take(len(allowed), self._deadline):
            self.traces_capped += len(allowed)
            fetch.problems.append(Problem(self.name, f"{len(allowed)} trace(s) not fetched: this failure's "
                                                     f"{self._budget.seconds:g} s of backend time is spent"))
            return fetch
        self.traces_left -= len(allowed)
        got = self._note(self._backend.fetch_traces(allowed))
        got.problems[:0] = fetch.problems
        return got


class BudgetedSearch(BudgetedBackend):
    """:class:`BudgetedBackend` of a backend that can search (a :class:`TraceSearch`)."""

    def search_traces(self, attribute: str, value: str, *, service: str, start_unix_nano: int,
                      end_unix_nano: int, limit: int) -> BackendFetch:
        if self.searches_left <= 0 or self.traces_left <= 0 or not self._limiter.take(1, self._deadline):
            self.searches_capped += 1
            fetch = BackendFetch()
            fetch.problems.append(Problem(self.name, f"store search {attribute}={value[:80]!r} not made: "
                                                     "this failure's search budget is spent"))
            return fetch
        self.searches_left -= 1
        search: TraceSearch = self._backend  # type: ignore[assignment]
        got = self._note(search.search_traces(
            attribute, value, service=service, start_unix_nano=start_unix_nano, end_unix_nano=end_unix_nano,
            limit=min(limit, self.traces_left)))
        self.traces_left = max(0, self.traces_left - len(got.received))
        return got


def budgeted(backend: TraceBackend, budget: Budget, limiter: RateLimiter) -> BudgetedBackend:
    """The right wrapper for ``backend`` (searchable or not, as it is)."""
    if isinstance(backend, TraceSearch):
        return BudgetedSearch(backend, budget, limiter)
    return BudgetedBackend(backend, budget, limiter)
