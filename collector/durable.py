"""``memtrace serve``'s write-ahead store: what it acknowledged, kept on disk until it is done with it.

One SQLite database in WAL mode (``<data dir>/serve.sqlite3``) holds

* ``requests``: the body of every accepted OTLP request, as received (protobuf or JSON, after
  gzip), or, for spans handed over in-process, a pickle of their records; a request is
  acknowledged to its sender only once its row is committed;
* with each request, its trace index (``trace id -> (spans, holds a failed evaluation)``, pickled
  in the same row): which traces it holds spans of. A trace's spans are read back from its
  requests when it is attributed, and a request row goes when no unsettled trace needs it. Which
  requests each trace needs is kept in memory (a few numbers a trace), rebuilt from these indexes
  on open: a row per trace per request, written at ingest and deleted at settling, cost more than
  the rest of storing a request (``traces``, that table, is now read only to carry over a data
  directory an older version wrote);
* ``forgotten``: the traces forgotten while a request holding them still lives (attributed, or
  given up), so that reopening does not judge them again; a trace that settled without a failure
  is not written there (settling it again after a restart does nothing);
* ``outbox``: annotation spans, encoded as an OTLP ``ExportTraceServiceRequest``, until the
  trace backend accepts them (or refuses them for good);
* ``redo``: failures whose verdict was made while the backend could not give every trace,
  to be judged again when it answers (their requests are kept meanwhile).

A failure's annotations go into ``outbox`` and the trace is forgotten (the requests only it needed
deleted, or it is written to ``forgotten``) in one transaction, so a crash at any point either
redoes the failure or has its annotations, never both, never neither. On open, what a killed
process left is replayed: the requests' trace indexes are read back (those traces settle again)
and the outbox rows are exported.

Why SQLite (see docs/architecture.md, Decisions): in the standard library, one file, atomic
multi-table transactions (the exactly-once hand-over above), and WAL mode lets a commit cost
one append; ``synchronous=NORMAL`` survives the process being killed (what a crash of ``serve``
is); an operating-system crash may lose the last transactions (``synchronous=FULL`` would fsync
each). The decoded spans are *not* held in memory: the service's index holds a few numbers per
trace, so memory no longer grows with the traces waiting to settle.

Size: ``max_bytes`` bounds the bytes of request bodies and outbox rows held; over it, the oldest
requests are dropped (their traces with them), then the oldest outbox rows; counted and logged.

Thread safety: one connection, one lock; every method is one short transaction.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import sqlite3
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import cast

from memtrace_otel.spans.model import SpanRecord

__all__ = ["KIND_JSON", "KIND_PICKLE", "KIND_PROTOBUF", "DurableStore", "StoredTrace"]

_logger = logging.getLogger(__name__)

KIND_PROTOBUF = 0
KIND_JSON = 1
KIND_PICKLE = 2
"""Spans handed over in-process (``AttributionService.ingest`` without a body)."""
FILE_NAME = "serve.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, body BLOB NOT NULL,
                                     traces BLOB);
CREATE TABLE IF NOT EXISTS traces (trace_id TEXT NOT NULL, request_id INTEGER NOT NULL,
                                   spans INTEGER NOT NULL, failed INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS traces_by_trace ON traces (trace_id);
CREATE INDEX IF NOT EXISTS traces_by_request ON traces (request_id);
CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY, spans INTEGER NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS redo (trace_id TEXT PRIMARY KEY, until REAL NOT NULL, attempts INTEGER NOT NULL,
                                 superseded TEXT NOT NULL, seen TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS forgotten (trace_id TEXT NOT NULL, request_id INTEGER NOT NULL);
"""


@dataclass(slots=True)
class StoredTrace:
    """One trace as the index on disk has it (replayed on open)."""

    trace_id: str
    spans: int
    failed: bool


@dataclass(slots=True)
class Redo:
    """A failure to judge again once the backend answers: until when (wall clock), how often tried,
    the span ids of the annotations a new verdict supersedes (comma-separated hex), and what the
    last attempt with the backend answering gathered (a digest; empty when it failed)."""

    trace_id: str
    until: float
    attempts: int
    superseded: str
    seen: str = ""


