"""``add``'s LLM calls and its search of existing memories recorded straight into their stage events.

With the stages as events of the ``add`` span (:mod:`.stages`), a stage has no span, no context of
its own and nothing nested under it that reads it, yet the generic path still opened one: a
:class:`~.lifecycle.Call`, a :class:`~.scope.Scope` made current, a
:class:`~.stages.StageOperation` with its collector, the steps as dictionaries checked against the
chain rule, the lineage flushed as lists and joined again. These three stages are most of an
``add``'s recorded lineage, and their shape is fixed: an LLM stage reads the ``add``'s sources (and
on the decision call the records retrieved), writes prompt -> response -> parsed lines (always the
chain rule), and a search reads the sources its query matches and writes nothing. So here each is a
:class:`FlatStage`: plain lists filled while mem0 runs, and one ``memtrace.stage`` event built at
its end with its lists joined once. What the event holds, and what the version registry, the
in-process contents and the links receive, is exactly what the generic path wrote
(``tests/mem0/test_mem0_stage_shape.py`` builds both shapes' graphs on the real mem0). The records
an ``add`` inserts are its write stage, leaner still (:class:`FlatWrite`: 2.x's batch, and the insert
of each ``_create_memory``, which itself passes through): the insert only versions its records and
writes their lineage into their payloads, the rest waits for the event; its updates and deletes keep
the generic path, which their semantics need. A flat stage's event is made when the ``add`` ends
(:meth:`FlatStage.finish`), all of them together.

Thread safety: a stage belongs to the call that opened it (mem0's worker thread); the event and the
links go to the ``add`` span, which the SDK locks; the set of linked writers only grows.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import SpanContext

from memtrace_otel.instrument.genai import (
    RetrievedRecord,
    llm_call_attributes,
    retrieval_attributes,
    stored_records_attributes,
)
from memtrace_otel.instrument.mem0.lifecycle import Binder, MethodSpec, warn_once
from memtrace_otel.instrument.mem0.pipeline import LlmCallSpec, prompt_text
from memtrace_otel.instrument.mem0.scope import (
    PendingStage,
    Role,
    Scope,
    current_scope,
    record_name,
    stored_variable,
    unhashed_descriptor,
)
from memtrace_otel.instrument.mem0.stages import joined_list
from memtrace_otel.instrument.operation import describe
from memtrace_otel.instrument.record_lineage import format_traceparent
from memtrace_otel.instrument.tracer import MemoryTracer
from memtrace_otel.instrument.variables import Variable
from memtrace_otel.semconv import (
    Category,
    GenAI,
    MemTrace,
    MemTraceEvent,
    MemTraceLink,
    MemTraceStage,
    RecordMetadata,
    VariableKind,
)

__all__ = ["FlatStage", "FlatWrite", "flat_batch_insert", "flat_create_wrapper", "flat_llm_wrapper",
           "flat_search_wrapper"]

Args = tuple[Any, ...]
Kw = dict[str, Any]
Wrapper = Callable[[Callable[..., Any], Any, Args, Kw], Any]

_LLM_STEPS = ("prompt", "response", "parse")
"""An LLM stage's steps, in the chain rule's order: step ``i`` writes output ``i``."""
_random = random.Random()  # as stages.py: the SDK's RandomIdGenerator's own kind of source
_LINK_VARIABLE = MemTraceLink.VARIABLE
_STAGE = MemTraceEvent.STAGE
_RETRIEVAL = Category.RETRIEVAL.value
_MEMORY_UNIT = VariableKind.MEMORY_UNIT
_RECORD_VARIABLE, _RECORD_TRACEPARENT = RecordMetadata.VARIABLE, RecordMetadata.TRACEPARENT


class FlatStage:
    """One stage of a traced ``add``: what it read and wrote, in plain lists, until its event.

    ``read`` and ``write`` do what :meth:`Operation.read` / :meth:`Operation.write` do for a stage
    event (the registry's versions, the in-process contents, one link per writer on the ``add``
    span), without an operation's state; :meth:`finish` adds the event.
    """

    __slots__ = ("_add", "_capture", "_context", "_end", "_host", "_limit", "_linked", "_links", "_llm",
                 "_owner", "_start", "attributes", "inputs", "outputs", "stage_id", "start", "steps")

    def __init__(self, tracer: MemoryTracer, add: Scope, name: str, category: str) -> None:
        host = add.op
        self._owner, self._host, self._add = tracer, host, add
        self._end = 0
        self._links: list[tuple[SpanContext, str]] | None = None
        """The writers this stage links the ``add`` span to, linked when its event is added."""
        self._llm: tuple[str, Any, Any] | None = None
        """An LLM stage: its name, the messages sent and the response, made into its prompt and
        response variables when its event is added (nothing reads them before)."""
        self._start = {MemTrace.OPERATION_CATEGORY: category, MemTrace.OPERATION_NAME: name}
        # A sampled-out add records nothing, and its stages' versions name no producer (as before).
        self._context = host._context if host._recording else None
        if add.stage_links is None:
            add.stage_links = set() if self._context is None else {self._context.span_id}
        elif not add.stage_links and self._context is not None:
            add.stage_links.add(self._context.span_id)  # the add itself is never linked
        self._linked = add.stage_links
        self._capture, self._limit = tracer.capture_content, tracer.content_max_chars
        ids = getattr(tracer._tracer, "id_generator", None)  # the provider's: a seeded one seeds stages too
        self.stage_id = (ids.generate_span_id() if ids is not None else _random.getrandbits(64)) or 1
        self.start = time.time_ns()
        self.inputs: list[Variable] = []
        self.outputs: list[Variable] = []
        self.steps = 0
        """How many of the LLM chain's steps were taken (prompt, response, parse)."""
        self.attributes: dict[str, Any] = {}

    def read(self, variable: Variable | str, kind: VariableKind = VariableKind.OTHER) -> Variable:
        if isinstance(variable, str):  # a record stored untraced: the newest version this process knows
            owner = self._owner
            variable, new = owner.registry.resolve(variable, 0, kind, None)
            if new and variable.content is not None and self._context is not None:
                owner.contents.put(variable.id, variable.content)
        self.inputs.append(variable)
        producer = variable.producer
        if producer is not None and self._context is not None and producer.span_id not in self._linked \
                and producer.is_valid:
            self._linked.add(producer.span_id)  # decided now: a writer is linked once per add
            if self._links is None:
                self._links = [(producer, variable.id)]
            else:
                self._links.append((producer, variable.id))
        return variable

    def write(self, name: str, content: str | None, *, kind: VariableKind) -> Variable:
        owner = self._owner
        variable = owner.registry.next_version(name, kind, content, self._context)
        if content is not None and self._context is not None \
                and (not self._capture or len(content) > self._limit):
            owner.contents.put(variable.id, content)
        self.outputs.append(variable)
        return variable

    def write_own(self, name: str, content: str | None, *, kind: VariableKind) -> Variable:
        """:meth:`write` of a variable whose name holds this stage's id (its prompt, response, parsed
        lines): no other write can ever name it, so it is version 1 by construction, and the
        registry (which exists to version names written again) is neither asked nor filled. It kept
        the newest version of every name, prompts of several kilobytes included, two of each kind
        per LLM stage: on 1.x six of the eight names an ``add`` wrote, each a lock, an ordered-dictionary
        insert and, once the registry is full, an eviction of a name that can be written again."""
        variable = self._own(name, content, kind)
        self.outputs.append(variable)
        return variable

    def _own(self, name: str, content: str | None, kind: VariableKind) -> Variable:
        """The variable :meth:`write_own` writes, not yet among the outputs (the prompt and response
        of an LLM stage are put before its parsed lines when its event is made).

        Its descriptor carries no content hash unless something reads one: a content hash is read
        only to find a text in a store by reference (the uploader's, :func:`_fill_contents` of the
        graph builder) or to move contents captured on a span into one (``externalize``). Without
        content capture and without an uploader neither happens, and an own variable is never a
        copy of another (:meth:`GraphIndex.original`) nor a record a retrieval returned
        (``lineage._results``). So the BLAKE2b of the stage's prompt (4-7 kB on mem0), response and
        parsed lines is skipped then; the kind and size, which the engines read, stay."""
        owner = self._owner
        variable = Variable(name, 1, kind, content, self._context)
        if self._context is not None:
            capture = self._capture
            if content is not None and (not capture or len(content) > self._limit):
                owner.contents.put(variable.id, content)
            if not capture and owner.uploader is None:
                variable.descriptor = unhashed_descriptor(variable)
        return variable

    def finish(self, exc: BaseException | None) -> None:
        """The stage ended: its event is due (nothing when the ``add`` is not recording).

        The event is built and added when the ``add`` ends, or before another of its stages that
        is not flat starts (:func:`~.lifecycle.emit_stages`: the events keep the order the stages
        ended in), with the time the stage ended; until then the stage waits on the ``add``'s scope.
        Built here, between mem0's own steps, each event paid for code and data mem0 had pushed out
        of the processor's caches; built together, the second and later find them warm. Nothing is
        left out: the same attributes, the same event, at the same time."""
        if self._context is None:
            return
        if exc is not None:
            self.attributes[GenAI.ERROR_TYPE] = type(exc).__qualname__
        self._end = time.time_ns()
        _pend(self._add, self)

    def emit(self) -> None:
        """The stage's ``memtrace.stage`` event on the ``add`` span, at the time the stage ended."""
        attributes = self.attributes
        span = self._host.span
        links = self._links
        for producer, variable_id in links or ():
            span.add_link(producer, {_LINK_VARIABLE: variable_id})
        if self._llm is not None:  # the prompt and the response, before the parsed lines
            name, messages, result = self._llm
            stage_id = f"{self.stage_id:016x}"
            own = [self._own(f"{name}.prompt:{stage_id}", prompt_text(messages), VariableKind.PROMPT)]
            if self.steps >= 2:
                text = result if isinstance(result, str) else json.dumps(result, default=str)
                own.append(self._own(f"{name}.response:{stage_id}", text, VariableKind.RESPONSE))
            self.outputs[:0] = own
        # The lineage lists joined here, as they are made (join_lists does it to a stage operation's
        # lists afterwards, by the same rule): the event's values are the same.
        limit = getattr(getattr(span, "_limits", None), "max_attribute_length", None)
        described: list[Variable] = []  # external inputs (no producer): described here
        if self.inputs:
            ids = []
            for v in self.inputs:
                ids.append(v.id)
                if v.producer is None:
                    described.append(v)
            attributes[MemTrace.INPUTS] = joined_list(ids, limit)
        if self.outputs:
            attributes[MemTrace.OUTPUTS] = joined_list([v.id for v in self.outputs], limit)
            described += self.outputs
        if described:
            attributes[MemTrace.VARIABLES] = joined_list([v.descriptor or describe(v) for v in described],
                                                         limit)
            if self._capture:
                chars = self._limit
                attributes[MemTrace.VARIABLE_CONTENTS] = [
                    "" if v.content is None else v.content[:chars] for v in described]
            uploader = self._owner.uploader
            if uploader is not None:
                for v in described:  # as Operation's flush: a tombstone needs nothing stored
                    if v.content is not None:
                        uploader.submit(v.hash, v.content)
                attributes[MemTrace.CONTENT_REF] = self._owner.content_ref
        if self.steps:
            attributes[MemTrace.STEP_NAMES] = joined_list(list(_LLM_STEPS[:self.steps]), limit)
        attributes.update(self._start)
        attributes[MemTraceStage.ID] = f"{self.stage_id:016x}"
        attributes[MemTraceStage.START] = self.start
        span.add_event(_STAGE, attributes, timestamp=self._end)


