"""OTLP/JSON: one ``TracesData`` object per line (Collector ``file`` exporter,
``opentelemetry-exporter-otlp-json-file``), or one whole JSON document.

Follows the OTLP/JSON encoding rules: ids are hex (base64 is accepted too,
as protobuf's generic JSON mapping writes it), 64-bit integers may be
strings, field names may be lowerCamelCase or snake_case.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from sys import intern as _intern
from typing import Any

from memtrace_otel.spans.model import Problem, SpanEvent, SpanLink, SpanRecord

__all__ = ["MAX_ATTRIBUTE_CHARS", "records_from_traces_data"]

MAX_ATTRIBUTE_CHARS = 1 << 20
"""A longer string attribute is truncated (and reported): one bad span must not cost the heap."""

_STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR", "STATUS_CODE_UNSET": "UNSET",
                 "STATUS_CODE_OK": "OK", "STATUS_CODE_ERROR": "ERROR"}


_HEX = re.compile(r"[0-9a-fA-F]+")
_ZEROS = {16: "0" * 16, 32: "0" * 32}
_LOWER_HEX = {length: re.compile(f"[0-9a-f]{{{length}}}").fullmatch for length in (16, 32)}
_NO_STATUS: dict[str, Any] = {}


class MalformedSpan(ValueError):
    """A span that cannot be kept (missing or malformed ids, wrong types)."""


def _get(obj: dict[str, Any], camel: str, snake: str) -> Any:
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
        raise MalformedSpan(f"id {raw!r} is not a string")
    if len(raw) == length:
        try:
            int(raw, 16)
        except ValueError:
            pass
        else:
            if raw.strip("0") == "":
                raise MalformedSpan(f"id {raw!r} is all zeros")
            return raw.lower()
    try:
        decoded = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if len(decoded) * 2 == length and any(decoded):
        return decoded.hex()
    raise MalformedSpan(f"id {raw[:40]!r} is not {length} hex chars")


def any_value(value: Any) -> Any:
    """Python value of an OTLP ``AnyValue``.

    >>> any_value({"intValue": "7"})
    7
    """
    if not isinstance(value, dict):
        return value
    # One key per AnyValue: look it up rather than trying every field (hot loop).
    for key, raw in value.items():
        convert = _CONVERTERS.get(key)
        if convert is not None:
            return convert(raw)
    return None


def _array(raw: Any) -> list[Any]:
    values = raw.get("values") if isinstance(raw, dict) else None
    if not isinstance(values, list):
        return []
    result = []
    for value in values:
        text = value.get("stringValue") if type(value) is dict else None
        result.append(text if type(text) is str else any_value(value))
    return result


def _kvlist(raw: Any) -> dict[str, Any]:
    values = raw.get("values", []) if isinstance(raw, dict) else []
    return key_values(values)


_CONVERTERS: dict[str, Any] = {
    "stringValue": str, "intValue": int, "boolValue": bool, "doubleValue": float,
    "arrayValue": _array, "kvlistValue": _kvlist, "bytesValue": str,
    "string_value": str, "int_value": int, "bool_value": bool, "double_value": float,
    "array_value": _array, "kvlist_value": _kvlist, "bytes_value": str,
}


def key_values(items: Any) -> dict[str, Any]:
    """``[{"key": k, "value": AnyValue}]`` as a dict; entries without a key are dropped."""
    if not isinstance(items, list):
        return {}
    result: dict[str, Any] = {}
    for item in items:
        if type(item) is not dict:
            continue
        key = item.get("key")
        if type(key) is not str:
            continue
        # One shared copy of each key rather than one per span and attribute: large files
        # repeat a handful of keys millions of times.
        key = _intern(key)
        value = item.get("value")
        if type(value) is dict:
            # Fast paths for what memory spans are made of: strings and arrays of strings.
            text = value.get("stringValue")
            if type(text) is str:
                result[key] = text
                continue
            array = value.get("arrayValue")
            if array is not None:
                result[key] = _array(array)
                continue
        result[key] = any_value(value)
    return result


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


def _span(raw: dict[str, Any], service: str, where: str, problems: list[Problem],
          check_long: bool, trace_ids: dict[str, str], span_ids: dict[str, str]) -> SpanRecord:
    # The hot loop of reading a file: field lookups are spelled out rather than going
    # through _get, and the record is built positionally (keywords cost twice as much).
    get = raw.get
    trace_id = get("traceId")
    trace_id = _cached_id(get("trace_id") if trace_id is None else trace_id, 32, trace_ids)
    span_id = get("spanId")
    span_id = _cached_id(get("span_id") if span_id is None else span_id, 16, span_ids)
    parent = get("parentSpanId")
    if parent is None:
        parent = get("parent_span_id")
    parent = _cached_id(parent, 16, span_ids) if parent else ""
    attributes = key_values(get("attributes"))
    if check_long:
        _truncate_long(attributes, where, problems)
    events = get("events")
    events = [
        SpanEvent(str(e.get("name", "")), int(_get(e, "timeUnixNano", "time_unix_nano") or 0),
                  key_values(e.get("attributes")))
        for e in events if isinstance(e, dict)
    ] if events else []
    links = get("links")
    links = _links(links, span_id, where, problems, trace_ids, span_ids) if links else []
    status = get("status") or _NO_STATUS
    start = get("startTimeUnixNano")
    end = get("endTimeUnixNano")
    return SpanRecord(
        trace_id, span_id, str(get("name", "")), parent,
        int((get("start_time_unix_nano") if start is None else start) or 0),
        int((get("end_time_unix_nano") if end is None else end) or 0),
        attributes, events, links,
        _STATUS_CODES.get(status.get("code", 0), "UNSET"), str(status.get("message", "")),
        service, where,
    )


def _links(raw_links: Any, span_id: str, where: str, problems: list[Problem],
           trace_ids: dict[str, str], span_ids: dict[str, str]) -> list[SpanLink]:
    links = []
    for link in raw_links:
        try:
            links.append(SpanLink(_cached_id(_get(link, "traceId", "trace_id"), 32, trace_ids),
                                  _cached_id(_get(link, "spanId", "span_id"), 16, span_ids),
                                  key_values(link.get("attributes"))))
        except (MalformedSpan, AttributeError) as error:
            problems.append(Problem(where, f"span {span_id}: link dropped: {error}"))
    return links


def records_from_traces_data(
    document: Any, where: str, problems: list[Problem], *, check_long: bool = True
) -> Iterator[SpanRecord]:
    """Spans of one ``TracesData`` object; a malformed span is reported and skipped.

    ``check_long=False`` skips looking for over-long attributes, for callers that know
    the document's text was shorter than :data:`MAX_ATTRIBUTE_CHARS`.
    """
    if isinstance(document, dict) and isinstance(document.get("result"), dict):
        document = document["result"]  # Jaeger's /api/v3 wraps TracesData in {"result": ...}
    resource_spans = _get(document, "resourceSpans", "resource_spans") if isinstance(document, dict) else None
    if not isinstance(resource_spans, list):
        problems.append(Problem(where, "not an OTLP TracesData object (no resourceSpans list)"))
        return
    trace_ids: dict[str, str] = {}  # valid ids seen in this document, raw -> normalised
    span_ids: dict[str, str] = {}
    for resource_span in resource_spans:
        if not isinstance(resource_span, dict):
            problems.append(Problem(where, "resourceSpans entry is not an object"))
            continue
        service = _service_name(resource_span.get("resource"), where, problems)
        scope_spans = _get(resource_span, "scopeSpans", "scope_spans")
        if not isinstance(scope_spans, list):
            problems.append(Problem(where, "resourceSpans entry has no scopeSpans list"))
            continue
        for scope_span in scope_spans:
            spans = scope_span.get("spans") if isinstance(scope_span, dict) else None
            if not isinstance(spans, list):
                problems.append(Problem(where, "scopeSpans entry has no spans list"))
                continue
            for raw in spans:
                try:
                    if not isinstance(raw, dict):
                        raise MalformedSpan("span is not an object")
                    record = _span(raw, service, where, problems, check_long, trace_ids, span_ids)
                except _SKIPPED as error:
                    name = raw.get("name", "?") if isinstance(raw, dict) else "?"
                    problems.append(Problem(where, f"span {str(name)[:80]!r} skipped: {error}"))
                    continue
                yield record


def _service_name(resource: Any, where: str, problems: list[Problem]) -> str:
    try:
        attributes = key_values(resource.get("attributes")) if isinstance(resource, dict) else {}
    except (TypeError, ValueError, OverflowError) as error:  # {"intValue": "x"}, say
        problems.append(Problem(where, f"resource attributes unreadable ({error}); service name left empty"))
        return ""
    return str(attributes.get("service.name", ""))


_SKIPPED = (MalformedSpan, TypeError, ValueError, AttributeError, OverflowError)
"""What makes one span unusable; it is reported and the rest of the document read."""
