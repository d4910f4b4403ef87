"""``Mem0Instrumentor``: mem0's ``Memory`` and ``AsyncMemory`` (and the platform's ``MemoryClient`` /
``AsyncMemoryClient``, ``client.py``) as memtrace operation spans.

Enable it once (``Mem0Instrumentor().instrument()``), or run the program under
``opentelemetry-instrument``, which finds it through the ``opentelemetry_instrumentor``
entry point. Spans go through the application's TracerProvider (``tracer_provider=``
or the global one); content capture follows
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, decided once here.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import inspect
from collections.abc import Collection
from importlib import metadata
from types import ModuleType
from typing import Any

import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from memtrace_otel.instrument.mem0.client import CLIENT_CLASSES, CLIENT_METHODS, CLIENT_MODULE, client_specs
from memtrace_otel.instrument.mem0.flat import flat_create_wrapper
from memtrace_otel.instrument.mem0.hooks import StoreHooks
from memtrace_otel.instrument.mem0.lifecycle import propagate_context, unwrap_own, wrapper_for
from memtrace_otel.instrument.mem0.methods import method_specs
from memtrace_otel.instrument.mem0.package import _instruments
from memtrace_otel.instrument.mem0.packed import packed_add_wrapper, packed_default, packed_pass_through
from memtrace_otel.instrument.mem0.packed_search import packed_search_wrapper
from memtrace_otel.instrument.mem0.stages import stage_spans_default
from memtrace_otel.instrument.tracer import MemoryTracer

__all__ = ["Mem0Instrumentor", "mem0_generation"]

_MODULE = "mem0.memory.main"
_CLASSES = ("Memory", "AsyncMemory")


def mem0_generation() -> int:
    """The installed mem0ai's major version (1 or 2); ``ValueError`` outside the supported range."""
    major = int(metadata.version("mem0ai").split(".", 1)[0])
    if major not in (1, 2):
        raise ValueError(f"mem0ai {metadata.version('mem0ai')} is outside {_instruments[0]}")
    return major


def _patches(major: int) -> ModuleType:
    return importlib.import_module(f"memtrace_otel.instrument.mem0.v{major}")


class Mem0Instrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces mem0ai 1.x and 2.x ``Memory`` / ``AsyncMemory`` (see ``docs/mem0.md``).

    ``instrument(tracer_provider=None, memory_tracer=None, stage_spans=None)``: ``memory_tracer``
    shares a :class:`~memtrace_otel.MemoryTracer` (its version registry and in-process contents)
    with the application's own traced operations. ``add``'s internal stages (extraction, the
    search of existing memories, the decision) are ``memtrace.stage`` events of its span
    (:mod:`.stages`); ``stage_spans=True`` (default: the ``MEMTRACE_MEM0_STAGE_SPANS`` environment
    variable) makes them child spans as before, for dashboards that count them; the graph is the
    same either way. ``uninstrument()`` restores every patched method and class as it was.

    Thread-safe: ``instrument``/``uninstrument`` are serialised by the base class's
    singleton; the wrappers keep per-call state in context variables.
    """

    memory_tracer: MemoryTracer | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        tracer = kwargs.get("memory_tracer") or MemoryTracer(kwargs.get("tracer_provider"))
        version = _patches(mem0_generation())
        self.memory_tracer = tracer
        stage_spans = kwargs.get("stage_spans")
        stage_spans = stage_spans_default() if stage_spans is None else bool(stage_spans)
        packed = kwargs.get("packed")
        packed = (packed_default() if packed is None else bool(packed)) and not stage_spans
        self._hooks = StoreHooks(tracer, version.llm_call_specs(), stage_spans=stage_spans, packed=packed)
        self._wrapped: list[tuple[Any, str, Any]] = []
        module = importlib.import_module(_MODULE)
        specs = method_specs()
        for spec in specs.values():
            spec.hooks = self._hooks
            # The internal writes (_create_memory ...) an add makes are events of its span too: a
            # public call has no add around it, and stays a span (MethodSpec.open decides per call).
            spec.as_event = not stage_spans
        for class_name in _CLASSES:
            cls = getattr(module, class_name)
            for method in version.METHODS:
                if method in cls.__dict__:
                    function = cls.__dict__[method]
                    wrapper = wrapper_for(tracer, specs[method], function)
                    sync = not inspect.iscoroutinefunction(function)
                    if packed and sync and method == "add":
                        wrapper = packed_add_wrapper(tracer, self._hooks)
                    elif packed and sync and method == "search":
                        wrapper = packed_search_wrapper(tracer, function)
                    elif packed and sync and method in ("_create_memory", "_update_memory", "_delete_memory"):
                        wrapper = packed_pass_through(wrapper)
                    elif method == "_create_memory" and not stage_spans and sync:
                        # Inside an add, a write stage straight into its event (flat.py); elsewhere a span.
                        wrapper = flat_create_wrapper(wrapper)
                    wrapt.wrap_function_wrapper(cls, method, wrapper)
                    self._wrapped.append((cls, method, wrapper))
        self._wrap_clients(tracer)
        if version.PROPAGATE_CONTEXT:
            classes = tuple(getattr(module, name) for name in _CLASSES)
            submit = propagate_context(classes)
            wrapt.wrap_function_wrapper(concurrent.futures.ThreadPoolExecutor, "submit", submit)
            self._wrapped.append((concurrent.futures.ThreadPoolExecutor, "submit", submit))

    def _wrap_clients(self, tracer: MemoryTracer) -> None:
        """The platform clients (``mem0.client.main``), when this mem0ai has them."""
        try:
            module = importlib.import_module(CLIENT_MODULE)
        except ImportError:  # pragma: no cover - every supported mem0ai ships it
            return
        specs = client_specs()
        for class_name in CLIENT_CLASSES:
            cls = getattr(module, class_name, None)
            for method in CLIENT_METHODS if cls is not None else ():
                if method in cls.__dict__:
                    wrapper = wrapper_for(tracer, specs[method], cls.__dict__[method])
                    wrapt.wrap_function_wrapper(cls, method, wrapper)
                    self._wrapped.append((cls, method, wrapper))

    def _uninstrument(self, **kwargs: Any) -> None:
        # Our own layers only: another mem0 instrumentation may have wrapped the same methods after us.
        for owner, method, wrapper in reversed(getattr(self, "_wrapped", [])):
            unwrap_own(owner, method, wrapper)
        self._wrapped = []
        hooks = getattr(self, "_hooks", None)
        if hooks is not None:
            hooks.remove()
        self.memory_tracer = None
