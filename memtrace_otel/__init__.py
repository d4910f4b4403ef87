"""memtrace-otel: OpenTelemetry-native tracing and root-cause attribution for LLM memory systems.

The folders follow the data flow: ``instrument`` (operations -> spans),
``spans`` (reading span files into records), ``graph`` (the memory evolution
graph and its queries), ``attribution`` (root-cause engines), and the
write-back/services in ``memtrace_otel.exporters`` and ``memtrace_otel.collector``.

:func:`analyze` is the library's whole pipeline in one call (span files or records -> the
traces their failures need, gathered from a backend -> graph -> one verdict per failed
answer); it is loaded on first use, so instrumenting an application imports none of it.
"""

from typing import Any

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
    "analyze",
    "current_operation",
]


def __getattr__(name: str) -> Any:
    if name == "analyze":
        from memtrace_otel.attribution.runner import analyze

        return analyze
    raise AttributeError(f"module 'memtrace_otel' has no attribute {name!r}")
