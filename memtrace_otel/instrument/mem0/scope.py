"""What a traced mem0 call is doing, visible to the hooks that run inside it.

mem0 writes memory records deep inside its own methods (``Memory._create_memory``
makes the record id, 2.x's ``add`` inserts a batch directly), so lineage is written
where the record is stored: hooks on the memory's vector store and LLM (``hooks.py``)
look up the :class:`Scope` of the traced call they run in. The scope lives in a
``ContextVar``, so threads and tasks each see their own; mem0's worker threads and
``asyncio.to_thread`` calls get a copy of the caller's context (``lifecycle.py``).

Thread safety: a scope belongs to one traced call; its lists are appended to from
the threads that call spawns (``list.append`` is atomic), never rebound elsewhere.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from memtrace_otel.instrument.genai import RetrievedRecord
from memtrace_otel.instrument.operation import Operation
from memtrace_otel.instrument.record_lineage import parse_traceparent
from memtrace_otel.instrument.variables import Variable, VariableRegistry
from memtrace_otel.semconv import RecordMetadata, VariableKind
from memtrace_otel.wire import parse_variable_id

__all__ = ["PendingStage", "RecordWriter", "Role", "Scope", "current_scope", "message_name", "record_name",
           "record_variable", "stored_variable", "text_hash", "unhashed_descriptor"]


class Role(Enum):
    """What the writes made inside a traced call mean."""

    ADD = "add"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    DELETE_ALL = "delete_all"
    READ = "read"


class RecordWriter(Protocol):
    """What writes the records a store call inserts: an operation, or a flat stage (``flat.py``)."""

    def write(self, name: str, content: str | None, *, kind: VariableKind) -> Variable: ...

    def lineage_metadata(self, variable: Variable, metadata: MutableMapping[str, object]) -> Any: ...

    def record_memory(self, *, record_id: str | None = None, count: int | None = None,
                      records: Sequence[RetrievedRecord | Variable] | None = None) -> None: ...


class PendingStage(Protocol):
    """A flat stage of ``add`` that ended (``flat.FlatStage``): its event is added by :meth:`emit`."""

    def emit(self) -> None: ...


@dataclass(eq=False)
class Scope:
    """One traced mem0 call: its operation, the memory it acts on and what it has seen."""

    memory: Any
    op: Operation
    role: Role
    record_id: str | None = None
    sources: list[Variable] = field(default_factory=list)
    """What records written here derive from: messages, then facts, then the LLM's decisions."""
    retrieved: list[Variable] = field(default_factory=list)
    """Existing memories the call's own searches returned (``add`` shows them to its LLM)."""
    before: dict[str, Variable | str] = field(default_factory=dict)
    """Record id -> the version the call read before changing it."""
    llm_calls: int = 0
    registry: VariableRegistry | None = None
    """The tracer's version registry (records read from the store are registered in it)."""
    parent: Scope | None = None
    """The traced call this one runs inside (``add`` for its pipeline's stages)."""
    context: str | None = None
    """A search's context variable (``methods.context_name`` of its query and scope)."""
    stage_links: set[int] | None = None
    """``add``: span ids of the writers its stage events linked (one link per writer on its span)."""
    pending: list[PendingStage] | None = None
    """``add``: its flat stages that ended and whose events are not added yet (``lifecycle.emit_stages``)."""


_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("memtrace_mem0_scope", default=None)


def current_scope() -> Scope | None:
    """The traced mem0 call this thread or task runs in, if any."""
    return _scope.get()


def set_scope(scope: Scope | None) -> contextvars.Token[Scope | None]:
    return _scope.set(scope)


def reset_scope(token: contextvars.Token[Scope | None]) -> None:
    _scope.reset(token)


