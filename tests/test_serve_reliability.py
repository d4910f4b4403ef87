"""`memtrace serve` when things go wrong (issue 9, item 7): real processes on 127.0.0.1 only.

* killed mid-stream (SIGKILL) behind the Collector's tee: the backend still gets every
  application span, and once serve is restarted on its port (same data directory), every failure
  is annotated once, those it had acknowledged before the kill included;
* the backend down for a while (``MEMTRACE_TEST_BACKEND_OUTAGE`` seconds, default 6; CI
  may set 30): every annotation made meanwhile arrives after it returns, none twice;
* one trace of 10,000 spans is taken in and attributed;
* malformed, truncated and oversized OTLP payloads over HTTP and gRPC: an error answer
  each, one log line each, no traceback, and serve goes on attributing;
* a trace backend whose query API never answers: the fetch gives up at the client's
  timeout, the verdict is made without the linked traces, and the worker is free for
  the next failure.

The first two need Jaeger and the Collector (skipped with the reason when they are not
built, failed on CI); the others run serve alone, its verdicts printed on stderr.
"""

from __future__ import annotations

import gzip
import http.client
import itertools
import json
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.config import ENV_BACKEND_DEADLINE, ENV_BACKEND_TIMEOUT
from memtrace_otel.semconv import AnnotationSpan, MemTraceAttribution

import jaeger_harness
import otelcol_harness
from jaeger_harness import JaegerEndpoints
from scenario import run_pipeline
from serve_harness import (
    POLL_SECONDS,
    AppPipeline,
    ServeProcess,
    Verdict,
    app_pipeline,
    await_annotations,
    await_stored,
    failed_traces,
    hex_ids,
    jaeger_trace,
    reference_verdicts,
    run_serve,
    start_serve,
    stop_serve,
    stored_verdict,
    tags,
    wait_for,
)

ENV_OUTAGE = "MEMTRACE_TEST_BACKEND_OUTAGE"
"""Seconds the backend stays down in the outage test (issue 9 asks for 30; 6 keeps local runs short)."""
_SETTLE = 1.0
_VERDICT = re.compile(r"trace ([0-9a-f]{32}): (\w+) at (\S+)")
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _outage_seconds() -> float:
    raw = os.environ.get(ENV_OUTAGE, "6")
    try:
        return max(1.0, float(raw))
    except ValueError:
        pytest.fail(f"{ENV_OUTAGE}={raw!r} is not a number of seconds", pytrace=False)


def _logged_verdicts(serve: ServeProcess) -> dict[str, tuple[str, str]]:
    """Verdicts serve printed (no backend: one line per annotation span), by failed trace id."""
    return {m.group(1): (m.group(2), m.group(3)) for m in _VERDICT.finditer(serve.log())}


def _assert_clean_log(serve: ServeProcess) -> None:
    assert "Traceback" not in serve.log(), serve.log_tail(80)


# -- the pipeline with a Collector and Jaeger ---------------------------------------------------

@pytest.fixture(scope="module")
def otelcol_bin() -> Path:
    return otelcol_harness.require_otelcol_binary()


@pytest.fixture(scope="module")
def jaeger_bin(otelcol_bin: Path) -> Path:
    return jaeger_harness.require_jaeger_binary()


def _annotation_counts(stored: dict[str, list[dict]], trace_ids: set[str]) -> Counter[tuple[str, str]]:
    return Counter((trace_id, span["operationName"]) for trace_id in trace_ids for span in stored[trace_id]
                   if span["operationName"] in (AnnotationSpan.ATTRIBUTION, AnnotationSpan.ROOT_CAUSE))


def _one_verdict_each(stored: dict[str, list[dict]],
                      sent: list[ReadableSpan]) -> dict[tuple[str, str], Verdict]:
    """The stored verdicts of the failures in ``sent``: exactly one attribution span each."""
    failed = failed_traces(sent)
    spans = [span for trace_id in failed for span in stored[trace_id]
             if span["operationName"] == AnnotationSpan.ATTRIBUTION]
    assert Counter(span["traceID"].rjust(32, "0") for span in spans) == failed
    return {stored_verdict(span).evaluation: stored_verdict(span) for span in spans}


