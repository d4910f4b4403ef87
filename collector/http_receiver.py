"""OTLP/HTTP trace receiver: ``POST /v1/traces`` with a protobuf or JSON body (gzip too).

Answers as the OTLP/HTTP specification says, so a standard Collector's
``otlphttp`` exporter (or any SDK exporter) behaves well against it:

* 200 with an ``ExportTraceServiceResponse`` (``partial_success`` counts the
  spans rejected as malformed), in the request's encoding;
* 400 for a body that is not an export request, 413 for one over the size
  limit, 415 for another content type: not retryable, one log line each;
* 503 with ``Retry-After`` when the service is over its memory ceiling:
  retryable, so the sender's queue holds the spans instead of this process
  growing.

The server is waitress (a maintained pure-Python WSGI server, the ``[serve]`` extra),
not ``http.server``: connections are multiplexed by one I/O thread and requests handled by a
fixed pool of ``workers`` threads (a slow or idle client holds a connection slot, never a thread),
the listen backlog is ``backlog`` (default 1024; ``http.server``'s was 5, and 20 concurrent clients
saw resets), connections are capped (``connection_limit``), closed after ``idle_timeout`` seconds
without a byte, and closed when their headers have not arrived ``header_timeout`` seconds after the
request began (slowloris). Bodies over 256 KiB wait in a temporary file, not in memory, until the
request is admitted (``admission``: requests and bytes in flight, checked before the body is read).
A client that hangs up before its answer is one counted log line, no traceback.

Binds 127.0.0.1 by default. Thread safety: the ``workers`` threads call ``ingest`` concurrently;
all shared state is behind the service's locks.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from memtrace_otel.collector.assembler import trace_index
from memtrace_otel.collector.durable import KIND_JSON, KIND_PROTOBUF
from memtrace_otel.collector.memory import Admission
from memtrace_otel.collector.otlp_proto import (
    TakeFailed,
    decode_request,
    index_body,
    records_from_request,
    span_count,
)
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.spans.otlp_json import records_from_traces_data
from memtrace_otel.spans.otlp_json import span_count as json_span_count

__all__ = ["OTLPHttpReceiver"]

_logger = logging.getLogger(__name__)
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_RETRY_AFTER_SECONDS = "2"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 413: "Content Too Large", 415: "Unsupported Media Type",
            503: "Service Unavailable"}


class _BadRequest(ValueError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _length(wsgi: dict[str, Any], max_bytes: int) -> int:
    length_text = wsgi.get("CONTENT_LENGTH") or ""
    if not length_text.isascii() or not length_text.isdigit():
        raise _BadRequest(411, "a Content-Length header is required")
    length = int(length_text)
    if length > max_bytes:
        raise _BadRequest(413, f"body of {length} bytes is over the {max_bytes}-byte limit")
    return length


def _read_body(wsgi: dict[str, Any], length: int, max_bytes: int) -> bytes:
    body = wsgi["wsgi.input"].read(length)
    if len(body) < length:  # the sender hung up mid-body: a prefix may still parse, as the wrong request
        raise _BadRequest(400, f"body ended after {len(body)} of its {length} bytes")
    encoding = (wsgi.get("HTTP_CONTENT_ENCODING") or "identity").lower()
    if encoding == "gzip":
        return _gunzip(body, max_bytes)
    if encoding != "identity":
        raise _BadRequest(415, f"unsupported Content-Encoding {encoding[:40]!r}")
    return body


def _gunzip(body: bytes, max_bytes: int) -> bytes:
    # Bounded: a small gzip bomb must not expand past the body limit.
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as error:
        raise _BadRequest(400, f"body is not valid gzip: {error}") from None
    if len(out) > max_bytes or inflater.unconsumed_tail:
        raise _BadRequest(413, f"decompressed body is over the {max_bytes}-byte limit")
    if not inflater.eof:  # cut short: what did inflate is a prefix, not the request sent
        raise _BadRequest(400, "body is truncated gzip (the stream ends before its trailer)")
    return out


def _decode(body: bytes, content_type: str, where: str,
            problems: list[Problem]) -> tuple[list[SpanRecord], int]:
    """The spans kept, and how many the request offered."""
    if content_type == _PROTOBUF:
        try:
            request = decode_request(body)
        except ValueError as error:
            raise _BadRequest(400, str(error)) from None
        return records_from_request(request, where, problems), span_count(request)
    if content_type == _JSON:
        import orjson

        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError as error:
            raise _BadRequest(400, f"body is not JSON: {error}") from None
        spans = document.get("resourceSpans", document.get("resource_spans")) if isinstance(document, dict) \
            else None
        if not isinstance(spans, list):
            raise _BadRequest(400, "body is not an OTLP ExportTraceServiceRequest (no resourceSpans list)")
        return list(records_from_traces_data(document, where, problems)), json_span_count(document)
    raise _BadRequest(415, f"unsupported Content-Type {content_type[:60]!r} "
                           f"(use {_PROTOBUF} or {_JSON})")


Ingest = Callable[..., bool]


class _Application:
    """The WSGI application: ``POST /v1/traces`` only."""

    def __init__(self, ingest: Ingest, max_body_bytes: int, admission: Admission | None,
                 store_bodies: bool) -> None:
        self._ingest = ingest
        self._max_body_bytes = max_body_bytes
        self._admission = admission
        self._store_bodies = store_bodies

    def __call__(self, wsgi: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        content_type = (wsgi.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
        client = wsgi.get("REMOTE_ADDR", "?")
        try:
            if wsgi.get("PATH_INFO") != "/v1/traces":
                raise _BadRequest(404, f"no receiver at {str(wsgi.get('PATH_INFO'))[:80]!r}; POST /v1/traces")
            if wsgi.get("REQUEST_METHOD") != "POST":
                raise _BadRequest(405, "POST /v1/traces")
            length = _length(wsgi, self._max_body_bytes)
        except _BadRequest as error:
            return self._error(start_response, error.status, str(error), content_type, client)
        # Admitted before the body is read into memory (waitress holds it in a temporary file).
        if self._admission is not None and not self._admission.take(length):
            return self._error(start_response, 503, "memtrace serve is at its memory limit; retry later",
                               content_type, client)
        try:
            return self._handle(wsgi, start_response, length, content_type, client)
        finally:
            if self._admission is not None:
                self._admission.give(length)

    def _handle(self, wsgi: dict[str, Any], start_response: Callable[..., Any], length: int,
                content_type: str, client: str) -> Iterable[bytes]:
        where = f"{client} POST /v1/traces"
        problems: list[Problem] = []
        take_failed: TakeFailed | None = None
        try:
            body = _read_body(wsgi, length, self._max_body_bytes)
            if self._store_bodies and content_type == _PROTOBUF:  # stored as received: index only
                try:
                    indexed = index_body(body, where, problems)
                except ValueError as error:
                    raise _BadRequest(400, str(error)) from None
                index, take_failed = indexed.index, indexed.take_failed
                rejected = indexed.offered - sum(count for count, _ in index.values())
            else:
                spans, offered = _decode(body, content_type, where, problems)
                rejected = offered - len(spans)
                index = trace_index(spans) if self._store_bodies else {}
        except _BadRequest as error:
            return self._error(start_response, error.status, str(error), content_type, client)
        if problems:
            _logger.warning("%d span(s) rejected from %s, %d problem(s): %s", rejected, client, len(problems),
                            problems[0].message)
        kind = KIND_JSON if content_type == _JSON else KIND_PROTOBUF
        accepted = (self._ingest(index, body, kind, take_failed) if self._store_bodies
                    else self._ingest(spans, len(body)))
        if not accepted:
            return self._error(start_response, 503, "memtrace serve is over its memory ceiling; retry later",
                               content_type, client)
        if not problems:
            return _accepted(start_response, content_type)
        response = ExportTraceServiceResponse()
        # rejected_spans 0 with a message: OTLP's warning (kept spans were repaired)
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = problems[0].message[:500]
        return _reply(start_response, 200, response, content_type)

    @staticmethod
    def _error(start_response: Callable[..., Any], status: int, message: str, content_type: str,
               client: str) -> Iterable[bytes]:
        from google.rpc.status_pb2 import Status  # shipped with googleapis-common-protos, an OTLP dependency

        if status != 503:
            _logger.warning("rejected a request from %s: %s", client, message)
        return _reply(start_response, status, Status(code=status, message=message), content_type,
                      retry_after=status == 503)


def _reply(start_response: Callable[..., Any], status: int, message: Any, content_type: str, *,
           retry_after: bool = False) -> list[bytes]:
    if content_type == _JSON:
        payload, kind = MessageToJson(message).encode(), _JSON
    else:
        payload, kind = message.SerializeToString(), _PROTOBUF
    headers = [("Content-Type", kind), ("Content-Length", str(len(payload)))]
    if retry_after:
        headers.append(("Retry-After", _RETRY_AFTER_SECONDS))
    start_response(f"{status} {_REASONS.get(status, 'Error')}", headers)
    return [payload]


# The answer to a request taken whole, the same every time: encoded once.
_ACCEPTED = {kind: (payload, [("Content-Type", kind), ("Content-Length", str(len(payload)))])
             for kind, payload in ((_JSON, MessageToJson(ExportTraceServiceResponse()).encode()),
                                   (_PROTOBUF, ExportTraceServiceResponse().SerializeToString()))}


def _accepted(start_response: Callable[..., Any], content_type: str) -> list[bytes]:
    payload, headers = _ACCEPTED[_JSON if content_type == _JSON else _PROTOBUF]
    start_response("200 OK", list(headers))
    return [payload]


class _HangUps(logging.Filter):
    """Turns waitress's line per client hang-up into a count, logged on the first and every 100th."""

    def __init__(self) -> None:
        super().__init__()
        self.count_so_far = 0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Client disconnected"):
            return True
        self.count()
        return False

    def count(self) -> None:
        with self._lock:
            self.count_so_far += 1
            count = self.count_so_far
        if count == 1 or count % 100 == 0:
            _logger.warning("a client hung up before its answer (%d so far)", count)