def text_hash(text: str) -> str:
    """A short stable hash naming a message or query by its text.

    >>> text_hash("hello")
    'a7b6eda801e5347d'
    """
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def unhashed_descriptor(variable: Variable) -> str:
    """The ``memtrace.variables`` descriptor of ``variable`` with its hash left empty
    (``docs/conventions.md``: a hash nothing can read is not written).

    For a variable whose hash no reader could use: a content hash is read only to find a text in a
    store by reference (the uploader's; the graph builder's ``_fill_contents``) or to move contents
    captured on a span into one (``content/externalize.py``), so without content capture and without
    an uploader it is read only by the engines that compare two variables' hashes, and they compare
    a copy with its original (``GraphIndex.original``) or what a retrieval returned with what it read
    (``lineage._results``). A stage's own variables and ``add``'s messages are neither.

    >>> unhashed_descriptor(Variable("mem0.add.extract.prompt:00ff", 1, VariableKind.PROMPT, "hello"))
    'prompt 5  mem0.add.extract.prompt:00ff@1'
    """
    content = variable.content
    return f"{variable.kind._value_} {len(content) if content is not None else 0}  {variable.id}"


def record_name(record_id: object) -> str:
    """The variable name of a mem0 memory record.

    >>> record_name("7f3c")
    'mem0:7f3c'
    """
    return f"mem0:{record_id}"


def message_name(message: Mapping[str, Any], app_id: str | None = None) -> str:
    """The variable name of a message given to ``add``: ``msg:`` and the application's own id for it,
    else a hash of role and text.

    ``msg:`` makes it a message for evidence matching (``docs/conventions.md``); an app id (from
    ``add``'s metadata, ``methods.MESSAGE_IDS_KEY``) lets evaluation evidence name the same message.

    >>> message_name({"role": "user", "content": "I live in Lisbon"})
    'msg:mem0-983e6025bd77c5ed'
    >>> message_name({"role": "user", "content": "I live in Lisbon"}, "D3:5")
    'msg:D3:5'
    """
    if app_id:
        return f"msg:{app_id}"
    return f"msg:mem0-{text_hash(str(message.get('role')) + ':' + str(message.get('content')))}"


def stored_variable(registry: VariableRegistry | None, record_id: object, payload: object) -> Variable | str:
    """The version a stored record holds, from the lineage in its payload, without reading it yet.

    Records stored untraced, or whose lineage is not well formed (the payload is the
    user's data), give the record's variable name: the newest version this process knows.

    >>> stored_variable(None, "7f", {"memtrace_variable": "mem0:7f@3", "data": "x"}).id
    'mem0:7f@3'
    >>> stored_variable(None, "7f", {"memtrace_variable": "mem0:7f@zero"})
    'mem0:7f'
    """
    metadata = payload if type(payload) is dict or isinstance(payload, Mapping) else None
    return record_variable(registry, record_id, metadata, metadata.get("data") if metadata else None)


def record_variable(registry: VariableRegistry | None, record_id: object, metadata: Mapping[str, Any] | None,
                    content: object) -> Variable | str:
    """:func:`stored_variable` of a record whose lineage is ``metadata`` and whose text is ``content``.

    What a search result gives (``{"id", "memory", "metadata"}``), read without copying it.

    >>> record_variable(None, "7f", {"memtrace_variable": "mem0:7f@2"}, "x").id
    'mem0:7f@2'
    >>> record_variable(None, "7f", None, "x")
    'mem0:7f'
    """
    variable_id = metadata.get(RecordMetadata.VARIABLE) if metadata else None
    parsed = _variable_id(variable_id) if isinstance(variable_id, str) else None
    if parsed is None:
        return record_name(record_id)
    producer = parse_traceparent(metadata.get(RecordMetadata.TRACEPARENT))  # type: ignore[union-attr]
    variable = Variable(parsed[0], parsed[1], VariableKind.MEMORY_UNIT,
                        content if isinstance(content, str) else None, producer)
    if registry is not None:
        registry.register(variable)
    return variable


def _variable_id(text: str) -> tuple[str, int] | None:
    # Records come back search after search: ids of a plausible length are parsed once.
    return _parse_cached(text) if len(text) <= 256 else _parse_cached.__wrapped__(text)


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> tuple[str, int] | None:
    try:
        return parse_variable_id(text)
    except ValueError:
        return None
