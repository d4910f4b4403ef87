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

Binds 127.0.0.1 by default. Thread safety: one thread per connection
(``ThreadingHTTPServer``); all shared state is behind the service's locks.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from memtrace_otel.collector.otlp_proto import decode_request, records_from_request
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.spans.otlp_json import records_from_traces_data

__all__ = ["OTLPHttpReceiver"]

_logger = logging.getLogger(__name__)
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_RETRY_AFTER_SECONDS = "2"
_DRAIN_SECONDS = 1.0
_DRAIN_BYTES = 64 << 20


class _BadRequest(ValueError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _read_body(handler: BaseHTTPRequestHandler, max_bytes: int) -> bytes:
    length_text = handler.headers.get("Content-Length")
    if length_text is None or not length_text.isascii() or not length_text.isdigit():
        raise _BadRequest(411, "a Content-Length header is required")
    length = int(length_text)
    if length > max_bytes:
        raise _BadRequest(413, f"body of {length} bytes is over the {max_bytes}-byte limit")
    body = handler.rfile.read(length)
    if len(body) < length:  # the sender hung up mid-body: a prefix may still parse, as the wrong request
        raise _BadRequest(400, f"body ended after {len(body)} of its {length} bytes")
    encoding = (handler.headers.get("Content-Encoding") or "identity").lower()
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


def _decode(body: bytes, content_type: str, where: str, problems: list[Problem]) -> list[SpanRecord]:
    if content_type == _PROTOBUF:
        try:
            request = decode_request(body)
        except ValueError as error:
            raise _BadRequest(400, str(error)) from None
        return records_from_request(request, where, problems)
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
        return list(records_from_traces_data(document, where, problems))
    raise _BadRequest(415, f"unsupported Content-Type {content_type[:60]!r} "
                           f"(use {_PROTOBUF} or {_JSON})")


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        try:
            if self.path.split("?")[0] != "/v1/traces":
                raise _BadRequest(404, f"no receiver at {self.path[:80]!r}; POST /v1/traces")
            body = _read_body(self, self.server.max_body_bytes)
            problems: list[Problem] = []
            spans = _decode(body, content_type, f"{self.client_address[0]} POST /v1/traces", problems)
        except _BadRequest as error:
            self._reply_error(error.status, str(error), content_type)
            return
        if problems:
            _logger.warning("%d malformed span(s) rejected from %s: %s", len(problems),
                            self.client_address[0], problems[0].message)
        if not self.server.ingest(spans, len(body)):
            self._reply_error(503, "memtrace serve is over its memory ceiling; retry later", content_type,
                              retry_after=True)
            return
        response = ExportTraceServiceResponse()
        if problems:
            response.partial_success.rejected_spans = len(problems)
            response.partial_success.error_message = problems[0].message[:500]
        self._reply(200, response, content_type)

    def _reply(self, status: int, message: Any, content_type: str, *, retry_after: bool = False) -> None:
        if content_type == _JSON:
            payload, kind = MessageToJson(message).encode(), _JSON
        else:
            payload, kind = message.SerializeToString(), _PROTOBUF
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        if retry_after:
            self.send_header("Retry-After", _RETRY_AFTER_SECONDS)
        self.end_headers()
        self.wfile.write(payload)

    def _reply_error(self, status: int, message: str, content_type: str, *,
                     retry_after: bool = False) -> None:
        from google.rpc.status_pb2 import Status  # shipped with googleapis-common-protos, an OTLP dependency

        if status != 503:
            _logger.warning("rejected a request from %s: %s", self.client_address[0], message)
        unread = status in (411, 413)
        if unread:
            self.close_connection = True  # the unread body would be taken for the next request
        self._reply(status, Status(code=status, message=message), content_type, retry_after=retry_after)
        if unread:
            self._discard_unread()

    def _discard_unread(self) -> None:
        # Closing a socket with unread input resets the connection, and a client still sending its
        # body would see the reset instead of the answer. Send the answer, close our side, and
        # swallow what the client still sends for a moment (bounded in time and bytes).
        self.wfile.flush()
        deadline = time.monotonic() + _DRAIN_SECONDS
        try:
            self.connection.shutdown(socket.SHUT_WR)
            budget = _DRAIN_BYTES
            while budget > 0 and (left := deadline - time.monotonic()) > 0:
                self.connection.settimeout(left)
                chunk = self.connection.recv(min(budget, 1 << 16))
                if not chunk:
                    break
                budget -= len(chunk)
        except OSError:
            pass  # the client is gone or too slow: nothing more to do for it

    def log_message(self, format: str, *args: Any) -> None:
        _logger.debug("http: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], ingest: Any, max_body_bytes: int) -> None:
        super().__init__(address, _Handler)
        self.ingest = ingest
        self.max_body_bytes = max_body_bytes


class OTLPHttpReceiver:
    """Serves ``POST /v1/traces`` on ``host:port`` (port 0 picks a free one) and hands spans to ``ingest``.

    ``ingest(spans, wire_bytes) -> bool``; ``False`` makes the answer a retryable 503.
    """

    def __init__(self, ingest: Any, *, host: str = "127.0.0.1", port: int = 14318,
                 max_body_bytes: int = 16 << 20) -> None:
        if max_body_bytes < 1:
            raise ValueError("max_body_bytes must be >= 1")
        self._server = _Server((host, port), ingest, max_body_bytes)
        self._thread = threading.Thread(target=self._server.serve_forever, name="memtrace-otlp-http",
                                        daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

