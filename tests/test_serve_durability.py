"""Issue 24's regressions for `memtrace serve`: real processes and sockets on 127.0.0.1 only.

* SIGKILL after acknowledging: a restarted serve attributes every acknowledged failure (loss 0);
* annotations held while the backend is down survive a restart and reach it afterwards;
* a permanent refusal (HTTP 400) drops that batch, counted, and the next batches go through;
* 200 concurrent clients: every request answered, no connection reset;
* one failure's backend requests are capped by its budget, a backend's rate is limited, and one
  failure waiting on a slow backend query does not hold the others;
* 300 idle connections and a slowloris client hold no thread, and the slow one is closed;
* a flood of attribute-dense requests keeps resident memory under the limit;
* a serve stopped while the backend is down keeps its annotations and sends them after a restart
  (real Jaeger).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.collector.assembler import TraceAssembler
from memtrace_otel.collector.budget import Budget, RateLimiter, budgeted
from memtrace_otel.collector.durable import DurableStore
from memtrace_otel.collector.export import DurableOutbox, OtlpHttpSender
from memtrace_otel.collector.http_receiver import OTLPHttpReceiver
from memtrace_otel.spans.backend import BackendFetch

from otelcol_harness import free_ports as _free_ports
from scenario import run_pipeline
from serve_harness import failed_traces, post_protobuf, start_serve, stop_serve, wait_for

_VERDICT = re.compile(r"trace ([0-9a-f]{32}): (\w+) at (\S+)")


def _failing_requests(runs: int) -> tuple[list[bytes], set[str]]:
    """Protobuf requests of ``runs`` pipeline runs (one failed question each), and the failed trace ids."""
    provider, sent = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(sent))
    for run in range(runs):
        run_pipeline(provider, capture_content=True, store_id=f"s{run}")
    spans = sent.get_finished_spans()
    bodies = [encode_spans(spans[i:i + 50]).SerializeToString() for i in range(0, len(spans), 50)]
    return bodies, set(failed_traces(spans))


def test_sigkill_after_acknowledging_loses_no_failure(tmp_path: Path) -> None:
    bodies, failed = _failing_requests(3)
    # A long settle: nothing is attributed before the kill, everything is only acknowledged.
    serve = start_serve(tmp_path, grpc_port=-1, http_port=0, settle=60)
    assert [post_protobuf(serve.http_port, body) for body in bodies] == [200] * len(bodies)  # type: ignore[arg-type]
    assert stop_serve(serve, sig=signal.SIGKILL) == -signal.SIGKILL
    serve = start_serve(tmp_path, grpc_port=-1, http_port=0, settle=0.5)
    try:
        judged = wait_for(lambda: failed <= {m.group(1) for m in _VERDICT.finditer(serve.log())} or None,
                          timeout=60, what=serve.log_tail)
        assert judged
        assert "replaying" in serve.log()
    finally:
        assert stop_serve(serve) == 0
    lost = failed - {m.group(1) for m in _VERDICT.finditer(serve.log())}
    assert len(lost) == 0
    assert "Traceback" not in serve.log()


class _Backend:
    """An OTLP/HTTP backend on a local port that answers each request as ``answers`` says."""

    def __init__(self, answers: list[int]) -> None:
        self.answers, self.bodies = answers, []
        self.lock = threading.Lock()
        self.receiver = OTLPHttpReceiver(self._ingest, port=0, store_bodies=False)
        self.receiver.start()

    def _ingest(self, spans: list, _size: int) -> bool:
        with self.lock:
            self.bodies.append(spans)
        return True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.receiver.address[1]}/v1/traces"


def test_a_permanent_refusal_drops_that_batch_and_the_next_ones_go_through(tmp_path: Path) -> None:
    class Sender(OtlpHttpSender):
        def __init__(self, url: str) -> None:
            super().__init__(url)
            self.calls = 0

        def send(self, body: bytes):  # type: ignore[no-untyped-def]
            self.calls += 1
            if body == b"poison":  # what a 3 MiB operation name once made Jaeger answer
                from memtrace_otel.collector.export import Answer

                return Answer.PERMANENT, "HTTP 400 'too large'"
            return super().send(body)

    backend = _Backend([])
    store = DurableStore(tmp_path)
    good = encode_spans([_span()]).SerializeToString()
    ids = store.finish("0" * 31 + "1", [(1, b"poison")]) + store.finish("0" * 31 + "2", [(1, good)])
    outbox = DurableOutbox(store, Sender(backend.url), initial_backoff=0.01, max_backoff=0.02)
    outbox.add(ids)
    assert outbox.force_flush(20_000)
    assert outbox.dropped == 1 and outbox.exported == 1 and outbox.held == 0
    assert len(backend.bodies) == 1
    outbox.shutdown(1000)
    backend.receiver.stop()
    store.close()


def _named_rows(store: DurableStore, names: list[str]) -> list[int]:
    """One outbox row per name: an encoded request of one span so named (``poison``: not a request)."""
    ids: list[int] = []
    for number, name in enumerate(names):
        body = b"poison" if name == "poison" else encode_spans([_span(name)]).SerializeToString()
        ids += store.finish(f"{number + 1:032x}", [(1, body)])
    return ids


def test_annotation_rows_waiting_together_go_as_one_request(tmp_path: Path) -> None:
    port = _free_ports(1)[0]  # nothing listens there yet: the backend is down while rows pile up
    store = DurableStore(tmp_path)
    names = [f"annotation-{n}" for n in range(20)]
    outbox = DurableOutbox(store, OtlpHttpSender(f"http://127.0.0.1:{port}/v1/traces", timeout=1),
                           initial_backoff=0.05, max_backoff=0.1)
    outbox.add(_named_rows(store, names))
    wait_for(lambda: outbox.failed_attempts >= 1 or None, timeout=20, what="the backend was never tried")
    requests: list[list[str]] = []
    backend = OTLPHttpReceiver(lambda spans, _size: requests.append([s.name for s in spans]) or True,
                               port=port, store_bodies=False)
    backend.start()
    try:
        assert outbox.force_flush(20_000)
    finally:
        backend.stop()
    assert [name for request in requests for name in request] == names  # each once, in order
    # the row being retried, then every row that waited behind it (a request a row: 20)
    assert len(requests) <= 2
    assert outbox.exported == 20 and outbox.held == 0 and outbox.dropped == 0
    outbox.shutdown(1000)
    store.close()



def test_a_join_the_backend_cannot_take_for_now_goes_a_row_at_a_time(tmp_path: Path) -> None:
    """A backend that answers 503 to any request of more than one span (a receiver limit under the joined
    request's size) takes the rows sent alone: the join is not retried for ever with the rows behind it."""
    from memtrace_otel.collector.export import _OutboxStep, _requests

    taken: list[str] = []

    def ingest(spans: list, _size: int) -> bool:  # type: ignore[type-arg]
        if len(spans) > 1:
            return False  # the receiver's 503: retry later
        taken.extend(span.name for span in spans)
        return True

    backend = OTLPHttpReceiver(ingest, port=0, store_bodies=False)
    backend.start()
    store = DurableStore(tmp_path)
    try:
        names = [f"annotation-{n}" for n in range(5)]
        ids = _named_rows(store, names)
        url = f"http://127.0.0.1:{backend.address[1]}/v1/traces"
        step = _OutboxStep(store, OtlpHttpSender(url, timeout=5))
        assert step.export(ids) is True  # nothing left to retry
        assert step.requests == 1 + 5 and taken == names and store.outbox_rows(ids) == []
    finally:
        backend.stop()
        store.close()
    # an empty body first still starts a request of its own (no row is lost to an empty group)
    assert _requests([(1, 1, 0), (2, 1, 1)]) == [[1, 2]]


class _RawBackend:
    """An HTTP server on 127.0.0.1 that reads each body and answers ``status``, keeping only sizes: what
    it holds is not what the outbox's memory is measured by."""

    def __init__(self, status: int) -> None:
        import http.server

        self.sizes: list[int] = []
        sizes = self.sizes

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                while length:
                    length -= len(self.rfile.read(min(length, 1 << 16)))
                sizes.append(int(self.headers["Content-Length"]))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


_ROW_BYTES = 128 << 10
_ROWS = 256  # a whole batch: 32 MiB of bodies, 1 MiB a request


def _large_rows(store: DurableStore) -> list[int]:
    return [row_id for number in range(_ROWS)
            for row_id in store.finish(f"{number + 1:032x}", [(2, bytes([number % 251]) * _ROW_BYTES)])]


def _peak_bytes(work: Callable[[], object]) -> int:
    """The most bytes Python held at once while ``work`` ran (every thread), over what it held before."""
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_a_batch_of_large_rows_is_read_a_request_at_a_time(tmp_path: Path) -> None:
    """The outbox reads a request's bodies when it sends it: a batch of 256 rows of 128 KiB (32 MiB) goes in
    1 MiB requests, and no more than a few requests' bytes are held at once (all 32 MiB were read first)."""
    from memtrace_otel.collector.export import _OutboxStep

    backend = _RawBackend(200)
    store = DurableStore(tmp_path)
    try:
        ids = _large_rows(store)
        step = _OutboxStep(store, OtlpHttpSender(backend.url, timeout=30))
        peak = _peak_bytes(lambda: step.export(ids))
        assert step.exported_spans == 2 * _ROWS and store.outbox_rows(ids) == []
        assert backend.sizes == [8 * _ROW_BYTES] * (_ROWS // 8)  # 1 MiB a request
        assert peak < 8 << 20, f"{peak / (1 << 20):.1f} MiB held at once"
    finally:
        backend.stop()
        store.close()


def test_a_refused_batch_is_counted_without_reading_its_bodies(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """A batch the backend refuses for now is logged with its span count, summed by the store: the bodies of
    its rows are not read for it (a batch of 256 rows of 128 KiB, 32 MiB, was read all at once)."""
    backend = _RawBackend(503)
    store = DurableStore(tmp_path)
    outbox = DurableOutbox(store, OtlpHttpSender(backend.url, timeout=30), initial_backoff=60, max_backoff=60)
    taken: list[list[int]] = []
    logged = outbox._retrying._on_refused
    assert logged is not None

    def refused_batch(attempts: int, batch: list[int]) -> None:
        taken.append(list(batch))
        logged(attempts, batch)

    outbox._retrying._on_refused = refused_batch
    ids = _large_rows(store)  # made after the outbox: nothing replayed, all queued by add below
    refused = re.compile(r"did not accept (\d+) annotation span\(s\)")
    try:
        with caplog.at_level(logging.WARNING, logger="memtrace_otel.collector.export"):
            outbox.add(ids)
            wait_for(lambda: any(map(refused.search, caplog.messages)) or None, timeout=60,
                     what="no refusal logged")
            # The worker may take its first batch before all 256 rows are queued: its line counts that batch.
            first = next(int(match.group(1)) for match in map(refused.search, caplog.messages) if match)
            assert first == 2 * len(set(taken[0])) and 0 < first <= 2 * _ROWS  # 2 spans a row
            assert backend.sizes[0] == min(len(taken[0]), 8) * _ROW_BYTES  # its first request: up to 1 MiB
            assert outbox.held == 2 * _ROWS
            caplog.clear()
            peak = _peak_bytes(lambda: outbox._refused(1, ids))  # the whole 32 MiB batch's line
        assert any(f"did not accept {2 * _ROWS} annotation span(s)" in message for message in caplog.messages)
        assert peak < 8 << 20, f"{peak / (1 << 20):.1f} MiB held at once"
    finally:
        outbox.shutdown(1000)
        backend.stop()
        store.close()


_SINK_CONFIG = """
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:${env:OTELCOL_HTTP_PORT}
      grpc:
        endpoint: 127.0.0.1:${env:OTELCOL_GRPC_PORT}
exporters:
  file:
    path: ${env:SINK_PATH}
    flush_interval: 100ms
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
  telemetry:
    metrics:
      level: none
"""


def test_the_collector_refusing_one_row_of_a_request_drops_that_row_only(tmp_path: Path) -> None:
    """Rows sent together that the real Collector refuses for good (HTTP 400: one of them is not an export
    request) are sent again a row at a time: the good ones reach it, the refused one alone is dropped."""
    import json

    from memtrace_otel.collector.export import _OutboxStep

    import otelcol_harness

    binary = otelcol_harness.require_otelcol_binary()
    config, sink = tmp_path / "sink.yaml", tmp_path / "sink.jsonl"
    config.write_text(_SINK_CONFIG)
    store = DurableStore(tmp_path / "data")
    ids = _named_rows(store, ["first", "poison", "second", "third"])
    with otelcol_harness.run_otelcol(binary, config, tmp_path, env={"SINK_PATH": str(sink)}) as collector:
        step = _OutboxStep(store, OtlpHttpSender(collector.otlp_http_traces))
        assert step.export(ids) is True  # nothing left to retry
        assert step.requests == 1 + 4  # the four together, refused; then each alone
        assert (step.exported_spans, step.dropped_spans) == (3, 1) and store.outbox_rows(ids) == []

        def names() -> list[str]:
            lines = sink.read_text().splitlines() if sink.exists() else []
            return [span["name"] for line in lines for resource in json.loads(line)["resourceSpans"]
                    for scope in resource["scopeSpans"] for span in scope["spans"]]

        assert wait_for(lambda: names() if len(names()) >= 3 else None, timeout=30,
                        what=collector.log_tail) == ["first", "second", "third"]
    store.close()


def _span(name: str = "annotation"):  # type: ignore[no-untyped-def]
    provider, sent = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(sent))
    provider.get_tracer("t").start_span(name).end()
    return sent.get_finished_spans()[0]


def test_annotations_held_while_the_backend_is_down_survive_a_restart(tmp_path: Path) -> None:
    store = DurableStore(tmp_path)
    body = encode_spans([_span()]).SerializeToString()
    ids = store.finish("0" * 31 + "1", [(1, body)])
    down = DurableOutbox(store, OtlpHttpSender("http://127.0.0.1:9/v1/traces", timeout=1),
                         initial_backoff=0.01, max_backoff=0.02)
    down.add(ids)
    assert not down.force_flush(500) and down.held == 1
    down.shutdown(100)
    store.close()  # the process ends with the annotation unexported
    backend = _Backend([])
    store = DurableStore(tmp_path)
    up = DurableOutbox(store, OtlpHttpSender(backend.url), initial_backoff=0.01, max_backoff=0.02)
    wait_for(lambda: up.exported == 1 or None, timeout=20, what="replayed annotation not exported")
    assert up.held == 0 and len(backend.bodies) == 1 and backend.bodies[0][0].name == "annotation"
    up.shutdown(1000)
    backend.receiver.stop()
    store.close()


def test_two_hundred_concurrent_clients_are_all_answered(tmp_path: Path) -> None:
    bodies, _ = _failing_requests(1)
    serve = start_serve(tmp_path, grpc_port=-1, http_port=0, settle=1)
    try:
        with ThreadPoolExecutor(200) as pool:
            statuses = list(pool.map(lambda n: post_protobuf(serve.http_port, bodies[n % len(bodies)]),  # type: ignore[arg-type]
                                     range(600)))
        assert statuses == [200] * 600  # no reset (http.server's backlog of 5 reset 173 of 600)
    finally:
        assert stop_serve(serve) == 0
    assert "Traceback" not in serve.log()


def test_one_failure_makes_at_most_its_budget_of_backend_requests() -> None:
    class Counting:
        name = "counting"

        def __init__(self) -> None:
            self.asked = 0

        def fetch_traces(self, trace_ids):  # type: ignore[no-untyped-def]
            self.asked += len(trace_ids)
            return BackendFetch()

    inner = Counting()
    backend = budgeted(inner, Budget(max_traces=50, seconds=5, rate=1000), RateLimiter(1000))
    for batch in range(40):  # a trace with 2,000 links asks for them in rounds
        backend.fetch_traces([f"{batch * 50 + n:032x}" for n in range(50)])
    assert inner.asked == 50 and backend.traces_capped == 39 * 50


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def test_idle_and_slow_clients_hold_no_thread_and_are_closed(tmp_path: Path) -> None:
    bodies, _ = _failing_requests(1)
    serve = start_serve(tmp_path, grpc_port=-1, http_port=0, settle=1)
    try:
        before = _threads(serve.process.pid)
        idle = [socket.create_connection(("127.0.0.1", serve.http_port), timeout=10)  # type: ignore[arg-type]
                for _ in range(300)]
        slow = socket.create_connection(("127.0.0.1", serve.http_port), timeout=30)  # type: ignore[arg-type]
        slow.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")  # headers never finished (slowloris)
        assert post_protobuf(serve.http_port, bodies[0]) == 200  # type: ignore[arg-type]
        # http.server held one thread per connection (1,016 threads for 1,000 idle connections).
        assert _threads(serve.process.pid) <= before + 2
        slow.settimeout(30)
        assert slow.recv(1) == b""  # closed by the header timeout, not by this test
        for sock in idle:
            sock.close()
        slow.close()
    finally:
        assert stop_serve(serve) == 0
    assert "request headers not complete" in serve.log()
    assert "Traceback" not in serve.log()


def test_a_dense_flood_keeps_resident_memory_under_the_limit(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks" / "performance"))
    from serve_flood import dense_request

    limit = 256
    bodies = [dense_request(6, seed) for seed in range(6)]
    serve = start_serve(tmp_path, grpc_port=-1, http_port=0, settle=1, args=["--memory-limit", str(limit)])
    statuses: list[int] = []
    peak = 0.0
    try:
        with ThreadPoolExecutor(len(bodies)) as pool:
            pending = [pool.submit(lambda body: [post_protobuf(serve.http_port, body) for _ in range(3)],
                                   body) for body in bodies]
            while not all(future.done() for future in pending):
                peak = max(peak, _rss_mib(serve.process.pid))
            statuses = [status for future in pending for status in future.result()]
        peak = max(peak, _rss_mib(serve.process.pid))
    finally:
        assert stop_serve(serve) == 0
    assert set(statuses) <= {200, 503} and 200 in statuses
    assert peak < limit, f"peak RSS {peak:.0f} MiB over the {limit} MiB limit"
    assert "Traceback" not in serve.log()


def test_a_restart_while_the_backend_is_down_keeps_the_annotations(tmp_path: Path) -> None:
    import jaeger_harness
    from serve_harness import await_annotations

    binary = jaeger_harness.require_jaeger_binary()
    provider, sent = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(sent))
    run_pipeline(provider, capture_content=True, store_id="down")
    spans = list(sent.get_finished_spans())
    body = encode_spans(spans).SerializeToString()
    failed = set(failed_traces(spans))
    (dead,) = _free_ports(1)
    serve = start_serve(tmp_path, grpc_port=-1, http_port=0, settle=0.5,
                        backend_otlp=f"http://127.0.0.1:{dead}")
    assert post_protobuf(serve.http_port, body) == 200  # type: ignore[arg-type]
    wait_for(lambda: "did not accept" in serve.log() or None, timeout=60, what=serve.log_tail)
    assert stop_serve(serve) == 0  # the drain does not wait for a backend that is down
    assert "kept in" in serve.log() and "for the next start" in serve.log()
    with jaeger_harness.run_jaeger(binary, tmp_path) as jaeger:
        sender = TracerProvider()  # the application's spans reach the backend by its own path
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=jaeger.otlp_http_traces)
        assert exporter.export(spans).name == "SUCCESS"
        exporter.shutdown()
        sender.shutdown()
        serve = start_serve(tmp_path, grpc_port=-1, http_port=0, settle=0.5, backend_otlp=jaeger.otlp_http)
        try:
            stored = await_annotations(jaeger, spans, [serve])
        finally:
            assert stop_serve(serve) == 0
    attributed = {span["traceID"].rjust(32, "0") for trace_id in failed for span in stored[trace_id]
                  if span["operationName"] == "memtrace.attribution"}
    assert failed - attributed == set()  # loss 0
    assert "replaying" in serve.log()


def test_the_rate_limiter_spreads_requests_and_never_waits_past_a_deadline() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(10, clock=lambda: now[0], sleep=sleep)
    assert limiter.take(10, deadline=100)  # the burst
    assert slept == []
    assert limiter.take(5, deadline=100)  # 5 more at 10/s: half a second's wait
    assert slept == [0.5]
    assert not limiter.take(20, deadline=now[0] + 1)  # would need 2 s: refused, nothing taken
    assert limiter.take(10, deadline=now[0] + 1.01)
    assert slept[-1] == pytest.approx(1.0)


def test_one_expensive_failure_does_not_hold_the_others() -> None:
    from memtrace_otel.collector.attribution_service import AttributionService
    from memtrace_otel.collector.otlp_proto import records_from_request

    released = threading.Event()
    searched: list[str] = []

    class Backend:
        """Searching store "slow" hangs until released (a backend answering one query slowly)."""

        name = "test backend"

        def fetch_traces(self, trace_ids):  # type: ignore[no-untyped-def]
            return BackendFetch()

        def search_traces(self, attribute, value, **_):  # type: ignore[no-untyped-def]
            searched.append(value)
            if value == "slow":
                released.wait(60)
            return BackendFetch()

    provider, sent = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(sent))
    run_pipeline(provider, capture_content=True, store_id="slow")
    slow = list(sent.get_finished_spans())
    sent.clear()
    run_pipeline(provider, capture_content=True, store_id="fast")
    fast = list(sent.get_finished_spans())
    exporter = InMemorySpanExporter()
    service = AttributionService(exporter, backend=Backend(), assembler=TraceAssembler(settle_seconds=0),
                                 workers=2)
    service.start()
    try:
        for spans in (slow, fast):
            records = records_from_request(encode_spans(spans), "test", [])
            assert service.ingest(records, 1000)
        wait_for(lambda: "slow" in searched or None, timeout=30, what="the slow search never started")
        fast_failed = set(failed_traces(fast))
        # While one worker waits on the slow search, the other attributes the fast failures.
        wait_for(lambda: fast_failed <= {f"{s.context.trace_id:032x}" for s in exporter.get_finished_spans()}
                 or None, timeout=60, what="the fast failures were held behind the slow one")
    finally:
        released.set()
        assert service.stop(30)
    slow_failed = set(failed_traces(slow))
    assert slow_failed <= {f"{s.context.trace_id:032x}" for s in exporter.get_finished_spans()}


def test_the_grpc_sender_retries_only_what_the_collector_retries() -> None:
    from memtrace_otel.collector.export import Answer, OtlpGrpcSender
    from memtrace_otel.collector.grpc_receiver import OTLPGrpcReceiver

    taken: list[int] = []
    receiver = OTLPGrpcReceiver(lambda spans, _size: taken.append(len(spans)) is None, port=0,
                                store_bodies=False)
    receiver.start()
    try:
        sender = OtlpGrpcSender(f"127.0.0.1:{receiver.address[1]}", timeout=10)
        assert sender.send(encode_spans([_span()]).SerializeToString())[0] is Answer.ACCEPTED
        answer, reason = sender.send(b"\xff\x00not a request")
        assert answer is Answer.PERMANENT and "INVALID_ARGUMENT" in reason  # dropped, never retried
        sender.shutdown()
    finally:
        receiver.stop()
    assert taken == [1]
    (dead,) = _free_ports(1)
    down = OtlpGrpcSender(f"127.0.0.1:{dead}", timeout=2)
    assert down.send(b"")[0] is Answer.RETRY  # nothing listens: UNAVAILABLE
    down.shutdown()