def _superseded(span: dict) -> set[str]:
    value = tags(span).get(MemTraceAttribution.SUPERSEDES)
    if value is None:
        return set()
    return set(json.loads(value) if isinstance(value, str) else value)


def _final_verdicts(jaeger: JaegerEndpoints, sent: list[ReadableSpan], logs: list,
                    timeout: float) -> dict[tuple[str, str], Verdict]:
    """The verdicts no other verdict supersedes, once each failure in ``sent`` has one that is not
    provisional (polled)."""
    failed = failed_traces(sent)

    def final() -> dict[tuple[str, str], Verdict] | None:
        spans = [span for trace_id in failed for span in jaeger_trace(jaeger.query_url, trace_id)
                 if span["operationName"] == AnnotationSpan.ATTRIBUTION
                 and tags(span).get(MemTraceAttribution.PROVISIONAL) not in (True, "true")]
        if Counter(span["traceID"].rjust(32, "0") for span in spans) != failed:
            return None
        return {stored_verdict(span).evaluation: stored_verdict(span) for span in spans}

    return wait_for(final, timeout=timeout,
                    what=lambda: "\n".join(log.log_tail() for log in logs))


def _sent_since(app: AppPipeline, before: int) -> list[ReadableSpan]:
    return app.spans()[before:]


def test_serve_killed_mid_stream_loses_no_backend_span_and_annotates_after_restart(
    otelcol_bin: Path, jaeger_bin: Path, tmp_path: Path
) -> None:
    (port,) = otelcol_harness.free_ports(1)  # fixed: the restarted serve takes the same port
    with ExitStack() as stack:
        jaeger = stack.enter_context(jaeger_harness.run_jaeger(jaeger_bin, tmp_path))
        options = {"grpc_port": -1, "http_port": port, "settle": _SETTLE, "backend_otlp": jaeger.otlp_http,
                   "jaeger_url": jaeger.query_url}
        serve = start_serve(tmp_path, **options)
        stack.callback(lambda: stop_serve(serve))
        env = {"MEMTRACE_BACKEND_OTLP": jaeger.otlp_grpc, "MEMTRACE_SERVE_OTLP": f"http://127.0.0.1:{port}"}
        collector = stack.enter_context(otelcol_harness.run_otelcol(otelcol_bin, otelcol_harness.TEE_CONFIG,
                                                                    tmp_path, env=env))
        stores = (f"s{n}" for n in itertools.count())  # one memory per run (serve searches by store)
        app = app_pipeline(collector.otlp_http_traces, f"memory-app-{uuid.uuid4().hex[:8]}")
        run_pipeline(app.provider, capture_content=True, store_id=next(stores))
        await_annotations(jaeger, app.spans(), [serve, collector])  # serve works before it is killed
        before_kill = len(app.spans())
        run_pipeline(app.provider, capture_content=True, store_id=next(stores))
        # Killed with traces acknowledged and not yet judged (settle 1 s): they are in its data
        # directory, and so is whatever it was judging.
        assert stop_serve(serve, sig=signal.SIGKILL) == -signal.SIGKILL
        run_pipeline(app.provider, capture_content=True, store_id=next(stores))  # while serve is dead
        # The backend is fed by its own exporter: every application span, whatever serve's state.
        await_stored(jaeger, Counter(hex_ids(span)[0] for span in app.spans()), [collector])
        serve = start_serve(tmp_path, **options)
        run_pipeline(app.provider, capture_content=True, store_id=next(stores))
        app.provider.shutdown()
        # Every failure from the kill on is annotated once, with the verdicts of a serve that never
        # stopped: those it had acknowledged (replayed from its data directory), those sent while it
        # was dead (the Collector's queue for serve retried them) and those after.
        later = _sent_since(app, before_kill)
        stored = await_annotations(jaeger, later, [serve, collector])
        assert _one_verdict_each(stored, later) == reference_verdicts(later)
        for trace_id in {hex_ids(span)[0] for span in app.spans()}:
            stored_ids = {s["spanID"].rjust(16, "0") for s in jaeger_trace(jaeger.query_url, trace_id)}
            assert {hex_ids(s)[1] for s in app.spans() if hex_ids(s)[0] == trace_id} <= stored_ids
        assert stop_serve(serve) == 0
        _assert_clean_log(serve)


