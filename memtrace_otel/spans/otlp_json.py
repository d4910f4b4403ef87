"""OTLP/JSON: one ``TracesData`` object per line (Collector ``file`` exporter,
``opentelemetry-exporter-otlp-json-file``), or one whole JSON document.

Follows the OTLP/JSON encoding rules: ids are hex (base64 is accepted too,
as protobuf's generic JSON mapping writes it), 64-bit integers may be
strings, enums are numbers (their names are accepted too), field names may
be lowerCamelCase or snake_case.

Every field is type-checked where it is read. What the graph needs (ids,
name, times) makes a span unusable when wrong: the span is skipped. A wrong
attribute, event, link, kind, status or scope is left out (or left at its
default) and the rest of the span kept. Either way it is one :class:`Problem`
naming the place, the span and the key.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from typing import Any

from memtrace_otel.spans.anyvalue import BadValue, brief, enum_name, key_values, unsigned_nanos
from memtrace_otel.spans.model import SPAN_KINDS, STATUS_CODES, Problem, SpanEvent, SpanLink, SpanRecord

__all__ = ["MAX_ATTRIBUTE_CHARS", "MalformedSpan", "normalise_id", "records_from_traces_data", "span_count"]

MAX_ATTRIBUTE_CHARS = 1 << 20
"""A longer string attribute is truncated (and reported): one bad span must not cost the heap."""

_KIND_BY_VALUE: dict[Any, str] = {
    **dict(enumerate(SPAN_KINDS)), **{f"SPAN_KIND_{kind}": kind for kind in SPAN_KINDS},
}
_STATUS_BY_VALUE: dict[Any, str] = {
    **dict(enumerate(STATUS_CODES)), **{f"STATUS_CODE_{code}": code for code in STATUS_CODES},
}
_HEX = re.compile(r"[0-9a-fA-F]+")
_ZEROS = {16: "0" * 16, 32: "0" * 32}
_LOWER_HEX = {length: re.compile(f"[0-9a-f]{{{length}}}").fullmatch for length in (16, 32)}


class MalformedSpan(ValueError):
    """A span that cannot be kept (missing or malformed ids, wrong types)."""


def get_field(obj: dict[str, Any], camel: str, snake: str) -> Any:
    """A field under its OTLP/JSON (lowerCamelCase) name, else its protobuf (snake_case) name."""
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def normalise_id(raw: Any, length: int) -> str:
    """Hex id of ``length`` hex chars from OTLP/JSON hex or protobuf base64.

    >>> normalise_id("AAAAAAAAAAE=", 16)
    '0000000000000001'
    >>> normalise_id("00000000000000000000000000000001", 32)
    '00000000000000000000000000000001'
    """
    if type(raw) is str and len(raw) == length and _HEX.fullmatch(raw) and raw != _ZEROS[length]:
        return raw.lower()  # the common case, OTLP/JSON hex, in one C-level check
    if not isinstance(raw, str) or not raw:
        raise MalformedSpan(f"id {brief(raw)} is not a string")
    if len(raw) == length and _HEX.fullmatch(raw):
        raise MalformedSpan(f"id {raw!r} is all zeros")
    try:
        decoded = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if len(decoded) * 2 == length and any(decoded):
        return decoded.hex()
    raise MalformedSpan(f"id {brief(raw)} is not {length} hex chars")


def _truncate_long(attributes: dict[str, Any], where: str, problems: list[Problem]) -> None:
    for key, value in attributes.items():
        if isinstance(value, str) and len(value) > MAX_ATTRIBUTE_CHARS:
            attributes[key] = value[:MAX_ATTRIBUTE_CHARS]
            problems.append(Problem(where, f"attribute {key!r} of {len(value):,} chars truncated to "
                                           f"{MAX_ATTRIBUTE_CHARS:,}"))
        elif isinstance(value, list) and any(
            isinstance(v, str) and len(v) > MAX_ATTRIBUTE_CHARS for v in value
        ):
            attributes[key] = [v[:MAX_ATTRIBUTE_CHARS] if isinstance(v, str) else v for v in value]
            problems.append(Problem(where, f"attribute {key!r} has an element over "
                                           f"{MAX_ATTRIBUTE_CHARS:,} chars; truncated"))


def _cached_id(raw: Any, length: int, known: dict[str, str]) -> str:
    """:func:`normalise_id`, remembering valid ids: a trace id recurs in every span of its
    trace, and parents and links name spans already seen."""
    if type(raw) is str:
        value = known.get(raw)
        if value is not None:
            return value
        # Lowercase hex, the OTLP/JSON norm, is kept as it is (no copy); anything else is
        # left to normalise_id and its problem messages.
        value = raw if _LOWER_HEX[length](raw) and raw != _ZEROS[length] else normalise_id(raw, length)
        known[raw] = value
        return value
    return normalise_id(raw, length)


class _Context:
    """What one ``TracesData`` object's spans share while it is read."""

    __slots__ = ("check_long", "errors", "problems", "resource", "scope_name", "scope_version", "service",
                 "span_ids", "trace_ids", "where")

    def __init__(self, where: str, problems: list[Problem], check_long: bool) -> None:
        self.where, self.problems, self.check_long = where, problems, check_long
        self.errors: list[tuple[str, str]] = []  # attribute errors of the span being read
        self.trace_ids: dict[str, str] = {}  # valid ids seen in this document, raw -> normalised
        self.span_ids: dict[str, str] = {}
        self.resource: dict[str, Any] = {}
        self.service = self.scope_name = self.scope_version = ""

    def report(self, span_id: str, what: str) -> None:
        self.problems.append(Problem(self.where, f"span {span_id}: {what}"))

    def report_attributes(self, span_id: str, owner: str) -> None:
        for key, reason in self.errors:
            self.report(span_id, f"{owner}attribute {key!r}: {reason}; attribute skipped")
        self.errors.clear()


