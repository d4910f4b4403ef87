"""Jaeger JSON: the UI's "Download" file and ``/api/traces`` responses (``{"data": [trace...]}``).

Jaeger keeps span tags and logs but drops link attributes, and it turns
OTLP array attributes into JSON strings; both are undone here so the graph
builder sees the same :class:`SpanRecord` it would from OTLP. What Jaeger
keeps of the OTLP span outside its attributes comes back too: the kind from
the ``span.kind`` tag, the scope from ``otel.scope.*`` tags, the status from
``otel.status_*`` tags, the resource from the process (its tags and service
name).

Every value is type-checked where it is read: a wrong tag is one problem
(span and key) and left out; wrong ids or times skip the span.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, cast

from memtrace_otel.semconv import MemTrace, MemTraceStep, SmartComment
from memtrace_otel.spans.anyvalue import BadValue, brief, int64
from memtrace_otel.spans.model import Problem, SpanEvent, SpanLink, SpanRecord
from memtrace_otel.spans.otlp_json import MalformedSpan, _truncate_long

__all__ = ["records_from_jaeger"]

# Jaeger turns OTLP array attributes into JSON strings. Only keys that are arrays by
# convention are decoded back: an application string that merely looks like a JSON array
# (a prediction of "[1, 2]") must stay a string.
_ARRAY_KEYS = frozenset({
    MemTrace.INPUTS, MemTrace.OUTPUTS, MemTrace.VARIABLES, MemTrace.VARIABLE_CONTENTS,
    MemTrace.DELETED, MemTrace.STEP_NAMES, MemTrace.EVALUATION_EVIDENCE,
    MemTraceStep.INPUTS, MemTraceStep.OUTPUTS,
    # Imported smartcomment graphs (spans/smartcomment.py) keep their edges and annotations as arrays.
    SmartComment.EDGE_IDS, SmartComment.EDGE_SOURCES, SmartComment.EDGE_TARGETS,
    SmartComment.EDGE_CATEGORIES, SmartComment.VARIABLE_IDS, SmartComment.VARIABLE_CATEGORIES,
    SmartComment.GOLDEN_ANSWERS, SmartComment.SOURCE_EVIDENCE_IDS,
})
# Tags the OTLP -> Jaeger translation adds for span fields that Jaeger has no place for.
_KIND_TAG, _STATUS_TAG, _STATUS_TEXT_TAG, _ERROR_TAG = "span.kind", "otel.status_code", \
    "otel.status_description", "error"
_SCOPE_TAGS = (("otel.scope.name", "otel.scope.version"), ("otel.library.name", "otel.library.version"))
_HEX = re.compile(r"[0-9a-fA-F]+").fullmatch
_KINDS = {"internal": "INTERNAL", "server": "SERVER", "client": "CLIENT", "producer": "PRODUCER",
          "consumer": "CONSUMER"}


def _jaeger_id(raw: Any, length: int) -> str:
    # Jaeger drops leading zeros; int(raw, 16) alone would also take "0x1f", " 1f" and "1_f".
    if type(raw) is not str or not _HEX(raw) or len(raw) > length:
        raise MalformedSpan(f"id {brief(raw)} is not up to {length} hex chars")
    value = int(raw, 16)
    if value == 0:
        raise MalformedSpan(f"id {raw!r} is all zeros")
    return f"{value:0{length}x}"


def _micros(raw: Any, what: str) -> int:
    if raw is None:
        return 0
    if type(raw) is not int or raw < 0:
        raise MalformedSpan(f"{what} {brief(raw)} is not a non-negative integer")
    return raw * 1000


def _tag_value(tag: dict[str, Any]) -> Any:
    value, kind = tag.get("value"), tag.get("type", "string")
    if kind == "string":
        if type(value) is not str:
            raise BadValue(f"string tag value {brief(value)} is not a string")
        return _array_back(tag["key"], value)
    if kind == "int64":
        return int64(value, "int64 tag value")
    if kind == "float64":
        if type(value) not in (int, float):
            raise BadValue(f"float64 tag value {brief(value)} is not a number")
        return float(cast(float, value))
    if kind == "bool":
        if type(value) is not bool:
            raise BadValue(f"bool tag value {brief(value)} is not true or false")
        return value
    if kind == "binary" and type(value) is str:
        return value
    raise BadValue(f"tag type {brief(kind)} with value {brief(value)} is not a Jaeger tag")


def _array_back(key: str, value: str) -> Any:
    if key in _ARRAY_KEYS and value.startswith("["):
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            return value
        return decoded if isinstance(decoded, list) else value
    return value


def _tags(items: Any, report: Any) -> dict[str, Any]:
    """Tags as a dict; ``report(key, reason)`` hears of each one left out."""
    if items is None:
        return {}
    if type(items) is not list:
        report("", f"tag list {brief(items)} is not a list")
        return {}
    result: dict[str, Any] = {}
    for tag in items:
        key = tag.get("key") if type(tag) is dict else None
        if type(key) is not str:
            report("", f"tag {brief(tag)} has no string key")
            continue
        try:
            result[key] = _tag_value(tag)
        except BadValue as error:
            report(key, str(error))
    return result


class _Reader:
    """The spans of one Jaeger document, with the resources of its processes."""

    def __init__(self, where: str, problems: list[Problem]) -> None:
        self.where, self.problems = where, problems

    def report(self, span_id: str, what: str) -> None:
        self.problems.append(Problem(self.where, f"span {span_id}: {what}" if span_id else what))

    def tags(self, items: Any, span_id: str, owner: str = "") -> dict[str, Any]:
        return _tags(items, lambda key, why: self.report(span_id, f"{owner}tag {key!r}: {why}; tag skipped"))

    def processes(self, raw: Any) -> dict[str, tuple[str, dict[str, Any]]]:
        """processID -> (service name, resource attributes), one shared dict per process."""
        if raw is None:
            return {}
        if type(raw) is not dict:
            self.report("", f"processes {brief(raw)} is not an object; ignored")
            return {}
        return {pid: self.process(process, f"process {pid!r} ") for pid, process in raw.items()}

    def process(self, raw: Any, owner: str) -> tuple[str, dict[str, Any]]:
        if type(raw) is not dict:
            self.report("", f"{owner}{brief(raw)} is not an object; ignored")
            return "", {}
        service = raw.get("serviceName", "")
        if type(service) is not str:
            self.report("", f"{owner}serviceName {brief(service)} is not a string; left empty")
            service = ""
        tags = self.tags(raw.get("tags"), "", owner)
        return service, {"service.name": service, **tags} if service else tags

    def span(self, raw: dict[str, Any], processes: dict[str, tuple[str, dict[str, Any]]]) -> SpanRecord:
        trace_id = _jaeger_id(raw.get("traceID"), 32)
        span_id = _jaeger_id(raw.get("spanID"), 16)
        name = raw.get("operationName", "")
        if type(name) is not str:
            raise MalformedSpan(f"operationName {brief(name)} is not a string")
        start = _micros(raw.get("startTime"), "startTime")
        end = start + _micros(raw.get("duration"), "duration")
        parent, links = self.references(raw.get("references"), trace_id, span_id)
        tags = self.tags(raw.get("tags"), span_id)
        _truncate_long(tags, self.where, self.problems)
        kind = self.kind(tags.pop(_KIND_TAG, None), span_id)
        scope_name, scope_version = self.scope(tags, span_id)
        status, message = self.status(tags, span_id)
        service, resource = self.span_process(raw, processes, span_id)
        events = self.events(raw.get("logs"), span_id)
        return SpanRecord(trace_id, span_id, name, parent, start, end, tags, events, links, status, message,
                          service, self.where, kind, scope_name, scope_version, resource)

    def span_process(self, raw: dict[str, Any], processes: dict[str, tuple[str, dict[str, Any]]],
                     span_id: str) -> tuple[str, dict[str, Any]]:
        process_id = raw.get("processID")
        if type(process_id) is str and process_id in processes:
            return processes[process_id]
        if raw.get("process") is not None:  # an older layout: the process inline in the span
            return self.process(raw["process"], f"span {span_id}: process ")
        return "", {}

    def references(self, raw: Any, trace_id: str, span_id: str) -> tuple[str, list[SpanLink]]:
        if raw is None:
            return "", []
        if type(raw) is not list:
            self.report(span_id, f"references {brief(raw)} is not a list; ignored")
            return "", []
        parent, links = "", []
        for ref in raw:
            try:
                if type(ref) is not dict:
                    raise MalformedSpan(f"{brief(ref)} is not an object")
                ref_trace, ref_span = _jaeger_id(ref.get("traceID"), 32), _jaeger_id(ref.get("spanID"), 16)
            except MalformedSpan as error:
                self.report(span_id, f"reference dropped: {error}")
                continue
            if ref.get("refType") == "CHILD_OF" and not parent and ref_trace == trace_id:
                parent = ref_span
            else:
                links.append(SpanLink(ref_trace, ref_span, {}))
        return parent, links

    def kind(self, raw: Any, span_id: str) -> str:
        if raw is None:
            return "UNSPECIFIED"
        kind = _KINDS.get(raw) if type(raw) is str else None
        if kind is None:
            self.report(span_id, f"tag {_KIND_TAG!r}: {brief(raw)} is not a span kind; left UNSPECIFIED")
            return "UNSPECIFIED"
        return kind

    def scope(self, tags: dict[str, Any], span_id: str) -> tuple[str, str]:
        found = ["", ""]
        for keys in _SCOPE_TAGS:
            for index, key in enumerate(keys):
                value = tags.pop(key, None)
                if value is not None and type(value) is not str:
                    self.report(span_id, f"tag {key!r}: {brief(value)} is not a string; ignored")
                elif value and not found[index]:
                    found[index] = value
        return found[0], found[1]

    def status(self, tags: dict[str, Any], span_id: str) -> tuple[str, str]:
        code, message = tags.pop(_STATUS_TAG, None), tags.pop(_STATUS_TEXT_TAG, "")
        if code is None:
            status = "ERROR" if tags.get(_ERROR_TAG) is True else "UNSET"
        elif type(code) is str and code.upper() in ("OK", "ERROR", "UNSET"):
            status = code.upper()
        else:
            self.report(span_id, f"tag {_STATUS_TAG!r}: {brief(code)} is not a status code; left UNSET")
            status = "UNSET"
        if status == "ERROR" and tags.get(_ERROR_TAG) is True:
            del tags[_ERROR_TAG]  # the translation's marker of an error status, not an attribute
        if type(message) is not str:
            self.report(span_id, f"tag {_STATUS_TEXT_TAG!r}: {brief(message)} is not a string; left empty")
            message = ""
        return status, message

    def events(self, raw: Any, span_id: str) -> list[SpanEvent]:
        if raw is None:
            return []
        if type(raw) is not list:
            self.report(span_id, f"logs {brief(raw)} is not a list; ignored")
            return []
        events = []
        for log in raw:
            try:
                if type(log) is not dict:
                    raise MalformedSpan(f"{brief(log)} is not an object")
                time = _micros(log.get("timestamp"), "timestamp")
            except MalformedSpan as error:
                self.report(span_id, f"log skipped: {error}")
                continue
            fields = self.tags(log.get("fields"), span_id, "log field ")
            name = fields.pop("event", "")
            events.append(SpanEvent(name if type(name) is str else str(name), time, fields))
        return events


def records_from_jaeger(document: Any, where: str, problems: list[Problem]) -> Iterator[SpanRecord]:
    """Spans of a Jaeger JSON document; a malformed span is reported and skipped.

    >>> document = {"data": [{"processes": {"p1": {"serviceName": "svc"}}, "spans": [
    ...     {"traceID": "ab" * 16, "spanID": "cd" * 8, "operationName": "s", "processID": "p1",
    ...      "tags": [{"key": "span.kind", "type": "string", "value": "client"}]}]}]}
    >>> [(s.name, s.kind, s.service_name) for s in records_from_jaeger(document, "f:1", [])]
    [('s', 'CLIENT', 'svc')]
    """
    traces = document.get("data") if isinstance(document, dict) else None
    if not isinstance(traces, list):
        problems.append(Problem(where, "not a Jaeger JSON document (no data list)"))
        return
    reader = _Reader(where, problems)
    for trace in traces:
        if not isinstance(trace, dict):
            problems.append(Problem(where, "Jaeger trace entry is not an object"))
            continue
        spans = trace.get("spans")
        if not isinstance(spans, list):
            problems.append(Problem(where, "Jaeger trace entry has no spans list"))
            continue
        processes = reader.processes(trace.get("processes"))
        for raw in spans:
            try:
                if not isinstance(raw, dict):
                    raise MalformedSpan("span is not an object")
                yield reader.span(raw, processes)
            except MalformedSpan as error:
                name = raw.get("operationName", "?") if isinstance(raw, dict) else "?"
                name = repr(name[:80]) if type(name) is str else brief(name)
                problems.append(Problem(where, f"span {name} skipped: {error}"))
