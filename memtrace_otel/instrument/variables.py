"""Variables of the memory evolution graph, and the in-process registry of their versions.

A variable is one value in the pipeline (a message, a memory unit, a query, a
retrieved context, a prompt, an answer ...). Its id is ``name@version``; an
in-place change of a memory unit makes ``version + 1``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from opentelemetry.trace import SpanContext

from memtrace_otel.semconv import VariableKind
from memtrace_otel.wire import content_hash, variable_id

__all__ = ["ContentStore", "Variable", "VariableRegistry"]

@dataclass(slots=True)
class Variable:
    """One version of one variable.

    ``producer`` is the span context of the operation that wrote it, when known
    (in this process, or read back from a memory record's metadata).
    """

    name: str
    version: int
    kind: VariableKind
    content: str | None = None
    producer: SpanContext | None = None
    deleted: bool = False
    _hash: str | None = field(default=None, repr=False)
    id: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Computed once: the id is read on every link, attribute and registry access.
        self.id = variable_id(self.name, self.version)

    @property
    def hash(self) -> str:
        # Hashing is lazy so that operations on a non-recording span never pay for it.
        if self._hash is None:
            self._hash = content_hash(self.content or "")
        return self._hash

    @property
    def size(self) -> int:
        return len(self.content) if self.content is not None else 0


class VariableRegistry:
    """Latest known version of each variable name, bounded (least recently used go first).

    Thread-safe: one lock guards the map; every method holds it only for a
    dictionary operation.
    """

    def __init__(self, max_names: int = 100_000) -> None:
        if max_names < 1:
            raise ValueError("max_names must be >= 1")
        self._latest: OrderedDict[str, Variable] = OrderedDict()
        self._max_names = max_names
        self._lock = threading.Lock()

    def latest(self, name: str) -> Variable | None:
        """The newest version of ``name`` seen in this process, if any."""
        with self._lock:
            variable = self._latest.get(name)
            if variable is not None:
                self._latest.move_to_end(name)
            return variable

    def new_version(self, name: str, kind: VariableKind, content: str | None,
                    producer: SpanContext | None) -> Variable:
        """Create and remember the next version of ``name`` atomically.

        Two threads writing one name get two versions, never the same one twice.
        """
        with self._lock:
            current = self._latest.get(name)
            variable = Variable(name, 1 if current is None else current.version + 1, kind, content, producer)
            self._latest[name] = variable
            self._latest.move_to_end(name)
            if len(self._latest) > self._max_names:
                self._latest.popitem(last=False)
            return variable

    def register(self, variable: Variable) -> None:
        """Remember ``variable`` unless a newer version of its name is known."""
        with self._lock:
            current = self._latest.get(variable.name)
            if current is not None and current.version > variable.version:
                return
            self._latest[variable.name] = variable
            self._latest.move_to_end(variable.name)
            if len(self._latest) > self._max_names:
                self._latest.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._latest)


class ContentStore:
    """Contents of variables kept inside this process, never exported.

    The in-process attribution path reads contents from here when spans were
    exported without them (content capture off). Bounded; least recently
    written contents go first. Thread-safe: one lock.
    """

    def __init__(self, max_items: int = 50_000) -> None:
        if max_items < 0:
            raise ValueError("max_items must be >= 0")
        self._items: OrderedDict[str, str] = OrderedDict()
        self._max_items = max_items
        self._lock = threading.Lock()

    def put(self, variable_id: str, content: str) -> None:
        if self._max_items == 0:
            return
        with self._lock:
            self._items[variable_id] = content
            self._items.move_to_end(variable_id)
            if len(self._items) > self._max_items:
                self._items.popitem(last=False)

    def get(self, variable_id: str) -> str | None:
        with self._lock:
            return self._items.get(variable_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
