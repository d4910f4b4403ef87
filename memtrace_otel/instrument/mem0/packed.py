"""A traced ``add`` as one span whose stages are raw facts packed into one attribute (issue 28, item 1).

The stage-event shape (:mod:`.flat`) records, while mem0 runs, what the graph is: each stage's
variables with their versions (the registry), descriptors, joined lineage lists, one link per writer,
the in-process contents. Here an ``add`` records only what happened, in plain lists, and encodes them
once, with ``orjson``, into ``memtrace.mem0.add`` when it ends (``docs/conventions.md``, "The packed
mem0 ``add``"): the messages (name, size), each LLM stage (times, prompt and response sizes, the parsed
lines' count and size), each search of existing memories (the lineage each returned record's payload
carries: its variable id and its writer's traceparent, as stored), each record written (id, size,
content hash, the version the payload now carries). No events, no links, no registry: the graph
builder derives the stage nodes, variables, versions and cross-trace edges from the packed facts
(:mod:`memtrace_otel.graph.packed`).

Versions. A record's version travels in its payload (``memtrace_variable``), as in every shape: a
create writes version 1 (mem0 made the id just now), an update the version it read from the payload
it replaces plus one, so the order of writes per record is the store's own, across processes and
traces. A message's version is the order of the ``add`` spans that wrote its name (their start
times), which the graph builder counts.

Thread safety: an ``add``'s :class:`PackedAdd` is reached through a context variable that mem0's
worker threads get a copy of (``lifecycle.propagate_context``); its stages run one after another, and
``list.append`` is atomic.
"""

from __future__ import annotations

import contextvars
import json
import os
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Status, StatusCode

from memtrace_otel.config import env_flag
from memtrace_otel.instrument.genai import stored_records_attributes
from memtrace_otel.instrument.mem0.lifecycle import Binder, warn_once
from memtrace_otel.instrument.mem0.methods import (
    AddSpec,
    app_message_ids,
    messages_of,
    result_items,
    stored_records,
)
from memtrace_otel.instrument.mem0.pipeline import LlmCallSpec
from memtrace_otel.instrument.mem0.scope import message_name
from memtrace_otel.instrument.tracer import MemoryTracer
from memtrace_otel.semconv import Category, GenAI, MemTrace, RecordMetadata
from memtrace_otel.wire import content_hash

__all__ = ["PACKED_ADD", "PACKED_VERSION", "PackedAdd", "packed_add_wrapper", "packed_default", "packed_hook",
           "packed_pass_through"]

Args = tuple[Any, ...]
Kw = dict[str, Any]
Wrapper = Callable[[Callable[..., Any], Any, Args, Kw], Any]

PACKED_ADD = MemTrace.MEM0_ADD
"""The span attribute holding an ``add``'s packed facts (compact JSON)."""
PACKED_VERSION = 1
"""The packed format's version, its first element."""
_VARIABLE, _TRACEPARENT = RecordMetadata.VARIABLE, RecordMetadata.TRACEPARENT
_attach, _detach, _in_context = otel_context.attach, otel_context.detach, trace.set_span_in_context
_time = time.time_ns
_dumps = orjson.dumps
_INGEST = Category.INGEST
_ENV = "MEMTRACE_MEM0_PACKED"


def packed_default() -> bool:
    """Whether the ``add`` is packed: yes unless ``MEMTRACE_MEM0_PACKED`` says no (``false``/``0``/``no``/
    ``off``: the stage events); another value warns once and keeps the default."""
    if not os.environ.get(_ENV, "").strip():
        return True
    return env_flag(_ENV) or os.environ[_ENV].strip().lower() not in ("0", "false", "no", "off")


class PackedAdd:
    """One traced ``add``: its memory, its span's traceparent, and the facts recorded so far."""

    __slots__ = ("before", "capture", "kept", "llm_calls", "memory", "messages", "plain", "sources", "stages",
                 "traceparent", "tracer")

    def __init__(self, memory: Any, traceparent: str, tracer: MemoryTracer) -> None:
        self.memory, self.traceparent, self.tracer = memory, traceparent, tracer
        self.capture = tracer.capture_content
        self.plain = not self.capture and tracer.uploader is None
        """Without content capture and without an uploader a text is recorded by its size alone."""
        self.messages: list[Any] = []
        self.stages: list[Any] = []
        self.sources: list[str] = []
        """The texts the next stage derives from: the messages, then the last LLM stage's lines."""
        self.llm_calls = 0
        self.before: dict[str, tuple[Any, Any]] | None = None
        """Record id -> the lineage its payload carried when a change of this ``add`` read it."""
        self.kept: list[Any] | None = [] if not self.capture and tracer.contents.read_in_process else None
        """Without content capture, and when an in-process attribution reads them (an
        ``AttributionSpanProcessor`` sets ``read_in_process``), the texts it reads from the tracer's
        in-process contents, in the order the graph builder makes their variables
        (``graph.packed.kept_key``); a prompt as its messages, joined when the ``add`` ends. Not
        otherwise: a tuple and two joined prompts per ``add`` kept alive for nobody cost later calls
        (``docs/performance-history.md``, "Eighth pass")."""