def _add_scope(instance: Any, component: str) -> Scope | None:
    """The traced ``add`` this call of ``instance`` (its memory's ``component``) runs in, if any."""
    scope = current_scope()
    if scope is None or scope.role is not Role.ADD or getattr(scope.memory, component, None) is not instance:
        return None
    return scope if is_instrumentation_enabled() else None


def _guarded(what: str, function: Callable[..., None], *args: Any) -> None:
    try:
        function(*args)
    except Exception as exc:  # the instrumentation's fault must not become the application's
        warn_once(what, exc)


def _run(stage: FlatStage, what: str, wrapped: Callable[..., Any], args: Args, kwargs: Kw,
         end: Callable[[Any], None]) -> Any:
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        _guarded(f"{what} end", stage.finish, exc)
        raise
    # As a Call: a fault recording the result still leaves the stage's event with what it has.
    _guarded(f"{what} end", end, result)
    _guarded(f"{what} end", stage.finish, None)
    return result


def flat_llm_wrapper(tracer: MemoryTracer, specs: tuple[LlmCallSpec, ...],
                     function: Callable[..., Any]) -> Wrapper:
    """Each LLM call inside ``add`` is the stage its position says (extraction, decisions ...)."""
    bind = Binder.of(function)

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        add = _add_scope(instance, "llm")
        if add is None or not specs:
            return wrapped(*args, **kwargs)
        index, add.llm_calls = add.llm_calls, add.llm_calls + 1
        spec = specs[min(index, len(specs) - 1)]
        try:
            stage = FlatStage(tracer, add, spec.name, spec.category.value)
            _llm_begin(stage, spec, add, bind(args, kwargs))
        except Exception as exc:
            warn_once(f"{spec.name} start", exc)
            return wrapped(*args, **kwargs)
        return _run(stage, spec.name, wrapped, args, kwargs,
                    lambda result: _llm_end(stage, spec, add, result))

    return wrapper


