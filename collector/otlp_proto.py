"""OTLP protobuf (``ExportTraceServiceRequest``) into :class:`SpanRecord` s, for the receiver.

The JSON encoding is read by :mod:`memtrace_otel.spans.otlp_json`; this is its
protobuf twin. It walks the decoded message directly rather than converting
it to a dict first (``MessageToDict`` costs more than the rest of ingest).
A span with a malformed id is reported and skipped; the rest of the request
is kept, and the count of rejected spans goes back to the sender as OTLP's
``partial_success``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from itertools import chain, compress
from operator import attrgetter, itemgetter
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from memtrace_otel.semconv import GenAIEvent, MemTrace
from memtrace_otel.signals import default_failure_rule
from memtrace_otel.spans.model import SPAN_KINDS, STATUS_CODES, Problem, SpanEvent, SpanLink, SpanRecord

__all__ = ["STORED", "IndexedRequest", "TakeFailed", "attributes_of", "decode_request", "index_body",
           "index_request", "records_from_request", "span_count"]

STORED = "stored request"
"""Where the records of a stored request say they came from (``SpanRecord.source``)."""

TakeFailed = Callable[[Collection[str]], dict[str, list[SpanRecord]]]
"""Decodes the spans of the given failed traces of a request once (:meth:`IndexedRequest.take_failed`)."""



class _BadSpan(ValueError):
    pass


def decode_request(body: bytes) -> ExportTraceServiceRequest:
    """Parse a protobuf body; ``ValueError`` (one line) when it is not an export request."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception as error:  # protobuf raises DecodeError, upb sometimes RuntimeError
        raise ValueError(f"not an OTLP ExportTraceServiceRequest: {type(error).__name__}") from None
    return request


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "int_value":
        return value.int_value
    if which == "bool_value":
        return value.bool_value
    if which == "double_value":
        return value.double_value
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return None


def _attributes(items: Any) -> dict[str, Any]:
    # Memory spans are mostly string and string-array attributes: test those first.
    result: dict[str, Any] = {}
    for kv in items:
        value = kv.value
        which = value.WhichOneof("value")
        if which == "string_value":
            result[kv.key] = value.string_value
        elif which == "array_value":
            result[kv.key] = [_value(v) for v in value.array_value.values]
        else:
            result[kv.key] = _value(value)
    return result


def attributes_of(items: Any) -> dict[str, Any]:
    """OTLP ``KeyValue`` s as a dict (the outbox decodes its own annotation spans with it)."""
    return _attributes(items)


def _hex(raw: bytes, length: int, what: str) -> str:
    if len(raw) * 2 != length or not any(raw):
        raise _BadSpan(f"{what} is {len(raw)} bytes{' of zeros' if raw and not any(raw) else ''}, "
                       f"not {length // 2}")
    return raw.hex()


def _span(span: Any, resource: dict[str, Any], service: str, scope: Any, where: str,
          problems: list[Problem]) -> SpanRecord:
    trace_id = _hex(span.trace_id, 32, "trace id")
    span_id = _hex(span.span_id, 16, "span id")
    parent = _hex(span.parent_span_id, 16, "parent span id") if span.parent_span_id else ""
    links = []
    for link in span.links:
        try:
            links.append(SpanLink(_hex(link.trace_id, 32, "link trace id"),
                                  _hex(link.span_id, 16, "link span id"), _attributes(link.attributes)))
        except _BadSpan as error:
            problems.append(Problem(where, f"span {span_id}: link dropped: {error}"))
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=span.name,
        parent_span_id=parent,
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        attributes=_attributes(span.attributes),
        events=[SpanEvent(e.name, e.time_unix_nano, _attributes(e.attributes)) for e in span.events],
        links=links,
        status_code=STATUS_CODES[span.status.code] if 0 <= span.status.code < len(STATUS_CODES) else "UNSET",
        status_message=span.status.message,
        service_name=service,
        source=where,
        kind=SPAN_KINDS[span.kind] if 0 <= span.kind < len(SPAN_KINDS) else "UNSPECIFIED",
        scope_name=scope.name,
        scope_version=scope.version,
        resource_attributes=resource,
    )


