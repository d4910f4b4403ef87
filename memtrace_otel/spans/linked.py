"""Traces that spans link to but the input does not hold, and fetching them from a backend.

Lineage crosses traces: a retrieval span links to the span that wrote the
memory it read, usually in an ingestion trace recorded long before. Reading
only the question's trace leaves those producers out; these functions name
the missing traces and complete the input from a :class:`TraceBackend`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from memtrace_otel.semconv import WRITEBACK_SCOPE
from memtrace_otel.spans.backend import TraceBackend
from memtrace_otel.spans.model import Problem, SpanLink, SpanRecord
from memtrace_otel.spans.packed_add import PACKED_ADD, writer_links
from memtrace_otel.spans.packed_search import PACKED_SEARCH, search_writer_links
from memtrace_otel.spans.readers import SpanReadResult

__all__ = ["LinkedFetch", "fetch_linked_traces", "missing_linked_traces"]


@dataclass
class LinkedFetch:
    """What :func:`fetch_linked_traces` asked for, got, and still lacks."""

    requested: set[str] = field(default_factory=set)
    """Trace ids asked of the backend (each once)."""
    received: set[str] = field(default_factory=set)
    """Of those, the ones that came back with at least one span."""
    problems: list[Problem] = field(default_factory=list)
    still_missing: set[str] = field(default_factory=set)
    """Traces still linked to but not (wholly) present after the last round."""


def missing_linked_traces(spans: Iterable[SpanRecord]) -> set[str]:
    """Trace ids of span links whose target span is not among ``spans``.

    >>> from memtrace_otel.spans.model import SpanLink
    >>> a = SpanRecord("a" * 32, "1" * 16, "read", links=[SpanLink("b" * 32, "2" * 16, {})])
    >>> missing_linked_traces([a]) == {"b" * 32}
    True
    >>> missing_linked_traces([a, SpanRecord("b" * 32, "2" * 16, "write")])
    set()
    """
    spans = list(spans)
    present = {(span.trace_id, span.span_id) for span in spans}
    # A write-back span links a verdict to the other trace it concerns, not to data it was made from:
    # following it would pull unrelated traces (other failures) into the lineage. A packed mem0 add
    # or search names its writers inside its packed attribute (spans/packed_add.py, packed_search.py),
    # not as links.
    return {link.trace_id for span in spans if span.scope_name != WRITEBACK_SCOPE
            for link in _links(span) if (link.trace_id, link.span_id) not in present}


def _links(span: SpanRecord) -> list[SpanLink]:
    """The links ``span`` has once the graph builder reads it: a packed add's or search's writers too."""
    a = span.attributes
    if PACKED_ADD in a:
        return writer_links(span) + span.links
    if PACKED_SEARCH in a:
        return search_writer_links(span) + span.links
    return span.links


def fetch_linked_traces(result: SpanReadResult, backend: TraceBackend, *, rounds: int = 5) -> LinkedFetch:
    """Fetch the traces ``result``'s spans link to but lacks, and what those link to, up to ``rounds`` deep.

    Fetched spans are added to ``result`` (which drops duplicates); the fetch's
    problems are returned, not added to ``result``. No trace id is asked twice.

    Parameters
    ----------
    result:
        Spans read so far; completed in place.
    backend:
        Where traces are fetched from, e.g. a
        :class:`~memtrace_otel.spans.jaeger_query.JaegerQueryClient`.
    rounds:
        How many hops of links to follow (each round is one ``fetch_traces`` call).

    Returns
    -------
    LinkedFetch

    Raises
    ------
    ValueError
        ``rounds`` < 1.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, not {rounds}")
    fetched = LinkedFetch()
    for _ in range(rounds):
        missing = missing_linked_traces(result.spans) - fetched.requested
        if not missing:
            break
        fetched.requested |= missing
        answer = backend.fetch_traces(sorted(missing))
        result.add(answer.spans)
        fetched.received |= answer.received & missing
        fetched.problems.extend(answer.problems)
    fetched.still_missing = missing_linked_traces(result.spans)
    return fetched