def _span(raw: dict[str, Any], ctx: _Context) -> SpanRecord:
    # The hot loop of reading a file: field lookups are spelled out rather than going
    # through get_field, the common well-typed case of each field is tested inline before any
    # call, and the record is built positionally (keywords cost twice as much).
    get, span_ids = raw.get, ctx.span_ids
    trace_id = get("traceId")
    trace_id = _cached_id(get("trace_id") if trace_id is None else trace_id, 32, ctx.trace_ids)
    span_id = get("spanId")
    span_id = _cached_id(get("span_id") if span_id is None else span_id, 16, span_ids)
    parent = get("parentSpanId")
    if parent is None:
        parent = get("parent_span_id")
    parent = "" if parent is None or parent == "" else _cached_id(parent, 16, span_ids)
    name = get("name")
    if type(name) is not str:
        if name is not None:  # null is the default value in proto3 JSON, as absent is
            raise MalformedSpan(f"name {brief(name)} is not a string")
        name = ""
    start = get("startTimeUnixNano")
    if start is None:
        start = get("start_time_unix_nano")
    start = int(start) if type(start) is str and len(start) < 20 and start.isdecimal() \
        else _nanos(start, "startTimeUnixNano", span_id)
    end = get("endTimeUnixNano")
    if end is None:
        end = get("end_time_unix_nano")
    end = int(end) if type(end) is str and len(end) < 20 and end.isdecimal() \
        else _nanos(end, "endTimeUnixNano", span_id)
    errors = ctx.errors
    attributes = key_values(get("attributes"), errors)
    if errors:
        ctx.report_attributes(span_id, "")
    if ctx.check_long:
        _truncate_long(attributes, ctx.where, ctx.problems)
    events = get("events")
    events = [] if events is None else _events(events, span_id, ctx)
    links = get("links")
    links = [] if links is None else _links(links, span_id, ctx)
    status = get("status")  # absent, or {} as the upstream encoder writes an unset one, is UNSET
    unset = status is None or (not status and type(status) is dict)
    status, message = ("UNSET", "") if unset else _status(status, span_id, ctx)
    kind = get("kind")
    kind = _KIND_BY_VALUE.get(kind) if type(kind) is int else "UNSPECIFIED" if kind is None \
        else enum_name(kind, _KIND_BY_VALUE)
    if kind is None:
        ctx.report(span_id, f"kind {brief(get('kind'))} is not a span kind; left UNSPECIFIED")
        kind = "UNSPECIFIED"
    return SpanRecord(
        trace_id, span_id, name, parent, start, end, attributes, events, links, status, message,
        ctx.service, ctx.where, kind, ctx.scope_name, ctx.scope_version, ctx.resource,
    )


