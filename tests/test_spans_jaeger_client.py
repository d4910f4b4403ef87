"""The trace-backend client against small real HTTP servers on 127.0.0.1: every fetch is bounded
(per request and overall), concurrent within its bound, honest about what it received, and every
failure is one line."""

from __future__ import annotations

import http.server
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from memtrace_otel.spans import SpanReadResult, SpanRecord, TraceBackend, fetch_linked_traces
from memtrace_otel.spans.jaeger_query import JaegerQueryClient, JaegerQueryError
from memtrace_otel.spans.model import SpanLink

from loopback_http import LoopbackServers, one_problem, send_answer

A, B, C = "a1" * 16, "b2" * 16, "c3" * 16


def _jaeger_trace(trace_id: str, links: tuple[str, ...] = ()) -> dict[str, Any]:
    references = [{"refType": "FOLLOWS_FROM", "traceID": linked, "spanID": "12" * 8} for linked in links]
    return {"traceID": trace_id, "processes": {"p1": {"serviceName": "svc"}}, "spans": [
        {"traceID": trace_id, "spanID": "12" * 8, "operationName": "write", "processID": "p1",
         "startTime": 1_700_000_000_000_000, "duration": 5, "references": references}]}


@dataclass
class _Server:
    """What the test server does, and what it saw."""

    respond: Callable[[http.server.BaseHTTPRequestHandler], None]
    stop: threading.Event = field(default_factory=threading.Event)
    hung_up: threading.Event = field(default_factory=threading.Event)
    asked: Counter[str] = field(default_factory=Counter)
    lock: threading.Condition = field(default_factory=threading.Condition)
    in_flight: int = 0
    most_in_flight: int = 0
    url: str = ""


class _Handler(http.server.BaseHTTPRequestHandler):
    server_state: _Server

    def do_GET(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        state.asked[self.path.rsplit("/", 1)[-1]] += 1
        state.respond(self)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[Any], None]], _Server]]:
    servers = LoopbackServers("test-jaeger")

    def start(respond: Callable[[Any], None]) -> _Server:
        state = _Server(respond)
        state.url = servers.start(_Handler, "state", state)
        return state

    yield start
    servers.close()


def _json(status: int, document: Any) -> Callable[[Any], None]:
    return lambda handler: send_answer(handler, status, json.dumps(document).encode())


def _traces(links: dict[str, tuple[str, ...]]) -> Callable[[Any], None]:
    """A Jaeger that knows the traces in ``links`` (each links to the traces listed)."""
    def respond(handler: Any) -> None:
        trace_id = handler.path.rsplit("/", 1)[-1]
        if trace_id in links:
            document = {"data": [_jaeger_trace(trace_id, links[trace_id])]}
            send_answer(handler, 200, json.dumps(document).encode())
        else:
            send_answer(handler, 404, b'{"data":null,"errors":[{"code":404,"msg":"trace not found"}]}')
    return respond


def test_a_dripping_server_is_cut_off_at_the_request_timeout(serve: Any) -> None:
    def drip(handler: Any) -> None:
        state = handler.server.state
        try:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 20:
                handler.wfile.write(bytes([byte]))
                if state.stop.wait(0.1):
                    return
        except OSError:
            state.hung_up.set()

    server = serve(drip)
    fetch = JaegerQueryClient(server.url, timeout=0.5, deadline=30).fetch_traces([A])
    one_problem(fetch, A, "no complete answer within 0.5 s")
    assert server.hung_up.wait(30), "the client never hung up on the dripping server"


def test_the_overall_deadline_bounds_a_whole_fetch(serve: Any) -> None:
    server = serve(lambda handler: handler.server.state.stop.wait(60))  # accepts, never answers
    fetch = JaegerQueryClient(server.url, timeout=30, deadline=0.5, concurrency=2).fetch_traces([A, B, C])
    text = one_problem(fetch, "3 traces not fetched", "no answer within the overall deadline of 0.5 s")
    assert A in text


def test_a_silent_server_times_out(serve: Any) -> None:
    server = serve(lambda handler: handler.server.state.stop.wait(60))
    with pytest.raises(JaegerQueryError, match=r"no complete answer within 0\.3 s"):
        JaegerQueryClient(server.url, timeout=0.3).fetch_trace(A)


@pytest.mark.parametrize(("respond", "words"), [
    (_json(500, {"errors": 5}), ("HTTP 500", '{"errors": 5}')),
    (lambda h: send_answer(h, 500, b"[" * 100_000), ("HTTP 500",)),
    (lambda h: send_answer(h, 200, b"[" * 100_000), ("response is not JSON",)),
    (_json(200, {"data": 5}), ("not a Jaeger query API answer",)),
    (_json(200, {"data": [5, {"spans": "x"}]}), ("answer not understood",)),
    (_json(200, {"data": []}), ("not found (empty answer)",)),
    (lambda h: send_answer(h, 200, b"<html>hello</html>", "text/html"), ("response is not JSON",)),
])
def test_a_bad_answer_is_one_line_and_nothing_received(serve: Any, respond: Any,
                                                       words: tuple[str, ...]) -> None:
    server = serve(respond)
    one_problem(JaegerQueryClient(server.url).fetch_traces([A]), A, "trace not fetched", *words)


