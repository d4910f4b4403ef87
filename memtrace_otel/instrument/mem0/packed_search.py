"""A traced ``search`` as one span whose retrieval is raw facts packed into one attribute (issue 28, item 1).

The generic shape (``methods.SearchSpec`` run by ``lifecycle.Call``) records, while the span is open,
what the graph is: the query read through the process's registry, each returned record made a variable
and registered, one link per writer, the descriptors, the context's text kept in process. Here a
``search`` records only what happened and encodes it once, with ``orjson``, into
``memtrace.mem0.search`` when it ends (``docs/conventions.md``, "The packed mem0 ``search``"): the
query (its variable's name, size and hash), the context it wrote (name, version, size, hash) and each
returned record's lineage as its payload carries it. No links, no records registered: the graph
builder derives the span's inputs, outputs, descriptors and one link per writer
(:mod:`memtrace_otel.graph.packed_search`).

The context's version is still the registry's: an application's answer operation reads the context
by name in the same process (``methods.context_name``), which must find the version this search wrote
and its span. That is the only registry call; the record variables the generic shape registered are
read by nobody in the process (a later change reads the lineage in the record's own payload).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Status, StatusCode

from memtrace_otel.instrument.genai import RetrievedRecord, retrieval_attributes
from memtrace_otel.instrument.mem0.lifecycle import Binder, warn_once
from memtrace_otel.instrument.mem0.methods import SearchSpec, scoped_context_name, search_scope
from memtrace_otel.instrument.mem0.scope import _variable_id
from memtrace_otel.instrument.tracer import MemoryTracer
from memtrace_otel.instrument.variables import Variable
from memtrace_otel.semconv import Category, GenAI, GenAIOperation, MemTrace, RecordMetadata, VariableKind
from memtrace_otel.wire import content_hash

__all__ = ["PACKED_SEARCH", "PACKED_SEARCH_FORMAT", "packed_search_wrapper"]

Args = tuple[Any, ...]
Kw = dict[str, Any]
Wrapper = Callable[[Callable[..., Any], Any, Args, Kw], Any]

PACKED_SEARCH = MemTrace.MEM0_SEARCH
"""The span attribute holding a ``search``'s packed facts (compact JSON)."""
PACKED_SEARCH_FORMAT = 1
"""The packed format's version, its first element."""
_VARIABLE, _TRACEPARENT = RecordMetadata.VARIABLE, RecordMetadata.TRACEPARENT
_attach, _detach, _in_context = otel_context.attach, otel_context.detach, trace.set_span_in_context
_dumps = orjson.dumps
_CONTEXT = VariableKind.CONTEXT
_COUNT, _TOP_K = GenAI.MEMORY_RECORD_COUNT, GenAI.RETRIEVAL_TOP_K
_MEMORY_UNIT = VariableKind.MEMORY_UNIT


def packed_search_wrapper(tracer: MemoryTracer, function: Callable[..., Any]) -> Wrapper:
    """``Memory.search`` as one span carrying its packed facts."""
    spec = SearchSpec("mem0.search", Category.RETRIEVAL)
    made: dict[int, tuple[weakref.ref[Any], Any]] = {}
    otel = tracer._tracer
    bind = Binder.of(function)
    # SearchSpec.end reads top_k, else limit, of the call's arguments with the signature's defaults
    # (1.x: limit=100; 2.x: top_k=20): the defaults once here, the call's keywords over them in _end.
    top_k_default = (("top_k", bind._defaults["top_k"]) if "top_k" in bind._defaults
                     else ("limit", bind._defaults.get("limit")))

    def template_of(memory: Any) -> Any:
        """``SearchSpec``'s span template (name, kind, start attributes) of this memory, made once."""
        found = made.get(id(memory))
        if found is not None and found[0]() is memory:
            return found[1]
        template = spec._operation(tracer, memory, GenAIOperation.SEARCH_MEMORY, {})
        if len(made) >= 64:  # memories made and dropped by a long-running process
            made.clear()
        made[id(memory)] = (weakref.ref(memory), template)
        return template

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        if not is_instrumentation_enabled():
            return wrapped(*args, **kwargs)
        try:
            template = template_of(instance)
            span = otel.start_span(template._span_name, None, template._kind, template._start, (), None)
        except Exception as exc:
            warn_once("mem0.search start", exc)
            return wrapped(*args, **kwargs)
        token = _attach(_in_context(span))
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            _detach(token)
            _end(span, tracer, bind, top_k_default, args, kwargs, None, exc)
            raise
        _detach(token)
        _end(span, tracer, bind, top_k_default, args, kwargs, result, None)
        return result

    return wrapper


def _end(span: Any, tracer: MemoryTracer, bind: Binder, top_k_default: tuple[str, Any], args: Args,
         kwargs: Kw, result: Any, exc: BaseException | None) -> None:
    try:
        if span.is_recording():
            # mem0's search takes its query by position and the rest by keyword: bound only otherwise.
            arguments = bind(args, kwargs) if len(args) > 1 else kwargs
            key, default = top_k_default
            top_k = arguments.get(key, default)
            if key == "limit" and "top_k" in arguments:
                top_k = arguments["top_k"]
            span.set_attributes(_facts(span, tracer, arguments, args[0] if args else kwargs.get("query"),
                                       top_k, result, exc))
    except Exception as error:
        warn_once("mem0.search end", error)
    span.end()


