"""Spans: every span format read into one :class:`SpanRecord` shape, and traces fetched from a backend."""

from memtrace_otel.spans.backend import BackendFetch, TraceBackend
from memtrace_otel.spans.linked import LinkedFetch, fetch_linked_traces, missing_linked_traces
from memtrace_otel.spans.model import (
    SPAN_KINDS,
    STATUS_CODES,
    Problem,
    SpanEvent,
    SpanLink,
    SpanRecord,
    record_from_readable,
)
from memtrace_otel.spans.readers import STDIN, SpanReadResult, read_span_files

__all__ = [
    "SPAN_KINDS",
    "STATUS_CODES",
    "STDIN",
    "BackendFetch",
    "LinkedFetch",
    "Problem",
    "SpanEvent",
    "SpanLink",
    "SpanReadResult",
    "SpanRecord",
    "TraceBackend",
    "fetch_linked_traces",
    "missing_linked_traces",
    "read_span_files",
    "record_from_readable",
]
