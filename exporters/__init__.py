"""Exporters: span exporters and trace-backend writers (imported as ``memtrace_otel.exporters``).

Clients that read from a trace backend sit with the readers, in :mod:`memtrace_otel.spans`.
"""

from memtrace_otel.exporters.graph_exporter import GraphSpanExporter
from memtrace_otel.exporters.otlp_json_file import (
    OTLPJsonLinesSpanExporter,
    SpanFileInUse,
    encode_readable_spans,
    encode_traces_data,
)

__all__ = ["GraphSpanExporter", "OTLPJsonLinesSpanExporter", "SpanFileInUse", "encode_readable_spans",
           "encode_traces_data"]