def span_count(request: ExportTraceServiceRequest) -> int:
    """Spans the request offers: ``partial_success.rejected_spans`` is those minus the spans kept (a
    problem with a kept span, a truncated attribute or a dropped link, is no rejection)."""
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)


def records_from_request(request: ExportTraceServiceRequest, where: str,
                         problems: list[Problem], *, trace_ids: set[str] | None = None) -> list[SpanRecord]:
    """Every well-formed span of ``request``; each malformed one is one :class:`Problem`.

    With ``trace_ids``, only the spans of those traces are decoded (``serve`` reading a stored
    request back for its failed traces).
    """
    records: list[SpanRecord] = []
    wanted = {bytes.fromhex(trace_id) for trace_id in trace_ids} if trace_ids is not None else None
    for resource_spans in request.resource_spans:
        resource: dict[str, Any] | None = None
        service = ""
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if wanted is not None and span.trace_id not in wanted:
                    continue
                if resource is None:
                    resource = _attributes(resource_spans.resource.attributes)
                    named = resource.get("service.name")
                    service = named if isinstance(named, str) else ""
                try:
                    records.append(_span(span, resource, service, scope_spans.scope, where, problems))
                except _BadSpan as error:
                    problems.append(Problem(where, f"span {span.name[:80]!r} rejected: {error}"))
    return records


_PASSED = MemTrace.EVALUATION_PASSED
_EVALUATION_RESULT = GenAIEvent.EVALUATION_RESULT


def _evaluator_failed(span: Any) -> bool:
    """Whether an evaluator's ``gen_ai.evaluation.result`` event on a protobuf span says it failed
    (:mod:`memtrace_otel.signals`); only such events' attributes are decoded. For a span without
    memtrace's own verdict, which decides where there is one."""
    rule = default_failure_rule()
    return any(event.name == _EVALUATION_RESULT
               and rule.fails({kv.key: _value(kv.value) for kv in event.attributes}) for event in span.events)


# Where a span's bytes lack a key's or an event name's bytes, no attribute or event of it has that key or
# name: the attributes and events of such spans are known to hold no verdict without reading them through
# upb (each key read costs about what a byte search of the whole request does).
_PASSED_BYTES = _PASSED.encode()
_EVALUATION_RESULT_BYTES = _EVALUATION_RESULT.encode()
# memtrace.evaluation.passed = true as a span's attribute, as encoders write it: Span field 9 (an attribute)
# of 32 bytes, its key (field 1, 26 bytes), its value (field 2: an AnyValue of bool_value, field 2, true).
_PASSED_TRUE = b"\x4a\x20\x0a\x1a" + _PASSED_BYTES + b"\x12\x02\x10\x01"
_PASSED_TRUE_KEY_AT = 4
_ZERO_TRACE, _ZERO_SPAN = bytes(16), bytes(8)
# Read through upb for a whole list at once (map in C): a Python loop over the spans costs more than the
# reads.
_SPANS, _TRACE_ID, _SPAN_ID = attrgetter("spans"), attrgetter("trace_id"), attrgetter("span_id")
_PARENT_ID, _LINKS, _KEY = attrgetter("parent_span_id"), attrgetter("links"), attrgetter("key")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _length_fields(buf: bytes, start: int, end: int, number: int) -> list[tuple[int, int]] | None:
    """``(start, end)`` of each length-delimited field ``number`` between ``start`` and ``end``, in
    wire order (the order upb lists a repeated field in); ``None`` where the wire holds what this
    walk does not follow (a group, a field running past ``end``)."""
    found: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint(buf, pos)
        wire = tag & 7
        if wire == 2:
            length = buf[pos]
            if length < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:  # a span's length, most often: two bytes
                length = (length & 0x7F) | buf[pos + 1] << 7
                pos += 2
            else:
                length, pos = _varint(buf, pos)
            if tag >> 3 == number:
                found.append((pos, pos + length))
            pos += length
        elif wire == 0:
            pos = _varint(buf, pos)[1]
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            return None
    return found if pos == end else None


