"""One traced mem0 call from start to finish, shared by sync and async wrappers.

A :class:`MethodSpec` says what a wrapped method means (operation name, category,
GenAI operation, what to read and write before and after); :class:`Call` is the
small lifecycle object that runs it: ``start`` opens the operation and its
:class:`~.scope.Scope`, ``stop`` records the result, ``fail`` marks the span
``ERROR`` with ``error.type``; both end the span exactly once and restore the
context in ``finally``. The wrappers return the wrapped result unchanged and
re-raise its exceptions as they were; a fault of the instrumentation itself is
logged once and never reaches the application.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import weakref
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import wrapt
from opentelemetry.instrumentation.utils import is_instrumentation_enabled

from memtrace_otel.instrument.mem0.scope import Role, Scope, current_scope, reset_scope, set_scope
from memtrace_otel.instrument.mem0.stages import StageOperation
from memtrace_otel.instrument.operation import Operation
from memtrace_otel.instrument.tracer import MemoryTracer
from memtrace_otel.semconv import Category, GenAIOperation

__all__ = ["Binder", "Call", "MethodSpec", "emit_stages", "propagate_context", "server_of",
           "store_and_server", "unwrap_own", "wrapper_for"]

_logger = logging.getLogger(__name__)
_warned: set[str] = set()
PROVIDER = "mem0"
"""``gen_ai.provider.name`` of mem0's memory spans."""

Arguments = Mapping[str, Any]
Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]


def warn_once(what: str, exc: BaseException) -> None:
    """Log a fault of the instrumentation once per kind; the application carries on."""
    if what not in _warned:
        _warned.add(what)
        _logger.warning("memtrace mem0 instrumentation: %s failed (%s: %s); the call is not traced",
                        what, type(exc).__name__, exc)


class MethodSpec:
    """What a wrapped mem0 method means. Subclasses override ``begin`` / ``end``.

    (Not a step: an operation's internal steps are ``Operation.step`` events and the model calls
    inside it, see docs/architecture.md, "Steps".)

    ``applies`` decides per call whether the method gets an operation of its own
    (an internal method called by a traced public one that already has it does not).
    """

    role: Role = Role.READ
    gen_ai: GenAIOperation | None = None
    hooks: Any = None
    """The instrumentor's ``StoreHooks``: a traced call hooks its memory's store and LLM first."""
    as_event = False
    """Inside a traced ``add``: a ``memtrace.stage`` event of the ``add`` span (:mod:`.stages`), not a
    child span. The instrumentor sets it on ``add``'s stages and writes unless asked for stage spans."""

    def __init__(self, name: str, category: Category) -> None:
        self.name = name
        self.category = category

    def applies(self, instance: Any, arguments: Arguments, parent: Scope | None) -> bool:
        return True

    def gen_ai_operation(self, arguments: Arguments) -> GenAIOperation | None:
        return self.gen_ai

    def record_id(self, arguments: Arguments) -> str | None:
        value = arguments.get("memory_id")
        return None if value is None else str(value)

    def memory_of(self, instance: Any, parent: Scope | None) -> Any:
        return instance

    def open(self, tracer: MemoryTracer, instance: Any, arguments: Arguments, parent: Scope | None) -> Scope:
        memory = self.memory_of(instance, parent)
        if self.hooks is not None:
            self.hooks.ensure(memory)
        gen_ai = self.gen_ai_operation(arguments)
        op: Operation
        if self.as_event and parent is not None and parent.role is Role.ADD:
            if parent.pending:  # the flat stages that ended before this one first: events in order
                emit_stages(parent)
            if parent.stage_links is None:
                parent.stage_links = set()
            attributes = None
            if gen_ai:  # a write: the GenAI memory-client attributes its span would start with
                attributes = self.start_attributes(tracer, memory, gen_ai, arguments)
            op = StageOperation(tracer, self.name, self.category, parent.op, parent.stage_links,
                                attributes=attributes, gen_ai_operation=gen_ai)
        else:
            op = self._operation(tracer, memory, gen_ai, arguments)
        return Scope(memory, op, self.role, record_id=self.record_id(arguments), registry=tracer.registry)

    def start_attributes(self, tracer: MemoryTracer, memory: Any, gen_ai: GenAIOperation | None,
                         arguments: Arguments) -> dict[str, Any]:
        """The attributes this call's span would start with (a stage event of ``add`` carries them)."""
        return self._operation(tracer, memory, gen_ai, arguments)._start

    def _operation(self, tracer: MemoryTracer, memory: Any, gen_ai: GenAIOperation | None,
                   arguments: Arguments) -> Operation:
        store, address, port = store_and_server(memory)
        if not gen_ai:
            address = port = None
        return tracer.operation(self.name, self.category, gen_ai_operation=gen_ai, store_id=store,
                                record_id=self.record_id(arguments) if gen_ai else None,
                                provider=PROVIDER if gen_ai else None, server_address=address,
                                server_port=port)

    def begin(self, scope: Scope, arguments: Arguments, parent: Scope | None) -> None:
        """After the operation started, before the wrapped call."""

    def end(self, scope: Scope, arguments: Arguments, result: Any) -> None:
        """After the wrapped call returned ``result``."""


