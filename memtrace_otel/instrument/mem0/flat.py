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
an ``add`` inserts are a flat write stage too (:func:`flat_batch_insert`: 2.x's batch, and the insert
of each ``_create_memory``, which itself passes through); its updates and deletes keep the generic
path, which their semantics need. A flat stage's event is made when the ``add`` ends
(:meth:`FlatStage.finish`), all of them together.

Thread safety: a stage belongs to the call that opened it (mem0's worker thread); the event and the
links go to the ``add`` span, which the SDK locks; the set of linked writers only grows.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import random
import time
import weakref
from collections.abc import Callable, MutableMapping, Sequence
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
from memtrace_otel.instrument.mem0.pipeline import LlmCallSpec, prompt_text, write_records
from memtrace_otel.instrument.mem0.scope import (
    Role,
    Scope,
    current_scope,
    stored_variable,
)
from memtrace_otel.instrument.mem0.stages import joined_list
from memtrace_otel.instrument.operation import describe
from memtrace_otel.instrument.record_lineage import write_lineage
from memtrace_otel.instrument.tracer import MemoryTracer
from memtrace_otel.instrument.variables import Variable
from memtrace_otel.semconv import (
    Category,
    GenAI,
    MemTrace,
    MemTraceEvent,
    MemTraceLink,
    MemTraceStage,
    VariableKind,
)

__all__ = ["FlatStage", "flat_batch_insert", "flat_create_wrapper", "flat_llm_wrapper", "flat_search_wrapper"]

Args = tuple[Any, ...]
Kw = dict[str, Any]
Wrapper = Callable[[Callable[..., Any], Any, Args, Kw], Any]

_LLM_STEPS = ("prompt", "response", "parse")
"""An LLM stage's steps, in the chain rule's order: step ``i`` writes output ``i``."""
_random = random.Random()  # as stages.py: the SDK's RandomIdGenerator's own kind of source
_LINK_VARIABLE = MemTraceLink.VARIABLE
_STAGE = MemTraceEvent.STAGE
_RETRIEVAL = Category.RETRIEVAL.value


class FlatStage:
    """One stage of a traced ``add``: what it read and wrote, in plain lists, until its event.

    ``read`` and ``write`` do what :meth:`Operation.read` / :meth:`Operation.write` do for a stage
    event (the registry's versions, the in-process contents, one link per writer on the ``add``
    span), without an operation's state; :meth:`finish` adds the event.
    """

    __slots__ = ("_add", "_capture", "_context", "_end", "_host", "_limit", "_linked", "_links", "_llm",
                 "_owner", "_records_recorded", "_start", "attributes", "inputs", "outputs", "stage_id",
                 "start", "steps", "storing")

    def __init__(self, tracer: MemoryTracer, add: Scope, name: str, category: str,
                 start: dict[str, Any] | None = None, *, storing: bool = False) -> None:
        # ``start``: the start attributes the stage's span would have had (a write's GenAI
        # memory-client attributes, ``MemoryTracer.operation``'s); by default its category and name.
        host = add.op
        self._owner, self._host, self._add = tracer, host, add
        self._end = 0
        self._links: list[tuple[SpanContext, str]] | None = None
        """The writers this stage links the ``add`` span to, linked when its event is added."""
        self._llm: tuple[str, Any, Any] | None = None
        """An LLM stage: its name, the messages sent and the response, made into its prompt and
        response variables when its event is added (nothing reads them before)."""
        self._start = start if start is not None else {MemTrace.OPERATION_CATEGORY: category,
                                                       MemTrace.OPERATION_NAME: name}
        self.storing = storing
        """A write of records (``create_memory``): described as stored at the end unless recorded."""
        self._records_recorded = False
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
                variable.descriptor = _unhashed(variable)
        return variable

    def lineage_metadata(self, variable: Variable, metadata: MutableMapping[str, object]) -> None:
        """As :meth:`Operation.lineage_metadata`: the record holds ``variable``, written by the add span."""
        write_lineage(metadata, variable.id, variable.producer)

    def record_memory(self, *, record_id: str | None = None, count: int | None = None,
                      records: Sequence[RetrievedRecord | Variable] | None = None) -> None:
        """As :meth:`Operation.record_memory`, into the stage's attributes."""
        if self._context is None:
            return
        attributes = self.attributes
        if record_id is not None:
            attributes[GenAI.MEMORY_RECORD_ID] = record_id
        if count is None and records is not None:
            count = len(records)
        if count is not None:
            attributes[GenAI.MEMORY_RECORD_COUNT] = int(count)
        if records is not None:
            self._records_recorded = True
            attributes.update(stored_records_attributes(records, capture=self._capture, limit=self._limit))

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
        add = self._add
        if add.pending is None:
            add.pending = [self]
        else:
            add.pending.append(self)

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
        if self.storing and self._capture and not self._records_recorded:
            stored = [v for v in self.outputs if v.kind is VariableKind.MEMORY_UNIT and not v.deleted]
            if stored:
                attributes.update(stored_records_attributes(stored, capture=True, limit=self._limit))
        attributes.update(self._start)
        attributes[MemTraceStage.ID] = f"{self.stage_id:016x}"
        attributes[MemTraceStage.START] = self.start
        span.add_event(_STAGE, attributes, timestamp=self._end)


def _unhashed(variable: Variable) -> str:
    """The ``memtrace.variables`` descriptor of ``variable`` with its hash left empty
    (``docs/conventions.md``: the hash of a stage's own variable is written only when read).

    >>> _unhashed(Variable("mem0.add.extract.prompt:00ff", 1, VariableKind.PROMPT, "hello"))
    'prompt 5  mem0.add.extract.prompt:00ff@1'
    """
    content = variable.content
    return f"{variable.kind._value_} {len(content) if content is not None else 0}  {variable.id}"


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


def flat_batch_insert(tracer: MemoryTracer, spec: MethodSpec,
                      function: Callable[..., Any]) -> Callable[[Callable[..., Any], Scope, Args, Kw], Any]:
    """An insert into the store of a traced ``add``: one write stage (``BatchCreateSpec``, flat).

    2.x's batch of new memories reads every source of the ``add``; the insert of a
    ``_create_memory`` (1.x's decisions, an ``add`` without inference) is its one record, which reads
    the sources its text is, else all of them (``CreateSpec.begin``)."""
    bind = Binder.of(function)
    starts = _StartAttributes(tracer, spec)

    def insert(wrapped: Callable[..., Any], add: Scope, args: Args, kwargs: Kw) -> Any:
        if not is_instrumentation_enabled():
            return wrapped(*args, **kwargs)
        try:
            arguments = bind(args, kwargs)
            stage = FlatStage(tracer, add, spec.name, spec.category.value, starts(add.memory, arguments),
                              storing=True)
            sources = add.sources
            if _creating.get():
                payloads = arguments.get("payloads")
                data = payloads[0].get("data") if isinstance(payloads, list) and len(payloads) == 1 \
                    and isinstance(payloads[0], dict) else None
                sources = [v for v in sources if v.content == data] or sources
            for variable in sources:
                stage.read(variable)
            write_records(stage, arguments)  # the lineage goes into the payloads before they are stored
        except Exception as exc:
            warn_once(f"{spec.name} start", exc)
            return wrapped(*args, **kwargs)
        return _run(stage, spec.name, wrapped, args, kwargs, _nothing)

    return insert


_creating: contextvars.ContextVar[bool] = contextvars.ContextVar("memtrace_mem0_creating", default=False)
"""Inside a ``_create_memory`` of a traced ``add``: its insert is that record's write stage."""


def flat_create_wrapper(tracer: MemoryTracer, spec: MethodSpec, function: Callable[..., Any],
                        generic: Wrapper) -> Wrapper:
    """``_create_memory`` inside a traced ``add``: passed through, its insert recording the write stage
    (:func:`flat_batch_insert`: one wrapper on the write instead of two, no scope of its own); anywhere
    else, ``generic`` (its own span).

    The stage's record id is the insert's (mem0 returns the id it inserted under); it starts at the
    insert and ends when the insert returns, rather than around the whole call (which then writes
    mem0's history row: not the record's lineage)."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kw) -> Any:
        add = current_scope()
        if add is None or add.role is not Role.ADD:
            return generic(wrapped, instance, args, kwargs)
        token = _creating.set(True)
        try:
            return wrapped(*args, **kwargs)
        finally:
            _creating.reset(token)

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


def _nothing(result: Any) -> None:
    """A batch insert's result says nothing more: its records were written before it ran."""
