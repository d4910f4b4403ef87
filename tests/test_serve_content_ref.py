"""`memtrace serve --content-store` resolving content references (issue 12, item 1), and the
resolver's retry of a store that was down.

End to end, real processes on 127.0.0.1: the application (this process) runs a memory
pipeline with content capture OFF and upload ON (``MemoryTracer(upload_base_path=...)``),
and exports by OTLP/HTTP to two real ``memtrace serve`` processes at once, one started
with ``--content-store`` and one without. Each writes its annotations by OTLP/HTTP to a
backend stand-in on loopback that keeps the request bodies as they arrived (only the
trace backend is stood in for; nothing of serve is). The pipeline's failure needs content
to be attributed right: ``update`` overwrote "Lisbon" with "Porto", which only the texts
show. Checked:

* serve with the store writes the verdict in-process attribution with content gives
  (the tracer's own in-process contents) and the one resolving the store gives;
* serve without it writes the content-free verdict, which differs or is less confident;
* no text of the pipeline is in what the application sent, what either serve exported
  (the engine's explanation quotes memory contents: serve must not send it back to a
  backend that was deliberately kept without them), or serve's log.

No Go binaries are needed. The retry of an unavailable store is unit-tested with an
injected clock.
"""

from __future__ import annotations

import gzip
import http.server
import logging
import re
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.attribution import create_engine
from memtrace_otel.attribution.base import FailureCase
from memtrace_otel.collector.otlp_proto import records_from_request
from memtrace_otel.config import ENV_CONTENT_STORE, ENV_CONTENT_UPLOAD_BASE_PATH, ENV_GENAI_UPLOAD_BASE_PATH
from memtrace_otel.content import ContentResolver, open_store
from memtrace_otel.graph.build import build_graph
from memtrace_otel.graph.query import failed_evaluations
from memtrace_otel.instrument import RetrievedRecord
from memtrace_otel.semconv import AnnotationSpan, ErrorType, MemTrace, MemTraceAttribution
from memtrace_otel.wire import content_hash

from loopback_http import LoopbackServers, send_answer
from serve_harness import POLL_SECONDS, ServeProcess, app_pipeline, hex_ids, run_serve, stop_serve, wait_for

_SETTLE = 1.0
_SUMMARY = re.compile(r"stopped; (\d+) spans received, (\d+) failures attributed, (\d+) annotations dropped")
_A = MemTraceAttribution
TEXTS = ("I moved to Lisbon", "I have a cat named Tom", "User moved to Lisbon", "User has a cat named Tom",
         "User moved to Porto", "Where did the user move?", "the user moved to Lisbon first")
WORDS = ("Lisbon", "Porto")
"""Every text of the pipeline, and the words its verdict turns on: none may leave the process."""


# -- the backend stand-in: OTLP/HTTP in, request bodies kept ---------------------------------------

@dataclass
class Received:
    """What one serve exported: each request body as it arrived (gunzipped), and the spans in it."""

    bodies: list[bytes] = field(default_factory=list)
    spans: list[Any] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attribution_spans(self) -> list[Any]:
        with self.lock:
            return [s for s in self.spans if s.name == AnnotationSpan.ATTRIBUTION]


class _OTLPHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        received: Received = self.server.received  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        with received.lock:
            received.bodies.append(body)
            received.spans += [span for resource in request.resource_spans
                               for scope in resource.scope_spans for span in scope.spans]
        send_answer(self, 200, b"", "application/x-protobuf")

    def log_message(self, *args: object) -> None:
        pass


def _attributes(span: Any) -> dict[str, Any]:
    """A protobuf span's string and double attributes."""
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes}


# -- the application -------------------------------------------------------------------------------