def _facts(span: Any, tracer: MemoryTracer, arguments: Mapping[str, Any], query: Any, top_k: Any,
           result: Any, exc: BaseException | None) -> dict[str, Any]:
    """The span's end attributes: the packed facts, and the GenAI retrieval attributes the generic shape
    sets (``SearchSpec.end``: the record count and top-k, with content capture the query text and the
    records; on an error only ``error.type``)."""
    capture, uploader, limit = tracer.capture_content, tracer.uploader, tracer.content_max_chars
    keep = not capture and tracer.contents.read_in_process
    attributes: dict[str, Any] = {}
    query_digest = packed_query = context = None
    records: list[Any] | None = None
    if type(query) is str:
        # The query's name and its descriptor's hash are the same digest (scope.text_hash, wire.content_hash):
        # one hash of it.
        query_digest = content_hash(query)
        name = f"query:{query_digest}"
        packed_query = [name, len(query), query_digest, (query if len(query) <= limit else query[:limit])
                        if capture else None]
        if uploader is not None:
            uploader.submit(query_digest, query)
        if keep or (capture and len(query) > limit):
            tracer.contents.put_version(name, 1, query)
    if exc is None:
        texts, records = [], []
        for item in _items(result):
            metadata = item.get("metadata")
            variable = traceparent = None
            if type(metadata) is dict or isinstance(metadata, Mapping):
                variable, traceparent = metadata.get(_VARIABLE), metadata.get(_TRACEPARENT)
            text = item.get("memory")
            # The generic shape's rule (scope.record_variable): a record whose lineage does not parse is
            # read by its name alone, and contributes no text to the context.
            if type(variable) is not str or _variable_id(variable) is None:
                variable = traceparent = None
                text = None
            elif type(text) is not str:
                text = None
            texts.append(text or "")
            if capture:
                score = item.get("score")
                records.append((str(item.get("id")), variable, traceparent, text,
                                score if isinstance(score, int | float) else None))
            else:
                records.append((str(item.get("id")), variable, traceparent))
        attributes[_COUNT] = len(records)
        if isinstance(top_k, int):
            attributes[_TOP_K] = top_k
        if capture:  # the raw span a trace backend shows carries the GenAI content keys, as the generic one
            attributes.update(_captured(query, records, limit))
        if query_digest is not None:
            text = "\n".join(texts)
            context_id = scoped_context_name(query_digest, search_scope(arguments))
            # Registered so that the application's own read of the context by name finds this version,
            # written by this span; its text is not kept there (nothing in the process reads it back).
            version = tracer.registry.next_version(context_id, _CONTEXT, None,
                                                   span.get_span_context()).version
            digest = content_hash(text)
            context = [context_id, version, len(text), digest,
                       (text if len(text) <= limit else text[:limit]) if capture else None]
            if uploader is not None:
                uploader.submit(digest, text)
            if keep or (capture and len(text) > limit):
                tracer.contents.put_version(context_id, version, text)
    else:
        attributes[GenAI.ERROR_TYPE] = type(exc).__qualname__
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, str(exc)))
    header = (limit if capture else None, tracer.content_ref if uploader is not None else None)
    packed = _dumps((PACKED_SEARCH_FORMAT, header, packed_query, context, records)).decode()
    limit_of_value = span._limits.max_attribute_length if hasattr(span, "_limits") else None
    if limit_of_value is None or len(packed) <= limit_of_value:
        attributes[PACKED_SEARCH] = packed
    else:  # OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT would cut it: in parts, which the reader joins
        attributes[PACKED_SEARCH] = packed[:limit_of_value]
        for part in range(1, -(-len(packed) // limit_of_value)):
            attributes[f"{PACKED_SEARCH}.{part}"] = packed[part * limit_of_value:(part + 1) * limit_of_value]
    return attributes


def _captured(query: Any, records: list[Any], limit: int) -> dict[str, Any]:
    """With content capture, the GenAI content attributes the generic search sets (``SearchSpec.end`` through
    ``Operation.record_retrieval``), by its helper: ``gen_ai.memory.query.text`` (a string query) and
    ``gen_ai.memory.records`` (each returned record's id, text and score; a record without lineage has no
    text there either). The graph builder derives the same two from the packed facts."""
    # Only the record's id, text and score reach the JSON: the variable is a carrier, named by the id.
    found = [RetrievedRecord(Variable(record_id, 0, _MEMORY_UNIT, text), score, record_id)
             for record_id, _, _, text, score in records]
    captured = retrieval_attributes(found, memory=True, query=query if type(query) is str else None,
                                    capture=True, limit=limit)
    del captured[_COUNT]  # already set, as without capture
    return captured


def _items(result: Any) -> list[Mapping[str, Any]]:
    """``methods.result_items``: the memory items of a mem0 result."""
    if type(result) is dict or isinstance(result, Mapping):
        items = result.get("results", [result] if "id" in result else [])
    else:
        items = result if type(result) is list else []
    return [item for item in items if type(item) is dict or isinstance(item, Mapping)]