def _llm_begin(stage: FlatStage, spec: LlmCallSpec, add: Scope, arguments: Kw) -> None:
    # LlmCallSpec.begin, flat: the reads, the prompt (made with the event), the model.
    for variable in add.sources + add.retrieved if spec.reads_retrieved else add.sources:
        stage.read(variable)
    stage._llm = (spec.name, arguments.get("messages"), None)
    stage.steps = 1
    memory = add.memory
    model_name = getattr(getattr(getattr(memory, "llm", None), "config", None), "model", None)
    provider = getattr(getattr(getattr(memory, "config", None), "llm", None), "provider", None)
    stage.attributes.update(llm_call_attributes(model=model_name if isinstance(model_name, str) else None,
                                                provider=provider))


def _llm_end(stage: FlatStage, spec: LlmCallSpec, add: Scope, result: Any) -> None:
    # LlmCallSpec.end, flat: prompt -> response (both made with the event) -> parsed lines, now: the
    # next stage's sources.
    stage._llm = (spec.name, stage._llm[1] if stage._llm else None, result)
    stage.steps = 2
    lines = spec.parse(result)
    parsed = stage.write_own(f"{spec.output}:{stage.stage_id:016x}", "\n".join(lines),
                             kind=VariableKind.FACTS)
    stage.steps = 3
    stage.attributes[MemTrace.OPERATION_OUTCOME] = f"{len(lines)} {spec.output.rsplit('.', 1)[-1]}"
    add.sources = [parsed]