def _nanos(raw: Any, what: str, span_id: str) -> int:
    try:
        return unsigned_nanos(raw, what)
    except BadValue as error:
        raise MalformedSpan(f"span {span_id}: {error}") from None


def _status(raw: Any, span_id: str, ctx: _Context) -> tuple[str, str]:
    if type(raw) is not dict:
        ctx.report(span_id, f"status {brief(raw)} is not an object; left UNSET")
        return "UNSET", ""
    code, message = raw.get("code", 0), raw.get("message", "")
    status = _STATUS_BY_VALUE.get(code) if type(code) is int else enum_name(code, _STATUS_BY_VALUE)
    if status is None:
        ctx.report(span_id, f"status code {brief(code)} is not a status code; left UNSET")
        status = "UNSET"
    if type(message) is not str:
        ctx.report(span_id, f"status message {brief(message)} is not a string; left empty")
        message = ""
    return status, message


def _events(raw_events: Any, span_id: str, ctx: _Context) -> list[SpanEvent]:
    if type(raw_events) is not list:
        ctx.report(span_id, f"events {brief(raw_events)} is not a list; events skipped")
        return []
    events = []
    for event in raw_events:
        try:
            if type(event) is not dict:
                raise BadValue(f"{brief(event)} is not an object")
            name = event.get("name", "")
            if type(name) is not str:
                raise BadValue(f"name {brief(name)} is not a string")
            time = unsigned_nanos(get_field(event, "timeUnixNano", "time_unix_nano"), "timeUnixNano")
        except BadValue as error:
            ctx.report(span_id, f"event skipped: {error}")
            continue
        attributes = key_values(event.get("attributes"), ctx.errors)
        if ctx.errors:
            ctx.report_attributes(span_id, f"event {name[:80]!r} ")
        events.append(SpanEvent(name, time, attributes))
    return events


def _links(raw_links: Any, span_id: str, ctx: _Context) -> list[SpanLink]:
    if type(raw_links) is not list:
        ctx.report(span_id, f"links {brief(raw_links)} is not a list; links skipped")
        return []
    links = []
    for link in raw_links:
        try:
            if type(link) is not dict:
                raise MalformedSpan(f"{brief(link)} is not an object")
            trace_id, linked = link.get("traceId"), link.get("spanId")
            trace_id = _cached_id(link.get("trace_id") if trace_id is None else trace_id, 32, ctx.trace_ids)
            linked = _cached_id(link.get("span_id") if linked is None else linked, 16, ctx.span_ids)
        except MalformedSpan as error:
            ctx.report(span_id, f"link dropped: {error}")
            continue
        attributes = key_values(link.get("attributes"), ctx.errors)
        if ctx.errors:
            ctx.report_attributes(span_id, f"link to {linked} ")
        links.append(SpanLink(trace_id, linked, attributes))
    return links


def records_from_traces_data(
    document: Any, where: str, problems: list[Problem], *, check_long: bool = True
) -> Iterator[SpanRecord]:
    """Spans of one ``TracesData`` object; a malformed span is reported and skipped.

    ``check_long=False`` skips looking for over-long attributes, for callers that know
    the document's text was shorter than :data:`MAX_ATTRIBUTE_CHARS`.

    >>> problems = []
    >>> document = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "app"}, "spans": [
    ...     {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "s", "kind": 3}]}]}]}
    >>> [(s.name, s.kind, s.scope_name) for s in records_from_traces_data(document, "f:1", problems)]
    [('s', 'CLIENT', 'app')]
    """
    if isinstance(document, dict) and isinstance(document.get("result"), dict):
        document = document["result"]  # Jaeger's /api/v3 wraps TracesData in {"result": ...}
    resource_spans = (get_field(document, "resourceSpans", "resource_spans")
                      if isinstance(document, dict) else None)
    if not isinstance(resource_spans, list):
        problems.append(Problem(where, "not an OTLP TracesData object (no resourceSpans list)"))
        return
    ctx = _Context(where, problems, check_long)
    for resource_span in resource_spans:
        for spans in _scope_span_lists(resource_span, ctx):
            for raw in spans:  # one generator for the whole walk: a yield per span is the hot path
                try:
                    if type(raw) is not dict:
                        raise MalformedSpan("span is not an object")
                    record = _span(raw, ctx)
                except MalformedSpan as error:
                    _skipped(raw, error, ctx)
                    continue
                yield record


