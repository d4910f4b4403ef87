"""A packed mem0 ``add`` (``memtrace.mem0.add``) read back as the span its stage events would have made.

The mem0 instrumentor records an ``add`` as one span whose stages are raw facts in one compact JSON
attribute (:mod:`memtrace_otel.instrument.mem0.packed`; ``docs/conventions.md``, "The packed mem0
``add``"): no ``memtrace.stage`` events, no links, no versions but the records' own. :func:`unpack`
derives from it the span the stage-event shape records for the same call: the ``add`` span's message
variables (``memtrace.outputs``, ``memtrace.variables``), one ``memtrace.stage`` event per stage with
its inputs, outputs, descriptors, steps and GenAI attributes, and one link per writer of the records
its searches read (the traceparent their payloads carry). The builder then makes the same nodes from
it as from the stage events (:mod:`memtrace_otel.graph.stages`).

What the instrumentor no longer decides, the reader does:

* a stage's id: ``blake2b`` of the span id and the stage's place, 16 hex digits (the stage-event shape
  drew a random one; nothing but the node's key and its own variables' names hold it);
* a message's version: the builder counts the packed ``add`` spans that wrote its name, in the order
  of their start times (:func:`message_versions`), where the stage-event shape asked the process's
  registry (which knew nothing of other processes);
* a record's version is the one its payload carries (the instrumentor wrote it: 1 on a create, the
  version read plus one on an update), so it is the store's order of writes, whatever process wrote.

A record a search returned that carries no lineage (stored untraced) is read as ``mem0:<id>@1`` with
the empty text's hash (the stage events hashed its payload text, which a packed ``add`` without content
capture does not record). A malformed packed attribute is one problem; the span is then read as it is
(no stages).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from hashlib import blake2b
from typing import Any

from memtrace_otel.graph.attributes import report
from memtrace_otel.graph.packed_search import PACKED_SEARCH, unpack_search
from memtrace_otel.semconv import (
    STAGE_LIST_SEPARATOR,
    GenAI,
    GenAIOperation,
    MemTrace,
    MemTraceEvent,
    MemTraceLink,
    MemTraceStage,
)
from memtrace_otel.spans.model import Problem, SpanEvent, SpanLink, SpanRecord
from memtrace_otel.spans.packed_add import PACKED_ADD, PACKED_FORMAT, decode_packed, parse_traceparent
from memtrace_otel.wire import content_hash

__all__ = ["PACKED_ADD", "is_packed", "kept_key", "message_versions", "unpack", "unpacked"]

_STEPS = ("prompt", "response", "parse")
_JOIN = STAGE_LIST_SEPARATOR.join
_SERVER = ("server.address", "server.port")


def is_packed(span: SpanRecord) -> bool:
    return PACKED_ADD in span.attributes


def _decoded(span: SpanRecord, problems: list[Problem] | None) -> list[Any] | None:
    packed, wrong = decode_packed(span)
    if packed is None and problems is not None:
        wrong = wrong or f"is not a packed add of format {PACKED_FORMAT}"
        report(problems, span, PACKED_ADD, f"{wrong}; the span is read without its stages")
    return packed


def message_versions(spans: Iterable[SpanRecord]) -> dict[tuple[str, str], dict[str, int]]:
    """Per packed ``add`` span (trace id, span id): the version of each message name it wrote, by the
    order of the spans' start times (ties by trace and span id) among all ``spans``."""
    order = sorted(spans, key=lambda s: (s.start_time_unix_nano, s.trace_id, s.span_id))
    counts: dict[str, int] = {}
    versions: dict[tuple[str, str], dict[str, int]] = {}
    for span in order:
        if (span.trace_id, span.span_id) in versions:  # the same span read twice
            continue
        packed = _decoded(span, None)
        own: dict[str, int] = {}
        for message in packed[2] if packed is not None and type(packed[2]) is list else ():
            name = message[0] if type(message) is list and message and type(message[0]) is str else None
            if name is not None and name not in own:
                own[name] = counts[name] = counts.get(name, 0) + 1
        versions[(span.trace_id, span.span_id)] = own
    return versions


