"""The entry point of the instrumentation: :class:`MemoryTracer` opens traced memory operations.

It wraps the application's TracerProvider (the global one by default) and
installs no exporter. What goes on spans is decided here, once: content
capture (constructor, else ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``),
content upload by reference (constructor, else ``MEMTRACE_CONTENT_UPLOAD_BASE_PATH`` or
``OTEL_INSTRUMENTATION_GENAI_UPLOAD_BASE_PATH``) and the truncation limit; operations
only test the results.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.trace import SpanKind, TracerProvider

from memtrace_otel.config import (
    ContentCapture,
    content_capture_from_env,
    content_max_chars_from_env,
    upload_base_path_from_env,
)
from memtrace_otel.content.store import ContentStoreError, open_store
from memtrace_otel.content.upload import ContentUploader
from memtrace_otel.instrument.operation import Operation, _plain, _record_once, checked_items
from memtrace_otel.instrument.variables import InProcessContents, Variable, VariableRegistry
from memtrace_otel.semconv import (
    GENAI_CALL_OPERATIONS,
    INSTRUMENTATION_SCOPE,
    Category,
    GenAI,
    GenAIOperation,
    MemTrace,
)
from memtrace_otel.version import __version__

__all__ = ["MemoryTracer", "span_name_of"]

F = TypeVar("F", bound=Callable[..., Any])
_CATEGORY, _NAME, _INTERNAL = MemTrace.OPERATION_CATEGORY, MemTrace.OPERATION_NAME, SpanKind.INTERNAL
_logger = logging.getLogger(__name__)


class MemoryTracer:
    """Opens traced memory operations on the application's TracerProvider.

    Parameters
    ----------
    tracer_provider:
        Provider to create spans with; the global one when ``None``.
    capture_content:
        Record contents (variable contents, queries, retrieved records, verdict texts)
        on spans. ``None`` decides from ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
        (off unless set).
    content_max_chars:
        Truncation limit of one captured content string.
    keep_content_in_process:
        How many variable contents to keep in this process's
        :class:`InProcessContents` for in-process attribution, exported or not
        (0 disables).
    registry:
        The version registry to share with another tracer of this process.
    upload_base_path:
        Upload every variable content (full, not truncated) and verdict text to this
        directory or ``fsspec`` URL, by hash, from a background thread; spans then
        carry ``memtrace.content_ref`` (and, without capture, no content). ``None``
        decides from ``MEMTRACE_CONTENT_UPLOAD_BASE_PATH``, else the GenAI hook's
        ``OTEL_INSTRUMENTATION_GENAI_UPLOAD_BASE_PATH`` (off unless set); ``""`` is off.
        Call :meth:`shutdown` (or :meth:`force_flush`) before the process ends to
        write what is queued (an ``atexit`` hook does it otherwise).

    Raises
    ------
    ValueError
        ``content_max_chars`` below 1, or an ``upload_base_path`` no filesystem serves
        (unknown protocol, its fsspec package not installed).

    Thread-safe: the registry and content store carry their own locks; the
    rest is set once here.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        capture_content: bool | None = None,
        content_max_chars: int | None = None,
        keep_content_in_process: int = 50_000,
        registry: VariableRegistry | None = None,
        upload_base_path: str | None = None,
    ) -> None:
        if content_max_chars is not None and content_max_chars < 1:
            raise ValueError("content_max_chars must be >= 1")
        if capture_content is None:
            capture_content = content_capture_from_env() is ContentCapture.SPAN
        self.capture_content = capture_content
        self.content_max_chars = content_max_chars or content_max_chars_from_env()
        self.registry = registry if registry is not None else VariableRegistry()
        self.contents = InProcessContents(keep_content_in_process)
        self.uploader: ContentUploader | None = _uploader(upload_base_path)
        self.content_ref: str | None = self.uploader.store.url if self.uploader else None
        self._tracer = trace.get_tracer(INSTRUMENTATION_SCOPE, __version__, tracer_provider=tracer_provider)

    def operation(
        self,
        name: str,
        category: Category | str = Category.OTHER,
        *,
        gen_ai_operation: GenAIOperation | str | None = None,
        store_id: str | None = None,
        record_id: str | None = None,
        data_source_id: str | None = None,
        provider: str | None = None,
        attributes: Mapping[str, Any] | None = None,
        span_name: str | None = None,
        model: str | None = None,
        server_address: str | None = None,
        server_port: int | None = None,
    ) -> Operation:
        """A traced operation, used as ``with tracer.operation(...) as op:``.

        Parameters
        ----------
        name, category:
            The application's name for the operation (``memtrace.operation.name``, on
            every span) and its role in the pipeline.
        gen_ai_operation:
            ``create_memory``, ``search_memory`` ... makes it a GenAI memory-client span (kind
            ``CLIENT``) named ``{gen_ai.operation.name}``; ``retrieval`` a retrieval span named
            ``retrieval {data_source_id}``; ``chat`` (or another model call) an inference span named
            ``{operation} {model}``, the model given here or recorded by ``record_llm_call``
            (the names the GenAI conventions give; :func:`span_name_of`).
        store_id:
            ``gen_ai.memory.store.id`` of a GenAI memory span.
        record_id, data_source_id, provider:
            ``gen_ai.memory.record.id`` (the one record the operation acts on),
            ``gen_ai.data_source.id`` (the source a retrieval searches) and
            ``gen_ai.provider.name``, known when the operation starts.
        attributes:
            More start attributes, set as given.
        span_name:
            Overrides the span name.
        model:
            ``gen_ai.request.model`` of a model call known when it starts.
        server_address, server_port:
            ``server.address`` / ``server.port`` of the memory service or store the operation talks
            to, when known (the port only with an address, as the conventions ask).

        Raises
        ------
        ValueError
            ``category`` is not a :class:`Category`.
        """
        category = category if type(category) is Category else Category(category)
        # ``_value_``: the member's plain string, without the ``value`` property's call.
        start: dict[str, Any] = {_CATEGORY: category._value_, _NAME: name}
        if not (gen_ai_operation or span_name or attributes or record_id is not None
                or data_source_id is not None or provider is not None or model is not None or server_address):
            return _plain(self, name, category, start)
        kind = _INTERNAL
        named = span_name is not None
        if gen_ai_operation:
            kind = SpanKind.CLIENT
            start[GenAI.OPERATION_NAME] = str(gen_ai_operation)
            if store_id:
                start[GenAI.MEMORY_STORE_ID] = store_id
            span_name = span_name or span_name_of(str(gen_ai_operation), model=model,
                                                  data_source_id=data_source_id)
        if (record_id is not None or data_source_id is not None or provider is not None or model is not None
                or server_address):
            _optional(start, record_id=record_id, data_source_id=data_source_id, provider=provider,
                      model=model, server_address=server_address, server_port=server_port)
        if attributes:
            start.update(attributes)
        return Operation(self, name, category, span_name=span_name or name, kind=kind, attributes=start,
                         gen_ai_operation=gen_ai_operation or None, named=named)

    def record(
        self,
        name: str,
        category: Category | str = Category.OTHER,
        *,
        reads: Iterable[Variable | str | tuple[Any, ...]] = (),
        writes: Iterable[tuple[Any, ...]] = (),
        error: BaseException | None = None,
        start_time: int | None = None,
        end_time: int | None = None,
        **options: Any,
    ) -> list[Variable]:
        """A traced operation whose reads and writes are known up front, recorded in one call.

        The span is the one ``with tracer.operation(name, category, **options) as op:`` makes when the
        block calls ``op.read(r)`` for each of ``reads`` and ``op.write(name, content, kind=kind)`` for
        each of ``writes``, in that order: it is that operation, run by the same code (the same versions,
        links, attributes, content capture, upload and in-process contents), without the ``with`` block
        and a call per read and write. The span is not made current (nothing runs inside it). Returns
        the variables written, in order. Thread-safe, as :meth:`operation` is: the call's state is its own.

        Parameters
        ----------
        reads:
            Each a :class:`Variable`, a name (``name`` or ``name@version``, as ``op.read`` takes), or
            ``(name, content)`` / ``(name, content, kind)`` for an input given with its content.
        writes:
            Each ``(name, content)`` or ``(name, content, kind)``.
        error:
            The exception the operation failed with, recorded as the ``with`` block records one (an
            exception event, status ``ERROR``, ``error.type``); not raised.
        start_time, end_time:
            The span's times in ns since the epoch (``time.time_ns()``), for work done before the call;
            now when not given.
        options:
            The keywords of :meth:`operation` (``gen_ai_operation``, ``store_id`` ...).

        Raises
        ------
        TypeError, ValueError
            A read or write of another shape, an unknown kind, ``category`` not a :class:`Category`, a
            keyword :meth:`operation` does not take: before anything is recorded (no span, no version).
        """
        reads, writes = checked_items(reads, writes)
        if options:  # the span operation() would start: its name, kind and start attributes
            operation = self.operation(name, category, **options)
            return _record_once(self, operation._span_name, operation._kind, operation._start,
                                operation.gen_ai_operation, reads, writes, error, start_time, end_time)
        # operation()'s plain case, without its call, its keywords' tests and the Operation object
        category = category if type(category) is Category else Category(category)
        return _record_once(self, name, _INTERNAL, {_CATEGORY: category._value_, _NAME: name}, None, reads,
                            writes, error, start_time, end_time)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Write every content queued for upload; False on timeout (True when upload is off)."""
        return self.uploader.force_flush(timeout_millis) if self.uploader else True

    def shutdown(self, timeout_millis: int = 30_000) -> bool:
        """Drain and stop the content uploader; idempotent. Spans are the provider's to shut down."""
        return self.uploader.shutdown(timeout_millis) if self.uploader else True

    def traced(
        self, name: str | None = None, category: Category | str = Category.OTHER, **options: Any
    ) -> Callable[[F], F]:
        """Decorator form of :meth:`operation`, for sync and async functions.

        The function finds its operation with :func:`current_operation`.
        """

        def decorate(function: F) -> F:
            op_name = name or function.__qualname__
            if inspect.iscoroutinefunction(function):

                @functools.wraps(function)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    with self.operation(op_name, category, **options):
                        return await function(*args, **kwargs)

                return async_wrapper  # type: ignore[return-value]

            @functools.wraps(function)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.operation(op_name, category, **options):
                    return function(*args, **kwargs)

            return wrapper  # type: ignore[return-value]

        return decorate


