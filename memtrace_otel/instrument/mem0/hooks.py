"""Hooks on a memory's vector store and LLM, installed when a traced call first meets them.

mem0 builds its vector store and LLM from a provider name (qdrant, chroma, pgvector
...; openai, anthropic, ollama ...), so their classes are known only once a
``Memory`` exists. The first traced call of a memory wraps the methods of its
store's and LLM's classes (once per class, under a lock); ``remove`` restores
each class exactly as it was, deleting what was inherited rather than leaving a
copy. Every hook passes straight through unless it runs inside a traced call
(:func:`~.scope.current_scope`) on that call's own memory: the entity store of
2.x, another library's use of the same class, or an untraced call are untouched.

Thread safety: installs and removal take one lock; the set of hooked classes is
an immutable ``frozenset`` swapped under it, so the hot path takes no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import wrapt

from memtrace_otel.instrument.genai import RetrievedRecord
from memtrace_otel.instrument.mem0.flat import flat_batch_insert, flat_llm_wrapper, flat_search_wrapper
from memtrace_otel.instrument.mem0.lifecycle import (
    Binder,
    Call,
    unwrap_own,
    warn_once,
    wrapper_for,
)
from memtrace_otel.instrument.mem0.packed import packed_hook
from memtrace_otel.instrument.mem0.pipeline import (
    BatchCreateSpec,
    ExistingSearchSpec,
    LlmCallSpec,
    write_records,
)
from memtrace_otel.instrument.mem0.scope import Role, Scope, current_scope, record_name, stored_variable
from memtrace_otel.instrument.tracer import MemoryTracer
from memtrace_otel.semconv import Category, VariableKind

__all__ = ["StoreHooks"]

Args = tuple[Any, ...]
Kw = dict[str, Any]
Wrapper = Callable[[Callable[..., Any], Any, Args, Kw], Any]


class StoreHooks:
    """Installs, and removes, the hooks on the vector store and LLM classes mem0 uses."""

    def __init__(self, tracer: MemoryTracer, llm_specs: tuple[LlmCallSpec, ...], *,
                 stage_spans: bool = False, packed: bool = False) -> None:
        self._tracer = tracer
        self._packed = packed
        self._stage_spans = stage_spans
        """``add``'s stages as child spans (the older shape) instead of events of its span."""
        for spec in llm_specs:
            spec.as_event = not stage_spans
        self._llm_specs = llm_specs
        self._lock = threading.Lock()
        self._hooked: frozenset[type] = frozenset()
        self._installed: list[tuple[type, str, object, Wrapper]] = []

    def ensure(self, memory: Any) -> None:
        """Hook the classes of ``memory``'s vector store and LLM, if not yet done."""
        for component, names in ((getattr(memory, "vector_store", None), _STORE_METHODS),
                                 (getattr(memory, "llm", None), ("generate_response",))):
            cls = type(component)
            if component is not None and cls not in self._hooked:
                self._install(cls, names)

    def remove(self) -> None:
        """Restore every hooked class exactly: the original attribute, or none where it was inherited.

        Only our layer comes off: a wrapper another instrumentation put on top of ours stays.
        """
        with self._lock:
            for cls, name, original, wrapper in reversed(self._installed):
                # Not found: someone replaced the attribute since; what is there now is theirs to keep.
                unwrap_own(cls, name, wrapper, inherited=original is _INHERITED)
            self._installed.clear()
            self._hooked = frozenset()

    def _install(self, cls: type, names: tuple[str, ...]) -> None:
        with self._lock:
            if cls in self._hooked:
                return
            for name in names:
                function = getattr(cls, name, None)
                if function is None or not callable(function):
                    continue
                original = cls.__dict__.get(name, _INHERITED)
                wrapper = self._wrapper(name, function)
                wrapt.wrap_function_wrapper(cls, name, wrapper)
                self._installed.append((cls, name, original, wrapper))
            self._hooked = self._hooked | {cls}

    def _wrapper(self, name: str, function: Callable[..., Any]) -> Wrapper:
        # Stages as events: the LLM calls and the search of existing memories take the flat path
        # (flat.py), straight into their events; as spans they open operations as any call does.
        if self._packed:  # inside a packed add its own hook; anywhere else the other shapes'
            return packed_hook(name, function, self._llm_specs, self._other_wrapper(name, function))
        return self._other_wrapper(name, function)

    def _other_wrapper(self, name: str, function: Callable[..., Any]) -> Wrapper:
        if name == "generate_response":
            if not self._stage_spans:
                return flat_llm_wrapper(self._tracer, self._llm_specs, function)
            return _llm_wrapper(self._tracer, self._llm_specs, function)
        if name == "search":
            if not self._stage_spans:
                return flat_search_wrapper(self._tracer, _SEARCH_STAGE, function)
            spec = ExistingSearchSpec(_SEARCH_STAGE, Category.RETRIEVAL)
            spec.as_event = not self._stage_spans
            return wrapper_for(self._tracer, spec, function)
        if name == "insert":
            return _insert_wrapper(self._tracer, function, not self._stage_spans)
        return _CHANGE_HOOKS[name](Binder.of(function))