def unpack(span: SpanRecord, versions: dict[str, int], problems: list[Problem],
           made: list[str] | None = None) -> SpanRecord:
    """``span`` as the stage-event shape records it (``versions``: its messages' versions). ``made``
    gets the ids of the variables the ``add`` wrote, in the order of the texts the instrumentor keeps in
    process for them (:func:`kept_key`)."""
    packed = _decoded(span, problems)
    if packed is None:
        return _without(span)
    try:
        unpacker = _Unpacker(span, packed, versions)
        attributes, events, links = unpacker.run()
        if made is not None:
            made += unpacker.made
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        report(problems, span, PACKED_ADD, f"holds a malformed stage ({type(exc).__name__}: {exc}); "
                                           "the span is read without its stages")
        return _without(span)
    return replace(span, attributes=attributes, events=[*span.events, *events], links=[*span.links, *links])


def unpacked(spans: Iterable[SpanRecord]) -> list[SpanRecord]:
    """``spans`` with every packed ``add`` as the span its stage events would have made, and every packed
    ``search`` as the generic shape's (:mod:`.packed_search`): the builder's reading, for tools and tests
    that look at spans rather than the graph."""
    spans = list(spans)
    packed = [s for s in spans if PACKED_ADD in s.attributes]
    versions, problems = message_versions(packed), list[Problem]()
    return [unpack(s, versions.get((s.trace_id, s.span_id), {}), problems) if PACKED_ADD in s.attributes
            else unpack_search(s, problems) if PACKED_SEARCH in s.attributes else s for s in spans]


def kept_key(trace_id: str, span_id: str) -> str:
    """The in-process contents' key of a packed ``add``'s texts (content capture off): a tuple, one text
    per variable it wrote, in the order :func:`unpack` makes them."""
    return f"{PACKED_ADD}:{trace_id}:{span_id}@1"


def _without(span: SpanRecord) -> SpanRecord:
    return replace(span, attributes=_rest(span.attributes))


def _rest(attributes: dict[str, Any]) -> dict[str, Any]:
    """The attributes but the packed ones (``memtrace.mem0.add`` and its parts)."""
    return {k: v for k, v in attributes.items() if not k.startswith(PACKED_ADD)}


class _Var:
    """A variable as the reader knows it: id, whether the ``add`` made it, and its descriptor."""

    __slots__ = ("id", "own", "producer")

    def __init__(self, variable_id: str, producer: tuple[str, str] | None) -> None:
        self.id, self.producer = variable_id, producer
        self.own = False