class Relay:
    """A TCP relay from ``127.0.0.1:port`` to ``upstream``: the network path to the backend.

    :meth:`stop` closes the listener and cuts every open connection, so the backend is
    down for whoever goes through the relay (connections refused); :meth:`start` brings it
    back on the same port. Thread-safe.
    """

    def __init__(self, port: int, upstream: str) -> None:
        host, _, upstream_port = upstream.removeprefix("http://").rpartition(":")
        self.port, self._upstream = port, (host, int(upstream_port))
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="relay-accept", daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, []
        for sock in ([listener] if listener else []) + sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()  # the backend itself is gone: so is this connection
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        for sock in (source, target):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def relays(jaeger_bin: Path, tmp_path: Path) -> Iterator[tuple[JaegerEndpoints, dict[str, Relay]]]:
    """A Jaeger reached only through relays: its OTLP/gRPC, OTLP/HTTP and query ports."""
    with jaeger_harness.run_jaeger(jaeger_bin, tmp_path) as jaeger:
        ports = otelcol_harness.free_ports(3)
        upstreams = {"otlp_grpc": jaeger.otlp_grpc, "otlp_http": jaeger.otlp_http, "query": jaeger.query_url}
        found = {name: Relay(port, upstream) for (name, upstream), port in zip(upstreams.items(), ports,
                                                                               strict=True)}
        for relay in found.values():
            relay.start()
        try:
            yield jaeger, found
        finally:
            for relay in found.values():
                relay.stop()


def test_backend_outage_loses_no_annotation(otelcol_bin: Path,
                                            relays: tuple[JaegerEndpoints, dict[str, Relay]],
                                            tmp_path: Path) -> None:
    jaeger, relay = relays
    outage = _outage_seconds()
    via = {name: f"127.0.0.1:{r.port}" for name, r in relay.items()}
    with ExitStack() as stack:
        serve = stack.enter_context(run_serve(tmp_path, grpc_port=-1, http_port=0, settle=_SETTLE,
                                              backend_otlp=f"http://{via['otlp_http']}",
                                              jaeger_url=f"http://{via['query']}"))
        env = {"MEMTRACE_BACKEND_OTLP": via["otlp_grpc"], "MEMTRACE_SERVE_OTLP": serve.http_url}
        collector = stack.enter_context(otelcol_harness.run_otelcol(otelcol_bin, otelcol_harness.TEE_CONFIG,
                                                                    tmp_path, env=env))
        app = app_pipeline(collector.otlp_http_traces, f"memory-app-{uuid.uuid4().hex[:8]}")
        stores = (f"s{n}" for n in itertools.count())  # one memory per run (serve searches by store)
        run_pipeline(app.provider, capture_content=True, store_id=next(stores))
        await_annotations(jaeger, app.spans(), [serve, collector])
        before = len(app.spans())
        for item in relay.values():  # the whole backend goes: ingest, query and annotation write-back
            item.stop()
        down_since = time.monotonic()
        for _ in range(3):
            run_pipeline(app.provider, capture_content=True, store_id=next(stores))
        during = _sent_since(app, before)
        # Serve attributed the failures meanwhile and holds their annotations: the backend refused them.
        wait_for(lambda: "did not accept" in serve.log(), timeout=POLL_SECONDS, what=serve.log_tail)
        time.sleep(max(0.0, outage - (time.monotonic() - down_since)))  # the outage's length is the point
        for item in relay.values():
            item.start()
        # Every application span arrives (the Collector's queue for the backend). Each failure got a
        # provisional verdict during the outage (its linked traces could not be fetched) and, once the
        # backend answered, a final one that supersedes it: the verdict of a serve that never saw an
        # outage. None lost, none twice.
        failed = failed_traces(during)
        final = _final_verdicts(jaeger, during, [serve, collector], timeout=POLL_SECONDS + outage)
        assert final == reference_verdicts(during)
        stored = await_annotations(jaeger, during, [serve, collector])
        attribution = [span for trace_id in failed for span in stored[trace_id]
                       if span["operationName"] == AnnotationSpan.ATTRIBUTION]
        provisional = {span["spanID"].rjust(16, "0") for span in attribution
                       if tags(span).get(MemTraceAttribution.PROVISIONAL) in (True, "true")}
        superseded = set().union(*(_superseded(span) for span in attribution))
        assert len(provisional) == len(failed) == 3 and provisional == superseded
        assert Counter(span["traceID"].rjust(32, "0") for span in attribution) == failed + failed
        app.provider.shutdown()
    assert "0 annotations dropped" in serve.log()
    _assert_clean_log(serve)