_current: contextvars.ContextVar[PackedAdd | None] = contextvars.ContextVar("memtrace_mem0_packed",
                                                                            default=None)


class _Starts:
    """Per memory and ``infer``: the ``add`` span's template (``AddSpec``'s: name, kind, start attributes)
    and the memory's LLM model and provider, which its LLM stages name."""

    __slots__ = ("_ensure", "_made", "_spec", "_tracer")

    def __init__(self, tracer: MemoryTracer, ensure: Callable[[Any], None]) -> None:
        self._tracer, self._spec, self._ensure = tracer, AddSpec("mem0.add", _INGEST), ensure
        self._made: dict[tuple[int, bool], tuple[weakref.ref[Any], Any, Any]] = {}

    def __call__(self, memory: Any, infer: bool) -> tuple[weakref.ref[Any], Any, Any]:
        made = self._made.get((id(memory), infer))
        if made is not None and made[0]() is memory:
            return made
        # A memory's store and LLM are made with it: their classes are hooked once, with its first template.
        self._ensure(memory)
        spec = self._spec
        arguments = {"infer": infer}
        template = spec._operation(self._tracer, memory, spec.gen_ai_operation(arguments), arguments)
        model = getattr(getattr(getattr(memory, "llm", None), "config", None), "model", None)
        provider = getattr(getattr(getattr(memory, "config", None), "llm", None), "provider", None)
        made = (weakref.ref(memory), template,
                (model if isinstance(model, str) else None, provider if isinstance(provider, str) else None))
        if len(self._made) >= 64:  # memories made and dropped by a long-running process
            self._made.clear()
        self._made[(id(memory), infer)] = made
        return made


def packed_add_wrapper(tracer: MemoryTracer, hooks: Any) -> Wrapper:
    """``Memory.add`` as one span carrying its packed facts (``hooks``: the instrumentor's ``StoreHooks``,
    which a traced call installs on its memory's store and LLM first)."""
    starts = _Starts(tracer, hooks.ensure)
    otel = tracer._tracer

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        if not is_instrumentation_enabled():
            return wrapped(*args, **kwargs)
        try:
            _, template, llm = starts(instance, kwargs.get("infer", True) is not False)
            span = otel.start_span(template._span_name, None, template._kind, template._start, (), None)
        except Exception as exc:
            warn_once("mem0.add start", exc)
            return wrapped(*args, **kwargs)
        token = _attach(_in_context(span))
        add = own = None
        try:
            if span.is_recording():
                context = span.get_span_context()
                add = PackedAdd(instance, f"00-{context.trace_id:032x}-{context.span_id:016x}-"
                                          f"{int(context.trace_flags):02x}", tracer)
                _messages(add, args[0] if args else kwargs.get("messages"), kwargs.get("metadata"))
                own = _current.set(add)
        except Exception as exc:
            warn_once("mem0.add start", exc)
            add = None
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            _end(span, add, llm, None, exc)
            raise
        finally:
            if own is not None:
                _current.reset(own)
            _detach(token)
        _end(span, add, llm, result, None)
        return result

    return wrapper


def _messages(add: PackedAdd, messages: Any, metadata: Any) -> None:
    """``AddSpec.begin``'s messages: each one's name and size (its text with content capture)."""
    if type(messages) is str:  # mem0's commonest call, one user message: no list of one to build and filter
        app_id = app_message_ids(metadata, 1)[0] if metadata is not None else None
        add.messages.append((message_name({"role": "user", "content": messages}, app_id),
                             len(messages) if add.plain else _text(add, messages)))
        add.sources.append(messages)
        if add.kept is not None:
            add.kept.append(messages)
        return
    texts = [m for m in messages_of(messages) if type(m.get("content")) is str and m.get("role") != "system"]
    ids = app_message_ids(metadata, len(texts)) if metadata is not None else [None] * len(texts)
    out, plain, sources = add.messages, add.plain, add.sources
    for message, app_id in zip(texts, ids, strict=True):
        content = message["content"]
        out.append((message_name(message, app_id), len(content) if plain else _text(add, content)))
        sources.append(content)
    if add.kept is not None:
        add.kept += sources


