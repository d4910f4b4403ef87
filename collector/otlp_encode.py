"""``memtrace serve``'s annotation spans written as OTLP protobuf bytes directly.

The write-back spans are a fixed shape this project makes (:class:`~memtrace_otel.writeback.
annotations.Annotation`: a name, a parent, at most one link, attributes of plain values, two events
and a status), so ``serve`` encodes them itself instead of making SDK spans through a tracer and
handing them to the SDK's generic encoder: that path cost more per failure than the engine's
verdict (an SDK span validates and copies every attribute under a lock; the encoder builds a
protobuf object per value). The bytes are the request the SDK's OTLP exporters send for the same
spans (``tests/test_serve_annotation_encoding.py`` compares them field by field): one
``ResourceSpans`` per distinct resource in order of first use, one ``ScopeSpans``
(``memtrace_otel.writeback``), each span's fields in field-number order, its flags saying the parent
is remote, an unset status as an empty ``Status``.

Span ids are drawn as the SDK's ``RandomIdGenerator`` draws them. Values are written as the SDK's
encoder writes them (what an SDK span would have refused to hold, a mapping or a list of mixed
types, annotations never carry). A resource is cleaned by the SDK's own ``Resource`` once and its
bytes kept (resources are few: one per application service).
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource

from memtrace_otel.writeback.annotations import Annotation

__all__ = ["AnnotationEncoder"]

_SMALL = [bytes((n,)) for n in range(128)]
_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")
_REMOTE_PARENT_FLAGS = b"\x85\x01" + struct.pack("<I", 0x300)  # field 16 (fixed32): has is_remote, is remote
_LOCAL_PARENT_FLAGS = b"\x85\x01" + struct.pack("<I", 0x100)
_REMOTE_LINK_FLAGS = b"\x35" + struct.pack("<I", 0x300)  # Link field 6 (fixed32)
_LOCAL_LINK_FLAGS = b"\x35" + struct.pack("<I", 0x100)
_KIND_INTERNAL = b"\x30\x01"
_UNSET_STATUS = b"\x7a\x00"
_KEYS_KEPT = 4096
_Shared = dict[tuple[bytes, str, int], bytes]
_TEXT_ERRORS = "replace"  # a lone surrogate from the input becomes "?": invalid UTF-8 would poison the batch


def _varint(number: int) -> bytes:
    if number < 0x80:
        return _SMALL[number]
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte(s), the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes | None:
    """``AnyValue``'s bytes as the SDK's encoder writes each type (in the order it tests them); ``None``
    where it fails (an integer beyond 64 bits, a type it does not know), which leaves the key out."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode("utf-8", _TEXT_ERRORS))
    if isinstance(value, int):
        return b"\x18" + _varint(value & 0xFFFF_FFFF_FFFF_FFFF) if -(1 << 63) <= value < 1 << 63 else None
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, (list, tuple)):
        items = [_any_value(item) for item in value]
        if any(item is None for item in items):
            return None
        return _field(b"\x2a", b"".join(_field(b"\x0a", item) for item in items if item is not None))
    if isinstance(value, Mapping):
        pairs = []
        for key, item in value.items():
            encoded = _any_value(item)
            if encoded is None:
                return None
            pairs.append(_field(b"\x0a", _field(b"\x0a", str(key).encode("utf-8", _TEXT_ERRORS))
                                + _field(b"\x12", encoded)))
        return _field(b"\x32", b"".join(pairs))
    return None


