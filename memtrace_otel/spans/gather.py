"""Gathering the traces a failure needs from the trace backend, written once for the CLI and ``serve``.

A failed trace rarely holds its whole lineage: the memory it read was written in
other traces, often routed to other processes. Two ways reach them, in this order:

1. the span links the input holds (:mod:`memtrace_otel.spans.linked`), a few rounds deep;
2. with a store lookback, a search of the backend for the traces that used the same memory
   stores (:mod:`memtrace_otel.spans.store_scope`: a retrieval that *missed* a memory has no
   link to it). It comes after the links because the linked traces name the services that
   wrote the stores, searched under each; then the links of what it found are followed too.

:func:`open_backend` is the one factory of query clients (Jaeger or Tempo, never both);
:func:`gather_traces` completes a :class:`~memtrace_otel.spans.readers.SpanReadResult` in
place and says what it asked for and got, for the caller to present (CLI lines, ``serve``
counters and log lines).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtrace_otel.config import backend_bounds_from_env
from memtrace_otel.spans.backend import TraceBackend
from memtrace_otel.spans.linked import LinkedFetch, fetch_linked_traces
from memtrace_otel.spans.model import Problem
from memtrace_otel.spans.readers import SpanReadResult
from memtrace_otel.spans.store_scope import StoreFetch, fetch_store_traces

__all__ = ["BackendChoiceError", "Gathered", "gather_traces", "open_backend"]

DEFAULT_ROUNDS = 5
"""Hops of span links followed per pass (each hop is one fetch of every trace still missing)."""


class BackendChoiceError(ValueError):
    """Both a Jaeger and a Tempo URL were given: linked traces come from one backend."""


def open_backend(jaeger_url: str | None = None, tempo_url: str | None = None) -> TraceBackend | None:
    """The query client of the one trace backend named, bounded by ``MEMTRACE_BACKEND_TIMEOUT`` and
    ``MEMTRACE_BACKEND_DEADLINE``; ``None`` when neither URL is given.

    Raises
    ------
    BackendChoiceError
        Both URLs are given.
    ValueError
        A malformed URL (the client's message names it).

    >>> open_backend() is None
    True
    >>> open_backend("http://127.0.0.1:16686").name
    'Jaeger http://127.0.0.1:16686'
    """
    if jaeger_url and tempo_url:
        raise BackendChoiceError("give either a Jaeger or a Tempo query URL, not both")
    timeout, deadline = backend_bounds_from_env()
    if jaeger_url:
        from memtrace_otel.spans.jaeger_query import JaegerQueryClient

        return JaegerQueryClient(jaeger_url, timeout=timeout, deadline=deadline)
    if tempo_url:
        from memtrace_otel.spans.tempo_query import TempoQueryClient

        return TempoQueryClient(tempo_url, timeout=timeout, deadline=deadline)
    return None


@dataclass
class Gathered:
    """What :func:`gather_traces` asked the backend for and got."""

    linked: list[LinkedFetch] = field(default_factory=list)
    """Each pass over the span links (one, or two around a store search)."""
    store: StoreFetch | None = None
    """The store search; ``None`` when none was made (lookback 0)."""

    @property
    def problems(self) -> list[Problem]:
        """Every fetch problem, in the order the fetches were made."""
        first, *rest = self.linked or [LinkedFetch()]
        return [*first.problems, *(self.store.problems if self.store else []),
                *(problem for fetch in rest for problem in fetch.problems)]

    @property
    def linked_received(self) -> set[str]:
        return set().union(*(fetch.received for fetch in self.linked))

    @property
    def still_missing(self) -> set[str]:
        """Traces still linked to but not fetched after the last pass."""
        return self.linked[-1].still_missing if self.linked else set()


def gather_traces(result: SpanReadResult, backend: TraceBackend, traces: set[str], *,
                  store_lookback: float = 0.0, rounds: int = DEFAULT_ROUNDS) -> Gathered:
    """Add to ``result`` the traces its spans link to and, with ``store_lookback`` > 0, the traces that
    used the memory stores of ``traces`` in that many seconds before (then their links too).

    Fetched spans are added to ``result`` (which drops duplicates); problems are returned in
    :class:`Gathered`, not added to ``result``. No trace id is asked twice in one pass.

    Raises
    ------
    ValueError
        ``store_lookback`` < 0 or ``rounds`` < 1.
    """
    if store_lookback < 0:
        raise ValueError(f"store_lookback must be >= 0, not {store_lookback}")
    gathered = Gathered(linked=[fetch_linked_traces(result, backend, rounds=rounds)])
    if store_lookback > 0:
        gathered.store = fetch_store_traces(result, backend, traces, lookback_seconds=store_lookback)
        gathered.linked.append(fetch_linked_traces(result, backend, rounds=rounds))
    return gathered
