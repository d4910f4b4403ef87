"""mem0's hosted-platform clients, ``MemoryClient`` and ``AsyncMemoryClient``, as memory-client spans.

The platform extracts, decides and stores on its own servers, so a client call is one span with no
children: ``add`` (``upsert_memory``; the messages sent become message variables, the records the
platform reports back, when it waits for them, ``async_mode=False``, are counted and, with content
capture, listed), ``search`` / ``get`` / ``get_all`` (``search_memory``: the records returned are read,
linked to their writers when their metadata carries memtrace lineage), ``update`` (``update_memory``:
the record's next version), ``delete`` (``delete_memory``: a tombstone), ``delete_all`` (an
``INTERNAL`` span: the platform deletes what the filters select, not the store) and ``history``.
Every span carries ``server.address`` / ``server.port`` of the client's ``host``
(``https://api.mem0.ai`` by default), as the GenAI conventions recommend.
"""

from __future__ import annotations

from typing import Any

from memtrace_otel.instrument.genai import RetrievedRecord
from memtrace_otel.instrument.mem0.lifecycle import Arguments, MethodSpec
from memtrace_otel.instrument.mem0.methods import (
    AddSpec,
    DeleteAllSpec,
    ReadSpec,
    SearchSpec,
    result_items,
    stored_records,
)
from memtrace_otel.instrument.mem0.scope import Role, Scope, record_name
from memtrace_otel.semconv import Category, GenAIOperation, VariableKind

__all__ = ["CLIENT_CLASSES", "CLIENT_METHODS", "CLIENT_MODULE", "client_specs"]

CLIENT_MODULE = "mem0.client.main"
CLIENT_CLASSES = ("MemoryClient", "AsyncMemoryClient")
CLIENT_METHODS = ("add", "search", "get", "get_all", "update", "delete", "delete_all", "history")


class ClientAddSpec(AddSpec):
    """``add`` on the platform: only the records it reports (``async_mode=False``) are counted."""

    def end(self, scope: Scope, arguments: Arguments, result: Any) -> None:
        items = [item for item in result_items(result) if "id" in item]
        scope.op.record_memory(count=len(items), records=stored_records(items))
        events = sorted({str(i.get("event")) for i in items}) if items else []
        scope.op.set_outcome(",".join(events) if events else "queued")


class ClientChangeSpec(MethodSpec):
    """``update`` / ``delete`` of one record by id: the next version, or a tombstone, of that record."""

    def __init__(self, name: str, category: Category, gen_ai: GenAIOperation, role: Role) -> None:
        super().__init__(name, category)
        self.gen_ai, self.role = gen_ai, role

    def end(self, scope: Scope, arguments: Arguments, result: Any) -> None:
        record_id = scope.record_id
        if record_id is None:
            return
        op = scope.op
        if self.role is Role.DELETE:
            op.delete(record_name(record_id))
            op.record_memory(record_id=record_id)
            return
        text = arguments.get("text")
        if isinstance(text, str):
            after = op.update(record_name(record_id), text, kind=VariableKind.MEMORY_UNIT)
            op.record_memory(record_id=record_id, records=[RetrievedRecord(after, None, record_id)])
        else:  # metadata or timestamp only: the record's text is unchanged
            op.record_memory(record_id=record_id, count=1)


def client_specs() -> dict[str, MethodSpec]:
    """The specs of the platform client's methods (names as for ``Memory``: the same API)."""
    return {
        "add": ClientAddSpec("mem0.add", Category.INGEST),
        "search": SearchSpec("mem0.search", Category.RETRIEVAL),
        "get": ReadSpec("mem0.get", Category.RETRIEVAL, GenAIOperation.SEARCH_MEMORY),
        "get_all": ReadSpec("mem0.get_all", Category.RETRIEVAL, GenAIOperation.SEARCH_MEMORY),
        "history": ReadSpec("mem0.history", Category.OTHER, None),
        "update": ClientChangeSpec("mem0.update", Category.UPDATE, GenAIOperation.UPDATE_MEMORY,
                                   Role.UPDATE),
        "delete": ClientChangeSpec("mem0.delete", Category.DELETION, GenAIOperation.DELETE_MEMORY,
                                   Role.DELETE),
        "delete_all": DeleteAllSpec("mem0.delete_all", Category.DELETION),
    }