def test_a_redirect_loop_is_one_line(serve: Any) -> None:
    def loop(handler: Any) -> None:
        handler.send_response(302)
        handler.send_header("Location", handler.path)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    server = serve(loop)
    one_problem(JaegerQueryClient(server.url).fetch_traces([A]), "redirect")
    assert server.asked[A] <= 5  # followed a few times, then given up


def test_a_bad_status_line_is_one_line(serve: Any) -> None:
    server = serve(lambda handler: handler.wfile.write(b"HELLO THERE\r\n\r\n"))
    one_problem(JaegerQueryClient(server.url).fetch_traces([A, B]), "2 traces not fetched", "BadStatusLine")


def test_only_traces_really_received_are_counted(serve: Any) -> None:
    other = "d4" * 16

    def respond(handler: Any) -> None:
        trace_id = handler.path.rsplit("/", 1)[-1]
        if trace_id == A:
            send_answer(handler, 200, json.dumps({"data": [_jaeger_trace(A), _jaeger_trace(other)]}).encode())
        elif trace_id == B:
            send_answer(handler, 200, b'{"data": []}')
        else:
            send_answer(handler, 404, b'{"errors": [{"code": 404, "msg": "trace not found"}]}')

    server = serve(respond)
    fetch = JaegerQueryClient(server.url).fetch_traces([A, B, C, A, "not a trace id"])
    assert fetch.received == {A} and {s.trace_id for s in fetch.spans} == {A}
    messages = sorted(p.message for p in fetch.problems)
    assert len(messages) == 4
    assert "1 span(s) of other traces; ignored" in messages[0]
    assert "trace not fetched: HTTP 404 Not Found: trace not found" in messages[1]
    assert "not found (empty answer)" in messages[2] and "not 1-32 hex digits" in messages[3]
    assert server.asked[A] == 1  # asked once, though named twice


def test_fetches_run_concurrently_within_the_bound(serve: Any) -> None:
    ids = [f"{i + 1:032x}" for i in range(8)]
    known = _traces({trace_id: () for trace_id in ids})

    answered: list[str] = []

    def respond(handler: Any) -> None:
        # Each request waits until three are in flight (or the rest are all here): the client
        # must reach its bound, and never pass it.
        state = handler.server.state
        with state.lock:
            state.in_flight += 1
            state.most_in_flight = max(state.most_in_flight, state.in_flight)
            state.lock.notify_all()
            state.lock.wait_for(lambda: state.in_flight >= 3 or state.in_flight + len(answered) == len(ids)
                                or state.stop.is_set(), timeout=10)
        known(handler)
        with state.lock:
            state.in_flight -= 1
            answered.append(handler.path)
            state.lock.notify_all()

    server = serve(respond)
    fetch = JaegerQueryClient(server.url, concurrency=3).fetch_traces(ids)
    assert fetch.problems == [] and fetch.received == set(ids)
    assert server.most_in_flight == 3


def test_linked_traces_are_fetched_round_by_round_and_never_asked_twice(serve: Any) -> None:
    server = serve(_traces({B: (C, A), C: ("e5" * 16,)}))  # e5... is nowhere
    start = SpanRecord(A, "12" * 8, "read", links=[SpanLink(B, "12" * 8, {}), SpanLink(C, "12" * 8, {})])
    result = SpanReadResult()
    result.add([start])
    backend = JaegerQueryClient(server.url)
    assert isinstance(backend, TraceBackend)
    fetched = fetch_linked_traces(result, backend)
    assert fetched.requested == {B, C, "e5" * 16} and fetched.received == {B, C}
    assert fetched.still_missing == {"e5" * 16}
    assert {s.trace_id for s in result.spans} == {A, B, C}
    (problem,) = fetched.problems
    assert "e5" * 16 in str(problem) and "HTTP 404" in str(problem)
    assert set(server.asked.values()) == {1}


def test_rounds_bound_how_deep_links_are_followed(serve: Any) -> None:
    chain = {f"{i + 1:032x}": (f"{i + 2:032x}",) for i in range(10)}
    server = serve(_traces(chain))
    result = SpanReadResult()
    result.add([SpanRecord(A, "12" * 8, "read", links=[SpanLink(f"{1:032x}", "12" * 8, {})])])
    fetched = fetch_linked_traces(result, JaegerQueryClient(server.url), rounds=3)
    assert fetched.requested == fetched.received == {f"{i + 1:032x}" for i in range(3)}
    assert fetched.still_missing == {f"{4:032x}"} and sum(server.asked.values()) == 3
    with pytest.raises(ValueError, match="rounds"):
        fetch_linked_traces(result, JaegerQueryClient(server.url), rounds=0)


@pytest.mark.parametrize("url", ["", "ftp://host", "http://", "http://host:99999", "http://ho st",
                                 "http://host/?q=1", "file:///etc/passwd", "http://host\n"])
def test_a_bad_base_url_is_a_clear_value_error(url: str) -> None:
    with pytest.raises(ValueError, match="Jaeger query URL") as error:
        JaegerQueryClient(url)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("arguments", [{"timeout": 0}, {"deadline": -1}, {"concurrency": 0},
                                       {"timeout": float("nan")}, {"concurrency": 1.5}])
def test_bad_bounds_are_value_errors(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        JaegerQueryClient("http://127.0.0.1:16686", **arguments)
