"""OTLP/JSON Lines span files: one ``TracesData`` object per export batch, per line.

The same shape the OpenTelemetry Collector's ``file`` exporter writes, so the
files feed ``memtrace inspect``/``graph``/``analyze``, a Collector
``otlpjsonfile`` receiver, or anything else that reads OTLP/JSON. Spans are
encoded by the upstream OTLP/JSON encoder (``opentelemetry-exporter-otlp-json-common``:
hex ids, lowerCamelCase, enums as numbers, every field: kind, status, scope,
resource, events and links with their attributes); :func:`encode_traces_data`
is the same encoding for :class:`~memtrace_otel.spans.SpanRecord` s, and the
fallback where that package is not installed.

Nothing reported as written is lost: each batch is one ``write`` of a whole
line (or, for ``.gz``, a whole gzip member, so a killed writer's file reads
up to its last batch); a write that fails halfway is cut back off the file
before anything else is written; a file deleted under the writer is noticed
and recreated.

One writer per file: the exporter holds an exclusive ``flock`` on the file while
it has it open, and a second exporter (in this process or another) is refused
with :class:`SpanFileInUse`. Two writers would cut each other's batches when
taking back a failed write. Holding the lock, the writer repairs what a killed
one left on open: a torn last line, or a torn last gzip member, is cut off (and
logged), so the file reads whole again (readers also skip a torn member).
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from memtrace_otel.spans.model import SPAN_KINDS, STATUS_CODES, SpanRecord, record_from_readable

try:
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as _upstream_encode
except ImportError:  # pragma: no cover - the package is optional; the fallback writes the same shape
    _upstream_encode = None  # type: ignore[assignment]
try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, one writer per file is the user's to keep
    fcntl = None  # type: ignore[assignment]
try:  # several times faster than json.dumps on these documents
    from orjson import dumps as _orjson_dumps
except ImportError:  # pragma: no cover
    _orjson_dumps = None  # type: ignore[assignment]

__all__ = ["OTLPJsonLinesSpanExporter", "SpanFileInUse", "encode_any_value", "encode_readable_spans",
           "encode_traces_data"]

_logger = logging.getLogger(__name__)
_KIND_NUMBER = {kind: number for number, kind in enumerate(SPAN_KINDS)}
_STATUS_NUMBER = {code: number for number, code in enumerate(STATUS_CODES)}
_SPECIAL_DOUBLES = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_GZIP_LEVEL = 6  # level 9 costs twice the time for a few percent
_MEMBER_START = b"\x1f\x8b\x08"  # gzip magic and deflate
_TAIL_WINDOW = 16 << 20  # how far back from the end a torn gzip member is looked for
_BLOCK = 1 << 16


class SpanFileInUse(RuntimeError):
    """Another writer (an exporter in this or another process) has the span file open."""


def encode_any_value(value: Any) -> dict[str, Any]:
    """OTLP/JSON ``AnyValue`` of a Python attribute value.

    >>> encode_any_value(3)
    {'intValue': '3'}
    >>> encode_any_value(["a"])
    {'arrayValue': {'values': [{'stringValue': 'a'}]}}
    >>> encode_any_value(float("-inf"))
    {'doubleValue': '-Infinity'}
    """
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        # OTLP/JSON spells the special doubles as strings; a bare NaN is not JSON.
        return {"doubleValue": value if math.isfinite(value) else _SPECIAL_DOUBLES[str(value)]}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [encode_any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": _key_values(value)}}
    return {"stringValue": str(value)}


def _key_values(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": encode_any_value(v)} for k, v in attributes.items()]


def _encode_span(span: SpanRecord) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if span.status_code != "UNSET":
        status["code"] = _STATUS_NUMBER.get(span.status_code, 0)
    if span.status_message:
        status["message"] = span.status_message
    encoded: dict[str, Any] = {
        "traceId": span.trace_id, "spanId": span.span_id, "name": span.name,
        "kind": _KIND_NUMBER.get(span.kind, 0),
        "startTimeUnixNano": str(span.start_time_unix_nano), "endTimeUnixNano": str(span.end_time_unix_nano),
        "attributes": _key_values(span.attributes), "status": status,
    }
    if span.parent_span_id:
        encoded["parentSpanId"] = span.parent_span_id
    if span.events:
        encoded["events"] = [{"timeUnixNano": str(e.time_unix_nano), "name": e.name,
                              "attributes": _key_values(e.attributes)} for e in span.events]
    if span.links:
        encoded["links"] = [{"traceId": link.trace_id, "spanId": link.span_id,
                             "attributes": _key_values(link.attributes)} for link in span.links]
    return encoded


def _resource_of(span: SpanRecord) -> dict[str, Any]:
    if span.resource_attributes:
        return span.resource_attributes
    return {"service.name": span.service_name} if span.service_name else {}


def encode_traces_data(spans: Iterable[SpanRecord], scope: str = "memtrace_otel") -> dict[str, Any]:
    """One OTLP/JSON ``TracesData`` object holding ``spans``, grouped by resource and scope.

    ``scope`` names the instrumentation scope of spans that carry none.

    >>> record = SpanRecord("ab" * 16, "cd" * 8, "s", kind="CLIENT", service_name="svc")
    >>> data = encode_traces_data([record])
    >>> data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["kind"]
    3
    """
    resources: dict[int, tuple[dict[str, Any], dict[tuple[str, str], list[dict[str, Any]]]]] = {}
    keys: dict[tuple[Any, ...], int] = {}
    for span in spans:
        resource = _resource_of(span)
        key = _resource_key(resource)
        index = keys.setdefault(key, len(keys))
        scopes = resources.setdefault(index, (resource, {}))[1]
        scopes.setdefault((span.scope_name or scope, span.scope_version), []).append(_encode_span(span))
    return {"resourceSpans": [
        {"resource": {"attributes": _key_values(resource)},
         "scopeSpans": [{"scope": {"name": name, "version": version} if version else {"name": name},
                         "spans": encoded} for (name, version), encoded in scopes.items()]}
        for resource, scopes in resources.values()
    ]}


def _resource_key(resource: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((k, repr(v)) for k, v in resource.items()))


def encode_readable_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """One OTLP/JSON ``TracesData`` line (no newline) of finished SDK spans.

    The upstream encoder when installed, else :func:`encode_traces_data` (the same shape).
    """
    if _upstream_encode is not None:
        document = _upstream_encode(spans).to_dict()
    else:  # pragma: no cover
        document = encode_traces_data(record_from_readable(span) for span in spans)
    if _orjson_dumps is not None:
        return _orjson_dumps(document)
    return json.dumps(document, separators=(",", ":")).encode("utf-8")  # pragma: no cover


class _AppendFile:
    """One output file, appended to in whole records, and able to take back a partial one.

    Not thread-safe: the exporter's lock guards it.
    """

    def __init__(self, path: str, *, compressed: bool) -> None:
        self.path, self.compressed = path, compressed
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            self._lock()
            info = os.fstat(self.fd)
            self.identity = (info.st_dev, info.st_ino)
            self.partial_at: int | None = None  # where a failed write began, until it is taken back
            size = self._repair(info.st_size)
        except BaseException:
            os.close(self.fd)
            raise
        # A line left unfinished by an earlier writer (one the repair could not cut) must not swallow ours.
        unfinished = not compressed and size and os.pread(self.fd, 1, size - 1) != b"\n"
        self.separator = b"\n" if unfinished else b""

    def _lock(self) -> None:
        if fcntl is None:
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SpanFileInUse(f"{self.path} is being written by another exporter (in this process or "
                                "another); two writers on one file would cut each other's batches. Give "
                                "each writer a file of its own") from None

    def _repair(self, size: int) -> int:
        """Cut off what a killed writer left half-written at the end; the file's size after."""
        if not size:
            return size
        keep = _whole_gzip_end(self.fd, size) if self.compressed else _whole_lines_end(self.fd, size)
        if keep is None or keep == size:
            return size
        try:
            os.ftruncate(self.fd, keep)
        except OSError as error:
            _logger.warning("OTLPJsonLinesSpanExporter: %s ends with %d torn byte(s) that cannot be cut "
                            "off: %s", self.path, size - keep, error)
            return size
        _logger.warning("OTLPJsonLinesSpanExporter: cut %d torn byte(s) off the end of %s (a writer "
                        "stopped mid-batch)", size - keep, self.path)
        return keep

    def write(self, data: bytes) -> None:
        """Append ``data`` whole, or leave the file as it was and raise :class:`OSError`."""
        self.take_back()
        if self.separator:
            data = self.separator + data
        start = os.fstat(self.fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[self.write_some(view):]
        except OSError:
            self.partial_at = start
            self.take_back(quiet=True)
            raise
        self.separator = b""

    def write_some(self, data: memoryview) -> int:
        return os.write(self.fd, data)

    def take_back(self, *, quiet: bool = False) -> None:
        """Cut a partly written record off the file, or else end a partial line there.

        Raises :class:`OSError` when neither works (unless ``quiet``): then nothing may be
        appended, or the next record would be glued to the partial one.
        """
        if self.partial_at is None:
            return
        try:
            self.truncate(self.partial_at)
        except OSError:
            if self.compressed:  # half a gzip member cannot be ended: it must go
                if not quiet:
                    raise
                return
            try:
                self.write_some(memoryview(b"\n"))  # the partial line becomes one bad line of its own
            except OSError:
                if not quiet:
                    raise
                return
        self.partial_at = None

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def deleted(self) -> bool:
        """Whether the file was unlinked (what is written now is lost), not merely renamed."""
        return os.fstat(self.fd).st_nlink == 0

    def moved(self) -> bool:
        """Whether ``path`` no longer names this file (deleted, renamed, or replaced)."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return True
        return (info.st_dev, info.st_ino) != self.identity

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


def _whole_lines_end(fd: int, size: int) -> int:
    """Where the last complete line of a plain file ends (0 when it has none)."""
    end = size
    while end > 0:
        start = max(0, end - _BLOCK)
        block = os.pread(fd, end - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def _whole_gzip_end(fd: int, size: int) -> int | None:
    """Where the last whole gzip member of a file ends; ``None`` when that cannot be told for sure.

    Member headers are looked for backwards from the end (within the last 16 MiB). One that
    decodes to the end of the file is whole: nothing is torn. One that runs out of input
    before its end is a torn member's start, if a whole member ends right before it (or the
    file begins there): "1f 8b 08" may also occur inside compressed data, and a false start
    near the end would otherwise cut a whole member. A whole member followed by bytes that
    begin no member (one torn inside its header) ends the whole part.
    """
    start = max(0, size - _TAIL_WINDOW)
    tail = os.pread(fd, size - start, start)
    at, torn_at = len(tail), None
    while True:
        at = tail.rfind(_MEMBER_START, 0, at)
        if at < 0:
            return start if torn_at == 0 and start == 0 else None
        end = _member_end(tail, at)
        if end is False:
            continue  # not a member's start: bytes inside another member's data
        if end is None:  # runs to the end of the file unfinished
            torn_at = at
            if at == 0 and start == 0:
                return 0
            continue
        if end == len(tail):
            return None  # the file ends with a whole member
        if torn_at is None or end >= torn_at:
            return start + end  # a whole member, then torn bytes (a false start among them if any)
        return None  # something between the whole member and the torn one: leave it alone


def _member_end(data: bytes, at: int) -> int | bool | None:
    """Where the gzip member starting at ``data[at]`` ends; ``None`` if the data ends first,
    ``False`` if it is not a valid member."""
    decoder = zlib.decompressobj(31)
    rest = data[at:]
    try:
        while rest and not decoder.eof:
            decoder.decompress(rest, _BLOCK)  # the text is not needed, only where the member ends
            rest = decoder.unconsumed_tail
    except zlib.error:
        return False
    if not decoder.eof:
        return None
    return len(data) - len(decoder.unused_data)


class OTLPJsonLinesSpanExporter(SpanExporter):
    """Appends each batch of spans as one OTLP/JSON line to ``path`` (a gzip member when it ends in ``.gz``).

    A failed batch is ``FAILURE`` and leaves nothing behind; export never raises.
    One writer per file: a failed write is cut back off the file's end, so a second
    exporter on the same file raises :class:`SpanFileInUse` from the constructor (or,
    when the file is recreated under it, fails its batches with a logged reason).

    Thread-safe: one lock serialises writes (encoding happens outside it).
    ``force_flush`` waits for a running write and syncs the file to disk;
    ``shutdown`` closes it, once (a second call warns); export after shutdown
    fails.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        if not self._path:
            raise ValueError("path must not be empty")
        self._compress = self._path.endswith(".gz")
        self._lock = threading.Lock()
        self._closed = False
        self._failing = ""  # the reason of the last failure logged, so a failing disk logs once
        self._file: _AppendFile | None = None
        with self._lock:
            self._reopen(first=True)

    def _open_file(self, path: str) -> _AppendFile:
        return _AppendFile(path, compressed=self._compress)

    def _reopen(self, *, first: bool = False) -> bool:
        try:
            self._file = self._open_file(self._path)
        except SpanFileInUse as error:
            self._file = None
            if first:
                raise
            self._fail("in use", str(error))
            return False
        except OSError as error:
            self._file = None
            self._fail("open", f"cannot open {self._path}: {error}")
            return False
        return True

    def _fail(self, kind: str, reason: str) -> None:
        # One line when a kind of failure starts, not one per batch while the disk stays full.
        if kind != self._failing:
            self._failing = kind
            _logger.warning("OTLPJsonLinesSpanExporter: %s", reason)

    def _recovered(self) -> None:
        if self._failing:
            _logger.warning("OTLPJsonLinesSpanExporter: writing to %s again", self._path)
            self._failing = ""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            payload = self._frame(encode_readable_spans(spans) + b"\n")
        except Exception as error:  # an exporter must never raise into the SDK
            self._fail("encode", f"encoding {len(spans)} span(s) failed: {type(error).__name__}: {error}")
            return SpanExportResult.FAILURE
        with self._lock:
            if self._closed:
                _logger.warning("OTLPJsonLinesSpanExporter for %s is shut down; batch dropped", self._path)
                return SpanExportResult.FAILURE
            ok = self._write(payload)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def _frame(self, line: bytes) -> bytes:
        # Each batch its own gzip member: readable alone, so a file cut after any batch reads whole.
        return gzip.compress(line, compresslevel=_GZIP_LEVEL, mtime=0) if self._compress else line

    def _write(self, payload: bytes) -> bool:
        if self._file is None and not self._reopen():
            return False
        assert self._file is not None
        try:
            self._file.write(payload)
            if self._file.moved():
                return self._after_move(payload)
        except OSError as error:
            self._fail("write", f"writing to {self._path} failed: {error}")
            return False
        self._recovered()
        return True

    def _after_move(self, payload: bytes) -> bool:
        """``path`` no longer names the open file: reopen it; rewrite the batch if it went nowhere."""
        assert self._file is not None
        lost = self._file.deleted()
        self._close_file()
        _logger.warning("OTLPJsonLinesSpanExporter: %s was %s; writing to a new file there", self._path,
                        "deleted" if lost else "moved away")
        if not self._reopen():
            return not lost
        if lost:
            assert self._file is not None
            try:
                self._file.write(payload)
            except OSError as error:
                self._fail("write", f"writing to {self._path} failed: {error}")
                return False
        return True

    def _close_file(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError as error:
                _logger.warning("OTLPJsonLinesSpanExporter: closing %s: %s", self._path, error)
            self._file = None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait for a write in progress and sync the file to disk; ``False`` on timeout or error."""
        return self._locked(self._sync, timeout_millis)

    def _sync(self) -> bool:
        if self._closed or self._file is None:
            return not self._closed
        try:
            self._file.sync()
        except OSError as error:
            self._fail("sync", f"syncing {self._path} failed: {error}")
            return False
        return True

    def _locked(self, action: Callable[[], bool], timeout_millis: float) -> bool:
        if not self._lock.acquire(timeout=max(timeout_millis, 0) / 1000):
            return False
        try:
            return action()
        finally:
            self._lock.release()

    def shutdown(self) -> None:
        """Sync and close the file; never raises. A second call warns and does nothing."""
        with self._lock:
            if self._closed:
                _logger.warning("OTLPJsonLinesSpanExporter for %s already shut down", self._path)
                return
            self._sync()
            self._closed = True
            self._close_file()
