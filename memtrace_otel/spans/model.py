"""The one span shape every reader produces and the graph builder consumes.

Readers of OTLP/JSON, Jaeger JSON and live SDK spans all normalise to
:class:`SpanRecord`, so that a graph built from a file equals the graph
built from the same spans live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import StatusCode

if TYPE_CHECKING:  # the SDK's import costs a reader of span files 30 ms for an annotation
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "SPAN_KINDS",
    "STATUS_CODES",
    "Problem",
    "SpanEvent",
    "SpanLink",
    "SpanRecord",
    "record_from_readable",
]

AttributeValue = Any  # str | bool | int | float | None | list of those | dict (OTLP kvlist)

SPAN_KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
"""Span kind names, indexed by their OTLP number (``SPAN_KIND_SERVER`` is 2)."""
STATUS_CODES = ("UNSET", "OK", "ERROR")
"""Status code names, indexed by their OTLP number."""


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
    """A span, whichever format it came from. Ids are lowercase hex strings.

    ``resource_attributes`` is shared by the spans of one resource (one dict per
    ``resourceSpans`` entry or Jaeger process): treat it as read-only.
    """

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
    """One of :data:`STATUS_CODES`."""
    status_message: str = ""
    service_name: str = ""
    source: str = ""
    """Where the span was read from (``file:line``), for problem reports."""
    kind: str = "UNSPECIFIED"
    """One of :data:`SPAN_KINDS` (``UNSPECIFIED`` when the input did not say)."""
    scope_name: str = ""
    """Instrumentation scope (the tracer's name) and its version."""
    scope_version: str = ""
    resource_attributes: dict[str, AttributeValue] = field(default_factory=dict)


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


_RESOURCES: dict[int, tuple[Any, dict[str, AttributeValue]]] = {}
_MAX_RESOURCES = 64


def _resource_attributes(resource: Any) -> dict[str, AttributeValue]:
    # A provider has one Resource for all its spans: share one plain copy rather than one per
    # span. Keyed by identity (Resource's own hash serialises it); the entry keeps the resource
    # alive, so the id cannot be reused while cached. Races only cost a duplicate copy.
    if resource is None:
        return {}
    entry = _RESOURCES.get(id(resource))
    if entry is not None and entry[0] is resource:
        return entry[1]
    if len(_RESOURCES) >= _MAX_RESOURCES:
        _RESOURCES.clear()
    plain = _plain(resource.attributes)
    _RESOURCES[id(resource)] = (resource, plain)
    return plain


def record_from_readable(span: ReadableSpan, source: str = "live") -> SpanRecord:
    """Normalise a finished SDK span.

    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> from opentelemetry.trace import SpanKind
    >>> with TracerProvider().get_tracer("app", "1.0").start_as_current_span("s", kind=SpanKind.CLIENT) as s:
    ...     pass
    >>> record = record_from_readable(s)
    >>> record.kind, record.scope_name, record.scope_version
    ('CLIENT', 'app', '1.0')
    """
    context = span.context  # a ReadableSpan always has one; get_span_context() is typed Optional
    parent = span.parent
    resource = _resource_attributes(span.resource)
    scope = span.instrumentation_scope
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
        kind=span.kind.name,
        scope_name=scope.name if scope is not None else "",
        scope_version=(scope.version or "") if scope is not None else "",
        resource_attributes=resource,
    )
