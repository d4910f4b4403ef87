"""The packed mem0 ``add`` attribute (``memtrace.mem0.add``) at the wire level: decoded, and its writers.

The mem0 instrumentor records an ``add`` as one span whose stages are raw facts in one compact JSON
attribute (``docs/conventions.md``, "The packed mem0 ``add``"), possibly cut into parts
(``memtrace.mem0.add.1``, ...) by an attribute length limit. This module only decodes it and names the
spans that wrote the records its stages read, which the spans layer needs to fetch linked traces
(:mod:`memtrace_otel.spans.linked`) before any graph exists; turning it into the span its stage events
would have made is the graph builder's (:mod:`memtrace_otel.graph.packed`).
"""

from __future__ import annotations

from typing import Any

import orjson

from memtrace_otel.semconv import MemTrace, MemTraceLink
from memtrace_otel.spans.model import SpanLink, SpanRecord

__all__ = ["PACKED_ADD", "PACKED_FORMAT", "decode_packed", "parse_traceparent", "writer_links"]

PACKED_ADD = MemTrace.MEM0_ADD
PACKED_FORMAT = 1


def decode_packed(span: SpanRecord) -> tuple[list[Any] | None, str | None]:
    """``span``'s packed add (``[format, header, messages, stages]``) and ``None``, or ``None`` and what
    is wrong with the attribute (``None`` too when the span carries none)."""
    a = span.attributes
    value = a.get(PACKED_ADD)
    if value is None:
        return None, None
    part = 1
    while type(value) is str and f"{PACKED_ADD}.{part}" in a:  # cut in parts by an attribute length limit
        more = a[f"{PACKED_ADD}.{part}"]
        value = value + more if type(more) is str else None
        part += 1
    try:
        packed = orjson.loads(value) if type(value) is str else None
    except orjson.JSONDecodeError as exc:
        return None, f"is not JSON ({exc})"
    if not (type(packed) is list and len(packed) == 4 and packed[0] == PACKED_FORMAT):
        return None, f"is not a packed add of format {PACKED_FORMAT}"
    return packed, None


def parse_traceparent(value: Any) -> tuple[str, str] | None:
    """(trace id, span id) of a W3C ``traceparent`` string; ``None`` for anything else or a zero id."""
    if type(value) is not str:
        return None
    parts = value.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or set(parts[1]) == {"0"} \
            or set(parts[2]) == {"0"}:
        return None
    return parts[1], parts[2]


def writer_links(span: SpanRecord) -> list[SpanLink]:
    """One link per other span that wrote a record ``span``'s packed stages read: the records its
    searches returned and the versions its updates and deletes replaced, as their payloads' lineage
    names them (a record stored untraced names no writer). In stage order, each writer once; the links
    the graph builder's reading gives the span (``graph.packed.unpack``). Malformed parts name none."""
    packed, _ = decode_packed(span)
    stages = packed[3] if packed is not None else None
    if type(stages) is not list:
        return []
    me = (span.trace_id, span.span_id)
    seen: set[tuple[str, str]] = set()
    links: list[SpanLink] = []

    def read(variable_id: Any, traceparent: Any) -> None:
        producer = parse_traceparent(traceparent)
        if type(variable_id) is str and "@" in variable_id and producer is not None \
                and producer != me and producer not in seen:
            seen.add(producer)
            links.append(SpanLink(producer[0], producer[1], {MemTraceLink.VARIABLE: variable_id}))

    for stage in stages:
        if type(stage) is not list or not stage:
            continue
        if stage[0] == "search" and len(stage) > 5 and type(stage[5]) is list:
            for item in stage[5]:
                if type(item) is list and len(item) > 2:
                    read(item[1], item[2])
        elif stage[0] in ("update", "delete") and len(stage) > 5:
            read(stage[4], stage[5])
    return links