class _Unpacker:
    def __init__(self, span: SpanRecord, packed: list[Any], versions: dict[str, int]) -> None:
        self.span, self.packed, self.versions = span, packed, versions
        self.me = (span.trace_id, span.span_id)
        self.linked: set[tuple[str, str]] = set()
        self.links: list[SpanLink] = []
        header = packed[1]
        self.model, self.provider, self.limit, self.content_ref = header
        self.capture = self.limit is not None
        self.made: list[str] = []

    def run(self) -> tuple[dict[str, Any], list[SpanEvent], list[SpanLink]]:
        span, messages, stages = self.span, self.packed[2], self.packed[3]
        attributes = _rest(span.attributes)
        sources: list[_Var] = []
        descriptors, contents, ids = [], [], []
        for name, text in messages:
            variable = _Var(f"{name}@{self.versions.get(name, 1)}", self.me)
            self.made.append(variable.id)
            sources.append(variable)
            ids.append(variable.id)
            descriptor, content = self._describe("message", text, variable.id)
            descriptors.append(descriptor)
            contents.append(content)
        if ids:
            attributes[MemTrace.OUTPUTS] = ids
            attributes[MemTrace.VARIABLES] = descriptors
            if self.capture:
                attributes[MemTrace.VARIABLE_CONTENTS] = contents
            if self.content_ref is not None:
                attributes[MemTrace.CONTENT_REF] = self.content_ref
        retrieved: list[_Var] = []
        events = []
        for index, stage in enumerate(stages):
            stage_id = self._stage_id(index)
            kind = stage[0]
            if kind == "llm":
                event, sources = self._llm(stage, stage_id, sources, retrieved)
            elif kind == "search":
                event = self._search(stage, sources, retrieved)
            elif kind == "write":
                event = self._write(stage, sources)
            elif kind in ("update", "delete"):
                event = self._change(stage, sources)
            else:
                raise ValueError(f"unknown stage kind {kind!r}")
            event[MemTraceStage.ID] = stage_id
            event[MemTraceStage.START] = stage[2 if kind == "llm" else 1]
            events.append(SpanEvent(MemTraceEvent.STAGE, stage[3 if kind == "llm" else 2], event))
        return attributes, events, self.links

    def _stage_id(self, index: int) -> str:
        digest = blake2b(f"{self.span.span_id}:{index}".encode(), digest_size=8).hexdigest()
        return digest if digest not in ("0" * 16, self.span.span_id) else f"{int(digest, 16) ^ 1:016x}"

    def _describe(self, kind: str, text: Any, variable_id: str) -> tuple[str, str]:
        """The descriptor of a variable and its captured content: ``text`` is its size (content off) or
        ``[size, hash, content]`` (capture, an uploader: the content truncated as captured)."""
        if type(text) is int:
            return f"{kind} {text}  {variable_id}", ""
        size, digest, content = text
        return f"{kind} {size} {digest} {variable_id}", content or ""

    def _read(self, variable: _Var, inputs: list[str], described: list[tuple[str, str]]) -> None:
        inputs.append(variable.id)
        producer = variable.producer
        if producer is None:
            described.append((f"memory_unit 0 {content_hash('')} {variable.id}", ""))
        elif producer != self.me and producer not in self.linked:
            self.linked.add(producer)
            self.links.append(SpanLink(producer[0], producer[1], {MemTraceLink.VARIABLE: variable.id}))

    def _lineage(self, event: dict[str, Any], inputs: list[str], outputs: list[str],
                 described: list[tuple[str, str]]) -> None:
        if inputs:
            event[MemTrace.INPUTS] = _JOIN(inputs)
        if outputs:
            event[MemTrace.OUTPUTS] = _JOIN(outputs)
        if described:
            event[MemTrace.VARIABLES] = _JOIN(d for d, _ in described)
            if self.capture:
                event[MemTrace.VARIABLE_CONTENTS] = [c for _, c in described]
            if self.content_ref is not None:
                event[MemTrace.CONTENT_REF] = self.content_ref

    def _llm(self, stage: list[Any], stage_id: str, sources: list[_Var],
             retrieved: list[_Var]) -> tuple[dict[str, Any], list[_Var]]:
        _, spec, _, _, prompt, response, count, parsed, error = stage
        name, category, output, reads_retrieved = spec
        event: dict[str, Any] = {}
        if self.model is not None:
            event[GenAI.REQUEST_MODEL] = self.model
        if self.provider is not None:
            event[GenAI.PROVIDER_NAME] = self.provider
        if error is not None:
            event[GenAI.ERROR_TYPE] = error
        inputs: list[str] = []
        described: list[tuple[str, str]] = []
        for variable in sources + retrieved if reads_retrieved else sources:
            self._read(variable, inputs, described)
        own = [(f"{name}.prompt:{stage_id}@1", "prompt", prompt)]
        if response is not None:
            own.append((f"{name}.response:{stage_id}@1", "response", response))
        if count is not None:
            own.append((f"{output}:{stage_id}@1", "facts", parsed))
            event[MemTrace.OPERATION_OUTCOME] = f"{count} {output.rsplit('.', 1)[-1]}"
        outputs = []
        for variable_id, kind, text in own:
            outputs.append(variable_id)
            self.made.append(variable_id)
            described.append(self._describe(kind, text, variable_id))
        self._lineage(event, inputs, outputs, described)
        event[MemTrace.STEP_NAMES] = _JOIN(_STEPS[:len(own)])
        event[MemTrace.OPERATION_CATEGORY] = category
        event[MemTrace.OPERATION_NAME] = name
        if count is not None:
            parsed_variable = _Var(outputs[-1], self.me)
            parsed_variable.own = True
            return event, [parsed_variable]
        return event, sources

    def _record(self, record_id: str, variable_id: Any, traceparent: Any) -> _Var:
        """A record a search returned, as its payload's lineage names it."""
        if type(variable_id) is str and "@" in variable_id:
            return _Var(variable_id, parse_traceparent(traceparent))
        return _Var(f"mem0:{record_id}@1", None)  # stored untraced: no writer to name

    def _search(self, stage: list[Any], sources: list[_Var], retrieved: list[_Var]) -> dict[str, Any]:
        _, _, _, top_k, match, found, error = stage
        event: dict[str, Any] = {}
        inputs: list[str] = []
        described: list[tuple[str, str]] = []
        for variable in [sources[i] for i in match] if match else sources:
            self._read(variable, inputs, described)
        records = []
        for item in found:
            variable = self._record(item[0], item[1], item[2])
            self._read(variable, inputs, described)
            retrieved.append(variable)
            records.append((variable, item))
        if error is not None:
            event[GenAI.ERROR_TYPE] = error
        event[GenAI.MEMORY_RECORD_COUNT] = len(records)
        if top_k is not None:
            event[GenAI.RETRIEVAL_TOP_K] = top_k
        if self.capture and records:
            event.update(_captured_retrieval(records, self.limit))
        self._lineage(event, inputs, [], described)
        event[MemTrace.OPERATION_CATEGORY] = "retrieval"
        event[MemTrace.OPERATION_NAME] = "mem0.add.search"
        return event

    def _write_start(self, operation: GenAIOperation, name: str, category: str,
                     record_id: str | None) -> dict[str, Any]:
        """The GenAI memory-client attributes the write's span would have started with: the ``add``'s
        store, provider and server (``MethodSpec.start_attributes`` of the same memory)."""
        a = self.span.attributes
        start: dict[str, Any] = {MemTrace.OPERATION_CATEGORY: category, MemTrace.OPERATION_NAME: name,
                                 GenAI.OPERATION_NAME: operation.value}
        if GenAI.MEMORY_STORE_ID in a:
            start[GenAI.MEMORY_STORE_ID] = a[GenAI.MEMORY_STORE_ID]
        if record_id is not None:
            start[GenAI.MEMORY_RECORD_ID] = record_id
        if GenAI.PROVIDER_NAME in a:
            start[GenAI.PROVIDER_NAME] = a[GenAI.PROVIDER_NAME]
        for key in _SERVER:
            if key in a:
                start[key] = a[key]
        return start

    def _write(self, stage: list[Any], sources: list[_Var]) -> dict[str, Any]:
        _, _, _, match, records, count, error = stage
        event: dict[str, Any] = {}
        inputs: list[str] = []
        described: list[tuple[str, str]] = []
        for variable in [sources[i] for i in match] if match else sources:
            self._read(variable, inputs, described)
        outputs = []
        for record_id, text, digest in records:
            variable_id = f"mem0:{record_id}@1"
            outputs.append(variable_id)
            self.made.append(variable_id)
            size, content = (text, None) if type(text) is int else (len(text), text)
            described.append((f"memory_unit {size} {digest} {variable_id}",
                              "" if content is None else content[:self.limit or 0]))
        if count is not None:
            if count == 1 and records:
                event[GenAI.MEMORY_RECORD_ID] = records[0][0]
                event[GenAI.MEMORY_RECORD_COUNT] = len(records)
            else:
                event[GenAI.MEMORY_RECORD_COUNT] = count
            if self.capture:
                event.update(_captured_records([(f"mem0:{r[0]}", r[1], r[0]) for r in records], self.limit))
        if error is not None:
            event[GenAI.ERROR_TYPE] = error
        self._lineage(event, inputs, outputs, described)
        event.update(self._write_start(GenAIOperation.CREATE_MEMORY, "mem0.create", "extraction", None))
        return event

    def _change(self, stage: list[Any], sources: list[_Var]) -> dict[str, Any]:
        """An update (``mem0.update``) or delete (``mem0.delete``) a decision of the ``add`` made: it reads
        the ``add``'s sources and the version the record held, and writes the next one (or a tombstone)."""
        kind = stage[0]
        record_id, before_id, before_writer = stage[3], stage[4], stage[5]
        event: dict[str, Any] = {}
        inputs: list[str] = []
        described: list[tuple[str, str]] = []
        for variable in sources:
            self._read(variable, inputs, described)
        before = self._record(record_id, before_id, before_writer)
        self._read(before, inputs, described)
        name = before.id.rpartition("@")[0]
        if kind == "update":
            version, text, digest, error = stage[6], stage[7], stage[8], stage[9]
            after = f"{name}@{version}"
            self.made.append(after)
            size, content = (text, None) if type(text) is int else (len(text), text)
            described.append((f"memory_unit {size} {digest} {after}",
                              "" if content is None else content[:self.limit or 0]))
            event[GenAI.MEMORY_RECORD_ID] = record_id
            event[GenAI.MEMORY_RECORD_COUNT] = 1
            if self.capture:
                event.update(_captured_records([(name, text, record_id)], self.limit))
            operation, category = GenAIOperation.UPDATE_MEMORY, "update"
        else:
            error = stage[6]
            after = f"{name}@{int(before.id.rpartition('@')[2]) + 1}"
            described.append((f"memory_unit 0 {content_hash('')} {after}", ""))
            event[GenAI.MEMORY_RECORD_ID] = record_id
            event[MemTrace.DELETED] = _JOIN([after])
            operation, category = GenAIOperation.DELETE_MEMORY, "deletion"
        if error is not None:
            event[GenAI.ERROR_TYPE] = error
        self._lineage(event, inputs, [after], described)
        event.update(self._write_start(operation, f"mem0.{kind}", category, record_id))
        return event


def _captured_retrieval(records: list[tuple[_Var, list[Any]]], limit: int) -> dict[str, Any]:
    from memtrace_otel.instrument.genai import RetrievedRecord, retrieval_attributes
    from memtrace_otel.instrument.variables import Variable
    from memtrace_otel.semconv import VariableKind

    found = []
    for variable, item in records:
        name, _, version = variable.id.rpartition("@")
        text = item[3] if len(item) > 3 else None
        score = item[4] if len(item) > 4 else None
        found.append(RetrievedRecord(Variable(name, int(version), VariableKind.MEMORY_UNIT, text), score,
                                     str(item[0])))
    return retrieval_attributes(found, memory=False, capture=True, limit=limit)


def _captured_records(records: list[tuple[str, Any, str]], limit: int) -> dict[str, Any]:
    from memtrace_otel.instrument.genai import RetrievedRecord, stored_records_attributes
    from memtrace_otel.instrument.variables import Variable
    from memtrace_otel.semconv import VariableKind

    stored = [RetrievedRecord(Variable(name, 1, VariableKind.MEMORY_UNIT,
                                       text if type(text) is str else None), None, record_id)
              for name, text, record_id in records]
    return stored_records_attributes(stored, capture=True, limit=limit)
