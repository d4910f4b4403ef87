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
from typing import Any

from memtrace_otel.spans.model import Problem, SpanEvent, SpanLink, SpanRecord

__all__ = ["MAX_ATTRIBUTE_CHARS", "records_from_traces_data"]

MAX_ATTRIBUTE_CHARS = 1 << 20
"""A longer string attribute is truncated (and reported): one bad span must not cost the heap."""

_STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR", "STATUS_CODE_UNSET": "UNSET",
                 "STATUS_CODE_OK": "OK", "STATUS_CODE_ERROR": "ERROR"}


_HEX = re.compile(r"[0-9a-fA-F]+")
_ZEROS = {16: "0" * 16, 32: "0" * 32}


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


def _span(raw: dict[str, Any], service: str, where: str, problems: list[Problem],
          check_long: bool = True) -> SpanRecord:
    trace_id = normalise_id(_get(raw, "traceId", "trace_id"), 32)
    span_id = normalise_id(_get(raw, "spanId", "span_id"), 16)
    parent_raw = _get(raw, "parentSpanId", "parent_span_id")
    parent = normalise_id(parent_raw, 16) if parent_raw else ""
    attributes = key_values(raw.get("attributes"))
    if check_long:
        _truncate_long(attributes, where, problems)
    events = [
        SpanEvent(str(e.get("name", "")), int(_get(e, "timeUnixNano", "time_unix_nano") or 0),
                  key_values(e.get("attributes")))
        for e in raw.get("events") or () if isinstance(e, dict)
    ]
    links = []
    for link in raw.get("links") or ():
        try:
            links.append(SpanLink(normalise_id(_get(link, "traceId", "trace_id"), 32),
                                  normalise_id(_get(link, "spanId", "span_id"), 16),
                                  key_values(link.get("attributes"))))
        except (MalformedSpan, AttributeError) as error:
            problems.append(Problem(where, f"span {span_id}: link dropped: {error}"))
    status = raw.get("status") or {}
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=str(raw.get("name", "")),
        parent_span_id=parent,
        start_time_unix_nano=int(_get(raw, "startTimeUnixNano", "start_time_unix_nano") or 0),
        end_time_unix_nano=int(_get(raw, "endTimeUnixNano", "end_time_unix_nano") or 0),
        attributes=attributes,
        events=events,
        links=links,
        status_code=_STATUS_CODES.get(status.get("code", 0), "UNSET"),
        status_message=str(status.get("message", "")),
        service_name=service,
        source=where,
    )


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
    for resource_span in resource_spans:
        if not isinstance(resource_span, dict):
            problems.append(Problem(where, "resourceSpans entry is not an object"))
            continue
        resource = resource_span.get("resource")
        attributes = key_values(resource.get("attributes")) if isinstance(resource, dict) else {}
        service = str(attributes.get("service.name", ""))
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
                yield from _checked_span(raw, service, where, problems, check_long)


def _checked_span(raw: Any, service: str, where: str, problems: list[Problem],
                  check_long: bool) -> Iterator[SpanRecord]:
    try:
        if not isinstance(raw, dict):
            raise MalformedSpan("span is not an object")
        yield _span(raw, service, where, problems, check_long)
    except (MalformedSpan, TypeError, ValueError, AttributeError, OverflowError) as error:
        name = raw.get("name", "?") if isinstance(raw, dict) else "?"
        problems.append(Problem(where, f"span {str(name)[:80]!r} skipped: {error}"))
