"""memtrace-otel: OpenTelemetry-native tracing and root-cause attribution for LLM memory systems.

The folders follow the data flow: ``instrument`` (operations -> spans),
``spans`` (reading span files into records), ``graph`` (the memory evolution
graph and its queries), ``attribution`` (root-cause engines), and the
write-back/services in ``memtrace_otel.exporters`` and ``memtrace_otel.collector``.
"""

from memtrace_otel.instrument import MemoryTracer, Operation, Variable, current_operation
from memtrace_otel.semconv import Category, EvaluationSignal, VariableKind
from memtrace_otel.version import __version__

__all__ = [
    "Category",
    "EvaluationSignal",
    "MemoryTracer",
    "Operation",
    "Variable",
    "VariableKind",
    "__version__",
    "current_operation",
]
