"""The operations mem0's public and internal methods become, shared by both generations.

Public methods: ``add`` (``upsert_memory`` with inference, ``create_memory`` without),
``search``, ``get``, ``get_all`` (``search_memory``), ``update`` (``update_memory``),
``delete``, ``delete_all`` (``delete_memory``) and ``history``. Internal ones, where a
record is really created, changed or removed: ``_create_memory``, ``_update_memory``,
``_delete_memory``, each its own child operation unless the public call that made it
already is that operation. What the records say is written by the store hooks
(``hooks.py``), which see the record ids and payloads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from memtrace_otel.instrument.genai import RetrievedRecord
from memtrace_otel.instrument.mem0.lifecycle import Arguments, MethodSpec, store_and_server
from memtrace_otel.instrument.mem0.scope import (
    Role,
    Scope,
    message_name,
    record_name,
    record_variable,
    stored_variable,
    text_hash,
    unhashed_descriptor,
)
from memtrace_otel.instrument.operation import Operation, _like
from memtrace_otel.instrument.tracer import MemoryTracer
from memtrace_otel.instrument.variables import Variable, VariableRegistry
from memtrace_otel.semconv import Category, GenAI, GenAIOperation, MemTrace, VariableKind

__all__ = [
    "MESSAGE_IDS_KEY",
    "AddSpec",
    "ChangeSpec",
    "CreateSpec",
    "DeleteAllSpec",
    "ReadSpec",
    "SearchSpec",
    "app_message_ids",
    "context_name",
    "read_result",
    "result_items",
    "scoped_context_name",
    "search_scope",
]


def result_items(result: Any) -> list[Mapping[str, Any]]:
    """The memory items of a mem0 result: ``{"results": [...]}``, a list, or one item."""
    if isinstance(result, Mapping):
        items = result.get("results", [result] if "id" in result else [])
    else:
        items = result if isinstance(result, list) else []
    return [item for item in items if type(item) is dict or isinstance(item, Mapping)]


def read_result(op: Operation, registry: VariableRegistry | None, item: Mapping[str, Any]) -> Variable:
    """Read one returned memory item, linking to its producer through the record's metadata."""
    metadata = item.get("metadata")
    if not (type(metadata) is dict or isinstance(metadata, Mapping)):
        metadata = None
    stored = record_variable(registry, item.get("id"), metadata, item.get("memory"))
    return op.read(stored, kind=VariableKind.MEMORY_UNIT)