def _own_store(instance: Any) -> Scope | None:
    scope = current_scope()
    if scope is None or getattr(scope.memory, "vector_store", None) is not instance:
        return None
    return scope


def _llm_wrapper(tracer: MemoryTracer, specs: tuple[LlmCallSpec, ...],
                 function: Callable[..., Any]) -> Wrapper:
    """Each LLM call inside ``add`` is the stage its position says (extraction, decisions ...)."""
    bind = Binder.of(function)

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        scope = current_scope()
        if scope is None or scope.role is not Role.ADD or not specs:
            return wrapped(*args, **kwargs)
        index, scope.llm_calls = scope.llm_calls, scope.llm_calls + 1
        spec = specs[min(index, len(specs) - 1)]
        call = Call.start(tracer, spec, instance, bind(args, kwargs))
        if call is None:
            return wrapped(*args, **kwargs)
        return call.run(wrapped, args, kwargs)

    return wrapper


def _insert_wrapper(tracer: MemoryTracer, function: Callable[..., Any], as_event: bool) -> Wrapper:
    """Inserts write new memory-unit versions: in ``_create_memory``'s operation, or a batch of ``add``."""
    bind = Binder.of(function)
    spec = BatchCreateSpec("mem0.create", Category.EXTRACTION)
    spec.as_event = as_event
    batch = wrapper_for(tracer, spec, function)
    flat_batch = flat_batch_insert(tracer, spec, function)

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        scope = _own_store(instance)
        if scope is None:
            return wrapped(*args, **kwargs)
        if scope.role is Role.ADD:
            if as_event:
                return flat_batch(wrapped, scope, args, kwargs)
            return batch(wrapped, instance, args, kwargs)
        if scope.role is Role.CREATE:
            _guarded("insert", write_records, scope.op, bind(args, kwargs))
        return wrapped(*args, **kwargs)

    return wrapper


def _get_hook(bind: Binder) -> Wrapper:
    """Reading a record before changing it: the version the change starts from."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        result = wrapped(*args, **kwargs)
        scope = _own_store(instance)
        if scope is not None and scope.role in (Role.UPDATE, Role.DELETE) and result is not None:
            _guarded("get", _remember, scope, result)
        return result

    return wrapper


def _remember(scope: Scope, record: Any) -> None:
    record_id = str(getattr(record, "id", scope.record_id))
    scope.before[record_id] = stored_variable(scope.registry, record_id, getattr(record, "payload", None))


def _store_write_hook(role: Role,
                      write: Callable[[Scope, Mapping[str, Any]], None]) -> Callable[[Binder], Wrapper]:
    """A store call that changes a record inside a traced ``role`` call: ``write`` records it first."""

    def hook(bind: Binder) -> Wrapper:
        def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
            scope = _own_store(instance)
            if scope is not None and scope.role is role:
                _guarded(role.value, write, scope, bind(args, kwargs))
            return wrapped(*args, **kwargs)

        return wrapper

    return hook


def _write_update(scope: Scope, arguments: Mapping[str, Any]) -> None:
    """A record's new content: the next version, its lineage written into the new payload."""
    payload, record_id = arguments.get("payload"), str(arguments.get("vector_id"))
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), str):
        return
    before = scope.before.get(record_id) or record_name(record_id)
    after = scope.op.update(before, payload["data"], kind=VariableKind.MEMORY_UNIT)
    scope.op.lineage_metadata(after, payload)
    scope.op.record_memory(record_id=record_id, records=[RetrievedRecord(after, None, record_id)])


def _write_delete(scope: Scope, arguments: Mapping[str, Any]) -> None:
    """A record removed: a tombstone version after the one read."""
    record_id = str(arguments.get("vector_id"))
    scope.op.delete(scope.before.get(record_id) or record_name(record_id))
    scope.op.record_memory(record_id=record_id)


def _guarded(what: str, function: Callable[..., None], *args: Any) -> None:
    try:
        function(*args)
    except Exception as exc:  # the instrumentation's fault must not become the application's
        warn_once(f"store hook {what}", exc)


_CHANGE_HOOKS: dict[str, Callable[[Binder], Wrapper]] = {
    "get": _get_hook, "update": _store_write_hook(Role.UPDATE, _write_update),
    "delete": _store_write_hook(Role.DELETE, _write_delete),
}
_SEARCH_STAGE = "mem0.add.search"
_INHERITED = object()
"""Marks a hooked method the class inherited: removing the hook deletes it again."""
_STORE_METHODS = ("insert", "search", "get", "update", "delete")