_DRAIN_SECONDS = 1.0
_DRAIN_BYTES = 64 << 20


class _Drainer:
    """Closes, off the I/O thread, the connections closed with input still unread (an answer to an
    oversized request sent while its body keeps coming): our side is shut for writing, and what the
    client still sends is swallowed for a moment (bounded in time and bytes), so it reads the answer
    instead of a connection reset. At most 16 wait; more are closed at once."""

    def __init__(self) -> None:
        import queue

        self._queue: queue.Queue[socket.socket] = queue.Queue(maxsize=16)
        threading.Thread(target=self._run, name="memtrace-otlp-http-drain", daemon=True).start()

    def offer(self, sock: socket.socket) -> bool:
        try:
            self._queue.put_nowait(sock)
        except Exception:  # full
            return False
        return True

    def _run(self) -> None:
        while True:
            sock = self._queue.get()
            try:
                sock.setblocking(True)
                sock.shutdown(socket.SHUT_WR)
                deadline, budget = time.monotonic() + _DRAIN_SECONDS, _DRAIN_BYTES
                while budget > 0 and (left := deadline - time.monotonic()) > 0:
                    sock.settimeout(left)
                    chunk = sock.recv(min(budget, 1 << 16))
                    if not chunk:
                        break
                    budget -= len(chunk)
            except OSError:
                pass  # the client is gone or too slow: nothing more to do for it
            finally:
                sock.close()