def _span_ranges(body: bytes) -> list[tuple[int, int]] | None:
    """Where each span of an export request is in ``body``, in the order upb lists them (resource
    spans, field 1; their scope spans, field 2; their spans, field 2); ``None`` when not found."""
    ranges: list[tuple[int, int]] = []
    resources = _length_fields(body, 0, len(body), 1)
    if resources is None:
        return None
    for resource_start, resource_end in resources:
        scopes = _length_fields(body, resource_start, resource_end, 2)
        if scopes is None:
            return None
        for scope_start, scope_end in scopes:
            spans = _length_fields(body, scope_start, scope_end, 2)
            if spans is None:
                return None
            ranges.extend(spans)
    return ranges


def _rejection(span: Any) -> str | None:
    """Why ``span``'s ids reject it, in :func:`records_from_request`'s words; ``None`` when they do not."""
    try:
        _hex(span.trace_id, 32, "trace id")
        _hex(span.span_id, 16, "span id")
        if span.parent_span_id:
            _hex(span.parent_span_id, 16, "parent span id")
    except _BadSpan as error:
        return f"span {span.name[:80]!r} rejected: {error}"
    return None


def _spans(request: ExportTraceServiceRequest) -> list[Any]:
    """Every span of ``request``, in the order upb lists them (the wrapper objects made in C)."""
    return list(chain.from_iterable(map(_SPANS, chain.from_iterable(
        resource_spans.scope_spans for resource_spans in request.resource_spans))))


def _ids_all_valid(traces: list[bytes], spans: list[Any]) -> bool:
    """Whether no span's ids reject it (checked over whole lists, in C, before looking at any one span)."""
    if set(map(len, traces)) - {16} or _ZERO_TRACE in traces:
        return False
    span_ids = list(map(_SPAN_ID, spans))
    if set(map(len, span_ids)) - {8} or _ZERO_SPAN in span_ids:
        return False
    parents = set(map(_PARENT_ID, spans))
    parents.discard(b"")
    return not parents or not (set(map(len, parents)) - {8} or _ZERO_SPAN in parents)


def _link_problems(span: Any, where: str) -> list[str]:
    problems = []
    for link in span.links:
        try:
            _hex(link.trace_id, 32, "link trace id")
            _hex(link.span_id, 16, "link span id")
        except _BadSpan as error:
            problems.append(f"span {span.span_id.hex()}: link dropped: {error}")
    return problems


def _verdict(span: Any) -> bool | None:
    """Whether memtrace's verdict on ``span`` (its last ``memtrace.evaluation.passed``) says it failed;
    ``None`` without one."""
    keys = list(map(_KEY, span.attributes))
    if _PASSED not in keys:
        return None
    value = span.attributes[len(keys) - 1 - keys[::-1].index(_PASSED)].value
    return value.WhichOneof("value") == "bool_value" and not value.bool_value


def _may_fail(spans: list[Any], body: bytes | None) -> Iterable[int]:
    """The positions of the spans that may hold a failing verdict: every span without ``body``; else those
    whose bytes hold an evaluator's result, or memtrace's verdict other than as the attribute "passed"
    written the one way the SDK and the Collector write it (:data:`_PASSED_TRUE`), found by byte search.

    A span whose only verdict bytes are that attribute did not fail, wherever the bytes are: where they
    are the span's attribute, it passed (an attribute 32 bytes long starting with that key holds that
    value and nothing else; every attribute with the key is one such, or its bytes would be a verdict
    other than that); where they sit inside some other value, the span has no verdict of its own and,
    without an evaluator's result, nothing that can fail. So a request whose every ``passed`` key is
    that attribute, and which holds no evaluator's result, has no failed trace, and where spans of it
    may have one, only those are read. This holds for requests encoded as protobuf encoders write them
    (each field once, in order: the SDK's, the Collector's); a hand-made request that repeats a
    ``value`` field, which protobuf merges, could hide a failing verdict from this test.
    """
    if body is None:
        return range(len(spans))
    results = _EVALUATION_RESULT_BYTES in body
    if not results and body.count(_PASSED_BYTES) == body.count(_PASSED_TRUE):
        return ()
    ranges = _span_ranges(body)
    if ranges is None or len(ranges) != len(spans):
        return range(len(spans))
    starts = [start for start, _ in ranges]
    found: set[int] = set()
    for needle in (_PASSED_BYTES, _EVALUATION_RESULT_BYTES) if results else (_PASSED_BYTES,):
        at = body.find(needle)
        while at >= 0:
            if needle is not _PASSED_BYTES or not body.startswith(_PASSED_TRUE, at - _PASSED_TRUE_KEY_AT):
                number = bisect_right(starts, at) - 1
                if number >= 0 and at + len(needle) <= ranges[number][1]:
                    found.add(number)
            at = body.find(needle, at + 1)
    return sorted(found)


