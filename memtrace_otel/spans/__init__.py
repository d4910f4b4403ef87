"""Spans: every span format read into one :class:`SpanRecord` shape."""

from memtrace_otel.spans.model import Problem, SpanEvent, SpanLink, SpanRecord, record_from_readable
from memtrace_otel.spans.readers import SpanReadResult, read_span_files

__all__ = [
    "Problem",
    "SpanEvent",
    "SpanLink",
    "SpanReadResult",
    "SpanRecord",
    "read_span_files",
    "record_from_readable",
]