def span_count(document: Any) -> int:
    """Span entries a ``TracesData`` object offers, as :func:`records_from_traces_data` walks them.

    A receiver's ``rejected_spans`` is these minus the records it kept: problems with kept spans
    (an attribute truncated or skipped, a link dropped) reject nothing.

    >>> span_count({"resourceSpans": [{"scopeSpans": [{"spans": [{}, {}]}, {"spans": 3}]}, 7]})
    2
    """
    if isinstance(document, dict) and isinstance(document.get("result"), dict):
        document = document["result"]
    resource_spans = (get_field(document, "resourceSpans", "resource_spans")
                      if isinstance(document, dict) else None)
    count = 0
    for resource_span in resource_spans if isinstance(resource_spans, list) else ():
        scope_spans = (get_field(resource_span, "scopeSpans", "scope_spans")
                       if isinstance(resource_span, dict) else None)
        for scope_span in scope_spans if isinstance(scope_spans, list) else ():
            spans = scope_span.get("spans") if isinstance(scope_span, dict) else None
            count += len(spans) if isinstance(spans, list) else 0
    return count


def _scope_span_lists(resource_span: Any, ctx: _Context) -> Iterator[list[Any]]:
    """The span lists of one ``resourceSpans`` entry, each after setting ``ctx`` to its resource and scope."""
    if not isinstance(resource_span, dict):
        ctx.problems.append(Problem(ctx.where, "resourceSpans entry is not an object"))
        return
    _resource(resource_span.get("resource"), ctx)
    scope_spans = get_field(resource_span, "scopeSpans", "scope_spans")
    if not isinstance(scope_spans, list):
        ctx.problems.append(Problem(ctx.where, "resourceSpans entry has no scopeSpans list"))
        return
    for scope_span in scope_spans:
        spans = scope_span.get("spans") if isinstance(scope_span, dict) else None
        if not isinstance(spans, list):
            ctx.problems.append(Problem(ctx.where, "scopeSpans entry has no spans list"))
            continue
        _scope(scope_span.get("scope"), ctx)
        yield spans


def _skipped(raw: Any, error: MalformedSpan, ctx: _Context) -> None:
    ctx.errors.clear()
    name = raw.get("name", "?") if isinstance(raw, dict) else "?"
    name = repr(name[:80]) if type(name) is str else brief(name)
    ctx.problems.append(Problem(ctx.where, f"span {name} skipped: {error}"))


def _resource(resource: Any, ctx: _Context) -> None:
    ctx.resource, ctx.service = {}, ""
    if resource is None:
        return
    if not isinstance(resource, dict):
        ctx.problems.append(Problem(ctx.where, f"resource {brief(resource)} is not an object; ignored"))
        return
    attributes = key_values(resource.get("attributes"), ctx.errors)
    for key, reason in ctx.errors:
        ctx.problems.append(Problem(ctx.where, f"resource attribute {key!r}: {reason}; attribute skipped"))
    ctx.errors.clear()
    service = attributes.get("service.name", "")
    if type(service) is not str:
        ctx.problems.append(Problem(ctx.where, f"resource attribute 'service.name' {brief(service)} is "
                                               "not a string; service name left empty"))
        service = ""
    ctx.resource, ctx.service = attributes, service


def _scope(scope: Any, ctx: _Context) -> None:
    ctx.scope_name = ctx.scope_version = ""
    if scope is None:
        return
    if not isinstance(scope, dict):
        ctx.problems.append(Problem(ctx.where, f"scope {brief(scope)} is not an object; ignored"))
        return
    name, version = scope.get("name", ""), scope.get("version", "")
    for field, value in (("name", name), ("version", version)):
        if type(value) is not str:
            ctx.problems.append(Problem(ctx.where, f"scope {field} {brief(value)} is not a string; "
                                                   "left empty"))
    ctx.scope_name = name if type(name) is str else ""
    ctx.scope_version = version if type(version) is str else ""