def messages_of(value: Any) -> list[Mapping[str, Any]]:
    """``add``'s messages as mem0 normalises them (a string is one user message)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, Mapping):
        return [value]
    return [m for m in value if isinstance(m, Mapping)] if isinstance(value, list) else []


def read_all(op: Operation, variables: Iterable[Variable]) -> None:
    for variable in variables:
        op.read(variable)


class _Templated(MethodSpec):
    """A method whose span's start attributes depend only on its memory's store and server and on the GenAI
    operation (and record id) its arguments give: each call starts from a template made once per such key
    (``operation._like``: a fresh operation sharing the template's start-attribute dictionary, which the
    SDK copies at span start), instead of ``MemoryTracer.operation`` building and checking them again."""

    def __init__(self, name: str, category: Category) -> None:
        super().__init__(name, category)
        self._made: dict[tuple[Any, ...], Operation] = {}
        """(tracer, GenAI operation, record id, store, server address, port) -> an operation made by the
        generic path, the template of every later call with the same key."""

    def _operation(self, tracer: MemoryTracer, memory: Any, gen_ai: GenAIOperation | None,
                   arguments: Arguments) -> Operation:
        key = (tracer, gen_ai, self.record_id(arguments) if gen_ai else None, *store_and_server(memory))
        template = self._made.get(key)
        if template is None:
            template = super()._operation(tracer, memory, gen_ai, arguments)
            if len(self._made) >= _MAX_TEMPLATES:  # stores made and dropped by a long-running process
                self._made.clear()
            self._made[key] = template
        return _like(template)


class AddSpec(_Templated):
    """``add``: the messages become message variables; the pipeline's stages are its children."""

    role = Role.ADD

    def gen_ai_operation(self, arguments: Arguments) -> GenAIOperation:
        infer = arguments.get("infer", True)
        return GenAIOperation.UPSERT_MEMORY if infer else GenAIOperation.CREATE_MEMORY

    def record_id(self, arguments: Arguments) -> None:
        return None

    def begin(self, scope: Scope, arguments: Arguments, parent: Scope | None) -> None:
        messages = [m for m in messages_of(arguments.get("messages"))
                    if isinstance(m.get("content"), str) and m.get("role") != "system"]
        ids = app_message_ids(arguments.get("metadata"), len(messages))
        op = scope.op
        owner = op._owner
        # A message is never a copy of another nor what a retrieval returned: without content capture
        # and without an uploader nothing reads its hash (scope.unhashed_descriptor), so none is made.
        unhashed = not owner.capture_content and owner.uploader is None
        for message, app_id in zip(messages, ids, strict=True):
            variable = op.write(message_name(message, app_id), message["content"], kind=VariableKind.MESSAGE)
            if unhashed:
                variable.descriptor = unhashed_descriptor(variable)
            scope.sources.append(variable)

    def end(self, scope: Scope, arguments: Arguments, result: Any) -> None:
        items, op = result_items(result), scope.op
        outcome = ",".join(sorted({str(i.get("event")) for i in items})) if items else "noop"
        # The stored records are written only with content capture (gen_ai.memory.records is opt-in):
        # without it the count says all, and the records are not built; the count and the outcome
        # are then one attribute call on the span (each call takes its lock and checks its values).
        if op.captures_content:
            op.record_memory(count=len(items), records=stored_records(items))
            op.set_outcome(outcome)
        else:
            # Set with the lineage's attributes when the span ends: one call to the span fewer.
            op._closing = {GenAI.MEMORY_RECORD_COUNT: len(items), MemTrace.OPERATION_OUTCOME: outcome}


_MAX_TEMPLATES = 64
"""A templated spec's start templates kept at most (one per tracer, store and server, each ``infer`` value
of ``add``)."""


def stored_records(items: Iterable[Mapping[str, Any]]) -> list[RetrievedRecord]:
    """What ``add`` says it stored, as the records of its span's opt-in ``gen_ai.memory.records``.

    Each result item's id and text (``memory``); a DELETE event stored nothing and is left out.

    >>> [r.id for r in stored_records([{"id": "7f", "memory": "Lives in Porto", "event": "UPDATE"},
    ...                                {"id": "8a", "memory": "x", "event": "DELETE"}])]
    ['7f']
    """
    records = []
    for item in items:
        if item.get("event") == "DELETE" or "id" not in item:
            continue
        text = item.get("memory")
        unit = Variable(record_name(item["id"]), 0, VariableKind.MEMORY_UNIT,
                        text if isinstance(text, str) else None)
        records.append(RetrievedRecord(unit, None, str(item["id"])))
    return records


class SearchSpec(_Templated):
    """``search``: the query in, the records out, each linked to the span that wrote it (its span started
    from a template, as ``add``'s: a search's start attributes name no argument of it)."""

    gen_ai = GenAIOperation.SEARCH_MEMORY

    def begin(self, scope: Scope, arguments: Arguments, parent: Scope | None) -> None:
        query = arguments.get("query")
        if isinstance(query, str):
            digest = text_hash(query)
            scope.sources.append(scope.op.read(f"query:{digest}", content=query, kind=VariableKind.QUERY))
            # The context written in ``end`` is this search's own: two searches of one question for
            # two users must not become versions 1 and 2 of one variable (each would pull the other
            # into the answer's history).
            scope.context = context_name(query, **search_scope(arguments))

    def end(self, scope: Scope, arguments: Arguments, result: Any) -> None:
        op, registry, found = scope.op, scope.registry, []
        for item in result_items(result):
            score = item.get("score")
            score = score if isinstance(score, int | float) else None
            found.append(RetrievedRecord(read_result(op, registry, item), score, str(item.get("id"))))
        top_k = arguments.get("top_k", arguments.get("limit"))
        op.record_retrieval(found, query=scope.sources[0] if scope.sources else None,
                            top_k=top_k if isinstance(top_k, int) else None)
        if scope.context is not None:
            text = "\n".join(r.variable.content or "" for r in found)
            op.write(scope.context, text, kind=VariableKind.CONTEXT)


