"""One traced memory operation: a span plus the variables it read and wrote.

An :class:`Operation` (opened by ``MemoryTracer.operation``) is a span whose
``memtrace.*`` attributes say which variables it read and wrote, with a span
link to the producer of every input whose producer is known, and whose
``gen_ai.*`` attributes say what the GenAI conventions ask of a retrieval, a
memory change or an LLM call made inside it.

Thread and asyncio safety: the current operation lives in a ``ContextVar``
(the same mechanism as the OTel context), so threads and tasks each see
their own; one :class:`Operation` belongs to the task that opened it and is
not meant to be shared. Versions come from the tracer's registry, which
allocates them atomically.

One recording path: ``read`` and ``write`` do only what must happen when they are called (a read
resolves its variable, a write takes its version from the registry and returns the new
:class:`Variable`) and list the variable on the operation; :func:`_record_lineage`, at the end, does
the rest (links, the in-process contents of the outputs, descriptors, contents on the span, upload);
``__exit__`` calls it directly, the mem0 stages through :meth:`Operation._flush_lineage`.
``MemoryTracer.record`` (:func:`_record_once`) runs the same three steps for an operation whose reads
and writes are given at once, without a ``with`` block and without
an :class:`Operation` object.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from hashlib import blake2b as _blake2b
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from memtrace_otel.content.upload import ContentUploader
from memtrace_otel.instrument.genai import (
    RetrievedRecord,
    evaluation_attributes,
    evaluation_event,
    llm_call_attributes,
    retrieval_attributes,
    stored_records_attributes,
)
from memtrace_otel.instrument.record_lineage import lineage_from_metadata, write_lineage
from memtrace_otel.instrument.variables import InProcessContents, Variable, VariableRegistry
from memtrace_otel.semconv import (
    GENAI_CALL_OPERATIONS,
    MEMORY_OPERATIONS,
    Category,
    EvaluationName,
    EvaluationSignal,
    GenAI,
    GenAIEvent,
    GenAIOperation,
    MemTrace,
    MemTraceEvent,
    MemTraceLink,
    MemTraceStep,
    VariableKind,
)
from memtrace_otel.wire import EVALUATION_TEXT_FIELDS, content_hash, evaluation_text_key, split_variable_id

__all__ = ["Operation", "current_operation", "describe"]

_attach, _detach, _set_span_in_context = otel_context.attach, otel_context.detach, trace.set_span_in_context

_current: contextvars.ContextVar[Operation | None] = contextvars.ContextVar(
    "memtrace_current_operation", default=None
)
_STORING_OPERATIONS = frozenset({GenAIOperation.CREATE_MEMORY, GenAIOperation.UPDATE_MEMORY,
                                 GenAIOperation.UPSERT_MEMORY})
"""Memory operations whose ``gen_ai.memory.records`` are the records they stored."""
_INPUTS, _OUTPUTS, _DELETED = MemTrace.INPUTS, MemTrace.OUTPUTS, MemTrace.DELETED
_VARIABLES, _VARIABLE_CONTENTS = MemTrace.VARIABLES, MemTrace.VARIABLE_CONTENTS
_LINK_VARIABLE = MemTraceLink.VARIABLE
_EMPTY_BLAKE2B = _blake2b(digest_size=8)
"""Copied for each content hash (as ``wire.content_hash`` does): cheaper than a new ``blake2b``."""
_new_operation = object.__new__
_NO_USAGE: tuple[int | None, int | None] = (None, None)
_OTHER = VariableKind.OTHER
_INVALID_SPAN, _INTERNAL = trace.INVALID_SPAN, SpanKind.INTERNAL
_CONTENT_TYPES = (str, type(None))
_EVALUATION_TEXT_KEYS = (MemTrace.EVALUATION_QUESTION, MemTrace.EVALUATION_PREDICTION,
                         MemTrace.EVALUATION_GOLD, MemTrace.EVALUATION_EXPLANATION)


class _Owner(Protocol):
    """What an operation needs of the ``MemoryTracer`` that opened it."""

    registry: VariableRegistry
    contents: InProcessContents
    capture_content: bool
    content_max_chars: int
    uploader: ContentUploader | None
    content_ref: str | None
    _tracer: Tracer


def _kind(kind: VariableKind | str) -> VariableKind:
    return kind if isinstance(kind, VariableKind) else VariableKind(kind)


def _plain(owner: _Owner, name: str, category: Category, start: dict[str, Any]) -> Operation:
    """``Operation(owner, name, category, span_name=name, kind=INTERNAL, attributes=start)``, the most common
    operation, made without ``__init__``'s keyword arguments and its frame; every slot is set here, as
    ``__init__`` sets them (the class has no defaults to fall back on)."""
    operation = _new_operation(Operation)
    operation._owner = owner
    operation.name = name
    operation.category = category
    operation._span_name = name
    operation._start = start
    operation.inputs = []
    operation.outputs = []
    # Every slot, the rarely used ones too (see the class's note on its slots).
    operation.span = _INVALID_SPAN
    operation._kind = _INTERNAL
    operation.gen_ai_operation = None
    operation._finished = operation._deleted = operation._named = operation._recording = False
    operation._records_recorded = False
    operation._linked = operation._steps = operation._closing = None
    operation._context = operation._token = operation._op_token = None
    operation._usage = _NO_USAGE
    return operation


def _like(template: Operation) -> Operation:
    """A new operation started as ``template`` was (its owner, names, kind, GenAI operation and start
    attributes, the dictionary shared: the SDK copies it when the span starts, and nothing changes it),
    for a caller that makes the same operation call after call (mem0's ``add``), without
    ``MemoryTracer.operation`` building and checking its start attributes each time."""
    operation = _plain(template._owner, template.name, template.category, template._start)
    operation._span_name = template._span_name
    operation._kind = template._kind
    operation.gen_ai_operation = template.gen_ai_operation
    operation._named = template._named
    return operation


def current_operation() -> Operation | None:
    """The operation open in this thread or task, if any."""
    return _current.get()


class Operation:
    """One traced memory operation: a span plus the variables it read and wrote.

    Lifecycle: ``__enter__`` starts the span and makes it current; ``read`` and
    ``write`` list what the operation read and wrote; ``__exit__`` marks an
    exception as ``ERROR`` with ``error.type``, records the lineage (links to the
    producers, the outputs' in-process contents, the lineage attributes:
    :func:`_record_lineage`), ends the span and restores the context.
    Finishing twice is a no-op. Every ``record_*`` method does nothing on a
    span that is not recording.
    """

    __slots__ = ("_closing", "_context", "_deleted", "_finished", "_kind", "_linked", "_named", "_op_token",
                 "_owner", "_recording", "_records_recorded", "_span_name", "_start", "_steps", "_token",
                 "_usage", "category", "gen_ai_operation", "inputs", "name", "outputs", "span")
    # The per-operation state, in slots: one allocation per operation (an instance with a dictionary is two:
    # the object and its values), each read and write an indexed load or store (CPython 3.11 specialises
    # them as LOAD_ATTR_SLOT / STORE_ATTR_SLOT), and no class default that an unset name would fall back
    # on, which made every read of that name take the generic lookup. So every slot is set when the
    # operation is made (``__init__``, ``_plain``), the rarely used ones too.
    span: Span
    _kind: SpanKind
    gen_ai_operation: GenAIOperation | str | None
    _finished: bool
    _steps: list[str] | None
    _linked: set[int] | None
    """Span ids of the producers linked so far: one link per producer span (the first variable
    read from it names it; ``memtrace.inputs`` lists every one), so a batch of records one span
    wrote costs one link, and the SDK's link limit counts distinct writers. Set by the mem0 stages (one set
    that an ``add``'s stages share); ``None`` otherwise, and :func:`_record_lineage` makes its own."""
    _deleted: bool
    """A tombstone was written (``memtrace.deleted`` is then listed at the end)."""
    _closing: dict[str, AttributeValue] | None
    """Attributes known only when the operation ends, set with the lineage's in one call to the span
    (:func:`_record_lineage`) rather than in a call of their own (mem0's ``add``: its record count and
    outcome)."""
    _usage: tuple[int | None, int | None]
    """Tokens of the LLM calls recorded so far."""
    _context: SpanContext | None
    """The span's context once started: what every write and link names (read once)."""
    _records_recorded: bool
    """``gen_ai.memory.records`` of the stored records was written by ``record_memory``."""
    _recording: bool
    _token: object | None
    _op_token: contextvars.Token[Operation | None] | None
    _named: bool
    """The application chose the span name: a model recorded later does not rename the span."""

    def __init__(
        self,
        owner: _Owner,
        name: str,
        category: Category,
        *,
        span_name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        gen_ai_operation: GenAIOperation | str | None = None,
        named: bool = False,
    ) -> None:
        self._owner = owner
        self.name = name
        self.category = category
        self.gen_ai_operation = gen_ai_operation
        self._span_name = span_name
        self._named = named
        self._kind = kind
        self._start = attributes
        self.inputs: list[Variable] = []
        self.outputs: list[Variable] = []
        self.span = _INVALID_SPAN
        self._finished = self._deleted = self._recording = self._records_recorded = False
        self._linked = self._steps = self._closing = None
        self._context = self._token = self._op_token = None
        self._usage = _NO_USAGE

    # -- lifecycle ---------------------------------------------------------
    def __enter__(self) -> Operation:
        # Tracer.start_span(name, context, kind, attributes, links, start_time), its arguments given by
        # position: CPython 3.11 specialises a call with positional arguments only (keywords take the
        # generic path, matching each name). Written here, not in a method of its own: a frame fewer.
        span = self.span = self._owner._tracer.start_span(self._span_name, None, self._kind, self._start, (),
                                                          None)
        if span.is_recording():
            self._recording = True
            self._context = span.get_span_context()
        self._token = _attach(_set_span_in_context(span))
        self._op_token = _current.set(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            if self._recording:
                if exc is not None:
                    _fail(self.span, exc)
                # _flush_lineage's call, written out: a frame fewer at the end of every with block.
                _record_lineage(self._owner, self.span, self._context, self.inputs, self.outputs,
                                self._closing or {}, self._linked, self._deleted, self._steps,
                                self.gen_ai_operation in _STORING_OPERATIONS and not self._records_recorded)
        finally:
            if self._op_token is not None:
                _current.reset(self._op_token)
            if self._token is not None:
                _detach(self._token)  # type: ignore[arg-type]
            self.span.end()

    async def __aenter__(self) -> Operation:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    @property
    def captures_content(self) -> bool:
        """Contents go on this operation's span (the tracer's content capture)."""
        return self._owner.capture_content

    @property
    def span_context(self) -> SpanContext:
        context = self._context
        return context if context is not None else self.span.get_span_context()

    # -- variables ---------------------------------------------------------
    def read(
        self,
        variable: Variable | str,
        *,
        content: str | None = None,
        kind: VariableKind | str = VariableKind.OTHER,
    ) -> Variable:
        """Declare that this operation reads ``variable``.

        A name (not a :class:`Variable`) resolves to the newest version this
        process knows; an unknown name becomes version 1 with no producer (an
        external input such as a user message).
        """
        if isinstance(variable, str):
            variable = _resolve(self._owner, variable, content, kind, self._recording)
        self.inputs.append(variable)  # linked, if its producer is known, when the operation ends
        return variable

    def read_record(
        self,
        metadata: Mapping[str, object] | None,
        *,
        content: str | None = None,
        name: str | None = None,
        kind: VariableKind | str = VariableKind.MEMORY_UNIT,
    ) -> Variable:
        """Read a stored memory record, taking its lineage from the record's metadata.

        This is what links a query trace to the ingestion trace (and process)
        that wrote the record. Records stored without lineage fall back to
        ``name`` (or the newest version this process knows).

        Raises
        ------
        ValueError
            The record has no lineage and no ``name`` was given.
        """
        variable_id, producer = lineage_from_metadata(metadata)
        if variable_id is None:
            if name is None:
                raise ValueError("record has no memtrace lineage and no name was given")
            return self.read(name, content=content, kind=kind)
        var_name, version = split_variable_id(variable_id)
        variable = Variable(var_name, version, _kind(kind), content, producer)
        self._owner.registry.register(variable)
        self._remember_content(variable)
        return self.read(variable)

    def write(
        self, name: str, content: str | None = None, *, kind: VariableKind | str = VariableKind.OTHER
    ) -> Variable:
        """Declare a new variable (or a new version of ``name``) written by this operation."""
        variable = self._owner.registry.next_version(
            name, kind if type(kind) is VariableKind else _kind(kind), content, self._context)
        self.outputs.append(variable)  # its content kept in process, if need be, when the operation ends
        return variable

    def update(
        self, variable: Variable | str, content: str | None, *, kind: VariableKind | str | None = None
    ) -> Variable:
        """In-place change: read version v of ``variable`` and write a new version after it.

        By name, the operation reads the newest version and writes the next, in
        one step of the registry: threads updating one name never get one version
        twice. Given a :class:`Variable` (or ``name@version``), it reads that
        version and writes one above every version known (v+1 unless another
        writer got there first, which the graph then shows).
        """
        registry, new_kind = self._owner.registry, _kind(kind) if kind else None
        producer = self._context
        if isinstance(variable, str) and "@" not in variable:
            before, after = registry.replace(variable, new_kind, content, producer,
                                             unknown_kind=new_kind or VariableKind.MEMORY_UNIT)
            self.inputs.append(before)
        else:
            before = self.read(variable, kind=new_kind or VariableKind.MEMORY_UNIT)
            after = registry.next_version(before.name, new_kind or before.kind, content, producer,
                                          after=before.version)
        self.outputs.append(after)
        return after

    def delete(self, variable: Variable | str) -> Variable:
        """Delete a unit: read version v and write a tombstone version after it."""
        tombstone = self.update(variable, None)
        tombstone.deleted = True
        self._deleted = True
        return tombstone

    def lineage_metadata(
        self, variable: Variable, metadata: MutableMapping[str, object] | None = None
    ) -> MutableMapping[str, object]:
        """Write ``variable``'s id and producer traceparent into a record's ``metadata``."""
        target: MutableMapping[str, object] = {} if metadata is None else metadata
        write_lineage(target, variable.id, variable.producer)
        return target

    def step(
        self,
        name: str,
        inputs: Sequence[Variable] = (),
        outputs: Sequence[Variable] = (),
    ) -> None:
        """Record an internal step (prompt -> raw LLM response -> parsed facts)."""
        if self._steps is None:
            self._steps = []
        self._steps.append(name)
        if self._recording:
            self.span.add_event(
                MemTraceEvent.STEP,
                {
                    MemTraceStep.NAME: name,
                    MemTraceStep.INPUTS: [v.id for v in inputs],
                    MemTraceStep.OUTPUTS: [v.id for v in outputs],
                },
            )

    def intermediate(
        self, name: str, content: str | None, *, kind: VariableKind | str = VariableKind.OTHER
    ) -> Variable:
        """An intermediate variable of an internal step (a prompt, a raw LLM response).

        It is an output of this operation like any other; the steps say which later
        step read it.
        """
        return self.write(name, content, kind=kind)

    # -- GenAI attributes --------------------------------------------------
    def record_retrieval(
        self,
        records: Iterable[RetrievedRecord | Variable] = (),
        *,
        query: Variable | str | None = None,
        top_k: int | None = None,
        data_source_id: str | None = None,
    ) -> None:
        """Say what a retrieval returned, as the GenAI conventions ask.

        ``records`` are what the operation read (``op.read`` / ``op.read_record``),
        best first; wrap one in :class:`RetrievedRecord` to give its score or store
        id. Writes ``gen_ai.memory.record.count`` (and ``gen_ai.memory.record.id``
        when one record came back), ``gen_ai.retrieval.top_k``,
        ``gen_ai.data_source.id``; with content capture on, also the query text and
        the records as JSON (``gen_ai.memory.*`` on memory searches,
        ``gen_ai.retrieval.*`` otherwise).
        """
        if not self._recording:
            return
        owner = self._owner
        text = query.content if isinstance(query, Variable) else query
        self.span.set_attributes(retrieval_attributes(
            records, memory=self.gen_ai_operation in MEMORY_OPERATIONS, query=text, top_k=top_k,
            data_source_id=data_source_id, capture=owner.capture_content, limit=owner.content_max_chars))

    def record_llm_call(
        self,
        *,
        model: str | None = None,
        provider: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        response_model: str | None = None,
    ) -> None:
        """Say which model an LLM-backed step called and what it spent.

        Token counts add up over the calls of one operation. ``provider`` names
        the model's provider unless the operation was opened with a provider of
        its own (a memory provider keeps ``gen_ai.provider.name``).
        """
        if not self._recording:
            return
        total_in, total_out = self._usage
        if input_tokens is not None:
            total_in = (total_in or 0) + input_tokens
        if output_tokens is not None:
            total_out = (total_out or 0) + output_tokens
        self._usage = (total_in, total_out)
        if GenAI.PROVIDER_NAME in self._start:
            provider = None
        if model and not self._named and self._span_name == self.gen_ai_operation \
                and self.gen_ai_operation in GENAI_CALL_OPERATIONS:
            # The conventions name a model call ``{operation} {gen_ai.request.model}``; the model was
            # not known when the span started.
            self._span_name = f"{self.gen_ai_operation} {model}"
            self.span.update_name(self._span_name)
        self.span.set_attributes(llm_call_attributes(model=model, provider=provider, input_tokens=total_in,
                                                     output_tokens=total_out, response_model=response_model))

    def record_memory(self, *, record_id: str | None = None, count: int | None = None,
                      records: Sequence[RetrievedRecord | Variable] | None = None) -> None:
        """Say which record a create/update/delete acted on, or how many it attempted.

        ``record_id`` only when the operation applies to that one record (the conventions read a
        ``delete_memory`` without one as "delete all": give a several-record delete its ``count``).
        ``records`` are the records it stored, best with their ids in the store
        (:class:`RetrievedRecord`): the opt-in ``gen_ai.memory.records`` (content capture on), and
        the count when ``count`` is not given. Without a call giving ``records``, a create, update
        or upsert describes the memory units it wrote itself when it ends.
        """
        if not self._recording:
            return
        if record_id is not None:
            self.span.set_attribute(GenAI.MEMORY_RECORD_ID, record_id)
        if count is None and records is not None:
            count = len(records)
        if count is not None:
            self.span.set_attribute(GenAI.MEMORY_RECORD_COUNT, int(count))
        if records is not None:
            self._records_recorded = True
            owner = self._owner
            self.span.set_attributes(stored_records_attributes(records, capture=owner.capture_content,
                                                               limit=owner.content_max_chars))

    # -- outcome -----------------------------------------------------------
    def set_outcome(self, outcome: str) -> None:
        """Mark how the operation ended (``noop``, ``skipped``, ``added`` ...)."""
        if self._recording:
            self.span.set_attribute(MemTrace.OPERATION_OUTCOME, outcome)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self._recording:
            self.span.set_attributes(attributes)

    def record_evaluation(
        self,
        passed: bool,
        *,
        score: float | None = None,
        signal: EvaluationSignal | str = EvaluationSignal.GOLD,
        metric: str = EvaluationName.ANSWER_CORRECTNESS,
        question: str | None = None,
        prediction: str | None = None,
        gold: str | None = None,
        explanation: str | None = None,
        evidence: Iterable[str] = (),
        answer: Variable | None = None,
        case_id: str | None = None,
    ) -> None:
        """Record a verdict on an answer, plus the GenAI ``gen_ai.evaluation.result`` event.

        Question, prediction, gold and explanation are content: they go on the
        span only with content capture on. This process's content store keeps
        them either way, for in-process attribution.
        """
        if not self._recording:
            return
        owner, texts = self._owner, (question, prediction, gold, explanation)
        self.span.set_attributes(evaluation_attributes(
            passed, EvaluationSignal(signal), score=score, evidence=evidence, answer=answer, case_id=case_id,
            texts=dict(zip(_EVALUATION_TEXT_KEYS, texts, strict=True)), capture=owner.capture_content,
            limit=owner.content_max_chars))
        self.span.add_event(GenAIEvent.EVALUATION_RESULT, evaluation_event(
            passed, str(metric), score=score, explanation=explanation, capture=owner.capture_content,
            limit=owner.content_max_chars))
        # The in-process content store keeps the verdict's text even when spans do not, so
        # in-process attribution (GraphSpanExporter(content=...)) still knows the gold.
        span_id = f"{self.span_context.span_id:016x}"
        for field_name, value in zip(EVALUATION_TEXT_FIELDS, texts, strict=True):
            if value is not None:
                owner.contents.put(evaluation_text_key(span_id, field_name), value)
        if owner.uploader is not None:
            self._upload_texts(owner.uploader, texts)

    def _upload_texts(self, uploader: ContentUploader, texts: Sequence[str | None]) -> None:
        refs = []
        for field_name, value in zip(EVALUATION_TEXT_FIELDS, texts, strict=True):
            if value is not None:
                digest = content_hash(value)
                uploader.submit(digest, value)
                refs.append(f"{field_name} {digest}")
        if refs:
            self.span.set_attributes({MemTrace.EVALUATION_TEXTS_REF: refs,
                                      MemTrace.CONTENT_REF: self._owner.content_ref})

    # -- internals ---------------------------------------------------------
    def _remember_content(self, variable: Variable) -> None:
        if variable.content is not None and self._recording:
            self._owner.contents.put_version(variable.name, variable.version, variable.content)

    def _truncate(self, text: str) -> str:
        limit = self._owner.content_max_chars
        return text if len(text) <= limit else text[:limit]

    def _flush_lineage(self) -> None:
        """The end of a recording operation, what its reads and writes left to do (:func:`_record_lineage`),
        for the mem0 stages (the ``with`` form's ``__exit__`` and ``MemoryTracer.record`` call the function
        themselves)."""
        _record_lineage(self._owner, self.span, self._context, self.inputs, self.outputs, self._closing or {},
                        self._linked, self._deleted, self._steps,
                        self.gen_ai_operation in _STORING_OPERATIONS and not self._records_recorded)


def _record_lineage(owner: _Owner, span: Span, context: SpanContext | None, inputs: list[Variable],
                    outputs: list[Variable], attributes: dict[str, AttributeValue], linked: set[int] | None,
                    deleted: bool, steps: list[str] | None, storing: bool) -> None:
    """The end of a recording operation, what its reads and writes left to do: a link to each producer,
    the outputs' contents kept in process, the lineage attributes (``attributes``: those known only at the
    end, :attr:`Operation._closing`, set in the same call). The one place they are recorded, for the
    ``with`` form, ``MemoryTracer.record`` and the mem0 stages alike. ``linked``: the producer span ids
    linked already (a set the mem0 stages of one ``add`` share, added to), or ``None``; ``storing``: the
    outputs' memory units are the records a GenAI memory write stored (``gen_ai.memory.records`` with
    content capture) and ``record_memory`` did not record them."""
    # One loop over each list, no comprehension (each costs a function frame in CPython 3.11,
    # a quarter of a microsecond on one- and two-element lists), the links, contents and descriptors
    # made in the same loops: this runs at the end of every traced operation.
    capture, uploader, limit = owner.capture_content, owner.uploader, owner.content_max_chars
    # Described once each, in this order: external inputs (no producer) at every read, then outputs.
    described: list[Variable] | None = [] if capture or uploader is not None else None
    descriptors: list[str] = []
    if inputs:
        input_ids = []
        for v in inputs:
            input_ids.append(v.id)
            producer = v.producer
            if producer is None:
                descriptors.append(v.descriptor or _descriptor(v))
                if described is not None:
                    described.append(v)
            # One link per producer span, in the order of the reads (the first variable read from it
            # names it). A SpanContext is the tuple (trace_id, span_id, is_remote, trace_flags,
            # trace_state, is_valid): its items read directly, without a property's frame each.
            elif producer[5] and (linked is None or producer[1] not in linked):
                if linked is None:
                    linked = set()
                linked.add(producer[1])
                if context is None or context[0] == producer[0]:  # same trace: it may be the parent
                    parent = getattr(span, "parent", None)
                    if parent is not None and parent[1] == producer[1] and parent[0] == producer[0]:
                        # The parent relation already says it; and Jaeger keeps one reference per span,
                        # so a link to the parent would replace the span's CHILD_OF with FOLLOWS_FROM.
                        continue
                span.add_link(producer, {_LINK_VARIABLE: v.id})
        attributes[_INPUTS] = input_ids
    if outputs:
        output_ids = []
        contents, keep_all = owner.contents, not capture
        for v in outputs:
            output_ids.append(v.id)
            # With content capture on, an output's content goes on the span whole unless it is longer
            # than the limit; the in-process store (for spans exported without contents) keeps only
            # what the span does not carry, by reference (name and version: no id string kept).
            content = v.content
            if content is not None and (keep_all or len(content) > limit):
                contents.put_version(v.name, v.version, content)
            descriptor = v.descriptor
            if descriptor is None:  # a version this operation wrote
                descriptor = _descriptor(v)
            descriptors.append(descriptor)
            if described is not None:
                described.append(v)
        attributes[_OUTPUTS] = output_ids
        if deleted:
            attributes[_DELETED] = [v.id for v in outputs if v.deleted]
    if descriptors:
        attributes[_VARIABLES] = descriptors
        if described is not None:
            if capture:
                texts = []
                for v in described:
                    content = v.content
                    texts.append("" if content is None else content if len(content) <= limit
                                 else content[:limit])
                attributes[_VARIABLE_CONTENTS] = texts
            if uploader is not None:
                _upload(uploader, described)
                attributes[MemTrace.CONTENT_REF] = owner.content_ref
    if steps:
        attributes[MemTrace.STEP_NAMES] = steps
    if capture and storing:
        stored = [v for v in outputs if v.kind is VariableKind.MEMORY_UNIT and not v.deleted]
        if stored:
            attributes.update(stored_records_attributes(stored, capture=True, limit=limit))
    if attributes:
        span.set_attributes(attributes)


def _record_once(owner: _Owner, span_name: str, kind: SpanKind, start: dict[str, Any],
                 gen_ai_operation: GenAIOperation | str | None,
                 reads: Sequence[Variable | str | tuple[Any, ...]], writes: Sequence[tuple[Any, ...]],
                 error: BaseException | None, start_time: int | None, end_time: int | None) -> list[Variable]:
    """``MemoryTracer.record``: the operation that ``Operation(owner, ..., span_name=span_name, kind=kind,
    attributes=start, gen_ai_operation=...)`` would be, never entered, reads each of ``reads`` and writes
    each of ``writes`` in order (and fails with ``error``), as ``read`` and ``write`` would, and ends.

    The same steps as the ``with`` form, run by the same code: the span started as
    :meth:`Operation.__enter__` starts it, each read resolved (:func:`_resolve`) and each write versioned by
    the registry, then :func:`_record_lineage`. No :class:`Operation` is made: nothing can reach one (the
    span is not made current: nothing runs inside it), and making one and keeping its state on it cost
    about 5% of the SDK's own span (issue 28, item 2: ``docs/performance.md``). ``reads`` and ``writes``
    were checked (:func:`checked_items`).
    """
    # Tracer.start_span(name, context, kind, attributes, links, start_time) by position, as __enter__ does.
    span = owner._tracer.start_span(span_name, None, kind, start, (), start_time)
    outputs: list[Variable] = []
    try:
        recording = span.is_recording()
        context = span.get_span_context() if recording else None
        inputs: list[Variable] = []
        for item in reads:
            if type(item) is tuple:  # (name, content[, kind]), as read(name, content=, kind=)
                item = _resolve(owner, item[0], item[1], item[2] if len(item) == 3 else _OTHER, recording)
            elif type(item) is str:
                item = _resolve(owner, item, None, _OTHER, recording)
            inputs.append(item)  # type: ignore[arg-type]  # a Variable: checked_items let nothing else by
        next_version = owner.registry.next_version
        for item in writes:  # (name, content[, kind]), as write(name, content, kind=)
            kind_ = item[2] if len(item) == 3 else _OTHER
            outputs.append(next_version(item[0], kind_ if type(kind_) is VariableKind else _kind(kind_),
                                        item[1], context))
        if recording:
            if error is not None:
                _fail(span, error)
            _record_lineage(owner, span, context, inputs, outputs, {}, None, False, None,
                            gen_ai_operation in _STORING_OPERATIONS)
    finally:
        span.end(end_time)
    return outputs


def _fail(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, str(exc)))
    span.set_attribute(GenAI.ERROR_TYPE, type(exc).__qualname__)


def _upload(uploader: ContentUploader, described: list[Variable]) -> None:
    # The hash was computed for the descriptor just before: a submit is a set lookup and an append.
    # A variable without content (a tombstone) needs nothing stored: the empty text's hash resolves
    # to "" without the store, as capture writes "" for it.
    for v in described:
        if v.content is not None:
            uploader.submit(v.hash, v.content)


def _resolve(owner: _Owner, variable: str, content: str | None, kind: VariableKind | str,
             recording: bool) -> Variable:
    # A read by name (``name`` or ``name@version``): the newest version this process knows, or a new
    # external input (version 1, no producer) whose content the in-process store keeps.
    name, version = split_variable_id(variable) if "@" in variable else (variable, 0)
    resolved, new = owner.registry.resolve(name, version, kind if type(kind) is VariableKind else _kind(kind),
                                           content)
    if new and recording and resolved.content is not None:
        owner.contents.put_version(resolved.name, resolved.version, resolved.content)
    return resolved


def checked_items(reads: Iterable[Variable | str | tuple[Any, ...]], writes: Iterable[tuple[Any, ...]]
                  ) -> tuple[Sequence[Variable | str | tuple[Any, ...]], Sequence[tuple[Any, ...]]]:
    """``reads`` and ``writes`` of ``MemoryTracer.record`` as sequences, each item checked, so that a bad
    one raises (one line naming its place) before anything is recorded.

    >>> checked_items(["q", ("p", "text", "prompt")], [("mem:1", None)])
    (['q', ('p', 'text', 'prompt')], [('mem:1', None)])
    >>> checked_items([], [("mem:1", 3)])
    Traceback (most recent call last):
    ...
    TypeError: record: writes[0]'s content must be a str or None, not int
    """
    if type(reads) is not tuple and type(reads) is not list:
        reads = tuple(reads)  # walked twice: checked, then recorded
    if type(writes) is not tuple and type(writes) is not list:
        writes = tuple(writes)
    # The common shapes tested first, in few bytecodes (every recorded read and write comes here);
    # _check_item says what is wrong, or accepts a kind given by its value.
    for item in reads:
        if type(item) is tuple:
            if not ((len(item) == 2 or (len(item) == 3 and type(item[2]) is VariableKind))
                    and type(item[0]) is str and (item[1] is None or type(item[1]) is str)):
                _check_item("reads", reads, item)
        elif type(item) is not str and not isinstance(item, Variable):
            _check_item("reads", reads, item)
    for item in writes:
        if not (type(item) is tuple and (len(item) == 2 or (len(item) == 3 and type(item[2]) is VariableKind))
                and type(item[0]) is str and (item[1] is None or type(item[1]) is str)):
            _check_item("writes", writes, item)
    return reads, writes


def _check_item(where: str, items: Sequence[Any], item: Any) -> None:
    i = next(i for i, other in enumerate(items) if other is item)
    if where == "reads" and type(item) is not tuple:
        raise TypeError(f"record: reads[{i}] must be a Variable, a name or (name, content[, kind]), "
                        f"not {type(item).__name__} {item!r:.60}")
    if type(item) is not tuple or not 2 <= len(item) <= 3:
        raise TypeError(f"record: {where}[{i}] must be (name, content[, kind]), not {type(item).__name__} "
                        f"{item!r:.60}")
    if type(item[0]) is not str:
        raise TypeError(f"record: {where}[{i}]'s name must be a str, not {item[0]!r:.60}")
    if type(item[1]) not in _CONTENT_TYPES:
        raise TypeError(f"record: {where}[{i}]'s content must be a str or None, not {type(item[1]).__name__}")
    if len(item) == 3 and type(item[2]) is not VariableKind:
        try:
            VariableKind(item[2])
        except ValueError:
            raise ValueError(f"record: {where}[{i}]'s kind {item[2]!r:.60} is not a VariableKind") from None


def describe(variable: Variable) -> str:
    """The ``memtrace.variables`` descriptor of ``variable`` (see :mod:`memtrace_otel.wire`).

    >>> from memtrace_otel.semconv import VariableKind
    >>> describe(Variable("msg:D1:1", 1, VariableKind.MESSAGE, "hello"))
    'message 5 a7b6eda801e5347d msg:D1:1@1'
    """
    return _descriptor(variable)


def _descriptor(variable: Variable) -> str:
    # wire.describe's format, inlined, made once per version (kept on the variable: an external input
    # such as a prompt is read, and described, by operation after operation). ``kind._value_`` is the
    # member's plain string, read without the ``value`` property or a dictionary keyed by the enum.
    content = variable.content
    digest = variable._hash
    if digest is None:  # wire.content_hash, inlined (a call fewer per version written)
        hasher = _EMPTY_BLAKE2B.copy()
        try:
            hasher.update((content or "").encode())
        except UnicodeEncodeError:
            hasher.update((content or "").encode("utf-8", "replace"))
        digest = variable._hash = hasher.hexdigest()
    descriptor = variable.descriptor = \
        f"{variable.kind._value_} {len(content) if content is not None else 0} {digest} {variable.id}"
    return descriptor