def _text(add: PackedAdd, content: str) -> list[Any]:
    """A text with content capture or an uploader: its size, its hash (which both read) and, with
    capture, the part a span carries; the uploader gets the whole."""
    tracer = add.tracer
    digest = content_hash(content)
    if tracer.uploader is not None:
        tracer.uploader.submit(digest, content)
    limit = tracer.content_max_chars
    captured = (content if len(content) <= limit else content[:limit]) if add.capture else None
    return [len(content), digest, captured]


def _end(span: Any, add: PackedAdd | None, llm: Any, result: Any, exc: BaseException | None) -> None:
    try:
        attributes: dict[str, Any] = {}
        if add is not None:
            tracer = add.tracer
            header = (*llm, tracer.content_max_chars if add.capture else None, tracer.content_ref)
            packed = _dumps((PACKED_VERSION, header, add.messages, add.stages)).decode()
            limit = span._limits.max_attribute_length if hasattr(span, "_limits") else None
            if limit is None or len(packed) <= limit:
                attributes[PACKED_ADD] = packed
            else:  # OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT would cut it: in parts, which the reader joins
                attributes[PACKED_ADD] = packed[:limit]
                for part in range(1, -(-len(packed) // limit)):
                    attributes[f"{PACKED_ADD}.{part}"] = packed[part * limit:(part + 1) * limit]
            if add.kept:
                context = span.get_span_context()
                tracer.contents.put_version(f"{PACKED_ADD}:{context.trace_id:032x}:{context.span_id:016x}", 1,
                                            tuple(_prompt_text(t) if type(t) is list else t
                                                  for t in add.kept))  # type: ignore[arg-type]
        if exc is None:
            items = result_items(result)
            attributes[GenAI.MEMORY_RECORD_COUNT] = len(items)
            attributes[MemTrace.OPERATION_OUTCOME] = (",".join(sorted({str(i.get("event")) for i in items}))
                                                      if items else "noop")
            if add is not None and add.capture:
                # AddSpec.end's opt-in gen_ai.memory.records on the add span: the records mem0 says it
                # stored, which the span a user sees in a trace backend carries as the generic one did.
                attributes.update(stored_records_attributes(stored_records(items), capture=True,
                                                            limit=add.tracer.content_max_chars))
        else:
            attributes[GenAI.ERROR_TYPE] = type(exc).__qualname__
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
        span.set_attributes(attributes)
    except Exception as error:
        warn_once("mem0.add end", error)
    span.end()


def packed_pass_through(generic: Wrapper) -> Wrapper:
    """``_create_memory`` / ``_update_memory`` / ``_delete_memory`` inside a packed ``add``: passed through
    (the store hooks inside record the write); anywhere else ``generic``, their own span."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        if _current.get() is not None:
            return wrapped(*args, **kwargs)
        return generic(wrapped, instance, args, kwargs)

    return wrapper


def packed_hook(name: str, function: Callable[..., Any], specs: tuple[LlmCallSpec, ...],
                other: Wrapper) -> Wrapper:
    """The hook of the store's or LLM's method ``name`` inside a packed ``add`` of its own memory;
    ``other`` (the other shapes' hook) anywhere else."""
    bind = Binder.of(function)
    component = "llm" if name == "generate_response" else "vector_store"
    record = _RECORDERS[name]
    always = name == "search"  # its default limit is its top-k
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        add = _current.get()
        if add is None:
            return other(wrapped, instance, args, kwargs)
        if getattr(add.memory, component, None) is not instance:
            return wrapped(*args, **kwargs)
        return record(add, specs, wrapped, args, bind(args, kwargs) if args or always else kwargs, kwargs)

    return wrapper


def _llm(add: PackedAdd, specs: tuple[LlmCallSpec, ...], wrapped: Callable[..., Any], args: Args,
         arguments: Kw, kwargs: Kw) -> Any:
    """An LLM call: the stage its position says (1.x: extraction, then decisions), its sizes, its lines."""
    if not specs:
        return wrapped(*args, **kwargs)
    index = add.llm_calls
    add.llm_calls = index + 1
    spec = specs[min(index, len(specs) - 1)]
    start = _time()
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        add.stages.append(("llm", _SPEC_FACTS[spec], start, _time(), _prompt(add, arguments.get("messages")),
                           None, None, None, type(exc).__qualname__))
        if add.kept is not None:
            add.kept.append(_as_list(arguments.get("messages")))
        raise
    end = _time()
    try:
        lines = spec.parse(result)
        parsed = "\n".join(lines)
        text = result if type(result) is str else json.dumps(result, default=str)
        plain = add.plain
        add.stages.append(("llm", _SPEC_FACTS[spec], start, end, _prompt(add, arguments.get("messages")),
                           len(text) if plain else _text(add, text), len(lines),
                           len(parsed) if plain else _text(add, parsed), None))
        add.sources = [parsed]
        if add.kept is not None:
            add.kept += (_as_list(arguments.get("messages")), text, parsed)
    except Exception as exc:
        warn_once("mem0 llm stage", exc)
    return result


def _prompt(add: PackedAdd, messages: Any) -> int | list[Any]:
    """The length of ``pipeline.prompt_text`` of the messages, without joining the 4-7 kB prompt (with
    content capture or an uploader, :func:`_text` of it)."""
    if not add.plain or type(messages) is not list:
        return _text(add, _prompt_text(messages)) if not add.plain else len(str(messages))
    size = -2
    for message in messages:
        if type(message) is dict or isinstance(message, Mapping):
            size += len(str(message.get("content"))) + 2
    return max(size, 0)


def _as_list(messages: Any) -> list[Any]:
    """The messages of a prompt as a list (what ``add.kept`` takes for a prompt joined later)."""
    return messages if type(messages) is list else [{"content": messages}]


def _prompt_text(messages: Any) -> str:
    from memtrace_otel.instrument.mem0.pipeline import prompt_text

    return prompt_text(messages)


def _search(add: PackedAdd, specs: tuple[LlmCallSpec, ...], wrapped: Callable[..., Any], args: Args,
            arguments: Kw, kwargs: Kw) -> Any:
    """A search of existing memories: the lineage each returned record's payload carries."""
    start = _time()
    match = _match(add.sources, arguments.get("query"))
    top_k = arguments.get("top_k", arguments.get("limit"))
    top_k = top_k if type(top_k) is int else None
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        add.stages.append(("search", start, _time(), top_k, match, (), type(exc).__qualname__))
        raise
    end = _time()
    try:
        records = result if type(result) is list else ()
        found = _lineage(records) if not add.capture else [_captured(record) for record in records]
        add.stages.append(("search", start, end, top_k, match, found, None))
    except Exception as exc:
        warn_once("mem0 search stage", exc)
    return result


def _lineage(records: list[Any] | tuple[()]) -> list[tuple[Any, ...]]:
    """Each returned record's id and the lineage its payload carries (a payload not a dict carries none)."""
    try:  # qdrant's and mem0's records: one comprehension, no call per record
        return [(str(record.id), payload.get(_VARIABLE), payload.get(_TRACEPARENT)) if type(payload) is dict
                else (str(record.id), None, None) for record in records for payload in (record.payload,)]
    except AttributeError:  # a record without an id or a payload: read one by one
        return [_captured(record)[:3] for record in records]


def _captured(record: Any) -> tuple[Any, ...]:
    """A returned record's id and lineage, and (with content capture) its text and score."""
    payload = getattr(record, "payload", None)
    if type(payload) is not dict:
        payload = {}
    data, score = payload.get("data"), getattr(record, "score", None)
    return (str(getattr(record, "id", None)), payload.get(_VARIABLE), payload.get(_TRACEPARENT),
            data if type(data) is str else None, score if isinstance(score, int | float) else None)


def _match(sources: list[str], text: Any) -> list[int] | None:
    """Which sources a stage reads: those whose text is ``text``; ``None``: all of them."""
    matching = None
    for i, source in enumerate(sources):
        if source == text:
            if matching is None:
                matching = [i]
            else:
                matching.append(i)
    return matching


def _insert(add: PackedAdd, specs: tuple[LlmCallSpec, ...], wrapped: Callable[..., Any], args: Args,
            arguments: Kw, kwargs: Kw) -> Any:
    """An insert: each record's lineage written into its payload (version 1: mem0 made its id just now),
    its id, size and content hash recorded."""
    start = _time()
    ids, payloads = arguments.get("ids"), arguments.get("payloads")
    records: list[Any] = []
    match = None
    try:
        traceparent, capture = add.traceparent, add.capture
        for record_id, payload in zip(ids or (), payloads or (), strict=False):
            if type(payload) is dict:
                data = payload.get("data")
                text = data if type(data) is str else ""
                payload[_VARIABLE] = f"mem0:{record_id}@1"
                payload[_TRACEPARENT] = traceparent
                records.append((str(record_id), text if capture else len(text), content_hash(text)))
                if add.kept is not None:
                    add.kept.append(text)
        if type(payloads) is list and len(payloads) == 1 and type(payloads[0]) is dict:
            match = _match(add.sources, payloads[0].get("data"))
    except Exception as exc:
        warn_once("mem0 insert stage", exc)
    count = len(ids) if type(ids) is list else None
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        add.stages.append(("write", start, _time(), match, records, count, type(exc).__qualname__))
        raise
    add.stages.append(("write", start, _time(), match, records, count, None))
    return result


def _get(add: PackedAdd, specs: tuple[LlmCallSpec, ...], wrapped: Callable[..., Any], args: Args,
         arguments: Kw, kwargs: Kw) -> Any:
    """A record read before a change (1.x's ``_update_memory`` / ``_delete_memory``): the lineage its
    payload carries, which the change's version follows."""
    result = wrapped(*args, **kwargs)
    if result is not None:
        payload = getattr(result, "payload", None)
        if type(payload) is dict:
            if add.before is None:
                add.before = {}
            add.before[str(getattr(result, "id", arguments.get("vector_id")))] = (
                payload.get(_VARIABLE), payload.get(_TRACEPARENT))
    return result


def _update(add: PackedAdd, specs: tuple[LlmCallSpec, ...], wrapped: Callable[..., Any], args: Args,
            arguments: Kw, kwargs: Kw) -> Any:
    """A record's new text: the version its payload carried plus one, written into the new payload."""
    start = _time()
    record_id, payload = str(arguments.get("vector_id")), arguments.get("payload")
    stage = None
    try:
        if type(payload) is dict and type(payload.get("data")) is str:
            before_variable, before_writer = (add.before or {}).get(record_id, (None, None))
            version = _next_version(before_variable)
            text = payload["data"]
            payload[_VARIABLE] = f"mem0:{record_id}@{version}"
            payload[_TRACEPARENT] = add.traceparent
            stage = ["update", start, 0, record_id, before_variable, before_writer, version,
                     text if add.capture else len(text), content_hash(text), None]
            if add.kept is not None:
                add.kept.append(text)
    except Exception as exc:
        warn_once("mem0 update stage", exc)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        if stage is not None:
            stage[2], stage[-1] = _time(), type(exc).__qualname__
            add.stages.append(stage)
        raise
    if stage is not None:
        stage[2] = _time()
        add.stages.append(stage)
    return result


def _next_version(variable_id: Any) -> int:
    """The version after the one a payload's ``memtrace_variable`` names (2 when it names none: the
    record was stored untraced, its first version)."""
    if type(variable_id) is str:
        _, _, version = variable_id.rpartition("@")
        if version.isdigit():
            return int(version) + 1
    return 2


def _delete(add: PackedAdd, specs: tuple[LlmCallSpec, ...], wrapped: Callable[..., Any], args: Args,
            arguments: Kw, kwargs: Kw) -> Any:
    """A record removed: a tombstone after the version its payload carried."""
    start = _time()
    record_id = str(arguments.get("vector_id"))
    before_variable, before_writer = (add.before or {}).get(record_id, (None, None))
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        add.stages.append(("delete", start, _time(), record_id, before_variable, before_writer,
                           type(exc).__qualname__))
        raise
    add.stages.append(("delete", start, _time(), record_id, before_variable, before_writer, None))
    return result


class _SpecFacts(dict[LlmCallSpec, tuple[str, str, str, bool]]):
    """An LLM stage's spec as the packed stage names it: name, category, output, whether it reads the
    records retrieved (made once per spec)."""

    def __missing__(self, spec: LlmCallSpec) -> tuple[str, str, str, bool]:
        facts = self[spec] = (spec.name, spec.category.value, spec.output, spec.reads_retrieved)
        return facts


_SPEC_FACTS = _SpecFacts()

_RECORDERS: dict[str, Callable[..., Any]] = {
    "generate_response": _llm, "search": _search, "insert": _insert, "get": _get, "update": _update,
    "delete": _delete,
}