def _session(mt: MemoryTracer, provider: TracerProvider) -> None:
    """One trace: two messages extracted, then ``update`` overwrites Lisbon with Porto, the answer says
    Porto and the judge fails it. Uploads are flushed before the root span ends, so the store holds
    every text before serve has the trace's last span (and its settle wait begins)."""
    with provider.get_tracer("app").start_as_current_span("session"):
        units = [_remember(mt, f"D1:{n}", text) for n, text in enumerate(TEXTS[:2], start=1)]
        with mt.operation("update", Category.UPDATE, store_id="s", record_id="mem:D1:1") as op:
            old = op.read_record(units[0], content=TEXTS[2])
            units[0] = op.lineage_metadata(op.update(old, TEXTS[4]))
        with mt.operation("search", Category.RETRIEVAL, store_id="s") as op:
            query = op.write("query:q1", TEXTS[5], kind=VariableKind.QUERY)
            unit = op.read_record(units[0], content=None)
            context = op.write("context:q1", str(unit.content), kind=VariableKind.CONTEXT)
            op.record_retrieval([RetrievedRecord(unit, score=0.8)], query=query, top_k=1)
        with mt.operation("generate", Category.GENERATION) as op:
            op.read(query)
            op.read(context)
            answer = op.write("answer:q1", "Porto", kind=VariableKind.ANSWER)
        with mt.operation("judge", Category.EVALUATION) as op:
            op.read(answer)
            op.record_evaluation(False, score=0.0, question=TEXTS[5], prediction="Porto", gold="Lisbon",
                                 evidence=["D1:1"], answer=answer, case_id="q1", explanation=TEXTS[6])
        assert mt.force_flush(30_000), "the content upload did not drain"


def _remember(mt: MemoryTracer, dia_id: str, text: str) -> dict[str, object]:
    with mt.operation("ingest", Category.INGEST) as op:
        message = op.write(f"msg:{dia_id}", text, kind=VariableKind.MESSAGE)
    with mt.operation("extract", Category.EXTRACTION, store_id="s") as op:
        op.read(message)
        unit = op.write(f"mem:{dia_id}", text.replace("I have", "User has").replace("I ", "User "),
                        kind=VariableKind.MEMORY_UNIT)
        return op.lineage_metadata(unit)


# -- the run ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """What an attribution says, confidence included (serve_harness's Verdict leaves it out)."""

    evaluation: tuple[str, str]
    error_type: str | None
    operation_name: str | None
    root_cause: tuple[str, str] | None
    confidence: float
    explanation: str = field(default="", compare=False)


@dataclass
class Run:
    store: str
    sent: list[ReadableSpan]
    mt: MemoryTracer
    serves: dict[str, ServeProcess]  # "store" / "bare"
    received: dict[str, Received]
    summaries: dict[str, tuple[int, int, int]]

    def records(self) -> list[Any]:
        """The spans sent, decoded from the OTLP protobuf they went out as (what serve took in)."""
        return records_from_request(encode_spans(self.sent), "sent", [])


def _no_proxy_exporter(url: str) -> OTLPSpanExporter:
    session = requests.Session()
    session.trust_env = False
    return OTLPSpanExporter(endpoint=url, timeout=10, session=session)


def _exported_verdict(received: Received, evaluation: tuple[str, str]) -> Verdict:
    (span,) = received.attribution_spans()
    found = _attributes(span)
    assert (found[_A.EVALUATION_TRACE_ID], found[_A.EVALUATION_SPAN_ID]) == evaluation
    blamed = found.get(_A.ROOT_CAUSE_TRACE_ID), found.get(_A.ROOT_CAUSE_SPAN_ID)
    # The span's explanation is in plain words (writeback/explain.py); the engine's own, when it may
    # be written, is the gen_ai.evaluation.result event's.
    (result,) = [_attributes(e) for e in span.events if e.name == "gen_ai.evaluation.result"]
    reasoning = result["gen_ai.evaluation.explanation"]
    return Verdict(evaluation, found.get(_A.ERROR_TYPE), found.get(_A.ROOT_CAUSE_OPERATION_NAME),
                   blamed if all(blamed) else None, found[_A.CONFIDENCE], reasoning)


def _reference(records: list[Any], **content: Any) -> Verdict:
    """The lineage engine's verdict on the one failure, the graph built with ``content``."""
    G = build_graph(records, **content)
    (node,) = failed_evaluations(G)
    verdict = create_engine("lineage").attribute(G, FailureCase.from_graph(G, node))
    blamed = (verdict.trace_id, verdict.span_id) if verdict.trace_id and verdict.span_id else None
    return Verdict((G.nodes[node]["trace_id"], G.nodes[node]["span_id"]),
                   verdict.error_type.value if verdict.error_type else None, verdict.operation_name, blamed,
                   verdict.confidence, verdict.explanation)