# -- serve alone -------------------------------------------------------------------------------

def _send_grpc(serve: ServeProcess, produce: object) -> list[ReadableSpan]:
    """Run ``produce(provider)`` with a provider exporting by OTLP/gRPC to serve; the spans sent."""
    provider, sent = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(BatchSpanProcessor(GrpcExporter(endpoint=serve.grpc_endpoint, insecure=True,
                                                                timeout=30),
                                                     max_queue_size=20_000, max_export_batch_size=512))
    provider.add_span_processor(SimpleSpanProcessor(sent))
    produce(provider)  # type: ignore[operator]
    assert provider.force_flush(120_000)
    provider.shutdown()
    return list(sent.get_finished_spans())


def _await_verdicts(serve: ServeProcess, traces: set[str], timeout: float = POLL_SECONDS) -> dict:
    def ready() -> dict | None:
        serve.assert_alive()
        found = _logged_verdicts(serve)
        return found if traces <= set(found) else None

    return wait_for(ready, timeout=timeout, what=lambda: f"verdicts for {sorted(traces)}\n{serve.log_tail()}")


def big_trace(provider: TracerProvider, pairs: int) -> None:
    """One trace: ``pairs`` ingest + extract operations, then an update that overwrites the first
    memory with a wrong value, a search that reads it, an answer and a failed judgement."""
    mt = MemoryTracer(provider, capture_content=True)
    with provider.get_tracer("big").start_as_current_span("big session"):
        records = {}
        for number in range(pairs):
            with mt.operation("ingest", Category.INGEST) as op:
                message = op.write(f"msg:{number}", f"I like colour {number}", kind=VariableKind.MESSAGE)
            with mt.operation("extract", Category.EXTRACTION) as op:
                op.read(message)
                unit = op.write(f"mem:{number}", f"User likes colour {number}", kind=VariableKind.MEMORY_UNIT)
                records[number] = op.lineage_metadata(unit)
        with mt.operation("update", Category.UPDATE) as op:
            old = op.read_record(records[0], content="User likes colour 0")
            records[0] = op.lineage_metadata(op.update(old, "User likes colour 999999"))
        with mt.operation("search", Category.RETRIEVAL) as op:
            query = op.write("query:big", "Which colour does the user like?", kind=VariableKind.QUERY)
            unit = op.read_record(records[0], content="User likes colour 999999")
            context = op.write("context:big", str(unit.content), kind=VariableKind.CONTEXT)
        with mt.operation("generate", Category.GENERATION) as op:
            op.read(query)
            op.read(context)
            answer = op.write("answer:big", "999999", kind=VariableKind.ANSWER)
        with mt.operation("judge", Category.EVALUATION) as op:
            op.read(answer)
            op.record_evaluation(False, score=0.0, question="Which colour does the user like?",
                                 prediction="999999", gold="0", evidence=["D:0"], answer=answer,
                                 case_id="big")