def _channel_class(drainer: _Drainer, hang_ups: _HangUps) -> type:
    from waitress.channel import HTTPChannel
    from waitress.task import ErrorTask

    class Refusal(ErrorTask):  # type: ignore[misc]
        """waitress's own error answer (a body over the limit, bad headers): the body may still come."""

        def __init__(self, channel: Any, request: Any) -> None:
            super().__init__(channel, request)
            channel.refused_request = True
            error = request.error
            _logger.warning("rejected a request from %s: %s", channel.addr[0] if channel.addr else "?",
                            f"{error.reason}: {error.body}" if error is not None else "bad request")

    class Channel(HTTPChannel):  # type: ignore[misc]
        error_task_class = Refusal
        refused_request = False

        def handle_close(self) -> None:
            sock = self.socket
            if self.refused_request and sock is not None:
                try:
                    duplicate: socket.socket | None = sock.dup()
                except OSError:
                    duplicate = None
                if duplicate is not None and not drainer.offer(duplicate):
                    duplicate.close()
            elif self.request is not None and not self.request.completed and not self.will_close:
                hang_ups.count()  # the client went away mid-request: nothing of it was taken
            super().handle_close()

    return Channel


class OTLPHttpReceiver:
    """Serves ``POST /v1/traces`` on ``host:port`` (port 0 picks a free one) and hands spans to ``ingest``.

    ``ingest(index, body, kind, take_failed) -> bool``: the request's
    :func:`~memtrace_otel.collector.assembler.trace_index` (for protobuf made without decoding the
    spans) and its bytes, to be stored before the answer, so that what is acknowledged is kept
    (``memtrace serve``'s path), and what decodes the records of its failed traces from the same
    parse once the service has room for them (protobuf: ``otlp_proto.IndexedRequest.take_failed``;
    JSON: ``None``, read back from the store when attributed). With ``store_bodies=False``,
    ``ingest(spans, wire_bytes)`` gets the decoded spans instead: nothing is stored, for consumers
    that keep spans in memory (test backends). ``False`` from ``ingest`` makes the answer a retryable 503.

    Parameters
    ----------
    workers:
        Threads handling requests (decoding is CPU work: more threads than cores buys nothing).
    backlog:
        The listen backlog.
    connection_limit:
        Open connections at most (more wait in the backlog).
    idle_timeout:
        Seconds a connection may stay without sending a byte.
    header_timeout:
        Seconds a request's headers may take to arrive.
    admission:
        Requests and bytes in flight (:class:`~memtrace_otel.collector.memory.Admission`).
    """

    def __init__(self, ingest: Ingest, *, host: str = "127.0.0.1", port: int = 14318,
                 max_body_bytes: int = 16 << 20, workers: int = 4, backlog: int = 1024,
                 connection_limit: int = 1000, idle_timeout: int = 60, header_timeout: float = 10.0,
                 admission: Admission | None = None, store_bodies: bool = True) -> None:
        if max_body_bytes < 1 or workers < 1 or backlog < 1 or connection_limit < 1 or idle_timeout < 1 \
                or header_timeout <= 0:
            raise ValueError("max_body_bytes, workers, backlog, connection_limit and timeouts must be >= 1")
        from waitress.server import create_server

        self.hang_ups = _HangUps()
        logging.getLogger("waitress").addFilter(self.hang_ups)
        self._server: Any = create_server(
            _Application(ingest, max_body_bytes, admission, store_bodies), host=host, port=port,
            threads=workers, backlog=backlog, connection_limit=connection_limit, channel_timeout=idle_timeout,
            cleanup_interval=1, max_request_body_size=max_body_bytes, inbuf_overflow=256 << 10,
            # An OTLP request is tens of KiB: read in 64 KiB, not waitress's 8 KiB, it takes one or two
            # turns of the I/O loop rather than seven or more.
            recv_bytes=64 << 10,
            log_socket_errors=False, expose_tracebacks=False, ident="memtrace",
            clear_untrusted_proxy_headers=True)
        self._server.channel_class = _channel_class(_Drainer(), self.hang_ups)
        self._header_timeout = header_timeout
        self._headers_since: dict[int, float] = {}
        maintenance = self._server.maintenance

        def close_slow_headers(now: float) -> None:
            maintenance(now)
            self._close_slow_headers(now)

        self._server.maintenance = close_slow_headers
        self._thread = threading.Thread(target=self._run, name="memtrace-otlp-http", daemon=True)

    def _close_slow_headers(self, now: float) -> None:
        """Runs on the I/O thread each second: close a connection whose request's headers are late."""
        waiting: dict[int, float] = {}
        for channel in list(self._server.active_channels.values()):
            request = channel.request
            if request is None or request.headers_finished:
                continue
            since = self._headers_since.get(id(request), now)
            if now - since > self._header_timeout:
                channel.will_close = True
                _logger.warning("closed a connection from %s: request headers not complete after %g s",
                                channel.addr[0] if channel.addr else "?", self._header_timeout)
            else:
                waiting[id(request)] = since
        self._headers_since = waiting

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # closed under it at stop
            self._server.run()

    @property
    def address(self) -> tuple[str, int]:
        return str(self._server.effective_host), int(self._server.effective_port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        server = self._server
        server.accepting = False  # no new connection from here on (read by the I/O thread's readable())
        for channel in list(server.active_channels.values()):
            channel.will_close = True
        # The handler threads first, as waitress's own run() does: a handler that finishes wakes the
        # I/O thread by writing to the server's trigger, and once the server is closed that file
        # descriptor is closed too (a traceback in the log), or already another file's.
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=5)
        server.close()
        self._thread.join(5)
        logging.getLogger("waitress").removeFilter(self.hang_ups)
