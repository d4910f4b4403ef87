"""Small HTTP servers on 127.0.0.1 for the trace-backend client tests (Jaeger, Tempo stand-ins).

A server is a ``ThreadingHTTPServer`` whose handler finds the test's state object on
``handler.server.<attribute>``; :class:`LoopbackServers` starts them and stops every one at
the end of the test. ``state.stop`` (a ``threading.Event``) is set first, so handlers that
hang on purpose let go.
"""

from __future__ import annotations

import http.server
import threading
from typing import Any

from memtrace_otel.spans.backend import BackendFetch

__all__ = ["LoopbackServers", "one_problem", "send_answer"]


class LoopbackServers:
    """Starts test servers on free loopback ports and stops them all in :meth:`close`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._running: list[tuple[http.server.ThreadingHTTPServer, Any, threading.Thread]] = []

    def start(self, handler: type[http.server.BaseHTTPRequestHandler], attribute: str, state: Any) -> str:
        """Serve ``handler`` with ``state`` as ``server.<attribute>``; the server's base URL."""
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        setattr(httpd, attribute, state)
        thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), name=self._name, daemon=True)
        thread.start()
        self._running.append((httpd, state, thread))
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    def close(self) -> None:
        for httpd, state, thread in self._running:
            state.stop.set()
            httpd.shutdown()
            httpd.server_close()
            thread.join()


def send_answer(handler: Any, status: int, body: bytes, content_type: str = "application/json") -> None:
    """One complete HTTP answer."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def one_problem(fetch: BackendFetch, *words: str) -> str:
    """The one problem line of a fetch that got nothing; it holds every one of ``words``."""
    assert fetch.spans == [] and fetch.received == set()
    (problem,) = fetch.problems
    text = str(problem)
    assert "\n" not in text and all(word in text for word in words), text
    return text