def context_name(query: str, *, user_id: str | None = None, agent_id: str | None = None,
                 run_id: str | None = None) -> str:
    """The variable a traced ``search`` writes its results into, the context an answer reads.

    An application's own answer operation reads it by name,
    ``op.read(context_name(query, user_id="ana"))`` with the ids the search was scoped by
    (top-level on 1.x, ``filters=`` on 2.x), which links the answer to that search (and through it
    to the records' writers). Each scope gets its own variable: searching one question for two
    users writes two contexts, not two versions of one.

    >>> context_name("Where does the user live?")
    'context:mem0-3da07c86f653cc1c'
    >>> context_name("Where does the user live?", user_id="ana")
    'context:mem0-user_id=ana-3da07c86f653cc1c'
    """
    return scoped_context_name(text_hash(query), {"user_id": user_id, "agent_id": agent_id, "run_id": run_id})


def scoped_context_name(digest: str, ids: Mapping[str, str | None]) -> str:
    """:func:`context_name` of a query whose ``text_hash`` is ``digest``, scoped by ``ids`` (in the order
    user, agent, run, as :func:`search_scope` gives them; empty ones left out)."""
    scope = "".join(f"{key}={value}-" for key, value in ids.items() if value)
    return f"{_CONTEXT_PREFIX}{scope}{digest}"


def search_scope(arguments: Arguments) -> dict[str, str]:
    """The ids a ``search`` is scoped by: top-level arguments (1.x) or plain ``filters`` values (2.x).

    >>> search_scope({"user_id": "ana", "filters": {"run_id": "r1", "agent_id": {"in": ["x"]}}})
    {'user_id': 'ana', 'run_id': 'r1'}
    """
    filters = arguments.get("filters")
    filters = filters if isinstance(filters, Mapping) else {}
    scope = {}
    for key in _SCOPE_KEYS:
        value = arguments.get(key)
        value = value if isinstance(value, str) and value else filters.get(key)
        if isinstance(value, str) and value:
            scope[key] = value
    return scope


def app_message_ids(metadata: Any, count: int) -> list[str | None]:
    """The application's own ids of ``add``'s ``count`` messages, from ``metadata[MESSAGE_IDS_KEY]``.

    A list gives one id per non-system message, in order; a string names a single message.
    Anything else (absent, wrong length, not strings) gives no ids: the messages are then
    named by their text's hash.

    >>> app_message_ids({"memtrace_message_ids": ["D3:5"]}, 1)
    ['D3:5']
    >>> app_message_ids({"memtrace_message_ids": "D3:5"}, 2)
    [None, None]
    """
    value = metadata.get(MESSAGE_IDS_KEY) if isinstance(metadata, Mapping) else None
    if isinstance(value, str):
        value = [value]
    if (isinstance(value, list) and len(value) == count
            and all(isinstance(v, str) and v and len(v) <= 200 for v in value)):
        return list(value)
    return [None] * count


_CONTEXT_PREFIX = "context:mem0-"
_SCOPE_KEYS = ("user_id", "agent_id", "run_id")
MESSAGE_IDS_KEY = "memtrace_message_ids"
"""``add(..., metadata={MESSAGE_IDS_KEY: [...]})``: the application's ids of its messages, which become
the message variables' names (``msg:<id>``), so that evaluation evidence in the same ids matches."""