def flat_search_wrapper(tracer: MemoryTracer, name: str, function: Callable[..., Any]) -> Wrapper:
    """``add`` searching the memories its new facts may change (1.x: per fact; 2.x: once)."""
    bind = Binder.of(function)

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        add = _add_scope(instance, "vector_store")
        if add is None:
            return wrapped(*args, **kwargs)
        try:
            arguments = bind(args, kwargs)
            stage = FlatStage(tracer, add, name, _RETRIEVAL)
            # ExistingSearchSpec.begin: the sources the query is (a fact's text), else all of them.
            query = arguments.get("query")
            sources = add.sources
            for variable in [v for v in sources if v.content == query] or sources:
                stage.read(variable)
        except Exception as exc:
            warn_once(f"{name} start", exc)
            return wrapped(*args, **kwargs)
        return _run(stage, name, wrapped, args, kwargs,
                    lambda result: _search_end(stage, add, arguments, result))

    return wrapper


def _search_end(stage: FlatStage, add: Scope, arguments: Kw, result: Any) -> None:
    # ExistingSearchSpec.end, flat: each record read (linked to its writer) and retrieved for the add.
    # Without content capture the retrieval attributes need only the count: no record objects.
    registry, capture, retrieved = stage._owner.registry, stage._capture, add.retrieved
    found: list[RetrievedRecord | Variable] = []
    for record in result if isinstance(result, list) else []:
        record_id = getattr(record, "id", None)
        variable = stage.read(stored_variable(registry, record_id, getattr(record, "payload", None)),
                              VariableKind.MEMORY_UNIT)
        retrieved.append(variable)
        if capture:
            score = getattr(record, "score", None)
            found.append(RetrievedRecord(variable, score if isinstance(score, int | float) else None,
                                         str(record_id)))
        else:
            found.append(variable)
    top_k = arguments.get("top_k", arguments.get("limit"))
    stage.attributes.update(retrieval_attributes(
        found, memory=False, top_k=top_k if isinstance(top_k, int) else None,
        capture=capture, limit=stage._limit))