_SERVERS: weakref.WeakKeyDictionary[Any, tuple[str, str | None, int | None]] = weakref.WeakKeyDictionary()
"""Memory -> its store id and server: read from mem0's configuration once per memory, not per call
(every span of a traced call names them; a ``Memory`` keeps its vector-store config for life)."""


def store_and_server(memory: Any) -> tuple[str, str | None, int | None]:
    try:
        return _SERVERS[memory]
    except KeyError:
        pass
    except TypeError:  # not weakly referable or not hashable: read each time
        return (store_id(memory), *server_of(memory))
    found = _SERVERS[memory] = (store_id(memory), *server_of(memory))
    return found


def store_id(memory: Any) -> str:
    """``gen_ai.memory.store.id``: the memory's vector-store collection."""
    name = getattr(memory, "collection_name", None)
    return name if isinstance(name, str) and name else "mem0"


def server_of(memory: Any) -> tuple[str | None, int | None]:
    """``server.address`` / ``server.port`` of the memory's vector store when it is remote.

    From the store's configuration as mem0 keeps it (``memory.config.vector_store.config``): a
    ``host`` (and ``port``), else the host and port of a ``url``. A local store (a path, in
    memory) has neither, and the span gets none. A platform client (``MemoryClient``) talks to its
    ``host``.

    >>> from types import SimpleNamespace as NS
    >>> server_of(NS(config=NS(vector_store=NS(config=NS(host="qdrant.internal", port=6333, url=None)))))
    ('qdrant.internal', 6333)
    >>> server_of(NS(config=NS(vector_store=NS(config={"url": "https://vec.example.com"}))))
    ('vec.example.com', 443)
    >>> server_of(NS(config=NS(vector_store=NS(config=NS(path="/tmp/qdrant", host=None)))))
    (None, None)
    >>> server_of(NS(host="https://api.mem0.ai"))
    ('api.mem0.ai', 443)
    """
    host = getattr(memory, "host", None)  # the platform client (MemoryClient): its API's URL
    if isinstance(host, str) and "://" in host:
        return _url_server(host)
    config = getattr(getattr(getattr(memory, "config", None), "vector_store", None), "config", None)
    if config is None:
        return None, None

    def field(name: str) -> Any:
        return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)

    host, port, url = field("host"), field("port"), field("url")
    if isinstance(host, str) and host:
        return host, port if isinstance(port, int) and not isinstance(port, bool) else None
    if isinstance(url, str) and "://" in url:
        return _url_server(url)
    return None, None