def _summary(serve: ServeProcess) -> tuple[int, int, int]:
    code = stop_serve(serve)  # SIGTERM drains, then prints its counters
    found = _SUMMARY.search(serve.log())
    assert code == 0 and found, f"serve exited {code}\n{serve.log_tail()}"
    received, attributed, dropped = (int(group) for group in found.groups())
    return received, attributed, dropped


def _await_attribution(serve: ServeProcess, received: Received) -> None:
    def arrived() -> list[Any]:
        serve.assert_alive()
        return received.attribution_spans()

    wait_for(arrived, timeout=POLL_SECONDS, what=lambda: f"an attribution span\n{serve.log_tail()}")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("serve-content-ref")
    store = str(workdir / "contents")
    servers = LoopbackServers("otlp-backend")
    received = {name: Received() for name in ("store", "bare")}
    args = {"store": ["--content-store", store], "bare": []}
    with pytest.MonkeyPatch.context() as env, ExitStack() as stack:
        for name in (ENV_CONTENT_STORE, ENV_CONTENT_UPLOAD_BASE_PATH, ENV_GENAI_UPLOAD_BASE_PATH):
            env.delenv(name, raising=False)  # serve inherits the environment: only the option may say
        stack.callback(servers.close)
        serves = {name: stack.enter_context(run_serve(
            workdir, name=f"serve-{name}", grpc_port=-1, http_port=0, settle=_SETTLE,
            backend_otlp=servers.start(_OTLPHandler, "received", received[name]), args=args[name]))
            for name in received}
        app = app_pipeline(f"{serves['store'].http_url}/v1/traces", f"memory-app-{uuid.uuid4().hex[:8]}")
        app.provider.add_span_processor(SimpleSpanProcessor(_no_proxy_exporter(
            f"{serves['bare'].http_url}/v1/traces")))
        mt = MemoryTracer(app.provider, capture_content=False, upload_base_path=store)
        _session(mt, app.provider)
        for name, serve in serves.items():
            _await_attribution(serve, received[name])
        summaries = {name: _summary(serve) for name, serve in serves.items()}
        yield Run(store, app.spans(), mt, serves, received, summaries)
        mt.shutdown()
        app.provider.shutdown()


def test_serve_with_the_store_gives_the_verdict_of_in_process_attribution_with_content(run: Run) -> None:
    records = run.records()
    in_process = _reference(records, content=run.mt.contents.get)
    resolved = _reference(records, content_by_hash=ContentResolver(run.store).get)
    assert in_process == resolved
    # The fault put in: update overwrote the only memory saying Lisbon.
    assert (in_process.error_type, in_process.operation_name) == (ErrorType.UPDATE.value, "update")
    exported = _exported_verdict(run.received["store"], in_process.evaluation)
    assert exported == in_process
    assert exported.explanation != in_process.explanation  # the engine's words quote the store's texts


def test_serve_without_the_store_gives_the_content_free_verdict(run: Run) -> None:
    with_content = _reference(run.records(), content=run.mt.contents.get)
    content_free = _reference(run.records())
    exported = _exported_verdict(run.received["bare"], content_free.evaluation)
    assert exported == content_free
    assert exported.explanation == content_free.explanation  # no store: the engine's words, nothing to hide
    blamed = (content_free.error_type, content_free.operation_name)
    assert blamed != (with_content.error_type, with_content.operation_name) \
        or content_free.confidence < with_content.confidence


def test_no_content_in_what_serve_received_or_exported(run: Run) -> None:
    sent = encode_spans(run.sent).SerializeToString()
    assert MemTrace.CONTENT_REF.encode() in sent and MemTrace.EVALUATION_TEXTS_REF.encode() in sent
    exported = {name: b"".join(received.bodies) for name, received in run.received.items()}
    for text in (*TEXTS, *WORDS):
        assert text.encode() not in sent, f"{text!r} was sent to serve"
        for name, body in exported.items():
            assert text.encode() not in body, f"serve ({name}) exported {text!r} to the backend"
            assert text not in run.serves[name].log(), f"serve ({name}) logged {text!r}"
    # The store holds the texts (what made the verdict right), under the hashes the spans carry.
    assert open_store(run.store).read(content_hash(TEXTS[0])) == TEXTS[0]


