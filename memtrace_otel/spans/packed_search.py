"""The packed mem0 ``search`` attribute (``memtrace.mem0.search``) at the wire level: decoded; its writers.

The mem0 instrumentor records a ``search`` as one span whose query, context and returned records are raw
facts in one compact JSON attribute (``docs/conventions.md``, "The packed mem0 ``search``"), possibly cut
into parts (``memtrace.mem0.search.1``, ...) by an attribute length limit. This module decodes it (and
re-encodes it without its captured texts, for :mod:`memtrace_otel.content.externalize`) and names the
spans that wrote the records it returned, which the spans layer needs to fetch linked traces
(:mod:`memtrace_otel.spans.linked`) before any graph exists; turning it into the span the generic shape
would have made is the graph builder's (:mod:`memtrace_otel.graph.packed_search`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from memtrace_otel.semconv import MemTrace, MemTraceLink
from memtrace_otel.spans.model import SpanLink, SpanRecord
from memtrace_otel.spans.packed_add import joined_parts, moved_text, parse_traceparent

__all__ = [
    "PACKED_SEARCH", "PACKED_SEARCH_FORMAT", "decode_search", "decode_search_attributes",
    "search_without_texts", "search_writer_links",
]

PACKED_SEARCH = MemTrace.MEM0_SEARCH
PACKED_SEARCH_FORMAT = 1


def decode_search_attributes(attributes: Mapping[str, Any]) -> tuple[list[Any] | None, str | None]:
    """The packed search in ``attributes`` (``[format, header, query, context, records | null]``) and
    ``None``, or ``None`` and what is wrong with the attribute (``None`` too when there is none)."""
    if attributes.get(PACKED_SEARCH) is None:
        return None, None
    value = joined_parts(attributes, PACKED_SEARCH)  # cut in parts by a length limit
    try:
        packed = orjson.loads(value) if type(value) is str else None
    except orjson.JSONDecodeError as exc:
        return None, f"is not JSON ({exc})"
    if not (type(packed) is list and len(packed) == 5 and packed[0] == PACKED_SEARCH_FORMAT
            and type(packed[1]) is list and len(packed[1]) == 2
            and (packed[4] is None or type(packed[4]) is list)):
        return None, f"is not a packed search of format {PACKED_SEARCH_FORMAT}"
    return packed, None


def decode_search(span: SpanRecord) -> tuple[list[Any] | None, str | None]:
    """``span``'s packed search (``[format, header, query, context, records | null]``) and ``None``, or
    ``None`` and what is wrong with the attribute (``None`` too when the span carries none)."""
    return decode_search_attributes(span.attributes)


def search_without_texts(packed: list[Any], content_ref: str) -> tuple[list[Any], list[tuple[str, str]]]:
    """A packed search with content capture as an uploader without capture writes it: the captured texts
    of its query and context (``(hash, text)``) and the search without them (the returned records without
    their text and score, which only capture records), its header ``[null, content_ref]``.

    ``packed`` without a capture limit has no texts: it is returned as it is, with none. Raises
    ``TypeError``, ``ValueError`` or ``IndexError`` on a malformed value (the builder reports those)."""
    limit, _ = packed[1]
    if limit is None:
        return packed, []
    texts: list[tuple[str, str]] = []
    query, context, records = packed[2], packed[3], packed[4]
    if query is not None:
        query = [query[0], *moved_text(query[1:], texts)]
    if context is not None:
        context = [*context[:2], *moved_text(context[2:], texts)]
    if records is not None:
        records = [item[:3] if type(item) is list else item for item in records]
    return [packed[0], [None, content_ref], query, context, records], texts


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