def _uploader(base_path: str | None) -> ContentUploader | None:
    from_env = base_path is None
    base_path = upload_base_path_from_env() if from_env else base_path
    if not base_path:
        return None
    try:
        return ContentUploader(open_store(base_path))
    except ContentStoreError as error:
        if not from_env:
            raise
        _logger.warning("%s; content upload stays off", error)
        return None


def span_name_of(gen_ai_operation: str, *, model: str | None = None,
                 data_source_id: str | None = None) -> str:
    """The span name the GenAI conventions give an operation (``spans.yaml`` of semantic-conventions-genai).

    A memory-client span is ``{gen_ai.operation.name}``; a retrieval ``{gen_ai.operation.name}
    {gen_ai.data_source.id}``; a model call ``{gen_ai.operation.name} {gen_ai.request.model}``. A part
    that is not known is left out, never replaced by something else.

    >>> span_name_of("update_memory"), span_name_of("chat", model="gpt-4o-mini")
    ('update_memory', 'chat gpt-4o-mini')
    >>> span_name_of("retrieval", data_source_id="docs-index"), span_name_of("chat")
    ('retrieval docs-index', 'chat')
    """
    if gen_ai_operation == GenAIOperation.RETRIEVAL:
        suffix = data_source_id
    elif gen_ai_operation in GENAI_CALL_OPERATIONS:
        suffix = model
    else:
        suffix = None
    return f"{gen_ai_operation} {suffix}" if suffix else gen_ai_operation


def _optional(start: dict[str, Any], *, record_id: str | None, data_source_id: str | None,
              provider: str | None, model: str | None, server_address: str | None,
              server_port: int | None) -> None:
    for key, value in ((GenAI.MEMORY_RECORD_ID, record_id), (GenAI.DATA_SOURCE_ID, data_source_id),
                       (GenAI.PROVIDER_NAME, provider), (GenAI.REQUEST_MODEL, model),
                       (GenAI.SERVER_ADDRESS, server_address or None)):
        if value is not None:
            start[key] = value
    if server_address and server_port is not None:
        start[GenAI.SERVER_PORT] = int(server_port)
