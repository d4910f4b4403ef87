"""Instrument: memory operations become OpenTelemetry spans with variable lineage."""

from memtrace_otel.instrument.genai import RetrievedRecord
from memtrace_otel.instrument.operation import Operation, current_operation
from memtrace_otel.instrument.record_lineage import (
    format_traceparent,
    lineage_from_metadata,
    parse_traceparent,
    write_lineage,
)
from memtrace_otel.instrument.tracer import MemoryTracer
from memtrace_otel.instrument.variables import InProcessContents, Variable, VariableRegistry

__all__ = [
    "InProcessContents",
    "MemoryTracer",
    "Operation",
    "RetrievedRecord",
    "Variable",
    "VariableRegistry",
    "current_operation",
    "format_traceparent",
    "lineage_from_metadata",
    "parse_traceparent",
    "write_lineage",
]