class FlatWrite:
    """The records one insert of a traced ``add`` stores: its write stage (``mem0.create``), with no
    :class:`FlatStage` and no call of its own.

    What the insert must do while mem0 waits is only what the stored records carry: each record's
    next version in the registry and its lineage written into its payload (the version's id and the
    ``add`` span's traceparent, which a later search reads back). The rest (its reads and their
    links, the in-process contents, the record attributes and the ``memtrace.stage`` event) is made
    when the ``add`` ends, with the other stages' events (:meth:`emit`), from what the insert
    returned and the two times around it. The event is the one the stage wrote before, attribute for
    attribute, so the graph keeps its ``mem0.create`` node (category ``extraction``) between the
    decision or extraction and the record, which the engines read (``tests/mem0/test_mem0_stage_shape.py``).

    Which sources it read comes from its own arguments (``CreateSpec.begin``'s rule): a one-record
    insert (1.x's ``_create_memory``, an ``add`` without inference, 2.x's one-by-one fallback) reads the
    sources whose text is its record's, else all of them; a batch (2.x) reads every source. 2.x's batch
    reads one source, its parsed facts, so the two rules agree on it.
    """

    __slots__ = ("_add", "_context", "_end", "_error", "_owner", "_start", "arguments", "inputs", "records",
                 "stage_id", "start")

    def __init__(self, tracer: MemoryTracer, add: Scope, start: dict[str, Any], arguments: Kw) -> None:
        host = add.op
        self._owner, self._add, self._start = tracer, add, start
        # A sampled-out add records nothing, and its records name no producer (as before).
        self._context = context = host._context if host._recording else None
        ids = getattr(tracer._tracer, "id_generator", None)  # the provider's: a seeded one seeds stages too
        self.stage_id = (ids.generate_span_id() if ids is not None else _random.getrandbits(64)) or 1
        self.start = time.time_ns()
        self._end = 0
        self._error: BaseException | None = None
        self.arguments = arguments
        sources = add.sources
        payloads = arguments.get("payloads")
        if type(payloads) is list and len(payloads) == 1 and type(payloads[0]) is dict:
            data = payloads[0].get("data")
            sources = [v for v in sources if v.content == data] or sources
        self.inputs: list[Variable] = list(sources)
        self.records: list[tuple[Variable, str]] = []
        """Each record stored: its version and its id in the store."""
        _write_records(self, context, arguments)

    def finish(self, exc: BaseException | None) -> None:
        """The insert returned (or raised): the stage's event is due when the ``add`` ends."""
        if self._context is None:
            return
        self._error = exc
        self._end = time.time_ns()
        _pend(self._add, self)

    def emit(self) -> None:
        """The write stage's ``memtrace.stage`` event on the ``add`` span, at the time the insert returned
        (:meth:`FlatStage.emit`'s attributes, in its order)."""
        owner, add, records = self._owner, self._add, self.records
        span = add.op.span
        context = self._context
        assert context is not None  # only a recording add's writes are pending
        capture, limit = owner.capture_content, owner.content_max_chars
        # The reads (FlatStage.read): one link per writer per add, on the add span.
        linked = add.stage_links
        if linked is None:
            linked = add.stage_links = {context.span_id}
        elif not linked:
            linked.add(context.span_id)  # the add itself is never linked
        for v in self.inputs:
            producer = v.producer
            if producer is not None and producer.span_id not in linked and producer.is_valid:
                linked.add(producer.span_id)
                span.add_link(producer, {_LINK_VARIABLE: v.id})
        contents = owner.contents
        for v, _ in records:  # the in-process contents (FlatStage.write)
            content = v.content
            if content is not None and (not capture or len(content) > limit):
                contents.put(v.id, content)
        # The record attributes (FlatStage.record_memory, as write_records called it).
        attributes: dict[str, Any] = {}
        ids, payloads = self.arguments.get("ids"), self.arguments.get("payloads")
        if isinstance(ids, Sequence) and isinstance(payloads, Sequence):  # as _write_records read them
            if len(ids) == 1:
                attributes[GenAI.MEMORY_RECORD_ID] = str(ids[0])
                attributes[GenAI.MEMORY_RECORD_COUNT] = len(records)
            else:
                attributes[GenAI.MEMORY_RECORD_COUNT] = len(ids)
            if capture:
                stored = [RetrievedRecord(v, None, record_id) for v, record_id in records]
                attributes.update(stored_records_attributes(stored, capture=True, limit=limit))
        if self._error is not None:
            attributes[GenAI.ERROR_TYPE] = type(self._error).__qualname__
        length_limit = getattr(getattr(span, "_limits", None), "max_attribute_length", None)
        described = [v for v in self.inputs if v.producer is None]
        if self.inputs:
            attributes[MemTrace.INPUTS] = joined_list([v.id for v in self.inputs], length_limit)
        if records:
            attributes[MemTrace.OUTPUTS] = joined_list([v.id for v, _ in records], length_limit)
            described += [v for v, _ in records]
        if described:
            attributes[MemTrace.VARIABLES] = joined_list([v.descriptor or describe(v) for v in described],
                                                         length_limit)
            if capture:
                attributes[MemTrace.VARIABLE_CONTENTS] = [
                    "" if v.content is None else v.content[:limit] for v in described]
            uploader = owner.uploader
            if uploader is not None:
                for v in described:
                    if v.content is not None:
                        uploader.submit(v.hash, v.content)
                attributes[MemTrace.CONTENT_REF] = owner.content_ref
        attributes.update(self._start)
        attributes[MemTraceStage.ID] = f"{self.stage_id:016x}"
        attributes[MemTraceStage.START] = self.start
        span.add_event(_STAGE, attributes, timestamp=self._end)


