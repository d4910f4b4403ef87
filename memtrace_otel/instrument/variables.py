"""Variables of the memory evolution graph, and the in-process registry of their versions.

A variable is one value in the pipeline (a message, a memory unit, a query, a
retrieved context, a prompt, an answer ...). Its id is ``name@version``; an
in-place change of a memory unit makes ``version + 1``.

Locks: the methods every traced operation calls (``VariableRegistry.next_version`` and ``resolve``,
``InProcessContents.put_version``) take their lock with ``acquire()`` and release it in ``finally``
rather than with ``with``: the same lock held over the same statements, but in CPython 3.11 a ``with``
block looks up and binds the lock's ``__enter__`` and ``__exit__`` and calls ``__exit__`` with three
arguments through the generic call path, about 1,000 machine instructions more per block than the two
method calls (callgrind), and an operation takes three such locks. The other methods keep ``with``.
"""

from __future__ import annotations

import threading
import zlib
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

from opentelemetry.trace import SpanContext

from memtrace_otel.semconv import VariableKind
from memtrace_otel.wire import content_hash

__all__ = ["InProcessContents", "Variable", "VariableRegistry"]

_KEY = -(1 << 63)
"""The version slot of a content kept under a plain key (``InProcessContents.put``): no variable's."""
_VERSION_MAX = (1 << 63) - 1
"""The largest version a slot of the content store's ring holds (a signed 64-bit integer)."""
_MAX_SLOTS = 1 << 16
"""High-water slots of the version registry: 512 KiB of marks at most."""


def _slot(name: str, slots: int) -> int:
    return zlib.crc32(name.encode("utf-8", "surrogatepass")) & (slots - 1)


