"""Jaeger JSON: the UI's "Download" file and ``/api/traces`` responses (``{"data": [trace...]}``).

Jaeger keeps span tags and logs but drops link attributes, and it turns
OTLP array attributes into JSON strings; both are undone here so the graph
builder sees the same :class:`SpanRecord` it would from OTLP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from memtrace_otel.semconv import MemTrace, MemTraceStep
from memtrace_otel.spans.model import Problem, SpanEvent, SpanLink, SpanRecord
from memtrace_otel.spans.otlp_json import MalformedSpan, _truncate_long

__all__ = ["records_from_jaeger"]


def _jaeger_id(raw: Any, length: int) -> str:
    if not isinstance(raw, str) or not raw or len(raw) > length:
        raise MalformedSpan(f"id {str(raw)[:40]!r} is not up to {length} hex chars")
    try:
        value = int(raw, 16)
    except ValueError as error:
        raise MalformedSpan(f"id {raw[:40]!r} is not hex") from error
    if value == 0:
        raise MalformedSpan(f"id {raw!r} is all zeros")
    return f"{value:0{length}x}"


# Jaeger turns OTLP array attributes into JSON strings. Only keys that are arrays by
# convention are decoded back: an application string that merely looks like a JSON array
# (a prediction of "[1, 2]") must stay a string.
_ARRAY_KEYS = frozenset({
    MemTrace.INPUTS, MemTrace.OUTPUTS, MemTrace.VARIABLES, MemTrace.VARIABLE_CONTENTS,
    MemTrace.DELETED, MemTrace.STEP_NAMES, MemTrace.EVALUATION_EVIDENCE,
    MemTraceStep.INPUTS, MemTraceStep.OUTPUTS,
})


def _tag_value(tag: dict[str, Any]) -> Any:
    value = tag.get("value")
    kind = tag.get("type", "string")
    if kind == "int64":
        return int(value)
    if kind == "float64":
        return float(value)
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if tag.get("key") in _ARRAY_KEYS and isinstance(value, str) and value.startswith("["):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if isinstance(decoded, list) else value
    return value


def _tags(items: Any) -> dict[str, Any]:
    if not isinstance(items, list):
        return {}
    result: dict[str, Any] = {}
    for tag in items:
        if isinstance(tag, dict) and isinstance(tag.get("key"), str):
            try:
                result[tag["key"]] = _tag_value(tag)
            except (TypeError, ValueError):
                result[tag["key"]] = tag.get("value")
    return result


def _span(raw: dict[str, Any], processes: dict[str, Any], where: str, problems: list[Problem]) -> SpanRecord:
    trace_id = _jaeger_id(raw.get("traceID"), 32)
    span_id = _jaeger_id(raw.get("spanID"), 16)
    parent = ""
    links: list[SpanLink] = []
    for ref in raw.get("references") or ():
        try:
            ref_trace, ref_span = _jaeger_id(ref.get("traceID"), 32), _jaeger_id(ref.get("spanID"), 16)
        except (MalformedSpan, AttributeError) as error:
            problems.append(Problem(where, f"span {span_id}: reference dropped: {error}"))
            continue
        if ref.get("refType") == "CHILD_OF" and not parent and ref_trace == trace_id:
            parent = ref_span
        else:
            links.append(SpanLink(ref_trace, ref_span, {}))
    tags = _tags(raw.get("tags"))
    _truncate_long(tags, where, problems)
    status = str(tags.pop("otel.status_code", "")).upper()
    if not status and tags.get("error") is True:
        status = "ERROR"
    events = []
    for log in raw.get("logs") or ():
        fields = _tags(log.get("fields"))
        name = str(fields.pop("event", ""))
        events.append(SpanEvent(name, int(log.get("timestamp", 0)) * 1000, fields))
    start = int(raw.get("startTime", 0)) * 1000
    process = processes.get(raw.get("processID", ""), raw.get("process") or {})
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=str(raw.get("operationName", "")),
        parent_span_id=parent,
        start_time_unix_nano=start,
        end_time_unix_nano=start + int(raw.get("duration", 0)) * 1000,
        attributes=tags,
        events=events,
        links=links,
        status_code=status if status in ("OK", "ERROR") else "UNSET",
        status_message=str(tags.pop("otel.status_description", "")),
        service_name=str(process.get("serviceName", "")) if isinstance(process, dict) else "",
        source=where,
    )


def records_from_jaeger(document: Any, where: str, problems: list[Problem]) -> Iterator[SpanRecord]:
    """Spans of a Jaeger JSON document; a malformed span is reported and skipped."""
    traces = document.get("data") if isinstance(document, dict) else None
    if not isinstance(traces, list):
        problems.append(Problem(where, "not a Jaeger JSON document (no data list)"))
        return
    for trace in traces:
        if not isinstance(trace, dict):
            problems.append(Problem(where, "Jaeger trace entry is not an object"))
            continue
        processes = trace.get("processes") if isinstance(trace.get("processes"), dict) else {}
        spans = trace.get("spans")
        if not isinstance(spans, list):
            problems.append(Problem(where, "Jaeger trace entry has no spans list"))
            continue
        for raw in spans:
            try:
                if not isinstance(raw, dict):
                    raise MalformedSpan("span is not an object")
                yield _span(raw, processes, where, problems)
            except (MalformedSpan, TypeError, ValueError, AttributeError) as error:
                name = raw.get("operationName", "?") if isinstance(raw, dict) else "?"
                problems.append(Problem(where, f"span {name!r} skipped: {error}"))
