"""The packed mem0 ``search`` attribute (``memtrace.mem0.search``) at the wire level: decoded; its writers.

The mem0 instrumentor records a ``search`` as one span whose query, context and returned records are raw
facts in one compact JSON attribute (``docs/conventions.md``, "The packed mem0 ``search``"), possibly cut
into parts (``memtrace.mem0.search.1``, ...) by an attribute length limit. This module decodes it and
names the spans that wrote the records it returned, which the spans layer needs to fetch linked traces
(:mod:`memtrace_otel.spans.linked`) before any graph exists; turning it into the span the generic shape
would have made is the graph builder's (:mod:`memtrace_otel.graph.packed_search`).
"""

from __future__ import annotations

from typing import Any

import orjson

from memtrace_otel.semconv import MemTrace, MemTraceLink
from memtrace_otel.spans.model import SpanLink, SpanRecord
from memtrace_otel.spans.packed_add import parse_traceparent

__all__ = ["PACKED_SEARCH", "PACKED_SEARCH_FORMAT", "decode_search", "search_writer_links"]

PACKED_SEARCH = MemTrace.MEM0_SEARCH
PACKED_SEARCH_FORMAT = 1


def decode_search(span: SpanRecord) -> tuple[list[Any] | None, str | None]:
    """``span``'s packed search (``[format, header, query, context, records | null]``) and ``None``, or
    ``None`` and what is wrong with the attribute (``None`` too when the span carries none)."""
    a = span.attributes
    value = a.get(PACKED_SEARCH)
    if value is None:
        return None, None
    part = 1
    while type(value) is str and f"{PACKED_SEARCH}.{part}" in a:  # cut in parts by a length limit
        more = a[f"{PACKED_SEARCH}.{part}"]
        value = value + more if type(more) is str else None
        part += 1
    try:
        packed = orjson.loads(value) if type(value) is str else None
    except orjson.JSONDecodeError as exc:
        return None, f"is not JSON ({exc})"
    if not (type(packed) is list and len(packed) == 5 and packed[0] == PACKED_SEARCH_FORMAT
            and type(packed[1]) is list and len(packed[1]) == 2
            and (packed[4] is None or type(packed[4]) is list)):
        return None, f"is not a packed search of format {PACKED_SEARCH_FORMAT}"
    return packed, None


def search_writer_links(span: SpanRecord, packed: list[Any] | None = None) -> list[SpanLink]:
    """One link per span that wrote a record ``span``'s packed search returned, as the records' payload
    lineage names them (a record stored untraced names no writer), in the order returned, each writer
    once; not the search itself nor its parent (the generic shape links neither: the parent relation
    already says it). The links the graph builder's reading gives the span. Malformed parts name none."""
    if packed is None:
        packed, _ = decode_search(span)
        if packed is None:
            return []
    me, parent = (span.trace_id, span.span_id), (span.trace_id, span.parent_span_id)
    seen: set[tuple[str, str]] = set()
    links: list[SpanLink] = []
    for item in packed[4] or ():
        if type(item) is not list or len(item) < 3:
            continue
        variable_id, producer = item[1], parse_traceparent(item[2])
        if type(variable_id) is str and producer is not None and producer != me and producer != parent \
                and producer not in seen:
            seen.add(producer)
            links.append(SpanLink(producer[0], producer[1], {MemTraceLink.VARIABLE: variable_id}))
    return links
