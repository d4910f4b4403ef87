"""Lineage that survives storage: the producer's span context inside a memory record.

When a record is stored, the writing operation's span context is written into
the record's own metadata as a W3C ``traceparent``, next to the variable id the
record holds. When the record is retrieved (another trace, process or day),
reading it back gives the consumer a span link to its producer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, MutableMapping

from opentelemetry.trace import SpanContext, TraceFlags

from memtrace_otel.semconv import RecordMetadata

__all__ = ["format_traceparent", "lineage_from_metadata", "parse_traceparent", "write_lineage"]

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def format_traceparent(context: SpanContext) -> str:
    """W3C traceparent of ``context``.

    >>> from opentelemetry.trace import SpanContext
    >>> format_traceparent(SpanContext(0xA, 0xB, is_remote=False))
    '00-0000000000000000000000000000000a-000000000000000b-00'
    """
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def parse_traceparent(value: object) -> SpanContext | None:
    """Span context from a W3C traceparent, or ``None`` when it is not one.

    >>> parse_traceparent("garbage") is None
    True
    >>> parse_traceparent("00-0000000000000000000000000000000a-000000000000000b-01").span_id
    11
    """
    if not isinstance(value, str):
        return None
    # Only strings a traceparent could be are cached: a long one (the user's data) must not be kept.
    return _parse_traceparent(value) if len(value) <= 64 else _parse_traceparent.__wrapped__(value)


@functools.lru_cache(maxsize=4096)
def _parse_traceparent(value: str) -> SpanContext | None:
    # Cached: a store returns the same records (the same writers) to search after search, and
    # a SpanContext is immutable, so one parse serves every later read of a record.
    match = _TRACEPARENT.match(value.strip().lower())
    if match is None:
        return None
    trace_id, span_id = int(match.group(1), 16), int(match.group(2), 16)
    if trace_id == 0 or span_id == 0:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(match.group(3), 16)))


def write_lineage(
    metadata: MutableMapping[str, object], variable_id: str, producer: SpanContext | None
) -> None:
    """Record in ``metadata`` which variable a record holds and which span wrote it."""
    metadata[RecordMetadata.VARIABLE] = variable_id
    if producer is not None and producer.is_valid:
        metadata[RecordMetadata.TRACEPARENT] = format_traceparent(producer)


def lineage_from_metadata(metadata: Mapping[str, object] | None) -> tuple[str | None, SpanContext | None]:
    """The variable id and producer span context stored in a record's metadata, if any."""
    if not metadata:
        return None, None
    variable_id = metadata.get(RecordMetadata.VARIABLE)
    producer = parse_traceparent(metadata.get(RecordMetadata.TRACEPARENT))
    return (variable_id if isinstance(variable_id, str) and variable_id else None), producer