def _url_server(url: str) -> tuple[str | None, int | None]:
    try:
        parts = urlsplit(url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None, None
    return (parts.hostname, port) if parts.hostname else (None, None)


_DEFAULT_PORTS = {"http": 80, "https": 443}


class Binder:
    """A method's arguments by parameter name, defaults filled in (``self`` left out).

    Cheaper than ``inspect.Signature.bind`` on every call: the positional names and
    defaults are read once. Extra or unknown arguments are mem0's to reject.

    >>> class Store:
    ...     def search(self, query, vectors, limit=5, filters=None): ...
    >>> Binder.of(Store.search)(("q", [0.1]), {"filters": {"user_id": "u"}})
    {'limit': 5, 'filters': {'user_id': 'u'}, 'query': 'q', 'vectors': [0.1]}
    """

    __slots__ = ("_defaults", "_names")

    def __init__(self, names: tuple[str, ...], defaults: dict[str, Any]) -> None:
        self._names, self._defaults = names, defaults

    @classmethod
    def of(cls, function: Callable[..., Any]) -> Binder:
        try:
            parameters = list(inspect.signature(function).parameters.values())[1:]
        except (TypeError, ValueError):
            return cls((), {})
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return cls(tuple(p.name for p in parameters if p.kind in positional),
                   {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty})

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        arguments = dict(self._defaults)
        arguments.update(zip(self._names, args, strict=False))
        arguments.update(kwargs)
        return arguments


class Call:
    """One traced call: ``start`` -> ``stop`` / ``fail``; finishing twice does nothing."""

    __slots__ = ("_arguments", "_finished", "_spec", "_token", "scope")

    def __init__(self, spec: MethodSpec, scope: Scope, arguments: Arguments) -> None:
        self._spec, self.scope, self._arguments = spec, scope, arguments
        self._finished = False
        self._token: contextvars.Token[Scope | None] | None = None

    @classmethod
    def start(cls, tracer: MemoryTracer, spec: MethodSpec, instance: Any,
              arguments: Arguments) -> Call | None:
        """Open the operation and make its scope current; ``None`` when the call is not traced
        (instrumentation suppressed in this context, as for every contrib instrumentor)."""
        if not is_instrumentation_enabled():
            return None
        try:
            parent = current_scope()
            if not spec.applies(instance, arguments, parent):
                return None
            scope = spec.open(tracer, instance, arguments, parent)
        except Exception as exc:  # never on the application's path
            warn_once(f"{spec.name} start", exc)
            return None
        call = cls(spec, scope, arguments)
        scope.op.__enter__()
        call._token = set_scope(scope)
        try:
            spec.begin(scope, arguments, parent)
        except Exception as exc:
            warn_once(f"{spec.name} begin", exc)
        return call

    def stop(self, result: Any) -> None:
        if self._finished:
            return
        try:
            self._spec.end(self.scope, self._arguments, result)
        except Exception as exc:
            warn_once(f"{self._spec.name} end", exc)
        self._finish(None)

    def run(self, wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``wrapped`` inside this call: its result comes back unchanged, its error re-raised."""
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            self.fail(exc)
            raise
        self.stop(result)
        return result

    def fail(self, exc: BaseException) -> None:
        self._finish(exc)

    def _finish(self, exc: BaseException | None) -> None:
        if self._finished:
            return
        self._finished = True
        if self.scope.pending:  # an add's flat stages: their events before its span ends
            emit_stages(self.scope)
        try:
            if self._token is not None:
                reset_scope(self._token)
        except ValueError:
            pass  # finished in another context than it started (a generator-like caller): keep going
        finally:
            self.scope.op.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)


def emit_stages(scope: Scope) -> None:
    """Add the events of the flat stages of ``scope`` (an ``add``) that ended, in the order they ended."""
    pending, scope.pending = scope.pending, None
    for stage in pending or ():
        try:
            stage.emit()
        except Exception as exc:  # the instrumentation's fault must not become the application's
            warn_once("mem0 stage event", exc)


def wrapper_for(tracer: MemoryTracer, spec: MethodSpec, function: Callable[..., Any]) -> Wrapper:
    """The ``wrapt`` wrapper running ``spec`` around ``function`` (sync or async alike)."""
    bind = Binder.of(function)
    if inspect.iscoroutinefunction(function):

        async def async_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                                kwargs: dict[str, Any]) -> Any:
            call = Call.start(tracer, spec, instance, bind(args, kwargs))
            if call is None:
                return await wrapped(*args, **kwargs)
            try:
                result = await wrapped(*args, **kwargs)
            except BaseException as exc:
                call.fail(exc)
                raise
            call.stop(result)
            return result

        return async_wrapper

    def sync_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
        call = Call.start(tracer, spec, instance, bind(args, kwargs))
        if call is None:
            return wrapped(*args, **kwargs)
        return call.run(wrapped, args, kwargs)

    return sync_wrapper


def unwrap_own(owner: Any, name: str, wrapper: Any, *, inherited: bool = False) -> bool:
    """Take ``wrapper``'s layer, and only it, off ``owner.name``; ``False`` when it is not there.

    Another instrumentation of mem0 (loongsuite-instrumentation-mem0 wraps the same ``Memory``
    methods) may have wrapped the method after this one did: ``unwrap`` would then remove the
    outermost layer, theirs, and leave ours. So the chain of ``wrapt`` proxies is walked to ours:
    outermost, the attribute gets what it wrapped (or is deleted again when ``inherited``, so the
    class inherits as before); further in, the layer above is pointed past it.
    """
    current = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    above: Any = None
    while isinstance(current, _PROXIES):
        if getattr(current, "_self_wrapper", None) is wrapper:
            inner = current.__wrapped__
            if above is not None:
                above.__wrapped__ = inner
            elif inherited:
                delattr(owner, name)
            else:
                setattr(owner, name, inner)
            return True
        above, current = current, current.__wrapped__
    return False


_PROXIES = (wrapt.FunctionWrapper, wrapt.ObjectProxy)
"""What ``wrap_function_wrapper`` puts on a class (wrapt 2's ``ObjectProxy`` is no longer their base)."""


def propagate_context(classes: tuple[type, ...]) -> Wrapper:
    """A ``ThreadPoolExecutor.submit`` wrapper that carries the caller's context into mem0's workers.

    mem0 1.x runs ``add``'s pipeline, ``search`` and ``get_all`` in a fresh thread pool;
    without the caller's context their spans would lose their parent. Only bound methods
    of ``classes`` are touched; every other submit passes through as it was.
    """

    def submit(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
        if args and isinstance(getattr(args[0], "__self__", None), classes):
            run = contextvars.copy_context().run
            args = (functools.partial(run, args[0]), *args[1:])
        return wrapped(*args, **kwargs)

    return submit
