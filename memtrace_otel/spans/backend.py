"""What the readers need from a trace backend: the spans of some traces, by id or by search.

A backend (Jaeger's or Tempo's query API) is any object with a ``name`` and
:meth:`TraceBackend.fetch_traces`. One that can also find traces by a span
attribute (both can) is a :class:`TraceSearch` too, and one that can find the traces of failed
evaluations (both can; ``memtrace annotate`` needs it) a :class:`FailureSearch`. Neither call raises for a
bad answer: what could not be fetched is a :class:`Problem`, and ``received``
says which traces really came back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from memtrace_otel.spans.model import Problem, SpanRecord

__all__ = ["BackendFetch", "FailureSearch", "TraceBackend", "TraceSearch"]


@dataclass
class BackendFetch:
    """The outcome of one :meth:`TraceBackend.fetch_traces` call."""

    spans: list[SpanRecord] = field(default_factory=list)
    received: set[str] = field(default_factory=set)
    """Trace ids (32 lowercase hex digits) the backend answered with at least one span."""
    problems: list[Problem] = field(default_factory=list)
    """One per trace not fetched or answer not understood (or one for many traces that failed alike)."""
    limited: bool = False
    """A search found as many traces as it was allowed to return: older matches may be left out."""


@runtime_checkable
class TraceBackend(Protocol):
    """A store of finished traces that can be asked for some of them by id.

    Implementations are thread-safe: one instance may serve concurrent fetches.
    """

    name: str
    """Says which backend, in messages (e.g. ``"Jaeger http://127.0.0.1:16686"``)."""

    def fetch_traces(self, trace_ids: Sequence[str]) -> BackendFetch:
        """The spans of ``trace_ids``; bounded in time, never raises for a bad answer or id."""
        ...


@runtime_checkable
class TraceSearch(Protocol):
    """A backend that can find the traces whose spans carry an attribute value, in a time window.

    Implementations are thread-safe.
    """

    name: str

    def search_traces(self, attribute: str, value: str, *, service: str, start_unix_nano: int,
                      end_unix_nano: int, limit: int) -> BackendFetch:
        """The spans of up to ``limit`` traces of ``service`` (the newest first, where the backend
        chooses) with a span whose ``attribute`` equals ``value``, started within the window;
        ``limited`` when ``limit`` was reached. Bounded in time, never raises for a bad answer."""
        ...


@runtime_checkable
class FailureSearch(Protocol):
    """A backend that can find the traces holding a failed evaluation
    (``memtrace.evaluation.passed = false``), or an evaluator's results, in a time window: what
    ``memtrace annotate`` works on.

    Their own calls because the attribute is a boolean, and an evaluator's result is a span event's
    attribute, which each backend's search spells its own way.
    Implementations are thread-safe.
    """

    name: str

    def search_failed_evaluations(self, *, service: str, start_unix_nano: int, end_unix_nano: int,
                                  limit: int) -> BackendFetch:
        """The spans (whole traces) of up to ``limit`` traces of ``service`` with a failed evaluation
        span started within the window; ``limited`` when ``limit`` was reached. Bounded in time,
        never raises for a bad answer."""
        ...

    def search_evaluator_results(self, name: str, *, service: str, start_unix_nano: int, end_unix_nano: int,
                                 limit: int) -> BackendFetch:
        """The spans (whole traces) of up to ``limit`` traces of ``service`` with a span that carries a
        ``gen_ai.evaluation.result`` event whose ``gen_ai.evaluation.name`` is ``name`` (an evaluator's
        result, passing or not: whether it failed is the graph's :class:`~memtrace_otel.signals.FailureRule`
        to say). Bounded in time, never raises for a bad answer."""
        ...
