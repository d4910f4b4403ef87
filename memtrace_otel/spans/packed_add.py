"""The packed mem0 ``add`` attribute (``memtrace.mem0.add``) at the wire level: decoded, and its writers.

The mem0 instrumentor records an ``add`` as one span whose stages are raw facts in one compact JSON
attribute (``docs/conventions.md``, "The packed mem0 ``add``"), possibly cut into parts
(``memtrace.mem0.add.1``, ...) by an attribute length limit. This module only decodes it, re-encodes it
without its captured texts (which :mod:`memtrace_otel.content.externalize` moves to a store), and names
the spans that wrote the records its stages read, which the spans layer needs to fetch linked traces
(:mod:`memtrace_otel.spans.linked`) before any graph exists; turning it into the span its stage events
would have made is the graph builder's (:mod:`memtrace_otel.graph.packed`).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import orjson

from memtrace_otel.semconv import MemTrace, MemTraceLink
from memtrace_otel.spans.model import SpanLink, SpanRecord

__all__ = [
    "PACKED_ADD", "PACKED_FORMAT", "add_without_texts", "decode_add", "decode_packed", "joined_parts",
    "moved_text", "parse_traceparent", "write_parts", "writer_links",
]

PACKED_ADD = MemTrace.MEM0_ADD
PACKED_FORMAT = 1


def joined_parts(attributes: Mapping[str, Any], key: str) -> Any:
    """The value of ``key`` with its parts (``<key>.1``, ...) appended, as an attribute length limit cut
    it; ``None`` when a part is not a string (``None`` too when there is no ``key``)."""
    value = attributes.get(key)
    part = 1
    while type(value) is str and f"{key}.{part}" in attributes:
        more = attributes[f"{key}.{part}"]
        value = value + more if type(more) is str else None
        part += 1
    return value


def write_parts(attributes: MutableMapping[str, Any], key: str, packed: list[Any]) -> None:
    """``packed`` encoded (compact, as the instrumentor writes it) into ``key``, in parts of the length
    the value's first part had when it was cut in parts (the limit that cut it), its old parts dropped."""
    part_length = len(attributes[key]) if f"{key}.1" in attributes and type(attributes.get(key)) is str \
        else None
    part = 1
    while f"{key}.{part}" in attributes:
        del attributes[f"{key}.{part}"]
        part += 1
    value = orjson.dumps(packed).decode()
    if not part_length or len(value) <= part_length:
        attributes[key] = value
        return
    attributes[key] = value[:part_length]
    for part in range(1, -(-len(value) // part_length)):
        attributes[f"{key}.{part}"] = value[part * part_length:(part + 1) * part_length]


def decode_add(attributes: Mapping[str, Any]) -> tuple[list[Any] | None, str | None]:
    """The packed add in ``attributes`` (``[format, header, messages, stages]``) and ``None``, or ``None``
    and what is wrong with the attribute (``None`` too when there is none)."""
    if attributes.get(PACKED_ADD) is None:
        return None, None
    value = joined_parts(attributes, PACKED_ADD)
    try:
        packed = orjson.loads(value) if type(value) is str else None
    except orjson.JSONDecodeError as exc:
        return None, f"is not JSON ({exc})"
    if not (type(packed) is list and len(packed) == 4 and packed[0] == PACKED_FORMAT):
        return None, f"is not a packed add of format {PACKED_FORMAT}"
    return packed, None


def decode_packed(span: SpanRecord) -> tuple[list[Any] | None, str | None]:
    """``span``'s packed add (``[format, header, messages, stages]``) and ``None``, or ``None`` and what
    is wrong with the attribute (``None`` too when the span carries none)."""
    return decode_add(span.attributes)


def moved_text(text: Any, texts: list[tuple[str, str]]) -> Any:
    """A packed *text* without its captured part (``[size, hash, null]``), the part appended to
    ``texts`` as ``(hash, text)``; a size alone, ``null`` or a text with none captured as it is."""
    if type(text) is list and len(text) == 3 and type(text[1]) is str and type(text[2]) is str:
        texts.append((text[1], text[2]))
        return [text[0], text[1], None]
    return text


def add_without_texts(packed: list[Any], content_ref: str) -> tuple[list[Any], list[tuple[str, str]]]:
    """A packed add with content capture as an uploader without capture writes it: its captured texts
    (``(hash, text)``, each as the graph builder reads it: a record's text cut at the capture limit) and
    the add without them, its header's capture limit ``null`` and its content ref ``content_ref``.

    ``packed`` without a capture limit has no texts: it is returned as it is, with none. Raises
    ``TypeError``, ``ValueError`` or ``IndexError`` on a malformed value (the builder reports those)."""
    model, provider, limit, _ = packed[1]
    if limit is None:
        return packed, []
    limit = int(limit)
    texts: list[tuple[str, str]] = []

    def record(text: Any, digest: Any) -> Any:  # a written record's text, whole with capture
        if type(text) is str and type(digest) is str:
            texts.append((digest, text[:limit]))
            return len(text)
        return text

    messages = [[name, moved_text(text, texts)] for name, text in packed[2]]
    stages: list[Any] = []
    for stage in packed[3]:
        stage = list(stage)
        kind = stage[0]
        if kind == "llm":
            for i in (4, 5, 7):  # prompt, response, parsed lines
                stage[i] = moved_text(stage[i], texts)
        elif kind == "search" and type(stage[5]) is list:
            stage[5] = [item[:3] if type(item) is list else item for item in stage[5]]  # text, score: capture
        elif kind == "write" and type(stage[4]) is list:
            stage[4] = [[r[0], record(r[1], r[2]), r[2]] for r in stage[4]]
        elif kind == "update":
            stage[7] = record(stage[7], stage[8])
        elif kind != "delete":
            raise ValueError(f"unknown stage kind {kind!r}")
        stages.append(stage)
    return [packed[0], [model, provider, None, content_ref], messages, stages], texts


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
