"""OTLP/JSON Lines span files: one ``TracesData`` object per export batch, per line.

The same shape the OpenTelemetry Collector's ``file`` exporter writes, so the
files feed ``memtrace inspect``/``graph``/``analyze``, a Collector
``otlpjsonfile`` receiver, or anything else that reads OTLP/JSON.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from memtrace_otel.spans.model import SpanRecord, record_from_readable

__all__ = ["OTLPJsonLinesSpanExporter", "encode_any_value", "encode_traces_data"]

_logger = logging.getLogger(__name__)
_STATUS_CODE = {"UNSET": 0, "OK": 1, "ERROR": 2}


def encode_any_value(value: Any) -> dict[str, Any]:
    """OTLP/JSON ``AnyValue`` of a Python attribute value.

    >>> encode_any_value(3)
    {'intValue': '3'}
    >>> encode_any_value(["a"])
    {'arrayValue': {'values': [{'stringValue': 'a'}]}}
    """
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [encode_any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _key_values(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": encode_any_value(v)} for k, v in attributes.items()]


def _encode_span(span: SpanRecord) -> dict[str, Any]:
    encoded: dict[str, Any] = {
        "traceId": span.trace_id, "spanId": span.span_id, "name": span.name,
        "startTimeUnixNano": str(span.start_time_unix_nano), "endTimeUnixNano": str(span.end_time_unix_nano),
        "attributes": _key_values(span.attributes),
        "status": {"code": _STATUS_CODE.get(span.status_code, 0)},
    }
    if span.parent_span_id:
        encoded["parentSpanId"] = span.parent_span_id
    if span.status_message:
        encoded["status"]["message"] = span.status_message
    if span.events:
        encoded["events"] = [{"timeUnixNano": str(e.time_unix_nano), "name": e.name,
                              "attributes": _key_values(e.attributes)} for e in span.events]
    if span.links:
        encoded["links"] = [{"traceId": link.trace_id, "spanId": link.span_id,
                             "attributes": _key_values(link.attributes)} for link in span.links]
    return encoded


def encode_traces_data(spans: Iterable[SpanRecord], scope: str = "memtrace_otel") -> dict[str, Any]:
    """One OTLP/JSON ``TracesData`` object holding ``spans``, grouped by service."""
    by_service: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        by_service[span.service_name].append(_encode_span(span))
    return {"resourceSpans": [
        {"resource": {"attributes": _key_values({"service.name": service} if service else {})},
         "scopeSpans": [{"scope": {"name": scope}, "spans": encoded}]}
        for service, encoded in by_service.items()
    ]}


class OTLPJsonLinesSpanExporter(SpanExporter):
    """Appends each batch of spans as one OTLP/JSON line to ``path`` (gzip when it ends in ``.gz``).

    Thread-safe: one lock serialises writes. ``shutdown`` closes the file;
    export after shutdown fails without raising.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        directory = os.path.dirname(self._path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        opener = gzip.open if self._path.endswith(".gz") else open
        self._stream: IO[str] = opener(self._path, "at", encoding="utf-8")  # type: ignore[operator]
        self._lock = threading.Lock()
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = json.dumps(encode_traces_data(record_from_readable(s) for s in spans),
                              separators=(",", ":"))
            with self._lock:
                if self._closed:
                    return SpanExportResult.FAILURE
                self._stream.write(line + "\n")
                self._stream.flush()
        except Exception:  # an exporter must never raise into the SDK
            _logger.exception("writing spans to %s failed", self._path)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        with self._lock:
            if not self._closed:
                self._stream.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                _logger.warning("OTLPJsonLinesSpanExporter for %s already shut down", self._path)
                return
            self._closed = True
            self._stream.close()
