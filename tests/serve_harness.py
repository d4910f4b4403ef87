"""Runs `memtrace serve` as a real process, and reads what reached Jaeger, for the live-pipeline tests.

``run_serve`` starts ``memtrace serve`` (the console script of this venv) on
given loopback ports, waits for its "listening" line, and stops it on exit
(SIGTERM, which drains; SIGKILL if it does not end). Its stderr goes to a log
file whose tail is part of every failure message.

The Jaeger helpers speak the query HTTP API as the UI does (the project's
own client is not what is under test) and poll with a deadline: Jaeger stores
asynchronously, and annotation spans arrive a settle wait after the spans
they annotate.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.semconv import AnnotationSpan, MemTrace, MemTraceAttribution
from memtrace_otel.spans.model import SpanRecord

from process_harness import LoggedProcess, loopback_env, spawn_logged, stop_process

__all__ = [
    "POLL_SECONDS",
    "AppPipeline",
    "ServeProcess",
    "Verdict",
    "app_pipeline",
    "await_annotations",
    "await_stored",
    "failed_traces",
    "hex_ids",
    "jaeger_trace",
    "post_protobuf",
    "reference_verdicts",
    "references",
    "run_serve",
    "start_serve",
    "stop_serve",
    "stored_verdict",
    "tag_search",
    "tags",
    "wait_for",
]

POLL_SECONDS = 90.0
"""How long a test waits for spans to reach Jaeger: a loaded 2-core CI machine, settle + fetch + export."""
_LISTENING = re.compile(r"memtrace serve: listening \(([^)]*)\)")
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 40.0  # serve's own drain timeout is 30 s
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
T = TypeVar("T")


@dataclass
class ServeProcess(LoggedProcess):
    """One running ``memtrace serve``; ports ``None`` when that receiver is off."""

    label: ClassVar[str] = "memtrace serve"
    process: subprocess.Popen[bytes]
    grpc_port: int | None
    http_port: int | None
    log_path: Path
    log_offset: int = 0
    """Where this run's lines begin in the log (a restarted instance appends to the same file)."""

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def log_tail(self, lines: int = 40) -> str:
        return f"--- {self.log_path.name} ---\n" + super().log_tail(lines)


def _memtrace() -> str:
    return str(Path(sys.executable).with_name("memtrace"))


def _listening(serve: ServeProcess) -> bool:
    """Whether serve said it listens; then its ports are read from that line."""
    found = _LISTENING.search(serve.log())
    if found:
        ports = dict(re.findall(r"(Grpc|Http) 127\.0\.0\.1:(\d+)", found.group(1)))
        serve.grpc_port = int(ports["Grpc"]) if "Grpc" in ports else None
        serve.http_port = int(ports["Http"]) if "Http" in ports else None
    return found is not None


def start_serve(workdir: Path, *, name: str = "serve", grpc_port: int = 0, http_port: int = -1,
                settle: float = 1.0, backend_otlp: str | None = None, jaeger_url: str | None = None,
                args: Sequence[str] = ()) -> ServeProcess:
    """Start ``memtrace serve`` (ports: 0 picks one, -1 is off) and wait until it listens.

    The log (stderr) is appended to ``workdir/<name>.log``, so a restarted instance keeps one log;
    its data directory is ``workdir/<name>.data``, so a restarted instance replays what it left.
    """
    command = [_memtrace(), "serve", "--grpc-port", str(grpc_port), "--http-port", str(http_port),
               "--settle", f"{settle:g}", "--data-dir", str(workdir / f"{name}.data"), *args]
    if backend_otlp:
        command += ["--backend-otlp", backend_otlp]
    if jaeger_url:
        command += ["--jaeger", jaeger_url]
    env = loopback_env({"COLUMNS": "500"})
    env.pop("MEMTRACE_JAEGER_URL", None)
    log_path = workdir / f"{name}.log"
    process, start = spawn_logged(command, log_path, cwd=workdir, env=env, stdout_to_log=False)
    serve = ServeProcess(process, None, None, log_path, start)
    try:
        serve.wait_ready(lambda: _listening(serve), timeout=_START_TIMEOUT, interval=0.05)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return serve


