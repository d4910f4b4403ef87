"""mem0's platform client (``MemoryClient``) against a local stand-in of the platform's API.

The stand-in (stdlib ``http.server`` on 127.0.0.1) answers the endpoints the client calls, as the
platform does (``/v1/ping/``, add, search, update, delete, delete_all); no request leaves the machine.
Each client call is one memory-client span with ``server.address`` / ``server.port`` of the client's
``host``; updates and deletes make versions and tombstones of the record, and a search reads them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from mem0_app import scope
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from memtrace_otel.semconv import GenAI, MemTrace

RECORD = "8c1f0b7e-0000-4000-8000-000000000001"


class _Platform(BaseHTTPRequestHandler):
    """The platform's answers, by method and path; everything else is a 404."""

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:
        if self.path.startswith("/v1/ping/"):
            self._answer(200, {"status": "ok", "user_email": "t@example.com", "org_id": "o",
                               "project_id": "p"})
        else:
            self._answer(404, {"detail": "not found"})

    def do_POST(self) -> None:
        body = self._body()
        if "/search/" in self.path:
            self._answer(200, {"results": [{"id": RECORD, "memory": "Moved to Porto", "score": 0.9}]})
        elif self.path.rstrip("/").endswith(("/memories", "/memories/add")):
            self._answer(200, {"results": [{"id": RECORD, "memory": "Moved to Lisbon", "event": "ADD"}]}
                         if body.get("async_mode") is False else
                         {"results": [{"message": "queued", "status": "PENDING", "event_id": "e1"}]})
        else:
            self._answer(404, {"detail": "not found"})

    def do_PUT(self) -> None:
        self._body()
        self._answer(200, {"message": "Memory updated successfully!"})

    def do_DELETE(self) -> None:
        self._answer(200, {"message": "Memory deleted successfully!"})

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def platform() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Platform)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _by_name(exporter: InMemorySpanExporter) -> dict[str, list[Any]]:
    spans: dict[str, list[Any]] = {}
    for span in exporter.get_finished_spans():
        spans.setdefault(span.attributes.get(MemTrace.OPERATION_NAME, span.name), []).append(span)
    return spans


def test_client_calls_are_memory_spans_with_the_server(instrumented: Any, platform: str,
                                                       span_exporter: InMemorySpanExporter) -> None:
    from mem0 import MemoryClient

    client = MemoryClient(api_key="test-key", host=platform)
    client.add("I moved to Lisbon.", user_id="alice", async_mode=False)
    client.add("I have a dog.", user_id="alice")  # queued: the platform reports no record yet
    client.update(RECORD, text="Moved to Porto")
    found = client.search("Where did the user move?", **scope(user_id="alice"))
    client.delete(RECORD)
    client.delete_all(user_id="alice")
    assert [r["id"] for r in found["results"]] == [RECORD]
    spans = _by_name(span_exporter)
    port = int(platform.rsplit(":", 1)[1])
    for name in ("mem0.add", "mem0.update", "mem0.search", "mem0.delete"):
        for span in spans[name]:
            assert span.kind is SpanKind.CLIENT
            assert (span.attributes[GenAI.SERVER_ADDRESS], span.attributes[GenAI.SERVER_PORT]) == (
                "127.0.0.1", port)
            assert span.name == span.attributes[GenAI.OPERATION_NAME]
    stored, queued = spans["mem0.add"]
    counts = stored.attributes[GenAI.MEMORY_RECORD_COUNT], queued.attributes[GenAI.MEMORY_RECORD_COUNT]
    assert counts == (1, 0)
    (update,), (search,), (delete,) = spans["mem0.update"], spans["mem0.search"], spans["mem0.delete"]
    assert update.attributes[GenAI.MEMORY_RECORD_ID] == delete.attributes[GenAI.MEMORY_RECORD_ID] == RECORD
    # The update made the record's next version; the search read that version, linked to the update.
    (new_version,) = update.attributes[MemTrace.OUTPUTS]
    assert new_version in search.attributes[MemTrace.INPUTS]
    assert update.context.span_id in {link.context.span_id for link in search.links}
    assert delete.attributes[MemTrace.DELETED]
    (delete_all,) = spans["mem0.delete_all"]
    assert delete_all.kind is SpanKind.INTERNAL and GenAI.OPERATION_NAME not in delete_all.attributes


def test_uninstrument_restores_the_client(tracer_provider: Any, platform: str,
                                          span_exporter: InMemorySpanExporter) -> None:
    from mem0.client import main

    from memtrace_otel.instrument.mem0 import Mem0Instrumentor

    before = {name: main.MemoryClient.__dict__[name] for name in ("add", "search", "update", "delete")}
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    assert all(main.MemoryClient.__dict__[name] is not f for name, f in before.items())
    instrumentor.uninstrument()
    assert all(main.MemoryClient.__dict__[name] is f for name, f in before.items())
    main.MemoryClient(api_key="test-key", host=platform).search("q", **scope(user_id="alice"))
    assert span_exporter.get_finished_spans() == ()