def test_both_serves_took_every_span_and_the_store_was_read_without_a_problem(run: Run) -> None:
    for name, (received, attributed, dropped) in run.summaries.items():
        assert (received, attributed, dropped) == (len(run.sent), 1, 0), name
        assert "Traceback" not in run.serves[name].log(), run.serves[name].log_tail()
    assert "content store" not in run.serves["store"].log(), run.serves["store"].log_tail()
    failed = {hex_ids(s) for s in run.sent if (s.attributes or {}).get(MemTrace.EVALUATION_PASSED) is False}
    assert len(failed) == 1


# -- the resolver's retry, with an injected clock ----------------------------------------------------

class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fill(root: Path, texts: list[str]) -> list[str]:
    store = open_store(str(root))
    return [store.put(text) for text in texts]


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("memtrace_otel.content")]


def test_an_unavailable_store_is_retried_after_the_back_off(tmp_path: Path, caplog) -> None:
    root, texts = tmp_path / "contents", ["alpha", "beta", "gamma", "delta"]
    digests = _fill(root, texts)
    clock = Clock()
    resolver = ContentResolver(str(root), retry_seconds=60, clock=clock)
    with caplog.at_level(logging.WARNING, logger="memtrace_otel.content"):
        assert resolver.get(digests[0]) == "alpha"
        shutil.rmtree(root)
        assert resolver.get(digests[1]) is None and resolver.unavailable
        _fill(root, texts)  # the store is back, but nobody looks until the back-off is over
        clock.now += 59.9
        assert resolver.get(digests[1]) is None and resolver.unavailable
        assert resolver.get(digests[0]) == "alpha"  # what is cached is still served
        clock.now += 0.1
        assert resolver.get(digests[1]) == "beta" and not resolver.unavailable
        outage, recovery = _lines(caplog)
        assert "cannot be read" in outage and resolver.url in outage
        assert "readable again" in recovery and resolver.url in recovery
        # A second outage: said once more, however many retries fail, and its end once.
        shutil.rmtree(root)
        assert resolver.get(digests[2]) is None
        for _ in range(3):
            clock.now += 60
            assert resolver.get(digests[2]) is None
        _fill(root, texts)
        clock.now += 30
        assert resolver.get(digests[2]) is None  # the last failed retry started a new back-off
        clock.now += 30
        assert resolver.get(digests[2]) == "gamma"
    assert _lines(caplog) == [outage, recovery, outage, recovery]
    assert resolver.outages == 2 and resolver.missing == 0 and resolver.found == 3
    assert resolver.messages() == [outage, f"content store {resolver.url}: unavailable 2 times in all"]


def test_a_store_back_with_texts_missing_counts_them_as_missing(tmp_path: Path, caplog) -> None:
    root = tmp_path / "contents"
    (digest,) = _fill(root, ["alpha"])
    clock = Clock()
    resolver = ContentResolver(str(root), retry_seconds=5, clock=clock)
    shutil.rmtree(root)
    with caplog.at_level(logging.WARNING, logger="memtrace_otel.content"):
        assert resolver.get(digest) is None and resolver.missing == 0
        root.mkdir()  # back, but empty: the probe finds the store and not the text
        clock.now += 5
        assert resolver.get(digest) is None and not resolver.unavailable and resolver.missing == 1
    assert ["readable again" in line for line in _lines(caplog)] == [False, True]


def test_without_retry_an_unavailable_store_stays_given_up(tmp_path: Path) -> None:
    root = tmp_path / "contents"
    (digest,) = _fill(root, ["alpha"])
    clock = Clock()
    resolver = ContentResolver(str(root), retry_seconds=None, clock=clock)
    shutil.rmtree(root)
    assert resolver.get(digest) is None
    _fill(root, ["alpha"])
    clock.now += 1e9
    assert resolver.get(digest) is None and resolver.unavailable and resolver.outages == 1


@pytest.mark.parametrize("bad", [0, -1.0])
def test_a_retry_that_is_not_positive_is_refused(tmp_path: Path, bad: float) -> None:
    with pytest.raises(ValueError, match="retry_seconds"):
        ContentResolver(str(tmp_path), retry_seconds=bad)