def test_a_trace_of_ten_thousand_spans_is_attributed(tmp_path: Path) -> None:
    with run_serve(tmp_path, grpc_port=0, http_port=-1, settle=_SETTLE) as serve:
        sent = _send_grpc(serve, lambda provider: big_trace(provider, pairs=4998))
        assert len(sent) == 10_001 and len({hex_ids(s)[0] for s in sent}) == 1
        (expected,) = reference_verdicts(sent).values()
        verdicts = _await_verdicts(serve, {expected.evaluation[0]})
        assert verdicts[expected.evaluation[0]] == (expected.error_type, expected.operation_name)
        assert stop_serve(serve) == 0
    assert "10001 spans received, 1 failures attributed, 0 annotations dropped" in serve.log()
    _assert_clean_log(serve)


# -- bad payloads ------------------------------------------------------------------------------

def _good_request() -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = os.urandom(16), os.urandom(8), "ok"
    return request.SerializeToString()


def _post(serve: ServeProcess, body: bytes, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", serve.http_port, timeout=30)
    try:
        connection.request("POST", "/v1/traces", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _truncated_post(serve: ServeProcess, body: bytes, claimed: int) -> int:
    """A body shorter than its Content-Length, the client's side then closed (a cut connection)."""
    with socket.create_connection(("127.0.0.1", serve.http_port), timeout=30) as sock:
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: serve\r\nContent-Type: application/x-protobuf\r\n"
                     + f"Content-Length: {claimed}\r\n\r\n".encode() + body)
        sock.shutdown(socket.SHUT_WR)
        answer = sock.recv(4096)
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else 0


def _oversized_post(serve: ServeProcess, length: int) -> int:
    """Headers announcing a ``length``-byte body and no body: serve must answer before reading it
    (a client still sending would see its connection reset once the answer is given)."""
    with socket.create_connection(("127.0.0.1", serve.http_port), timeout=30) as sock:
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: serve\r\nContent-Type: application/x-protobuf\r\n"
                     + f"Content-Length: {length}\r\n\r\n".encode())
        answer = sock.recv(4096)
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else 0


def _still_attributes(serve: ServeProcess) -> None:
    sent = _send_grpc(serve, lambda provider: run_pipeline(provider, capture_content=True))
    _await_verdicts(serve, set(failed_traces(sent)))


@pytest.fixture
def lone_serve(tmp_path: Path) -> Iterator[ServeProcess]:
    """serve with both receivers and a 1 MiB request limit, no backend: verdicts go to its log."""
    with run_serve(tmp_path, grpc_port=0, http_port=0, settle=_SETTLE,
                   args=["--max-request", "1"]) as serve:
        yield serve


_PB = {"Content-Type": "application/x-protobuf"}
_HTTP_BAD = [
    ("garbage protobuf", b"\xff\x00garbage", _PB, 400),
    ("truncated protobuf", _good_request()[:-7], _PB, 400),
    ("JSON that is not JSON", b'{"resourceSpans": [', {"Content-Type": "application/json"}, 400),
    ("JSON without resourceSpans", b'{"data": []}', {"Content-Type": "application/json"}, 400),
    ("another content type", b"spans", {"Content-Type": "text/plain"}, 415),
    ("gzip bomb", gzip.compress(b"\0" * (4 << 20)), {**_PB, "Content-Encoding": "gzip"}, 413),
    ("truncated gzip", gzip.compress(_good_request())[:-9], {**_PB, "Content-Encoding": "gzip"}, 400),
]


def test_bad_http_payloads_get_an_error_each_and_serve_keeps_serving(lone_serve: ServeProcess) -> None:
    for name, body, headers, status in _HTTP_BAD:
        assert _post(lone_serve, body, headers) == status, name
        assert _post(lone_serve, _good_request(), _PB) == 200, f"after {name}"
    assert _oversized_post(lone_serve, (1 << 20) + 1) == 413
    assert _post(lone_serve, _good_request(), _PB) == 200
    # A sender that hangs up mid-body gets no answer from waitress (0) and nothing of it is taken.
    assert _truncated_post(lone_serve, _good_request(), claimed=4096) in (0, 400)
    assert _post(lone_serve, _good_request(), _PB) == 200
    rejected = lone_serve.log().count("rejected a request")
    assert rejected == len(_HTTP_BAD) + 1  # one line each
    assert lone_serve.log().count("a client hung up before its answer (1 so far)") == 1
    _still_attributes(lone_serve)
    _assert_clean_log(lone_serve)