class ReadSpec(MethodSpec):
    """``get`` / ``get_all`` (records read, linked to their writers) and ``history`` (counted)."""

    def __init__(self, name: str, category: Category, gen_ai: GenAIOperation | None) -> None:
        super().__init__(name, category)
        self.gen_ai = gen_ai

    def end(self, scope: Scope, arguments: Arguments, result: Any) -> None:
        if self.gen_ai is None:
            scope.op.record_memory(count=len(result) if isinstance(result, list) else None)
            return
        items = [item for item in result_items(result) if "memory" in item]
        records = [read_result(scope.op, scope.registry, item) for item in items]
        scope.op.record_retrieval(records)


class ChangeSpec(MethodSpec):
    """``update`` / ``delete`` and their internal ``_update_memory`` / ``_delete_memory``.

    The public method is the operation; the internal one gets its own only when
    something else called it (``add``'s decisions, ``delete_all``). The store
    hooks read the old version and write the new one (or the tombstone).
    """

    def __init__(self, name: str, category: Category, gen_ai: GenAIOperation, role: Role, *,
                 internal: bool = False) -> None:
        super().__init__(name, category)
        self.gen_ai, self.role, self.internal = gen_ai, role, internal

    def applies(self, instance: Any, arguments: Arguments, parent: Scope | None) -> bool:
        return not (self.internal and parent is not None and parent.role is self.role
                    and parent.memory is instance)

    def begin(self, scope: Scope, arguments: Arguments, parent: Scope | None) -> None:
        if parent is not None and parent.role is not Role.DELETE_ALL:
            read_all(scope.op, parent.sources)
        existing = arguments.get("existing_memory")
        if scope.record_id is not None and existing is not None:
            payload = getattr(existing, "payload", None)
            scope.before[scope.record_id] = stored_variable(scope.registry, scope.record_id, payload)


class CreateSpec(MethodSpec):
    """``_create_memory``: one new record, from the message, fact or decision that asked for it."""

    role = Role.CREATE
    gen_ai = GenAIOperation.CREATE_MEMORY

    def begin(self, scope: Scope, arguments: Arguments, parent: Scope | None) -> None:
        if parent is None:
            return
        data = arguments.get("data")
        matching = [v for v in parent.sources if v.content == data]
        scope.sources = matching or list(parent.sources)
        read_all(scope.op, scope.sources)

    def end(self, scope: Scope, arguments: Arguments, result: Any) -> None:
        if isinstance(result, str):
            scope.op.record_memory(record_id=result)


class DeleteAllSpec(MethodSpec):
    """``delete_all``: one ``_delete_memory`` child per record removed.

    Not a memory-client span itself: the conventions read a ``delete_memory`` without a record id
    as deleting every record of the store, and ``delete_all`` removes only the records its filters
    (``user_id`` ...) select. Each removal is a ``delete_memory`` child with its record id.
    """

    role = Role.DELETE_ALL
    gen_ai = None


def method_specs() -> dict[str, MethodSpec]:
    """The specs of the public methods and of the internal ones that change records."""
    return {
        "add": AddSpec("mem0.add", Category.INGEST),
        "search": SearchSpec("mem0.search", Category.RETRIEVAL),
        "get": ReadSpec("mem0.get", Category.RETRIEVAL, GenAIOperation.SEARCH_MEMORY),
        "get_all": ReadSpec("mem0.get_all", Category.RETRIEVAL, GenAIOperation.SEARCH_MEMORY),
        "history": ReadSpec("mem0.history", Category.OTHER, None),
        "update": ChangeSpec("mem0.update", Category.UPDATE, GenAIOperation.UPDATE_MEMORY, Role.UPDATE),
        "delete": ChangeSpec("mem0.delete", Category.DELETION, GenAIOperation.DELETE_MEMORY, Role.DELETE),
        "delete_all": DeleteAllSpec("mem0.delete_all", Category.DELETION),
        "_create_memory": CreateSpec("mem0.create", Category.EXTRACTION),
        "_update_memory": ChangeSpec("mem0.update", Category.UPDATE, GenAIOperation.UPDATE_MEMORY,
                                     Role.UPDATE, internal=True),
        "_delete_memory": ChangeSpec("mem0.delete", Category.DELETION, GenAIOperation.DELETE_MEMORY,
                                     Role.DELETE, internal=True),
    }
