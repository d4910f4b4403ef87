"""Traces that acted on the memory stores a failed trace used, found by searching the backend.

Why: span links name the producers of what a retrieval *returned*. A retrieval
that missed a memory has no link to it, so following links never reaches the
trace that wrote it, and a missed retrieval looks like an answer that ignored
good context (ResponseError instead of RetrievalError). The stores a trace used
are named on its spans (``gen_ai.memory.store.id``); a backend that can search
by attribute (:class:`~memtrace_otel.spans.backend.TraceSearch`: Jaeger, Tempo)
gives back the traces of the same service that acted on the same store in a
window before the failure. Nothing is shared between ``serve`` instances: the
trace backend is the one place every trace already goes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from memtrace_otel.config import DEFAULT_STORE_LOOKBACK_SECONDS
from memtrace_otel.semconv import WRITEBACK_SCOPE, GenAI
from memtrace_otel.spans.backend import TraceBackend, TraceSearch
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.spans.readers import SpanReadResult

__all__ = ["StoreFetch", "StoreUse", "fetch_store_traces", "stores_used"]

DEFAULT_LOOKBACK_SECONDS = DEFAULT_STORE_LOOKBACK_SECONDS
"""How far back a store's traces are searched (defined in :mod:`memtrace_otel.config`)."""
DEFAULT_LIMIT = 200
"""Traces per store and search: bounds the work of one failure on a busy store."""


@dataclass(frozen=True, slots=True)
class StoreUse:
    """One memory store a trace acted on, by the service that did, and when it last did."""

    store_id: str
    service: str
    end_unix_nano: int


@dataclass
class StoreFetch:
    """What :func:`fetch_store_traces` searched for and got."""

    searched: list[StoreUse] = field(default_factory=list)
    received: set[str] = field(default_factory=set)
    """Trace ids the searches answered with spans (the failed trace's own included)."""
    limited: list[StoreUse] = field(default_factory=list)
    """Searches that reached their limit: older traces of that store were not fetched."""
    problems: list[Problem] = field(default_factory=list)
    searchable: bool = True
    """``False`` when the backend cannot search (only linked traces can then be fetched)."""


def stores_used(spans: Iterable[SpanRecord], trace_ids: set[str] | None = None) -> list[StoreUse]:
    """The stores the spans of ``trace_ids`` (all traces when ``None``) act on, each with every service
    seen acting on it among ``spans`` and the last time ``trace_ids`` did.

    Services come from all ``spans``: when the linked traces are already in, a store written by an
    ingestion worker and read by the agent is searched under both services (Jaeger searches one
    service at a time). Write-back spans are skipped: they describe a verdict, not a use of the
    store; so are spans without a service name, which no search can find.

    >>> s = SpanRecord("a" * 32, "1" * 16, "search", end_time_unix_nano=5, service_name="agent",
    ...                attributes={"gen_ai.memory.store.id": "user-7"})
    >>> stores_used([s])
    [StoreUse(store_id='user-7', service='agent', end_unix_nano=5)]
    """
    latest: dict[str, int] = {}
    services: dict[str, set[str]] = {}
    for span in spans:
        store = span.attributes.get(GenAI.MEMORY_STORE_ID)
        if span.scope_name == WRITEBACK_SCOPE or not isinstance(store, str) or not store:
            continue
        if span.service_name:
            services.setdefault(store, set()).add(span.service_name)
        if trace_ids is None or span.trace_id in trace_ids:
            latest[store] = max(latest.get(store, 0), span.end_time_unix_nano, span.start_time_unix_nano)
    return [StoreUse(store, service, latest[store])
            for store in sorted(latest) for service in sorted(services.get(store, ()))]


def fetch_store_traces(result: SpanReadResult, backend: TraceBackend, trace_ids: set[str], *,
                       lookback_seconds: float = DEFAULT_LOOKBACK_SECONDS,
                       limit: int = DEFAULT_LIMIT) -> StoreFetch:
    """Add to ``result`` the traces that acted on the stores ``trace_ids`` used, up to when they last did.

    One search per (store, service), over ``lookback_seconds`` before the last use. Fetched
    spans not already in ``result`` are added to it; problems are returned, not added.
    The traces found may link to others: follow with
    :func:`~memtrace_otel.spans.linked.fetch_linked_traces`.

    Raises
    ------
    ValueError
        ``lookback_seconds`` not positive or ``limit`` < 1.
    """
    if not lookback_seconds > 0 or limit < 1:
        raise ValueError(f"lookback_seconds must be > 0 and limit >= 1, not {lookback_seconds} and {limit}")
    fetched = StoreFetch()
    if not isinstance(backend, TraceSearch):
        fetched.searchable = False
        return fetched
    present = {(span.trace_id, span.span_id) for span in result.spans}
    for use in stores_used(result.spans, trace_ids):
        fetched.searched.append(use)
        end = use.end_unix_nano or time.time_ns()  # a span without timestamps: search up to now
        answer = backend.search_traces(GenAI.MEMORY_STORE_ID, use.store_id, service=use.service,
                                       start_unix_nano=end - int(lookback_seconds * 1e9),
                                       end_unix_nano=end, limit=limit)
        # The search finds the failed trace itself and traces already linked: not duplicates to report.
        new = [span for span in answer.spans if (span.trace_id, span.span_id) not in present]
        present.update((span.trace_id, span.span_id) for span in new)
        result.add(new)
        fetched.received |= answer.received
        fetched.problems.extend(answer.problems)
        if answer.limited:
            fetched.limited.append(use)
    return fetched
