"""The one span shape every reader produces and the graph builder consumes.

Readers of OTLP/JSON, Jaeger JSON and live SDK spans all normalise to
:class:`SpanRecord`, so that a graph built from a file equals the graph
built from the same spans live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

__all__ = ["Problem", "SpanEvent", "SpanLink", "SpanRecord", "record_from_readable"]

AttributeValue = Any  # str | bool | int | float | list of those


@dataclass(slots=True, frozen=True)
class SpanEvent:
    name: str
    time_unix_nano: int
    attributes: dict[str, AttributeValue]


@dataclass(slots=True, frozen=True)
class SpanLink:
    trace_id: str
    span_id: str
    attributes: dict[str, AttributeValue]


@dataclass(slots=True)
class SpanRecord:
    """A span, whichever format it came from. Ids are lowercase hex strings."""

    trace_id: str
    span_id: str
    name: str
    parent_span_id: str = ""
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    links: list[SpanLink] = field(default_factory=list)
    status_code: str = "UNSET"
    status_message: str = ""
    service_name: str = ""
    source: str = ""
    """Where the span was read from (``file:line``), for problem reports."""


@dataclass(slots=True, frozen=True)
class Problem:
    """Something in the input that was skipped or repaired; ``where`` is ``file:line``."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


_STATUS = {StatusCode.UNSET: "UNSET", StatusCode.OK: "OK", StatusCode.ERROR: "ERROR"}


def _plain(attributes: Any) -> dict[str, AttributeValue]:
    # SDK attribute values are tuples for arrays; the file readers give lists.
    return {k: list(v) if isinstance(v, tuple) else v for k, v in (attributes or {}).items()}


def record_from_readable(span: ReadableSpan, source: str = "live") -> SpanRecord:
    """Normalise a finished SDK span."""
    context = span.get_span_context()
    parent = span.parent
    resource = span.resource.attributes if span.resource is not None else {}
    return SpanRecord(
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        name=span.name,
        parent_span_id=f"{parent.span_id:016x}" if parent is not None else "",
        start_time_unix_nano=span.start_time or 0,
        end_time_unix_nano=span.end_time or 0,
        attributes=_plain(span.attributes),
        events=[SpanEvent(e.name, e.timestamp or 0, _plain(e.attributes)) for e in span.events],
        links=[
            SpanLink(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}", _plain(link.attributes))
            for link in span.links
        ],
        status_code=_STATUS.get(span.status.status_code, "UNSET"),
        status_message=span.status.description or "",
        service_name=str(resource.get("service.name", "")),
        source=source,
    )