@dataclass(slots=True, init=False)
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
    descriptor: str | None = field(default=None, init=False, repr=False, compare=False)
    """Its ``memtrace.variables`` descriptor once an operation has described it (one per version)."""

    def __init__(self, name: str, version: int, kind: VariableKind, content: str | None = None,
                 producer: SpanContext | None = None, deleted: bool = False,
                 _hash: str | None = None) -> None:
        # Written out rather than generated: the generated __init__ calls a __post_init__ for the id,
        # and every traced write makes one of these.
        self.name = name
        self.version = version
        self.kind = kind
        self.content = content
        self.producer = producer
        self.deleted = deleted
        self._hash = _hash
        # Computed once: the id is read on every link, attribute and registry access.
        self.id = f"{name}@{version}"  # wire.variable_id, inlined (every version made)
        self.descriptor = None

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

    Every version this registry hands out is unique per name, under threads and
    after eviction. Allocation (:meth:`next_version`, :meth:`replace`) reads the
    newest version and records the next one under one lock acquisition. A name
    evicted to stay within ``max_names`` leaves its newest version in a fixed
    array of high-water marks indexed by the name's hash; a later allocation for
    any name of that slot starts above it. So versions never repeat; after the
    first eviction, names sharing a slot with an evicted name may skip numbers
    (the graph links each version to the next one it knows, gaps included).
    The array costs 8 bytes a slot: ``min(max_names, 65536)`` rounded up to a
    power of two, 512 KiB at the default 100k names, against the tens of MiB the
    names themselves hold. Slots come from CRC-32 of the name, not Python's
    salted ``hash``, so the versions of a run do not depend on ``PYTHONHASHSEED``;
    before the first eviction no slot is computed at all.

    Versions are unique within one process: two processes writing one name
    without reading each other's records both start at 1 (reading a record
    through ``Operation.read_record`` tells this registry its version).

    Thread-safe: one lock guards the map and the marks; every method holds it
    only for a few dictionary operations.
    """

    def __init__(self, max_names: int = 100_000) -> None:
        if max_names < 1:
            raise ValueError("max_names must be >= 1")
        self._latest: OrderedDict[str, Variable] = OrderedDict()
        self._max_names = max_names
        self._slots = 1 << (min(max_names, _MAX_SLOTS) - 1).bit_length()
        self._evicted = array("q", bytes(8 * self._slots))
        self._any_evicted = False
        self._lock = threading.Lock()

    def latest(self, name: str) -> Variable | None:
        """The newest version of ``name`` seen in this process, if any (``None`` once evicted)."""
        with self._lock:
            variable = self._latest.get(name)
            if variable is not None:
                self._latest.move_to_end(name)
            return variable

    def next_version(self, name: str, kind: VariableKind, content: str | None,
                     producer: SpanContext | None, *, after: int = 0) -> Variable:
        """Create and remember a new version of ``name``, above every one known and above ``after``.

        Two threads writing one name get two versions, never the same one twice.

        >>> registry = VariableRegistry()
        >>> registry.next_version("mem:1", VariableKind.MEMORY_UNIT, "a", None).id
        'mem:1@1'
        >>> registry.next_version("mem:1", VariableKind.MEMORY_UNIT, "b", None, after=5).id
        'mem:1@6'
        """
        # Inlined _newest/_allocate/_remember: every traced write comes here. The lock is taken with
        # acquire/release, not ``with`` (module note).
        lock = self._lock
        lock.acquire()
        try:
            latest = self._latest
            current = latest.get(name)
            newest = 0 if current is None else current.version
            if self._any_evicted:
                newest = max(newest, self._evicted[_slot(name, self._slots)])
            variable = Variable(name, (newest if newest > after else after) + 1, kind, content, producer)
            latest[name] = variable
            if current is not None:
                latest.move_to_end(name)
            elif len(latest) > self._max_names:  # only a new name makes the map longer
                self._evict()
            return variable
        finally:
            lock.release()

    def replace(self, name: str, kind: VariableKind | None, content: str | None,
                producer: SpanContext | None, *, unknown_kind: VariableKind) -> tuple[Variable, Variable]:
        """``(replaced, new)``: the newest version of ``name`` and a new one after it, atomically.

        An in-place change by name reads the version it replaces. The new
        version has ``kind``, or the replaced one's when ``None``. A name this
        registry does not know is read as an external input (no producer, content
        unknown, ``unknown_kind``) at the version :meth:`resolve` would give it.

        >>> registry = VariableRegistry()
        >>> before, after = registry.replace("mem:1", None, "b", None, unknown_kind=VariableKind.MEMORY_UNIT)
        >>> before.id, after.id, after.kind.value
        ('mem:1@1', 'mem:1@2', 'memory_unit')
        """
        with self._lock:
            replaced = self._latest.get(name)
            if replaced is None:
                replaced = Variable(name, max(self._newest(name), 1), unknown_kind)
            version = max(self._newest(name), replaced.version) + 1
            return replaced, self._allocate(name, version, kind or replaced.kind, content, producer)

    def resolve(self, name: str, version: int, kind: VariableKind,
                content: str | None) -> tuple[Variable, bool]:
        """The variable a read of ``name`` means, and whether it is new to this registry.

        ``version`` 0 means the newest known. A version this registry does not
        know becomes a variable without a producer (an external input, such as a
        user message) and is remembered; a bare name never seen is version 1 (or,
        once evicted, its high-water mark, since the exact version is gone).

        >>> registry = VariableRegistry()
        >>> registry.resolve("question", 0, VariableKind.QUERY, "Why?")[0].id
        'question@1'
        >>> registry.resolve("question", 0, VariableKind.QUERY, None)[1]
        False
        """
        lock = self._lock  # every read by name comes here: not ``with`` (module note)
        lock.acquire()
        try:
            known = self._latest.get(name)
            if known is not None:
                self._latest.move_to_end(name)
                if version in (0, known.version):
                    return known, False
            variable = Variable(name, version or max(self._newest(name), 1), kind, content)
            if known is None or known.version < variable.version:
                self._remember(variable)
            return variable, True
        finally:
            lock.release()

    def register(self, variable: Variable) -> None:
        """Remember ``variable`` unless a newer version of its name is known."""
        with self._lock:
            current = self._latest.get(variable.name)
            if current is not None and current.version > variable.version:
                return
            self._remember(variable)

    def __len__(self) -> int:
        with self._lock:
            return len(self._latest)

    # -- under the lock ------------------------------------------------------
    def _newest(self, name: str) -> int:
        # The newest version known, or, for a name evicted (or sharing a slot with one), the
        # evicted high-water mark: a floor nothing below may be issued again.
        current = self._latest.get(name)
        newest = 0 if current is None else current.version
        if self._any_evicted:
            newest = max(newest, self._evicted[_slot(name, self._slots)])
        return newest

    def _allocate(self, name: str, version: int, kind: VariableKind, content: str | None,
                  producer: SpanContext | None) -> Variable:
        variable = Variable(name, version, kind, content, producer)
        self._remember(variable)
        return variable

    def _remember(self, variable: Variable) -> None:
        latest = self._latest
        latest[variable.name] = variable
        latest.move_to_end(variable.name)
        if len(latest) > self._max_names:
            self._evict()

    def _evict(self) -> None:
        name, evicted = self._latest.popitem(last=False)
        slot = _slot(name, self._slots)
        if evicted.version > self._evicted[slot]:
            self._evicted[slot] = evicted.version
        self._any_evicted = True


class InProcessContents:
    """Contents of variables kept inside this process, never exported.

    The in-process attribution path reads contents from here when spans were
    exported without them (content capture off). Bounded; least recently
    written contents go first. With content capture on, an operation's outputs
    carry their contents on its span, so only those longer than the truncation
    limit (and every content read or judged) are kept here.

    Every traced write puts its content here, and the contents are read only when a failure is
    attributed in process. So a write keeps only references, in a ring of ``max_items`` slots
    grown once to its bound: the text it was given (the application's own string), and for a variable
    its name and version (:meth:`put_version`; the version as a machine integer, in an array),
    not its id: a write allocates nothing that outlives it. (Keeping a new object per write alive
    for 50,000 writes, an id string and a tuple, made the garbage collector and the allocator of
    every later operation slower: issue 28.) The first read after a write moves the ring into
    the map in write order, making the ids then. What it keeps and drops is what a map filled by
    every write would: the map and the ring together never hold more than ``max_items``: once a
    read has filled the map, a write that would go over moves the ring in (and the oldest out)
    at once. Thread-safe: one lock, held for a few stores per write.
    """

    def __init__(self, max_items: int = 50_000) -> None:
        if max_items < 0:
            raise ValueError("max_items must be >= 0")
        self._items: OrderedDict[str, str] = OrderedDict()
        self._max_items = max_items
        # The ring: slot ``i % max_items`` of write ``i``, grown as written (a tracer that writes little
        # holds little). A version of _KEY means the name is the whole key (``put``); the slots of the
        # settled writes are cleared (no reference kept twice).
        self._names: list[str | None] = []
        self._versions = array("q")
        self._contents: list[str | None] = []
        self._written = 0
        """Writes so far; the ring holds writes ``max(_settled, _written - max_items)`` up to here."""
        self._settled = 0
        """Writes moved into the map so far."""
        self._lock = threading.Lock()
        self.read_in_process = False
        """An in-process attribution reads these contents (``AttributionSpanProcessor`` sets it): what is
        kept only for it (a packed mem0 ``add``'s texts, one tuple per ``add``) is kept only then, since
        every object kept alive makes the allocator and collector of later calls slower."""

    def put(self, variable_id: str, content: str) -> None:
        """Keep ``content`` under ``variable_id`` (any key: a variable id, a verdict text's key)."""
        self.put_version(variable_id, _KEY, content)

    def put_version(self, name: str, version: int, content: str) -> None:
        """Keep ``content`` under the id ``name@version`` (:attr:`Variable.id`), made only when read."""
        lock = self._lock  # every traced write comes here: not ``with`` (module note)
        lock.acquire()
        try:
            written, max_items = self._written, self._max_items
            if written < max_items:  # the ring grows to its bound as it is written, then wraps
                try:  # the range check left to the array: a version beyond 64 bits raises
                    self._versions.append(version)
                except OverflowError:  # a version no slot holds (from a record's metadata)
                    name = f"{name}@{version}"
                    self._versions.append(_KEY)
                self._names.append(name)
                self._contents.append(content)
            elif max_items:
                slot = written % max_items
                try:  # the range check left to the array, as above
                    self._versions[slot] = version
                except OverflowError:  # a version no slot holds (from a record's metadata)
                    name = f"{name}@{version}"
                    self._versions[slot] = _KEY
                self._names[slot] = name
                self._contents[slot] = content
            else:
                return
            self._written = written = written + 1
            # Until a read fills the map, the ring's own bound is the store's; after it, the two together.
            if self._items and min(written - self._settled, max_items) + len(self._items) > max_items:
                self._settle()
        finally:
            lock.release()

    def get(self, variable_id: str) -> str | None:
        with self._lock:
            if self._written != self._settled:
                self._settle()
            return self._items.get(variable_id)

    def __len__(self) -> int:
        with self._lock:
            if self._written != self._settled:
                self._settle()
            return len(self._items)

    @property
    def _queued(self) -> range:
        """The writes not yet moved into the map (what the ring holds beside it)."""
        return range(max(self._settled, self._written - self._max_items), self._written)

    def _settle(self) -> None:
        # Under the lock: the ring into the map, oldest first, as a map written by every put would hold them.
        items, names, versions, contents = self._items, self._names, self._versions, self._contents
        max_items = self._max_items
        for position in self._queued:
            slot = position % max_items
            name, version, content = names[slot], versions[slot], contents[slot]
            names[slot] = contents[slot] = None
            if name is None or content is None:  # never: every position in range was written
                continue
            key = name if version == _KEY else f"{name}@{version}"
            items[key] = content
            items.move_to_end(key)
        self._settled = self._written
        while len(items) > max_items:
            items.popitem(last=False)


ContentStore = InProcessContents
"""The name this class had up to 0.1.0; it clashed with the content store of ``memtrace_otel.content``
(``--content-store``, contents by reference). Kept as an alias so existing imports work."""