def stop_serve(serve: ServeProcess, *, sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` (SIGTERM drains), wait; SIGKILL when it does not end. The exit code."""
    return stop_process(serve.process, timeout=_STOP_TIMEOUT, sig=sig)


@contextmanager
def run_serve(workdir: Path, **options: Any) -> Iterator[ServeProcess]:
    """:func:`start_serve` as a context manager; stopped (drained) on exit."""
    serve = start_serve(workdir, **options)
    try:
        yield serve
    finally:
        stop_serve(serve)


# -- the application ----------------------------------------------------------------------------

@dataclass
class AppPipeline:
    """The application's provider: OTLP/HTTP out, and an in-memory copy of what was sent."""

    provider: TracerProvider
    sent: InMemorySpanExporter

    def spans(self) -> list[ReadableSpan]:
        return list(self.sent.get_finished_spans())


def app_pipeline(otlp_http_traces: str, service: str) -> AppPipeline:
    """A provider exporting synchronously to ``otlp_http_traces`` (each span is sent when it ends)."""
    session = requests.Session()
    session.trust_env = False  # loopback only, whatever *_proxy says
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=otlp_http_traces, timeout=10,
                                                                     session=session)))
    sent = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(sent))
    return AppPipeline(provider, sent)


def post_protobuf(port: int, body: bytes) -> int:
    """POST an OTLP/HTTP protobuf request to ``serve`` (or a receiver) on 127.0.0.1; its status."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/v1/traces", body=body,
                           headers={"Content-Type": "application/x-protobuf"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


# -- Jaeger's query API -------------------------------------------------------------------------

def _get_json(url: str) -> Any:
    with _DIRECT.open(url, timeout=10) as response:
        return json.load(response)


def jaeger_trace(query_url: str, trace_id: str) -> list[dict[str, Any]]:
    """The trace's spans as Jaeger stores them now (``[]`` when it has none: 404), each with its
    ``serviceName`` copied in from the trace's process table."""
    try:
        data = _get_json(f"{query_url}/api/traces/{trace_id}").get("data") or []
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return []
        raise
    spans = []
    for found in data:
        processes = found.get("processes") or {}
        for span in found.get("spans") or ():
            span["serviceName"] = (processes.get(span.get("processID")) or {}).get("serviceName")
            spans.append(span)
    return spans


def tag_search(query_url: str, service: str, tag_filter: dict[str, str], *, since: float) -> set[str]:
    """Trace ids the UI's tag search finds (``since``: a ``time.time()`` lower bound)."""
    query = urllib.parse.urlencode({"service": service, "tags": json.dumps(tag_filter), "limit": "1000",
                                    "start": str(int(since * 1e6)), "end": str(int(time.time() * 1e6) + 1)})
    return {t["traceID"].rjust(32, "0") for t in _get_json(f"{query_url}/api/traces?{query}")["data"]}


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span.get("tags") or ()}


def references(span: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(r["refType"], r["traceID"].rjust(32, "0"), r["spanID"].rjust(16, "0"))
            for r in span.get("references") or ()}


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: Callable[[], str] | str,
             interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy; past the deadline, fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what() if callable(what) else what}")
        time.sleep(interval)


def failed_traces(sent: Iterable[ReadableSpan]) -> Counter[str]:
    """Failed evaluation spans per trace id."""
    return Counter(hex_ids(span)[0] for span in sent
                   if (span.attributes or {}).get(MemTrace.EVALUATION_PASSED) is False)


def await_stored(jaeger: Any, counts: Mapping[str, int], logs: Sequence[Any], *,
                 timeout: float = POLL_SECONDS, name: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """Poll Jaeger until each trace holds at least ``counts[trace]`` spans (named ``name``, if given).

    ``jaeger`` is a :class:`jaeger_harness.JaegerEndpoints`; ``logs`` are things with a
    ``log_tail()`` (serve processes, the Collector) shown when the deadline passes.
    Returns the spans of each trace in ``counts``.
    """
    stored: dict[str, list[dict[str, Any]]] = {}

    def have(trace_id: str) -> int:
        return sum(name is None or s["operationName"] == name for s in stored.get(trace_id, ()))

    def complete() -> bool:
        jaeger.assert_alive()
        for trace_id, count in counts.items():
            if have(trace_id) < count:
                stored[trace_id] = jaeger_trace(jaeger.query_url, trace_id)
        return all(have(t) >= n for t, n in counts.items())

    def missing() -> str:
        short = {t: (f"{have(t)}/{n}", [s["operationName"] for s in stored.get(t, ())])
                 for t, n in counts.items() if have(t) < n}
        return f"{name or 'spans'} in Jaeger per trace (have/want, names): {short}\n" + "\n".join(
            log.log_tail() for log in logs)

    wait_for(complete, timeout=timeout, what=missing)
    return stored


def await_annotations(jaeger: Any, sent: Sequence[ReadableSpan], logs: Sequence[Any], *,
                      timeout: float = POLL_SECONDS) -> dict[str, list[dict[str, Any]]]:
    """Poll Jaeger until it holds every span ``sent``, a ``memtrace.attribution`` span per failed
    evaluation, and the ``memtrace.root_cause`` spans those point to (wherever they point).

    Returns the spans of every trace involved, by trace id.
    """
    await_stored(jaeger, Counter(hex_ids(span)[0] for span in sent), logs, timeout=timeout)
    failed = failed_traces(sent)
    stored = await_stored(jaeger, failed, logs, timeout=timeout, name=AnnotationSpan.ATTRIBUTION)
    attributions = [span for trace_id in failed for span in stored[trace_id]
                    if span["operationName"] == AnnotationSpan.ATTRIBUTION]
    blamed = Counter(trace_id for span in attributions for kind, trace_id, _ in references(span)
                     if kind == "FOLLOWS_FROM")
    stored.update(await_stored(jaeger, blamed, logs, timeout=timeout, name=AnnotationSpan.ROOT_CAUSE))
    for trace_id in {hex_ids(span)[0] for span in sent} - set(stored):
        stored[trace_id] = jaeger_trace(jaeger.query_url, trace_id)
    return stored


# -- verdicts -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """One attribution: the failed evaluation span, the error type and the blamed span."""

    evaluation: tuple[str, str]
    error_type: str | None
    operation_name: str | None
    root_cause: tuple[str, str] | None


class _SentBackend:
    """The spans sent, as a trace backend: what serve's query API client would get from Jaeger."""

    name = "sent spans"

    def __init__(self, records: Sequence[Any]) -> None:
        self._by_trace: dict[str, list[Any]] = {}
        for record in records:
            self._by_trace.setdefault(record.trace_id, []).append(record)

    def trace(self, trace_id: str) -> list[Any]:
        return list(self._by_trace.get(trace_id, ()))

    def fetch_traces(self, trace_ids: Sequence[str]) -> Any:
        from memtrace_otel.spans.backend import BackendFetch

        fetch = BackendFetch()
        for trace_id in trace_ids:
            if trace_id in self._by_trace:
                fetch.spans.extend(self.trace(trace_id))
                fetch.received.add(trace_id)
        return fetch

    def search_traces(self, attribute: str, value: str, *, service: str, start_unix_nano: int,
                      end_unix_nano: int, limit: int) -> Any:
        """As Jaeger's tag search: traces with one span of ``service`` tagged ``attribute=value``
        that started in the window, the newest ``limit``."""
        found = [trace_id for trace_id, spans in self._by_trace.items()
                 if any(s.service_name == service and s.attributes.get(attribute) == value
                        and start_unix_nano <= s.start_time_unix_nano <= end_unix_nano for s in spans)]
        found.sort(key=lambda t: -min(s.start_time_unix_nano for s in self._by_trace[t]))
        fetch = self.fetch_traces(found[:limit])
        fetch.limited = len(found) >= limit
        return fetch


_EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def offline_agent_spans() -> list[ReadableSpan]:
    """The spans of the offline memory agent of ``examples/`` (content capture off): its sessions,
    then its questions, one trace each, through a real SDK pipeline. q5's answer was written in a
    session its search missed, so only a store search reaches it."""
    from memtrace_otel import MemoryTracer

    sys.path.insert(0, str(_EXAMPLES))
    try:
        from jaeger_writeback import ingest
        from offline_memory_agent import QUESTIONS, TinyMemory
    finally:
        sys.path.remove(str(_EXAMPLES))
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "memory-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = TinyMemory(MemoryTracer(provider, capture_content=False), provider.get_tracer("agent"))
    ingest(agent)
    for case_id, question, gold, evidence in QUESTIONS:
        agent.answer(case_id, question, gold, evidence)
    provider.shutdown()
    return list(exporter.get_finished_spans())


def sent_records(sent: Sequence[ReadableSpan]) -> list[SpanRecord]:
    """``sent`` as span records, through the OTLP protobuf encoding, as they reach ``serve``."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from memtrace_otel.collector.otlp_proto import records_from_request

    return records_from_request(encode_spans(list(sent)), "sent", [])


def reference_verdicts(sent: Sequence[ReadableSpan], *, view: str = "serve",
                       engine: str = "lineage") -> dict[tuple[str, str], Verdict]:
    """What the engine says about each failed evaluation, keyed by evaluation (trace id, span id).

    ``view="serve"`` judges each failed trace as ``serve`` does by design: it holds one trace and
    fetches from the backend the traces that used the same memory stores (a search) and the
    traces those link to (transitively). ``view="linked"`` follows the links only (serve with
    ``--store-lookback 0``).
    ``view="whole"`` judges with every span sent in one graph, as a batch ``memtrace analyze``
    over all traces would. The spans go through the OTLP protobuf encoding, as they reach serve.
    """
    from memtrace_otel.graph.build import build_graph
    from memtrace_otel.graph.query import failed_evaluations
    from memtrace_otel.spans.linked import fetch_linked_traces
    from memtrace_otel.spans.readers import SpanReadResult
    from memtrace_otel.spans.store_scope import fetch_store_traces

    records = sent_records(sent)
    if view == "whole":
        return _verdicts(build_graph(records), None, engine)
    if view not in ("serve", "linked"):
        raise ValueError(f"view {view!r} is not 'serve', 'linked' or 'whole'")
    backend, verdicts = _SentBackend(records), {}
    whole = build_graph(records)
    for trace_id in sorted({whole.nodes[node]["trace_id"] for node in failed_evaluations(whole)}):
        result = SpanReadResult()
        result.add(backend.trace(trace_id))
        fetch_linked_traces(result, backend)
        if view == "serve":
            fetch_store_traces(result, backend, {trace_id})
            fetch_linked_traces(result, backend)
        verdicts.update(_verdicts(build_graph(result.spans), trace_id, engine))
    return verdicts


def _verdicts(G: Any, trace_id: str | None, engine: str) -> dict[tuple[str, str], Verdict]:
    from memtrace_otel.attribution import create_engine
    from memtrace_otel.attribution.base import FailureCase
    from memtrace_otel.graph.query import failed_evaluations

    attribute, verdicts = create_engine(engine).attribute, {}
    for node in failed_evaluations(G):
        evaluation = (G.nodes[node]["trace_id"], G.nodes[node]["span_id"])
        if trace_id is not None and evaluation[0] != trace_id:
            continue  # a failure of a linked trace is judged with its own trace
        verdict = attribute(G, FailureCase.from_graph(G, node))
        blamed = (verdict.trace_id, verdict.span_id) if verdict.trace_id and verdict.span_id else None
        verdicts[evaluation] = Verdict(evaluation, verdict.error_type.value if verdict.error_type else None,
                                       verdict.operation_name, blamed)
    return verdicts


def stored_verdict(attribution_span: dict[str, Any]) -> Verdict:
    """The verdict a ``memtrace.attribution`` span in Jaeger carries."""
    found, keys = tags(attribution_span), MemTraceAttribution
    blamed = found.get(keys.ROOT_CAUSE_TRACE_ID), found.get(keys.ROOT_CAUSE_SPAN_ID)
    evaluation = found[keys.EVALUATION_TRACE_ID], found[keys.EVALUATION_SPAN_ID]
    return Verdict(evaluation, found.get(keys.ERROR_TYPE), found.get(keys.ROOT_CAUSE_OPERATION_NAME),
                   blamed if all(blamed) else None)
