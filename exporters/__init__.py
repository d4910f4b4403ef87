"""Exporters: span exporters and trace-backend writers (imported as ``memtrace_otel.exporters``)."""

from memtrace_otel.exporters.graph_exporter import GraphSpanExporter
from memtrace_otel.exporters.otlp_json_file import OTLPJsonLinesSpanExporter, encode_traces_data

__all__ = ["GraphSpanExporter", "OTLPJsonLinesSpanExporter", "encode_traces_data"]