def _write_records(write: FlatWrite, context: SpanContext | None, arguments: Kw) -> None:
    """Each inserted record's next version, its lineage written into its payload before mem0 stores
    it (``pipeline.write_records``, without the writer's calls: its contents and attributes are the
    event's business, :meth:`FlatWrite.emit`)."""
    ids, payloads = arguments.get("ids"), arguments.get("payloads")
    if not isinstance(ids, Sequence) or not isinstance(payloads, Sequence):
        return
    registry, records = write._owner.registry, write.records
    traceparent = format_traceparent(context) if context is not None and context.is_valid else None
    for record_id, payload in zip(ids, payloads, strict=False):
        if isinstance(payload, dict):
            data = payload.get("data")
            variable = registry.next_version(record_name(record_id), _MEMORY_UNIT,
                                             data if isinstance(data, str) else None, context)
            payload[_RECORD_VARIABLE] = variable.id  # record_lineage.write_lineage, its producer the add
            if traceparent is not None:
                payload[_RECORD_TRACEPARENT] = traceparent
            records.append((variable, str(record_id)))


def flat_batch_insert(tracer: MemoryTracer, spec: MethodSpec,
                      function: Callable[..., Any]) -> Callable[[Callable[..., Any], Scope, Args, Kw], Any]:
    """An insert into the store of a traced ``add``: its write stage, a :class:`FlatWrite`."""
    bind = Binder.of(function)
    starts = _StartAttributes(tracer, spec)
    what = spec.name

    def insert(wrapped: Callable[..., Any], add: Scope, args: Args, kwargs: Kw) -> Any:
        if not is_instrumentation_enabled():
            return wrapped(*args, **kwargs)
        try:
            arguments = bind(args, kwargs)
            write = FlatWrite(tracer, add, starts(add.memory, arguments), arguments)
        except Exception as exc:
            warn_once(f"{what} start", exc)
            return wrapped(*args, **kwargs)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            _guarded(f"{what} end", write.finish, exc)
            raise
        _guarded(f"{what} end", write.finish, None)
        return result

    return insert