class DurableStore:
    """The write-ahead store; ``path`` ``None`` keeps it in memory (library use, tests).

    Parameters
    ----------
    path:
        The data directory (created, mode 0700) or ``None``.
    max_bytes:
        Bytes of bodies held at most; the oldest are dropped past it.

    Raises
    ------
    OSError
        The directory cannot be made or the database opened (one line naming it).
    """

    def __init__(self, path: str | os.PathLike[str] | None, *, max_bytes: int = 1 << 30) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        self.max_bytes = max_bytes
        self._lock_file: int | None = None
        if path is None:
            target = ":memory:"
            self.path: Path | None = None
        else:
            directory = Path(path).expanduser()
            try:
                directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as error:
                raise OSError(f"data directory {directory}: {error.strerror or error}") from None
            self.path = directory / FILE_NAME
            target = str(self.path)
            self._lock_file = _lock(directory)
        try:
            self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as error:
            raise OSError(f"data directory {path}: cannot open {FILE_NAME}: {error}") from None
        self._lock = threading.Lock()
        self.dropped_requests = 0
        """Request bodies dropped because the store was full (their traces are not attributed)."""
        self.dropped_annotation_batches = 0
        """Outbox rows dropped because the store was full."""
        self._warned_full = False
        # trace id -> the live requests holding its spans (an int for one, the common case, else a list,
        # oldest first); request id -> [traces it still holds spans of, its body's size].
        self._requests_of: dict[str, int | list[int]] = {}
        self._held: dict[int, list[int]] = {}
        self._forgotten_rows = 0
        with self._lock:
            try:
                self._open()
            except sqlite3.Error as error:
                raise OSError(f"data directory {path}: cannot read {FILE_NAME}: {error}") from None
            self.held_bytes = sum(value or 0 for value in self._db.execute(
                "SELECT (SELECT SUM(LENGTH(body)) FROM requests), (SELECT SUM(LENGTH(body)) FROM outbox)"
            ).fetchone())

    def _open(self) -> None:
        """The requests' trace indexes into memory (lock held): an older version's ``traces`` rows carried
        over into them first, and the requests no trace needs any more deleted."""
        db = self._db
        if "traces" not in [row[1] for row in db.execute("PRAGMA table_info(requests)")]:  # older version
            db.execute("ALTER TABLE requests ADD COLUMN traces BLOB")
        with db:
            db.execute("BEGIN IMMEDIATE")
            legacy: dict[int, dict[str, tuple[int, bool]]] = {}
            for trace_id, request_id, spans, failed in db.execute(
                    "SELECT trace_id, request_id, spans, failed FROM traces ORDER BY rowid"):
                index = legacy.setdefault(request_id, {})
                count, before = index.get(trace_id, (0, False))
                index[trace_id] = (count + spans, before or bool(failed))
            db.executemany("UPDATE requests SET traces = ? WHERE id = ? AND traces IS NULL",
                           [(_pack(index), request_id) for request_id, index in legacy.items()])
            db.execute("DELETE FROM traces")
            forgotten = set(db.execute("SELECT trace_id, request_id FROM forgotten"))
            unused = []
            for request_id, size, packed in db.execute(
                    "SELECT id, LENGTH(body), traces FROM requests ORDER BY id").fetchall():
                held = [trace_id for trace_id in _unpack(packed) if (trace_id, request_id) not in forgotten]
                if not held:
                    unused.append((request_id,))
                    continue
                self._held[request_id] = [len(held), size]
                for trace_id in held:
                    self._add(trace_id, request_id)
            db.executemany("DELETE FROM requests WHERE id = ?", unused)
            db.execute("DELETE FROM forgotten WHERE request_id NOT IN (SELECT id FROM requests)")
            self._forgotten_rows = db.execute("SELECT COUNT(*) FROM forgotten").fetchone()[0]

    def _add(self, trace_id: str, request_id: int) -> None:
        ids = self._requests_of.get(trace_id)
        if ids is None:
            self._requests_of[trace_id] = request_id
        elif isinstance(ids, int):
            self._requests_of[trace_id] = [ids, request_id]
        else:
            ids.append(request_id)

    def _ids(self, trace_id: str) -> list[int]:
        ids = self._requests_of.get(trace_id)
        return [] if ids is None else [ids] if isinstance(ids, int) else list(ids)

    # -- requests ----------------------------------------------------------------------------------
    def append(self, kind: int, body: bytes, traces: dict[str, tuple[int, bool]]) -> int:
        """Commit one request and the traces it holds (``trace id -> (spans, any failed)``); its row id.

        Returns once committed: only then may the sender be told it was accepted.
        """
        packed = _pack(traces)
        with self._lock:
            self._make_room(len(body))
            # One statement, its own transaction (the connection autocommits): committed when it returns,
            # as BEGIN, INSERT, COMMIT were, in one call into SQLite instead of three.
            inserted = self._db.execute("INSERT INTO requests (kind, body, traces) VALUES (?, ?, ?)",
                                        (kind, body, packed))
            request_id = int(inserted.lastrowid or 0)
            self.held_bytes += len(body)
            self._held[request_id] = [len(traces), len(body)]
            if self._requests_of.keys().isdisjoint(traces):  # traces new to the store (most): added in C
                self._requests_of.update(dict.fromkeys(traces, request_id))
            else:
                for trace_id in traces:
                    self._add(trace_id, request_id)
        return request_id

    def append_records(self, spans: Sequence[SpanRecord], traces: dict[str, tuple[int, bool]]) -> None:
        """:meth:`append` for spans handed over in-process (pickled: read back by this code only)."""
        self.append(KIND_PICKLE, pickle.dumps(list(spans), protocol=pickle.HIGHEST_PROTOCOL), traces)

    def request_ids_of(self, trace_id: str) -> list[int]:
        """The requests holding spans of ``trace_id``, oldest first."""
        with self._lock:
            return self._ids(trace_id)

    def request(self, request_id: int) -> tuple[int, bytes, list[str]] | None:
        """``(kind, body, failed traces in it)`` of a stored request; ``None`` when it is gone."""
        with self._lock:
            row = self._db.execute("SELECT kind, body, traces FROM requests WHERE id = ?",
                                   (request_id,)).fetchone()
            if row is None:
                return None
            failed = sorted(trace_id for trace_id, (_, failed) in _unpack(row[2]).items()
                            if failed and request_id in self._ids(trace_id))
        return int(row[0]), bytes(row[1]), failed

    def request_size(self, request_id: int) -> int:
        with self._lock:
            held = self._held.get(request_id)
        return held[1] if held else 0

    def requests_of(self, trace_id: str) -> list[tuple[int, bytes]]:
        """``(kind, body)`` of each request holding spans of ``trace_id``, oldest first."""
        with self._lock:
            ids = self._ids(trace_id)
            return list(self._db.execute(
                f"SELECT kind, body FROM requests WHERE id IN {_marks(ids)} ORDER BY id", ids)) if ids else []

    def release(self, trace_ids: Iterable[str], *, settled_clean: bool = False) -> None:
        """Forget ``trace_ids`` (settled and not failed, or done) and the requests no trace needs now.

        ``settled_clean``: they settled without a failure, so a request that still holds them need not
        say they are forgotten (after a restart they would only settle again, and be released).
        """
        ids = list(trace_ids)
        if not ids:
            return
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._forget(ids, mark=not settled_clean)

    def _forget(self, trace_ids: list[str], *, mark: bool = True) -> None:
        """Inside a transaction, with the lock held. The memory follows only once the statements ran: a
        failed statement rolls back and leaves both as they were."""
        trace_ids = list(dict.fromkeys(trace_ids))
        still: dict[int, int]  # request id -> its new count of traces held
        marks: list[tuple[str, int]] = []
        found = list(map(self._requests_of.get, trace_ids))
        if not mark and list not in set(map(type, found)):
            # Traces settled clean, each in one request (most are): counted per request in C, not a trace
            # at a time.
            held = self._held
            still = {request_id: held[request_id][0] - count
                     for request_id, count in Counter(cast("list[int | None]", found)).items()
                     if request_id is not None}
        else:
            still = {}
            for trace_id in trace_ids:
                for request_id in self._ids(trace_id):
                    left = still.get(request_id, self._held[request_id][0]) - 1
                    still[request_id] = left
                    if left > 0 and mark:
                        marks.append((trace_id, request_id))
            marks = [(trace_id, request_id) for trace_id, request_id in marks if still[request_id] > 0]
        empty = [request_id for request_id, left in still.items() if left == 0]
        db = self._db
        forgotten_rows = self._forgotten_rows
        if marks:
            db.executemany("INSERT INTO forgotten (trace_id, request_id) VALUES (?, ?)", marks)
            forgotten_rows += len(marks)
        for start in range(0, len(empty), 500):
            chunk = empty[start:start + 500]
            in_chunk = _marks(chunk)
            db.execute(f"DELETE FROM requests WHERE id IN {in_chunk}", chunk)
            if forgotten_rows:
                forgotten_rows -= db.execute(f"DELETE FROM forgotten WHERE request_id IN {in_chunk}",
                                             chunk).rowcount
        self._forgotten_rows = forgotten_rows
        deque(map(self._requests_of.pop, trace_ids, repeat(None)), maxlen=0)
        for request_id, left in still.items():
            if left == 0:
                self.held_bytes -= self._held.pop(request_id)[1]
            else:
                self._held[request_id][0] = left

    def stored_traces(self) -> list[StoredTrace]:
        """The trace index as committed, oldest first (replay after a restart); traces waiting for a
        redo are not in it (:meth:`redos` has them)."""
        with self._lock:
            redo = {row[0] for row in self._db.execute("SELECT trace_id FROM redo")}
            found: dict[str, tuple[int, bool]] = {}
            for request_id, packed in self._db.execute("SELECT id, traces FROM requests ORDER BY id"):
                for trace_id, (spans, failed) in _unpack(packed).items():
                    if trace_id in redo or request_id not in self._ids(trace_id):
                        continue
                    count, before = found.get(trace_id, (0, False))
                    found[trace_id] = (count + spans, before or failed)
        return [StoredTrace(trace_id, spans, failed) for trace_id, (spans, failed) in found.items()]

    # -- annotations -------------------------------------------------------------------------------
    def finish(self, trace_id: str, annotations: Sequence[tuple[int, bytes]], *,
               redo: Redo | None = None, keep: bool = False) -> list[int]:
        """One transaction: the annotation batches ``(spans, body)`` into the outbox, and the trace
        either forgotten or (``redo`` / ``keep``) kept for judging again. The new outbox row ids."""
        with self._lock:
            self._make_room(sum(len(body) for _, body in annotations))
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                ids = [int(self._db.execute("INSERT INTO outbox (spans, body) VALUES (?, ?)",
                                            (spans, body)).lastrowid or 0) for spans, body in annotations]
                if redo is not None:
                    self._db.execute("INSERT OR REPLACE INTO redo VALUES (?, ?, ?, ?, ?)",
                                     (redo.trace_id, redo.until, redo.attempts, redo.superseded, redo.seen))
                elif not keep:
                    self._db.execute("DELETE FROM redo WHERE trace_id = ?", (trace_id,))
                    self._forget([trace_id])
            self.held_bytes += sum(len(body) for _, body in annotations)
        return ids

    def outbox_ids(self) -> list[int]:
        """Every outbox row not yet exported, oldest first (replay after a restart)."""
        with self._lock:
            return [row[0] for row in self._db.execute("SELECT id FROM outbox ORDER BY id")]

    def outbox_rows(self, row_ids: Sequence[int]) -> list[tuple[int, int, bytes]]:
        """``(row id, spans, body)`` of those of ``row_ids`` still in the outbox, in the order given (each
        once: a row replayed on open may be queued again by its writer)."""
        row_ids = list(dict.fromkeys(row_ids))
        if not row_ids:
            return []
        with self._lock:
            found = {row[0]: (int(row[1]), bytes(row[2])) for row in self._db.execute(
                f"SELECT id, spans, body FROM outbox WHERE id IN {_marks(row_ids)}", row_ids)}
        return [(row_id, *found[row_id]) for row_id in row_ids if row_id in found]

    def outbox_sizes(self, row_ids: Sequence[int]) -> list[tuple[int, int, int]]:
        """``(row id, spans, body's bytes)`` of those of ``row_ids`` still in the outbox, in the order
        given (each once), without reading the bodies: the sender reads them a request at a time
        (:meth:`outbox_rows`), so a batch's bodies are not all held at once."""
        row_ids = list(dict.fromkeys(row_ids))
        if not row_ids:
            return []
        with self._lock:
            found = {row[0]: (int(row[1]), int(row[2])) for row in self._db.execute(
                f"SELECT id, spans, LENGTH(body) FROM outbox WHERE id IN {_marks(row_ids)}", row_ids)}
        return [(row_id, *found[row_id]) for row_id in row_ids if row_id in found]

    def outbox_spans_of(self, row_ids: Sequence[int]) -> int:
        """Spans in those of ``row_ids`` still in the outbox (summed by the store: no body read)."""
        row_ids = list(dict.fromkeys(row_ids))
        if not row_ids:
            return 0
        with self._lock:
            return int(self._db.execute(
                f"SELECT COALESCE(SUM(spans), 0) FROM outbox WHERE id IN {_marks(row_ids)}",
                row_ids).fetchone()[0])

    def exported(self, row_ids: Sequence[int]) -> None:
        """The backend took these outbox rows (or refused them for good): delete them."""
        row_ids = list(dict.fromkeys(row_ids))
        if not row_ids:
            return
        marks = _marks(row_ids)
        with self._lock:  # no other writer between the two statements: the count follows the rows
            size = self._db.execute(f"SELECT COALESCE(SUM(LENGTH(body)), 0) FROM outbox WHERE id IN {marks}",
                                    row_ids).fetchone()[0]
            self._db.execute(f"DELETE FROM outbox WHERE id IN {marks}", row_ids)
            self.held_bytes -= int(size)

    @property
    def outbox_spans(self) -> int:
        """Annotation spans held (not yet accepted by the backend)."""
        with self._lock:
            return int(self._db.execute("SELECT COALESCE(SUM(spans), 0) FROM outbox").fetchone()[0])

    # -- redo --------------------------------------------------------------------------------------
    def redos(self) -> list[Redo]:
        """Failures waiting to be judged again, oldest deadline first."""
        with self._lock:
            return [Redo(*row) for row in self._db.execute(
                "SELECT trace_id, until, attempts, superseded, seen FROM redo ORDER BY until, trace_id")]

    def forget_redo(self, trace_id: str) -> None:
        """Give a redo up (its time is over): the trace and its requests go too."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM redo WHERE trace_id = ?", (trace_id,))
            self._forget([trace_id])

    # -- size --------------------------------------------------------------------------------------
    def _make_room(self, incoming: int) -> None:
        """Drop the oldest requests (then outbox rows) until ``incoming`` more bytes fit. Lock held."""
        if self.held_bytes + incoming <= self.max_bytes:
            return
        dropped_requests = dropped_batches = 0
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            while self.held_bytes + incoming > self.max_bytes:
                row = self._db.execute("SELECT id, LENGTH(body), traces FROM requests ORDER BY id LIMIT 1"
                                       ).fetchone()
                if row is not None:
                    self._db.execute("DELETE FROM requests WHERE id = ?", (row[0],))
                    self._drop(row[0], row[2])
                    dropped_requests += 1
                else:
                    row = self._db.execute(
                        "SELECT id, LENGTH(body) FROM outbox ORDER BY id LIMIT 1").fetchone()
                    if row is None:
                        break
                    self._db.execute("DELETE FROM outbox WHERE id = ?", (row[0],))
                    dropped_batches += 1
                self.held_bytes -= row[1]
            if self._forgotten_rows:
                self._forgotten_rows -= self._db.execute(
                    "DELETE FROM forgotten WHERE request_id NOT IN (SELECT id FROM requests)").rowcount
        self.dropped_requests += dropped_requests
        self.dropped_annotation_batches += dropped_batches
        if not self._warned_full or (self.dropped_requests + self.dropped_annotation_batches) % 100 == 0:
            self._warned_full = True
            _logger.warning("data directory full (%g MiB): dropped the oldest %d request(s) and %d "
                            "annotation batch(es) (%d and %d so far)", self.max_bytes / (1 << 20),
                            dropped_requests, dropped_batches, self.dropped_requests,
                            self.dropped_annotation_batches)

    def _drop(self, request_id: int, packed: bytes | None) -> None:
        """A request dropped from a full store: its traces no longer need it (lock held)."""
        self._held.pop(request_id, None)
        for trace_id in _unpack(packed):
            ids = self._requests_of.get(trace_id)
            if ids == request_id:
                del self._requests_of[trace_id]
            elif isinstance(ids, list) and request_id in ids:
                ids.remove(request_id)
                if len(ids) == 1:
                    self._requests_of[trace_id] = ids[0]

    def close(self) -> None:
        with self._lock:
            # Another process holds it, or the disk is gone: the WAL is replayed on open.
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()
            if self._lock_file is not None:
                os.close(self._lock_file)  # releases the lock
                self._lock_file = None


def _marks(values: Sequence[object]) -> str:
    """``(?,?,…)``: an SQL ``IN`` list of one parameter per value (the values themselves are bound, never
    formatted into the statement)."""
    return f"({','.join('?' * len(values))})"


def _pack(traces: dict[str, tuple[int, bool]]) -> bytes:
    """A request's trace index as stored with it (read back by this code only)."""
    return pickle.dumps(traces, protocol=pickle.HIGHEST_PROTOCOL)


def _unpack(packed: bytes | None) -> dict[str, tuple[int, bool]]:
    index: dict[str, tuple[int, bool]] = pickle.loads(packed) if packed else {}  # written by _pack
    return index


def _lock(directory: Path) -> int:
    """An exclusive lock on ``directory`` for this process's life: two writers would replay each
    other's requests and export each other's annotations twice."""
    import fcntl

    descriptor = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        raise OSError(f"data directory {directory} is in use by another memtrace serve; give each its own "
                      "--data-dir") from None
    return descriptor


def now() -> float:
    """Wall-clock seconds: redo deadlines must survive a restart, so they are not monotonic."""
    return time.time()
