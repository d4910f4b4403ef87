"""Memory spans made by other instrumentations, read into the graph by their record ids.

A span is *foreign* when it has no ``memtrace.operation.category`` but says it is a memory operation:

* the GenAI conventions' memory-client span (``gen_ai.operation.name`` ``create_memory``,
  ``update_memory``, ``upsert_memory``, ``delete_memory``, ``search_memory``), with
  ``gen_ai.memory.record.id`` and, with the producer's content capture on, ``gen_ai.memory.records``;
* loongsuite-instrumentation-mem0's span (``gen_ai.operation.name = memory_operation``, the mem0
  method in ``gen_ai.memory.operation``, ``gen_ai.memory.id``, and with its capture on the method's
  result in ``gen_ai.memory.output.messages``).

Such spans carry no lineage, only which records they touched. :func:`lineage_spans` infers what
record ids alone allow, in start-time order: a record stored becomes the next version of the variable
``record:<id>`` (reading the version before it, if any); an update the same; a delete a tombstone
version; a search reads the current version of each record it returned and writes a context variable
``context:foreign-<span id>`` holding their texts. What it cannot know, it leaves out: the messages a
record came from (no convention carries them), which records a search returned when the producer
captured no content, which records a delete without a record id removed. An application's own
generation operation in the same trace, started after such a search, is then taken to have read its
context (:func:`search_contexts`): the one inference made from trace structure, not record ids.

A foreign span wrapped around (or inside) one of memtrace's own operation spans describes the same
call twice (both instrumentations on one program): it is left out (:func:`covered`).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from memtrace_otel.graph.attributes import report
from memtrace_otel.semconv import (
    GENAI_OPERATION_CATEGORY,
    LOONGSUITE_MEMORY_OPERATION,
    Category,
    GenAI,
    GenAIOperation,
    LoongsuiteMem0,
    MemTrace,
    VariableKind,
)
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.wire import content_hash, describe

__all__ = ["LOONGSUITE_MEMORY", "ForeignContext", "covered", "is_foreign", "lineage_spans", "search_contexts"]

LOONGSUITE_MEMORY = LOONGSUITE_MEMORY_OPERATION
LOONGSUITE_METHOD, LOONGSUITE_RECORD_ID = LoongsuiteMem0.OPERATION, LoongsuiteMem0.RECORD_ID
LOONGSUITE_INPUT, LOONGSUITE_OUTPUT = LoongsuiteMem0.INPUT_MESSAGES, LoongsuiteMem0.OUTPUT_MESSAGES

_MAX_RECORDS_CHARS = 4_000_000
"""A records attribute longer than this is not parsed (a Python literal is parsed in memory at once)."""
_GENAI_MEMORY = {str(op.value) for op in GENAI_OPERATION_CATEGORY if op != GenAIOperation.RETRIEVAL}
_STORE, _DELETE, _READ = "store", "delete", "read"


def is_foreign(attributes: Mapping[str, Any]) -> bool:
    """A memory span another instrumentation made (no ``memtrace.operation.category``).

    >>> is_foreign({"gen_ai.operation.name": "update_memory", "gen_ai.memory.record.id": "7f"})
    True
    >>> is_foreign({"gen_ai.operation.name": "update_memory", "memtrace.operation.category": "update"})
    False
    >>> is_foreign({"gen_ai.operation.name": "memory_operation", "gen_ai.memory.operation": "add"})
    True
    >>> is_foreign({"gen_ai.operation.name": ["update_memory"]})  # not a string: not a memory span
    False
    """
    if MemTrace.OPERATION_CATEGORY in attributes:
        return False
    operation = attributes.get(GenAI.OPERATION_NAME)
    if type(operation) is not str:  # a list or map from input is unhashable: no set lookup for it
        return False
    return operation in _GENAI_MEMORY or (operation == LOONGSUITE_MEMORY
                                          and isinstance(attributes.get(LOONGSUITE_METHOD), str))


@dataclass(frozen=True, slots=True)
class _Effect:
    action: str  # store, delete, read
    record_id: str
    content: str | None = None


@dataclass(slots=True)
class ForeignContext:
    """What a foreign search returned, as a variable an answer in its trace may have read."""

    trace_id: str
    start: int
    variable_id: str


@dataclass(slots=True)
class _Versions:
    current: dict[str, int] = field(default_factory=dict)

    def next(self, name: str) -> tuple[int | None, int]:
        before = self.current.get(name)
        after = (before or 0) + 1
        self.current[name] = after
        return before, after


def record_variable(record_id: str) -> str:
    """The variable name of a record another instrumentation named by ``record_id``.

    >>> record_variable("7f3c")
    'record:7f3c'
    """
    return f"record:{record_id}"


def _records(value: Any, span: SpanRecord, key: str,
             problems: list[Problem]) -> list[Mapping[str, Any]] | None:
    """The list of record objects in a JSON string (GenAI) or a Python repr (loongsuite), or None."""
    if value is None:
        return None
    parsed: Any = value
    if isinstance(value, str):
        if len(value) > _MAX_RECORDS_CHARS:
            report(problems, span, key, f"is over {_MAX_RECORDS_CHARS} characters; ignored")
            return None
        try:
            parsed = json.loads(value)
        except ValueError:
            try:  # loongsuite writes str() of mem0's result: a Python literal, read without evaluating code
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                report(problems, span, key, "is neither JSON nor a literal list of records; ignored")
                return None
    if isinstance(parsed, Mapping):
        parsed = parsed.get("results", [parsed] if "id" in parsed else [])
    if not isinstance(parsed, list):
        report(problems, span, key, "holds no list of records; ignored")
        return None
    return [item for item in parsed if isinstance(item, Mapping) and item.get("id") is not None]


def _text(item: Mapping[str, Any]) -> str | None:
    for key in ("content", "memory", "text"):
        value = item.get(key)
        if isinstance(value, str):
            return value
    return None


def _genai_effects(span: SpanRecord, operation: str, problems: list[Problem]) -> list[_Effect]:
    a = span.attributes
    records = _records(a.get(GenAI.MEMORY_RECORDS), span, GenAI.MEMORY_RECORDS, problems) or []
    record_id = a.get(GenAI.MEMORY_RECORD_ID)
    if operation == GenAIOperation.SEARCH_MEMORY:
        return [_Effect(_READ, str(item["id"]), _text(item)) for item in records]
    action = _DELETE if operation == GenAIOperation.DELETE_MEMORY else _STORE
    effects = [_Effect(action, str(item["id"]), _text(item)) for item in records]
    if not effects and isinstance(record_id, str) and record_id:
        effects.append(_Effect(action, record_id))
    return effects


def _loongsuite_effects(span: SpanRecord, method: str, problems: list[Problem]) -> list[_Effect]:
    a = span.attributes
    record_id = a.get(LOONGSUITE_RECORD_ID)
    record_id = record_id if isinstance(record_id, str) and record_id else None
    if method in ("add", "batch_update", "search", "get_all", "batch_delete"):
        items = _records(a.get(LOONGSUITE_OUTPUT), span, LOONGSUITE_OUTPUT, problems) or []
        if method in ("search", "get_all"):
            return [_Effect(_READ, str(item["id"]), _text(item)) for item in items]
        effects = []
        for item in items:
            event = str(item.get("event", "ADD")).upper()
            if event in ("ADD", "UPDATE"):
                effects.append(_Effect(_STORE, str(item["id"]), _text(item)))
            elif event == "DELETE" or method == "batch_delete":
                effects.append(_Effect(_DELETE, str(item["id"])))
        return effects
    if record_id is None:
        return []
    if method == "update":
        message = a.get(LOONGSUITE_INPUT)
        return [_Effect(_STORE, record_id, message if isinstance(message, str) else None)]
    if method == "delete":
        return [_Effect(_DELETE, record_id)]
    if method == "get":
        return [_Effect(_READ, record_id)]
    return []


_LOONGSUITE_CATEGORY = {
    "search": Category.RETRIEVAL, "get": Category.RETRIEVAL, "get_all": Category.RETRIEVAL,
    "update": Category.UPDATE, "batch_update": Category.UPDATE, "delete": Category.DELETION,
    "batch_delete": Category.DELETION, "delete_all": Category.DELETION,
}


def _category(span: SpanRecord, effects: list[_Effect], changed_existing: bool) -> Category:
    """The role of a foreign span. An upsert (GenAI ``upsert_memory``, mem0's ``add``) is an extraction
    when every record it stored was new, an update when it changed one that existed, a deletion when
    all it did was delete."""
    a = span.attributes
    operation = a.get(GenAI.OPERATION_NAME)
    method = a.get(LOONGSUITE_METHOD) if operation == LOONGSUITE_MEMORY else None
    if operation == GenAIOperation.UPSERT_MEMORY or method == "add":
        if effects and all(effect.action == _DELETE for effect in effects):
            return Category.DELETION
        return Category.UPDATE if changed_existing else Category.EXTRACTION
    if method is not None:
        return _LOONGSUITE_CATEGORY.get(str(method), Category.OTHER)
    return GENAI_OPERATION_CATEGORY[GenAIOperation(str(operation))]


def lineage_spans(spans: Iterable[SpanRecord], problems: list[Problem]) -> tuple[list[SpanRecord],
                                                                                 list[ForeignContext]]:
    """Copies of the foreign ``spans`` with the ``memtrace.*`` lineage their record ids allow.

    Spans are read in start order (then trace and span id: deterministic); a malformed records
    attribute is one problem and the rest of the span is read. Also returns each search's context.

    >>> write = SpanRecord("a" * 32, "1" * 16, "create_memory", start_time_unix_nano=1, attributes={
    ...     "gen_ai.operation.name": "create_memory", "gen_ai.memory.record.id": "7f"})
    >>> find = SpanRecord("b" * 32, "2" * 16, "search_memory", start_time_unix_nano=2, attributes={
    ...     "gen_ai.operation.name": "search_memory",
    ...     "gen_ai.memory.records": '[{"id": "7f", "content": "Lives in Porto", "score": 0.9}]'})
    >>> (created, found), contexts = lineage_spans([find, write], [])
    >>> created.attributes["memtrace.outputs"], found.attributes["memtrace.inputs"]
    (['record:7f@1'], ['record:7f@1'])
    >>> contexts[0].variable_id
    'context:foreign-2222222222222222@1'
    """
    versions, converted, contexts = _Versions(), [], []
    for span in sorted(spans, key=lambda s: (s.start_time_unix_nano, s.trace_id, s.span_id)):
        a = span.attributes
        operation = a.get(GenAI.OPERATION_NAME)
        effects = (_loongsuite_effects(span, str(a.get(LOONGSUITE_METHOD)), problems)
                   if operation == LOONGSUITE_MEMORY else _genai_effects(span, str(operation), problems))
        inputs: list[str] = []
        outputs: list[str] = []
        deleted: list[str] = []
        described: list[tuple[str, str, str | None]] = []  # kind, id, content
        read_texts: list[str] = []
        changed_existing = False
        for effect in effects:
            name = record_variable(effect.record_id)
            if effect.action == _READ:
                version = versions.current.get(name)
                if version is None:  # written before the spans read: an input with no producer here
                    version = versions.current[name] = 1
                    described.append((VariableKind.MEMORY_UNIT.value, f"{name}@1", effect.content))
                inputs.append(f"{name}@{version}")
                read_texts.append(effect.content or "")
                continue
            before, after = versions.next(name)
            if before is not None:
                inputs.append(f"{name}@{before}")
                changed_existing = True
            variable_id = f"{name}@{after}"
            outputs.append(variable_id)
            described.append((VariableKind.MEMORY_UNIT.value, variable_id,
                              None if effect.action == _DELETE else effect.content))
            if effect.action == _DELETE:
                deleted.append(variable_id)
        if operation == GenAIOperation.SEARCH_MEMORY or a.get(LOONGSUITE_METHOD) in ("search", "get_all"):
            context = f"context:foreign-{span.span_id}@1"
            outputs.append(context)
            described.append((VariableKind.CONTEXT.value, context, "\n".join(read_texts)))
            contexts.append(ForeignContext(span.trace_id, span.start_time_unix_nano, context))
        converted.append(replace(span, attributes={**a, **_lineage_attributes(
            span, _category(span, effects, changed_existing), inputs, outputs, deleted, described)}))
    return converted, contexts


def _lineage_attributes(span: SpanRecord, category: Category, inputs: list[str], outputs: list[str],
                        deleted: list[str], described: list[tuple[str, str, str | None]]) -> dict[str, Any]:
    attributes: dict[str, Any] = {MemTrace.OPERATION_CATEGORY: category.value,
                                  MemTrace.OPERATION_NAME: span.name}
    if inputs:
        attributes[MemTrace.INPUTS] = inputs
    if outputs:
        attributes[MemTrace.OUTPUTS] = outputs
    if deleted:
        attributes[MemTrace.DELETED] = deleted
    if described:
        attributes[MemTrace.VARIABLES] = [
            describe(kind, len(text or ""), content_hash(text or ""), variable_id)
            for kind, variable_id, text in described]
        if any(text is not None for _, _, text in described):
            attributes[MemTrace.VARIABLE_CONTENTS] = [text or "" for _, _, text in described]
    return attributes


def covered(span: SpanRecord, own_spans: set[tuple[str, str]], own_parents: set[tuple[str, str]]) -> bool:
    """``span`` wraps, or is wrapped by, one of memtrace's own operation spans: the same call.

    ``own_spans`` are (trace id, span id) of memtrace's operations; ``own_parents`` their parents'.
    """
    return ((span.trace_id, span.span_id) in own_parents
            or (span.parent_span_id is not None and (span.trace_id, span.parent_span_id) in own_spans))


def search_contexts(contexts: list[ForeignContext],
                    generations: Iterable[tuple[str, str, int]]) -> list[tuple[str, str]]:
    """(context variable, operation node) pairs: each generation operation (node, trace id, start)
    reads the contexts of the foreign searches of its trace that started before it.

    >>> search_contexts([ForeignContext("t", 5, "context:foreign-s@1")],
    ...                 [("op:t:g", "t", 9), ("op:t:h", "t", 1)])
    [('context:foreign-s@1', 'op:t:g')]
    """
    by_trace: dict[str, list[ForeignContext]] = {}
    for context in contexts:
        by_trace.setdefault(context.trace_id, []).append(context)
    pairs = []
    for node, trace_id, start in sorted(generations):
        for context in by_trace.get(trace_id, ()):
            if context.start <= start:
                pairs.append((context.variable_id, node))
    return pairs