def index_request(request: ExportTraceServiceRequest, where: str, problems: list[Problem],
                  body: bytes | None = None) -> dict[str, tuple[int, bool]]:
    """``trace id -> (spans, holds a failed evaluation)`` of ``request``, without decoding the spans.

    What ``serve`` needs to acknowledge a request it stores as received: the spans are decoded
    only if their trace fails (most do not), so ingest skips building records. The same spans are
    rejected, and the same problems reported, as :func:`records_from_request` would.

    Each field is read for all spans at once where it can be (ids, links), a span at a time only where
    one of them is off. ``body``, the bytes ``request`` was parsed from, lets the spans whose bytes
    cannot hold memtrace's verdict or an evaluator's result skip reading their attributes and events.
    """
    spans = _spans(request)
    traces = list(map(_TRACE_ID, spans))
    found: list[tuple[int, str]] = []  # (span's position, problem): reported in span order
    rejected: set[int] = set()
    if not _ids_all_valid(traces, spans):
        for number, span in enumerate(spans):
            rejection = _rejection(span)
            if rejection is not None:
                rejected.add(number)
                found.append((number, rejection))
    for number in compress(range(len(spans)), map(len, map(_LINKS, spans))):
        if number not in rejected:
            found.extend((number, problem) for problem in _link_problems(spans[number], where))
    if found:
        found.sort(key=itemgetter(0))  # stable: one span's link problems stay in their order
        problems.extend(Problem(where, message) for _, message in found)
    failed_traces: set[bytes] = set()
    for number in _may_fail(spans, body):
        if number in rejected:
            continue
        span = spans[number]
        failed = _verdict(span)
        if failed is None:
            failed = bool(span.events) and _evaluator_failed(span)
        if failed:
            failed_traces.add(traces[number])
    if rejected:
        traces = [trace for number, trace in enumerate(traces) if number not in rejected]
    return {trace.hex(): (count, trace in failed_traces) for trace, count in Counter(traces).items()}


class IndexedRequest:
    """A protobuf request's trace index (:func:`index_request`), the spans it offers
    (:func:`span_count`), and the parsed message, from which :meth:`take_failed` decodes the spans of
    the failed traces ``serve`` decides to keep.

    ``serve`` decides after it has checked that it has room for the request and for those spans:
    a request it refuses (503, retried) or spans past its cap at the time of the check (read back
    from the store) are not decoded here for nothing. The room is not reserved: receiver threads
    checking at once may each decode up to the cap, and what does not fit is then not kept.
    """

    __slots__ = ("_request", "index", "offered")

    def __init__(self, request: ExportTraceServiceRequest, index: dict[str, tuple[int, bool]],
                 offered: int) -> None:
        self._request: ExportTraceServiceRequest | None = request
        self.index = index
        self.offered = offered

    def take_failed(self, trace_ids: Collection[str]) -> dict[str, list[SpanRecord]]:
        """The spans of ``trace_ids`` (failed traces of the index), decoded from the same parse; the
        parsed message (~4x the body's size for attribute-dense spans) is let go, so that it is not
        held while the body is stored. Call once.

        The records are the ones a read-back makes (:data:`STORED` is their source; a malformed span is
        left out of them as there, its problem reported once, by the index).
        """
        request, self._request = self._request, None
        failed: dict[str, list[SpanRecord]] = {}
        if trace_ids and request is not None:
            for span in records_from_request(request, STORED, [], trace_ids=set(trace_ids)):
                failed.setdefault(span.trace_id, []).append(span)
        return failed


def index_body(body: bytes, where: str, problems: list[Problem]) -> IndexedRequest:
    """:func:`index_request` of a protobuf body, as the receivers index each request they store;
    ``ValueError`` when it is not an export request."""
    request = decode_request(body)
    return IndexedRequest(request, index_request(request, where, problems, body), span_count(request))
