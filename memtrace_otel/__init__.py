"""memtrace-otel: OpenTelemetry-native tracing and root-cause attribution for LLM memory systems.

The folders follow the data flow: ``instrument`` (operations -> spans),
``spans`` (reading span files into records), ``graph`` (the memory evolution
graph and its queries), ``attribution`` (root-cause engines), and the
write-back/services in ``memtrace_otel.exporters`` and ``memtrace_otel.collector``.

:func:`analyze` is the library's whole pipeline in one call (span files or records -> the
traces their failures need, gathered from a backend -> graph -> one verdict per failed
answer). It and the other analysis names (:class:`AttributionSpanProcessor`,
:func:`read_span_files`, :func:`build_graph`, :class:`Mem0Instrumentor`) are loaded on first
use, so instrumenting an application imports none of them; the instrumentation's names
(:class:`MemoryTracer` ...) are too, so reading spans and building graphs (the ``memtrace``
commands) imports no instrumentation (``wrapt``, the content uploader's worker).

>>> import memtrace_otel
>>> memtrace_otel.build_graph.__module__, memtrace_otel.AttributionSpanProcessor.__name__
('memtrace_otel.graph.build', 'AttributionSpanProcessor')
"""

import importlib
from typing import TYPE_CHECKING, Any

from memtrace_otel.semconv import Category, EvaluationSignal, VariableKind
from memtrace_otel.version import __version__

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from memtrace_otel.instrument import MemoryTracer, Operation, Variable, current_operation

__all__ = [
    "AttributionSpanProcessor",
    "Category",
    "EvaluationSignal",
    "Mem0Instrumentor",
    "MemoryTracer",
    "Operation",
    "Variable",
    "VariableKind",
    "__version__",
    "analyze",
    "build_graph",
    "current_operation",
    "read_span_files",
]

# name -> module, imported on first use (PEP 562): the analysis side is heavy, the mem0
# instrumentor needs the [mem0] extra, and the instrumentation's imports (wrapt, the upload worker:
# a tenth of a second) are not needed to read spans.
_LAZY = {
    "MemoryTracer": "memtrace_otel.instrument",
    "Operation": "memtrace_otel.instrument",
    "Variable": "memtrace_otel.instrument",
    "current_operation": "memtrace_otel.instrument",
    "analyze": "memtrace_otel.attribution.runner",
    "AttributionSpanProcessor": "memtrace_otel.writeback.processor",
    "build_graph": "memtrace_otel.graph.build",
    "read_span_files": "memtrace_otel.spans.readers",
    "Mem0Instrumentor": "memtrace_otel.instrument.mem0",
}

_SUBPACKAGES = frozenset({"instrument"})
"""Imported by this module before its names were lazy: still reachable as attributes."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        if name in _SUBPACKAGES:  # ``memtrace_otel.instrument`` used after a bare ``import memtrace_otel``
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'memtrace_otel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
