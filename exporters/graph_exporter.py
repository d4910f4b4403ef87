"""Live spans straight into the memory evolution graph, inside the application's process."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import networkx as nx
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from memtrace_otel.graph.build import ContentLookup, build_graph
from memtrace_otel.spans.model import SpanRecord, record_from_readable

__all__ = ["GraphSpanExporter"]


class GraphSpanExporter(SpanExporter):
    """Keeps finished spans (bounded) and builds the evolution graph from them on demand.

    Add it to any TracerProvider, e.g. with a ``SimpleSpanProcessor``. With a
    ``content`` lookup (a :class:`~memtrace_otel.instrument.InProcessContents`'s
    ``get``) the graph sees contents that were never exported.

    Thread-safe: one lock guards the span list; :meth:`graph` copies it
    under the lock and builds outside it.
    """

    def __init__(self, *, content: ContentLookup | None = None, max_spans: int = 1_000_000) -> None:
        if max_spans < 1:
            raise ValueError("max_spans must be >= 1")
        self._content = content
        self._max_spans = max_spans
        self._spans: list[SpanRecord] = []
        self._lock = threading.Lock()
        self._shutdown = False
        self.dropped = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        records = [record_from_readable(s) for s in spans]
        with self._lock:
            room = self._max_spans - len(self._spans)
            self._spans.extend(records[:max(room, 0)])
            self.dropped += max(len(records) - max(room, 0), 0)
        return SpanExportResult.SUCCESS

    def spans(self) -> list[SpanRecord]:
        with self._lock:
            return list(self._spans)

    def graph(self) -> nx.DiGraph:
        """The evolution graph of every span exported so far."""
        return build_graph(self.spans(), content=self._content)

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        self._shutdown = True