_GRPC_BAD = [
    ("garbage protobuf", b"\xff\x00garbage", grpc.StatusCode.INVALID_ARGUMENT),
    ("truncated protobuf", _good_request()[:-7], grpc.StatusCode.INVALID_ARGUMENT),
    ("oversized message", b"\x0a" * (2 << 20), grpc.StatusCode.RESOURCE_EXHAUSTED),
]


def test_bad_grpc_payloads_get_an_error_each_and_serve_keeps_serving(lone_serve: ServeProcess) -> None:
    with grpc.insecure_channel(lone_serve.grpc_endpoint) as channel:
        export = channel.unary_unary(_EXPORT)  # raw bytes: what a broken client could send
        for name, body, code in _GRPC_BAD:
            with pytest.raises(grpc.RpcError) as raised:
                export(body, timeout=30)
            assert raised.value.code() is code, f"{name}: {raised.value.code()} {raised.value.details()}"
            assert export(_good_request(), timeout=30) == b"", f"after {name}"
        mixed = ExportTraceServiceRequest.FromString(_good_request())
        bad = mixed.resource_spans[0].scope_spans[0].spans.add()
        bad.trace_id, bad.span_id, bad.name = b"\0" * 16, os.urandom(8), "zero trace id"
        reply = ExportTraceServiceResponse.FromString(export(mixed.SerializeToString(), timeout=30))
        assert reply.partial_success.rejected_spans == 1  # the good span is kept, the bad one counted
    assert lone_serve.log().count("rejected an Export") == 2  # one line per undecodable request
    _still_attributes(lone_serve)
    _assert_clean_log(lone_serve)


# -- a hanging backend -------------------------------------------------------------------------

class HangingServer:
    """Accepts connections on 127.0.0.1, reads the requests, never answers; counts requests."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requests = 0
        self._lock = threading.Lock()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, name="hanging-backend", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._held.append(client)
            threading.Thread(target=self._read, args=(client,), daemon=True).start()

    def _read(self, client: socket.socket) -> None:
        try:
            request = client.recv(65536)
        except OSError:
            return
        if request.startswith(b"GET "):
            with self._lock:
                self.requests += 1

    def close(self) -> None:
        for sock in [self._listener, *self._held]:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def test_a_hanging_backend_query_times_out_and_frees_the_worker(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BACKEND_TIMEOUT, "2")  # the service's bound, from the environment
    monkeypatch.setenv(ENV_BACKEND_DEADLINE, "3")
    backend = HangingServer()
    try:
        with run_serve(tmp_path, grpc_port=0, http_port=-1, settle=_SETTLE, jaeger_url=backend.url) as serve:
            verdicts: dict[str, tuple[str, str]] = {}
            for round_number in (1, 2):  # the second failure comes after the first fetch hung
                sent = _send_grpc(serve, lambda provider: run_pipeline(provider, capture_content=True))
                verdicts.update(_await_verdicts(serve, set(failed_traces(sent))))
                assert backend.requests >= round_number  # the linked traces were asked for, in vain
                # Without the linked traces the verdict is the failed trace's own best guess.
                own: dict[tuple[str, str], Verdict] = reference_verdicts(
                    [s for s in sent if hex_ids(s)[0] in failed_traces(sent)])
                assert {v.evaluation[0]: (v.error_type, v.operation_name) for v in own.values()}.items() \
                    <= verdicts.items()
            assert len(verdicts) == 2
            assert "linked trace fetch" in serve.log()  # the timeout is one warning line
            assert "within 2 s" in serve.log() or "within 3 s" in serve.log()  # the bound configured
            assert stop_serve(serve) == 0
        _assert_clean_log(serve)
    finally:
        backend.close()
