"""``memtrace serve``'s write-ahead store: what it acknowledged, kept on disk until it is done with it.

One SQLite database in WAL mode (``<data dir>/serve.sqlite3``) holds

* ``requests``: the body of every accepted OTLP request, as received (protobuf or JSON, after
  gzip), or, for spans handed over in-process, a pickle of their records; a request is
  acknowledged to its sender only once its row is committed;
* ``traces``: which requests hold spans of which trace (a trace's spans are read back from its
  requests when it is attributed; a request row goes when no unsettled trace needs it);
* ``outbox``: annotation spans, encoded as an OTLP ``ExportTraceServiceRequest``, until the
  trace backend accepts them (or refuses them for good);
* ``redo``: failures whose verdict was made while the backend could not give every trace,
  to be judged again when it answers (their requests are kept meanwhile).

A failure's annotations go into ``outbox`` and its trace rows out of ``traces`` in one
transaction, so a crash at any point either redoes the failure or has its annotations, never
both, never neither. On open, what a killed process left is replayed: the trace index is read
back (those traces settle again) and the outbox rows are exported.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memtrace_otel.spans.model import SpanRecord

__all__ = ["KIND_JSON", "KIND_PICKLE", "KIND_PROTOBUF", "DurableStore", "StoredTrace"]

_logger = logging.getLogger(__name__)

KIND_PROTOBUF = 0
KIND_JSON = 1
KIND_PICKLE = 2
"""Spans handed over in-process (``AttributionService.ingest`` without a body)."""
FILE_NAME = "serve.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS traces (trace_id TEXT NOT NULL, request_id INTEGER NOT NULL,
                                   spans INTEGER NOT NULL, failed INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS traces_by_trace ON traces (trace_id);
CREATE INDEX IF NOT EXISTS traces_by_request ON traces (request_id);
CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY, spans INTEGER NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS redo (trace_id TEXT PRIMARY KEY, until REAL NOT NULL, attempts INTEGER NOT NULL,
                                 superseded TEXT NOT NULL, seen TEXT NOT NULL);
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
        with self._lock:
            self.held_bytes = sum(value or 0 for value in self._db.execute(
                "SELECT (SELECT SUM(LENGTH(body)) FROM requests), (SELECT SUM(LENGTH(body)) FROM outbox)"
            ).fetchone())

    # -- requests ----------------------------------------------------------------------------------
    def append(self, kind: int, body: bytes, traces: dict[str, tuple[int, bool]]) -> None:
        """Commit one request and the traces it holds (``trace id -> (spans, any failed)``).

        Returns once committed: only then may the sender be told it was accepted.
        """
        with self._lock:
            self._make_room(len(body))
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                request_id = self._db.execute("INSERT INTO requests (kind, body) VALUES (?, ?)",
                                              (kind, body)).lastrowid
                self._db.executemany(
                    "INSERT INTO traces (trace_id, request_id, spans, failed) VALUES (?, ?, ?, ?)",
                    [(trace_id, request_id, spans, int(failed))
                     for trace_id, (spans, failed) in traces.items()])
            self.held_bytes += len(body)

    def append_records(self, spans: Sequence[SpanRecord], traces: dict[str, tuple[int, bool]]) -> None:
        """:meth:`append` for spans handed over in-process (pickled: read back by this code only)."""
        self.append(KIND_PICKLE, pickle.dumps(list(spans), protocol=pickle.HIGHEST_PROTOCOL), traces)

    def request_ids_of(self, trace_id: str) -> list[int]:
        """The requests holding spans of ``trace_id``, oldest first."""
        with self._lock:
            return [row[0] for row in self._db.execute(
                "SELECT DISTINCT request_id FROM traces WHERE trace_id = ? ORDER BY request_id", (trace_id,))]

    def request(self, request_id: int) -> tuple[int, bytes, list[str]] | None:
        """``(kind, body, failed traces in it)`` of a stored request; ``None`` when it is gone."""
        with self._lock:
            row = self._db.execute("SELECT kind, body FROM requests WHERE id = ?", (request_id,)).fetchone()
            if row is None:
                return None
            failed = [r[0] for r in self._db.execute(
                "SELECT DISTINCT trace_id FROM traces WHERE request_id = ? AND failed = 1 ORDER BY trace_id",
                (request_id,))]
        return int(row[0]), bytes(row[1]), failed

    def request_size(self, request_id: int) -> int:
        with self._lock:
            row = self._db.execute("SELECT LENGTH(body) FROM requests WHERE id = ?", (request_id,)).fetchone()
        return int(row[0]) if row else 0

    def requests_of(self, trace_id: str) -> list[tuple[int, bytes]]:
        """``(kind, body)`` of each request holding spans of ``trace_id``, oldest first."""
        with self._lock:
            return list(self._db.execute(
                "SELECT kind, body FROM requests WHERE id IN "
                "(SELECT request_id FROM traces WHERE trace_id = ?) "
                "ORDER BY id", (trace_id,)))

    def release(self, trace_ids: Iterable[str]) -> None:
        """Forget ``trace_ids`` (settled and not failed, or done) and the requests no trace needs now."""
        ids = list(trace_ids)
        if not ids:
            return
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._forget(ids)

    def _forget(self, trace_ids: list[str]) -> None:
        """Inside a transaction, with the lock held."""
        db = self._db
        requests: set[int] = set()
        for start in range(0, len(trace_ids), 500):
            chunk = trace_ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            requests.update(row[0] for row in db.execute(
                f"SELECT DISTINCT request_id FROM traces WHERE trace_id IN ({marks})", chunk))
            db.execute(f"DELETE FROM traces WHERE trace_id IN ({marks})", chunk)
        ordered = sorted(requests)
        for start in range(0, len(ordered), 500):
            request_ids = ordered[start:start + 500]
            marks = ",".join("?" * len(request_ids))
            unused = [row for row in db.execute(
                f"SELECT id, LENGTH(body) FROM requests WHERE id IN ({marks}) AND NOT EXISTS "
                f"(SELECT 1 FROM traces WHERE traces.request_id = requests.id)", request_ids)]
            if unused:
                db.executemany("DELETE FROM requests WHERE id = ?", [(row[0],) for row in unused])
                self.held_bytes -= sum(row[1] for row in unused)

    def stored_traces(self) -> list[StoredTrace]:
        """The trace index as committed, oldest first (replay after a restart); traces waiting for a
        redo are not in it (:meth:`redos` has them)."""
        with self._lock:
            return [StoredTrace(row[0], row[1], bool(row[2])) for row in self._db.execute(
                "SELECT trace_id, SUM(spans), MAX(failed) FROM traces "
                "WHERE trace_id NOT IN (SELECT trace_id FROM redo) "
                "GROUP BY trace_id ORDER BY MIN(rowid)")]

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

    def outbox_batch(self, row_id: int) -> tuple[int, bytes] | None:
        """``(spans, body)`` of an outbox row; ``None`` when it is gone (dropped when full)."""
        with self._lock:
            row = self._db.execute("SELECT spans, body FROM outbox WHERE id = ?", (row_id,)).fetchone()
        return (int(row[0]), bytes(row[1])) if row else None

    def exported(self, row_ids: Sequence[int]) -> None:
        """The backend took these outbox rows (or refused them for good): delete them."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            for row_id in row_ids:
                row = self._db.execute("SELECT LENGTH(body) FROM outbox WHERE id = ?", (row_id,)).fetchone()
                if row:
                    self._db.execute("DELETE FROM outbox WHERE id = ?", (row_id,))
                    self.held_bytes -= row[0]

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
                row = self._db.execute("SELECT id, LENGTH(body) FROM requests ORDER BY id LIMIT 1").fetchone()
                if row is not None:
                    self._db.execute("DELETE FROM traces WHERE request_id = ?", (row[0],))
                    self._db.execute("DELETE FROM requests WHERE id = ?", (row[0],))
                    dropped_requests += 1
                else:
                    row = self._db.execute(
                        "SELECT id, LENGTH(body) FROM outbox ORDER BY id LIMIT 1").fetchone()
                    if row is None:
                        break
                    self._db.execute("DELETE FROM outbox WHERE id = ?", (row[0],))
                    dropped_batches += 1
                self.held_bytes -= row[1]
        self.dropped_requests += dropped_requests
        self.dropped_annotation_batches += dropped_batches
        if not self._warned_full or (self.dropped_requests + self.dropped_annotation_batches) % 100 == 0:
            self._warned_full = True
            _logger.warning("data directory full (%g MiB): dropped the oldest %d request(s) and %d "
                            "annotation batch(es) (%d and %d so far)", self.max_bytes / (1 << 20),
                            dropped_requests, dropped_batches, self.dropped_requests,
                            self.dropped_annotation_batches)

    def close(self) -> None:
        with self._lock:
            # Another process holds it, or the disk is gone: the WAL is replayed on open.
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()
            if self._lock_file is not None:
                os.close(self._lock_file)  # releases the lock
                self._lock_file = None


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