class AnnotationEncoder:
    """Encodes annotation spans as one ``ExportTraceServiceRequest``; keeps the byte forms of the
    attribute keys, resources and scope it has seen. Thread-safe: what it keeps is only added to,
    with values that do not depend on who adds them first.

    Parameters
    ----------
    resource:
        The resource of an annotation whose parent's resource is not given (``serve``'s own).
    scope, version:
        The instrumentation scope every annotation is under.
    """

    def __init__(self, resource: Resource, scope: str, version: str) -> None:
        self._keys: dict[str, bytes] = {}
        self._resources: dict[tuple[tuple[str, str], ...], bytes] = {}
        self._fallback = self._resource_bytes(resource.attributes)
        self._fallback_key = _resource_key(resource.attributes)
        self._scope = _field(b"\x0a", _field(b"\x0a", scope.encode()) + _field(b"\x12", version.encode()))

    def encode(self, annotations: Sequence[Annotation],
               resources: Mapping[tuple[str, str], Mapping[str, Any]]) -> tuple[bytes, list[int]]:
        """The request for ``annotations`` and the span id given to each (in their order).

        ``resources`` maps ``(trace id, span id)`` to the resource attributes the span an
        annotation hangs under was recorded with: the annotation is grouped under it, so a search of
        that service finds it; one whose parent is not in it gets this encoder's resource.
        """
        groups: dict[tuple[tuple[str, str], ...], tuple[bytes, list[bytes]]] = {}
        ids: list[int] = []
        # A verdict's two spans share their attribute values (the same objects): each encoded once.
        # Keyed by identity, which holds while ``annotations`` holds the values.
        shared: _Shared = {}
        for annotation in annotations:
            parent = annotation.parent
            attributes = resources.get((f"{parent.trace_id:032x}", f"{parent.span_id:016x}"))
            key = _resource_key(attributes) if attributes else self._fallback_key
            group = groups.get(key)
            if group is None:
                group = groups[key] = (self._resource(key, attributes), [])
            span_id = _span_id()
            ids.append(span_id)
            group[1].append(self._span(annotation, span_id, shared))
        body = b"".join(
            _field(b"\x0a", resource + _field(b"\x12", self._scope + b"".join(spans)))
            for resource, spans in groups.values())
        return body, ids

    def _resource(self, key: tuple[tuple[str, str], ...], attributes: Mapping[str, Any] | None) -> bytes:
        if not attributes:
            return self._fallback
        kept = self._resources.get(key)
        if kept is None:
            kept = self._resource_bytes(Resource(dict(attributes)).attributes)  # the SDK's cleaning
            if len(self._resources) < _KEYS_KEPT:
                self._resources[key] = kept
        return kept

    def _resource_bytes(self, attributes: Mapping[str, Any]) -> bytes:
        return _field(b"\x0a", self._attributes(b"\x0a", attributes, {}))  # ResourceSpans.resource

    def _attributes(self, tag: bytes, attributes: Mapping[str, Any], shared: _Shared) -> bytes:
        """Each attribute as a ``KeyValue`` field with ``tag`` (the field number of the holder's list)."""
        keys = self._keys
        out = []
        for key, value in attributes.items():
            field = shared.get((tag, key, id(value)))
            if field is None:
                encoded = _any_value(value)
                if encoded is None:
                    continue
                prefix = keys.get(key)
                if prefix is None:
                    prefix = _field(b"\x0a", key.encode("utf-8", _TEXT_ERRORS))
                    if len(keys) < _KEYS_KEPT:
                        keys[key] = prefix
                field = shared[(tag, key, id(value))] = _field(tag, prefix + _field(b"\x12", encoded))
            out.append(field)
        return b"".join(out)

    def _span(self, annotation: Annotation, span_id: int, shared: _Shared) -> bytes:
        parent, link = annotation.parent, annotation.link
        if annotation.at is not None:
            start, end = annotation.at
        else:
            start = end = time.time_ns()
        trace_id = parent.trace_id.to_bytes(16, "big")
        parts = [
            b"\x0a\x10", trace_id,
            b"\x12\x08", span_id.to_bytes(8, "big"),
            b"\x22\x08", parent.span_id.to_bytes(8, "big"),
            _field(b"\x2a", annotation.name.encode()),
            _KIND_INTERNAL,
            b"\x39", _FIXED64.pack(start),
            b"\x41", _FIXED64.pack(end),
            self._attributes(b"\x4a", annotation.attributes, shared),
        ]
        stamp = _FIXED64.pack(start)
        for name, attributes in annotation.events:
            parts.append(_field(b"\x5a", b"\x09" + stamp + _field(b"\x12", name.encode())
                                + self._attributes(b"\x1a", attributes, shared)))
        if link is not None:
            parts.append(_field(b"\x6a", b"\x0a\x10" + link.trace_id.to_bytes(16, "big")
                                + b"\x12\x08" + link.span_id.to_bytes(8, "big")
                                + (_REMOTE_LINK_FLAGS if link.is_remote else _LOCAL_LINK_FLAGS)))
        if annotation.status is None:
            parts.append(_UNSET_STATUS)
        else:
            parts.append(_field(b"\x7a", _field(b"\x12", annotation.status.encode("utf-8", _TEXT_ERRORS))
                                + b"\x18\x02"))
        parts.append(_REMOTE_PARENT_FLAGS if parent.is_remote else _LOCAL_PARENT_FLAGS)
        return _field(b"\x12", b"".join(parts))  # ScopeSpans.spans


def _resource_key(attributes: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Resources with the same attributes are one group, in whatever order they were given (as the
    SDK's ``Resource`` compares)."""
    return tuple(sorted((name, repr(value)) for name, value in attributes.items()))


def _span_id() -> int:
    """A random non-zero span id, as the SDK's ``RandomIdGenerator`` makes it."""
    span_id = random.getrandbits(64)
    while span_id == 0:
        span_id = random.getrandbits(64)
    return span_id
