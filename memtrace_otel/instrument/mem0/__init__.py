"""mem0 instrumentation: ``Mem0Instrumentor().instrument()`` traces mem0ai's ``Memory`` and ``AsyncMemory``.

Registered as the ``mem0`` ``opentelemetry_instrumentor`` entry point, so
``opentelemetry-instrument python app.py`` enables it with no code change. Importing
this package does not import mem0. See ``docs/mem0.md``.
"""

from memtrace_otel.instrument.mem0.instrumentor import Mem0Instrumentor, mem0_generation
from memtrace_otel.instrument.mem0.methods import MESSAGE_IDS_KEY, context_name

__all__ = ["MESSAGE_IDS_KEY", "Mem0Instrumentor", "context_name", "mem0_generation"]