def flat_create_wrapper(generic: Wrapper) -> Wrapper:
    """``_create_memory`` inside a traced ``add``: passed through, its insert recording the write stage
    (:class:`FlatWrite`, which knows a one-record create from its own arguments); anywhere else,
    ``generic`` (its own span).

    The stage's record id is the insert's (mem0 returns the id it inserted under); it starts at the
    insert and ends when the insert returns, rather than around the whole call (which then writes
    mem0's history row: not the record's lineage)."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        add = current_scope()
        if add is None or add.role is not Role.ADD:
            return generic(wrapped, instance, args, kwargs)
        return wrapped(*args, **kwargs)

    return wrapper


class _StartAttributes:
    """The start attributes of a write stage (``MethodSpec.start_attributes``: the GenAI memory-client
    attributes its span would start with), made once per memory and reused: they depend only on the
    memory's store and server, which mem0 fixes when it builds the memory, and on no argument of an
    insert (a create names no record id before it runs). Making them built a whole operation per write.
    """

    __slots__ = ("_made", "_spec", "_tracer")

    def __init__(self, tracer: MemoryTracer, spec: MethodSpec) -> None:
        self._tracer, self._spec = tracer, spec
        self._made: tuple[weakref.ref[Any], dict[str, Any]] | None = None
        """The memory they were made for and the attributes, swapped as one (threads read it unlocked)."""

    def __call__(self, memory: Any, arguments: Kw) -> dict[str, Any]:
        made = self._made
        if made is not None and made[0]() is memory:
            return made[1]
        spec = self._spec
        attributes = spec.start_attributes(self._tracer, memory, spec.gen_ai_operation(arguments), arguments)
        with contextlib.suppress(TypeError):  # not weakly referable: made each time
            self._made = (weakref.ref(memory), attributes)
        return attributes


def _pend(add: Scope, stage: PendingStage) -> None:
    """Queue an ended flat stage on its ``add``: its event is added when the ``add`` ends, or before
    another of its stages that is not flat starts (:func:`~.lifecycle.emit_stages`)."""
    if add.pending is None:
        add.pending = [stage]
    else:
        add.pending.append(stage)
