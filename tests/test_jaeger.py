"""Lineage through a real Jaeger v2: OTLP export -> Jaeger -> /api/traces JSON -> the same graph.

Two "processes" (two TracerProviders with their own MemoryTracer and service
name) write and read memory records: ingestion exports over OTLP/gRPC, the
query side over OTLP/HTTP, both to one Jaeger on loopback. Jaeger drops link
attributes (links become bare ``FOLLOWS_FROM`` references) and turns array
attributes into JSON strings, so this checks that lineage survives from span
attributes (``memtrace.inputs``/``outputs``/``variables``) and bare references.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import requests
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.exporters import GraphSpanExporter
from memtrace_otel.graph import build_graph, failed_evaluations, lineage_path, operations_between
from memtrace_otel.semconv import GenAI, MemTrace
from memtrace_otel.spans import SpanReadResult, fetch_linked_traces, missing_linked_traces, read_span_files
from memtrace_otel.spans.backend import TraceSearch
from memtrace_otel.spans.jaeger_query import JaegerQueryClient, JaegerQueryError

import jaeger_harness
from jaeger_harness import JaegerEndpoints, wait_for_trace

jaeger = jaeger_harness.jaeger  # the session fixture, visible to this module's tests

_MESSAGES = [
    ("D1:1", 'I moved to Lisbon, "finally" [for good]'),
    ("D1:2", "My cat is named Tom 🐱"),
    ("D1:3", "I sold my bike"),
]


@dataclass
class TwoTraces:
    live: GraphSpanExporter
    ingest_trace: str
    query_trace: str
    ingest_service: str
    span_counts: Counter[str]
    answer: str


def _provider(service: str, exporter: SpanExporter, live: GraphSpanExporter) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(live))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    return provider


def _ingest(provider: TracerProvider) -> tuple[str, dict[str, dict[str, object]]]:
    """The ingestion process: messages -> memory units, one update; records keep lineage metadata."""
    mt, app = MemoryTracer(provider, capture_content=True), provider.get_tracer("ingest-app")
    records: dict[str, dict[str, object]] = {}
    with app.start_as_current_span("ingestion") as root:
        for dia_id, text in _MESSAGES:
            with mt.operation("ingest", Category.INGEST) as op:
                message = op.write(f"msg:{dia_id}", text, kind=VariableKind.MESSAGE)
            with mt.operation("extract", Category.EXTRACTION, gen_ai_operation="create_memory",
                              store_id="s") as op:
                op.read(message)
                prompt = op.intermediate("prompt", f"Extract facts: {text}", kind=VariableKind.PROMPT)
                unit = op.write(f"mem:{dia_id}", text.replace("I ", "User "), kind=VariableKind.MEMORY_UNIT)
                op.step("prompt", [message], [prompt])
                op.step("parse", [prompt], [unit])
                records[dia_id] = op.lineage_metadata(unit)
        with mt.operation("update", Category.UPDATE, gen_ai_operation="update_memory", store_id="s") as op:
            old = op.read_record(records["D1:1"], content="User moved to Lisbon")
            records["D1:1"] = op.lineage_metadata(op.update(old, "User moved to Porto"))
    return f"{root.get_span_context().trace_id:032x}", records


def _query(provider: TracerProvider, records: dict[str, dict[str, object]]) -> tuple[str, str]:
    """The query process, later: a fresh tracer whose only lineage is the records' metadata."""
    mt, app = MemoryTracer(provider, capture_content=True), provider.get_tracer("query-app")
    with app.start_as_current_span("question q1") as root:
        with mt.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                          store_id="s") as op:
            query = op.write("query:q1", "Where does the user live?", kind=VariableKind.QUERY)
            unit = op.read_record(records["D1:1"], content="User moved to Porto")
            context = op.write("context:q1", str(unit.content), kind=VariableKind.CONTEXT)
        with mt.operation("generate", Category.GENERATION) as op:
            op.read(query)
            op.read(context)
            answer = op.write("answer:q1", "Porto", kind=VariableKind.ANSWER)
        with mt.operation("judge", Category.EVALUATION) as op:
            op.read(answer)
            op.record_evaluation(False, score=0.0, question="Where does the user live?",
                                 prediction="Porto", gold="Lisbon", evidence=["D1:1"], answer=answer,
                                 case_id="q1")
    return f"{root.get_span_context().trace_id:032x}", answer.id


def _grpc_exporter(jaeger: JaegerEndpoints) -> GrpcExporter:
    # Loopback only: no *_proxy environment setting may route the export elsewhere.
    return GrpcExporter(endpoint=jaeger.otlp_grpc, insecure=True, timeout=10,
                        channel_options=(("grpc.enable_http_proxy", 0),))


def _http_exporter(jaeger: JaegerEndpoints) -> HttpExporter:
    session = requests.Session()
    session.trust_env = False
    return HttpExporter(endpoint=jaeger.otlp_http_traces, timeout=10, session=session)


@pytest.fixture(scope="module")
def two_traces(jaeger: JaegerEndpoints) -> TwoTraces:
    tag = uuid.uuid4().hex[:8]
    live = GraphSpanExporter()
    ingest = _provider(f"memtrace-ingest-{tag}", _grpc_exporter(jaeger), live)
    ingest_trace, records = _ingest(ingest)
    assert ingest.force_flush(10_000)  # ingestion is in Jaeger before the query process starts
    query = _provider(f"memtrace-query-{tag}", _http_exporter(jaeger), live)
    query_trace, answer = _query(query, json.loads(json.dumps(records)))  # as stored, then loaded
    assert query.force_flush(10_000)
    for provider in (ingest, query):  # shutting one down would shut the shared live exporter
        provider.shutdown()
    counts = Counter(span.trace_id for span in live.spans())
    return TwoTraces(live, ingest_trace, query_trace, f"memtrace-ingest-{tag}", counts, answer)


@pytest.fixture(scope="module")
def jaeger_files(jaeger: JaegerEndpoints, two_traces: TwoTraces,
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both traces as /api/traces JSON files, as a user would save them."""
    folder = tmp_path_factory.mktemp("jaeger-json")
    files = {}
    for name, trace_id in (("ingest", two_traces.ingest_trace), ("query", two_traces.query_trace)):
        document = wait_for_trace(jaeger, trace_id, two_traces.span_counts[trace_id])
        files[name] = folder / f"{name}.json"
        files[name].write_text(json.dumps(document, indent=2, ensure_ascii=False), encoding="utf-8")
    return files


def _operation_view(G: nx.DiGraph) -> dict[str, dict[str, Any]]:
    # Jaeger keeps a start and a duration in whole microseconds: compare the start at that
    # precision (the end may differ by the one microsecond the duration lost), the rest exactly.
    view = {}
    for node, data in G.nodes(data=True):
        if data["type"] == "operation":
            fields = {k: v for k, v in data.items() if k not in ("source", "start", "end")}
            view[node] = {**fields, "start_us": data["start"] // 1000}
    return view


def _assert_same_ends(got: nx.DiGraph, want: nx.DiGraph) -> None:
    for node, data in want.nodes(data=True):
        if data["type"] == "operation":
            assert abs(got.nodes[node]["end"] // 1000 - data["end"] // 1000) <= 1, node


def _assert_same_lineage(got: nx.DiGraph, want: nx.DiGraph) -> None:
    variables = {n: d for n, d in want.nodes(data=True) if d["type"] == "variable"}
    assert {n: d for n, d in got.nodes(data=True) if d["type"] == "variable"} == variables
    got_ops, want_ops = _operation_view(got), _operation_view(want)
    assert set(got_ops) == set(want_ops)
    for node, data in want_ops.items():
        assert got_ops[node] == data, node
    _assert_same_ends(got, want)
    edges = {(u, v, d["role"]) for u, v, d in want.edges(data=True)}
    assert {(u, v, d["role"]) for u, v, d in got.edges(data=True)} == edges


def test_jaeger_json_gives_the_live_graph(two_traces: TwoTraces, jaeger_files: dict[str, Path]) -> None:
    result = read_span_files(jaeger_files.values())
    assert [str(p) for p in result.problems] == []
    assert len(result.spans) == sum(two_traces.span_counts.values())
    G, live = build_graph(result.spans), two_traces.live.graph()
    assert G.graph["missing_traces"] == set()
    _assert_same_lineage(G, live)
    # Not vacuous: two traces, every category of the scenario, and the cross-trace lineage.
    assert {d["trace_id"] for _, d in G.nodes(data=True) if d["type"] == "operation"} == {
        two_traces.ingest_trace, two_traces.query_trace}
    path = lineage_path(G, "msg:D1:1@1", two_traces.answer)
    assert [G.nodes[n]["name"] for n in path if n.startswith("op:")] == [
        "extract", "update", "search", "generate"]
    assert len(failed_evaluations(G)) == 1


def _raw_spans(path: Path) -> list[dict[str, Any]]:
    document = json.loads(path.read_text(encoding="utf-8"))
    return [span for trace in document["data"] for span in trace["spans"]]


def test_jaeger_drops_link_attributes_and_stringifies_arrays(jaeger_files: dict[str, Path]) -> None:
    """The two Jaeger habits the reader must undo; if Jaeger changes, this says so first."""
    search = next(s for s in _raw_spans(jaeger_files["query"])
                  if any(t["key"] == MemTrace.OPERATION_NAME and t["value"] == "search" for t in s["tags"]))
    cross = [r for r in search["references"] if r["traceID"] != search["traceID"]]
    assert cross and all(set(r) <= {"refType", "traceID", "spanID"} for r in cross)
    tags = {t["key"]: t for t in search["tags"]}
    inputs = tags[MemTrace.INPUTS]
    assert inputs["type"] == "string" and json.loads(inputs["value"]) == ["mem:D1:1@2"]
    assert [d.split(" ")[-1] for d in json.loads(tags[MemTrace.VARIABLES]["value"])] == [
        "query:q1@1", "context:q1@1"]


def test_fetch_traces_reads_both_traces(jaeger: JaegerEndpoints, two_traces: TwoTraces,
                                        jaeger_files: dict[str, Path]) -> None:
    wanted = {two_traces.ingest_trace, two_traces.query_trace}
    result = JaegerQueryClient(jaeger.query_url).fetch_traces(sorted(wanted))
    assert [str(p) for p in result.problems] == []
    assert result.received == wanted
    _assert_same_lineage(build_graph(result.spans), two_traces.live.graph())


def test_missing_trace_is_fetched_and_completes_the_lineage(
    jaeger: JaegerEndpoints, two_traces: TwoTraces, jaeger_files: dict[str, Path]
) -> None:
    spans = read_span_files([jaeger_files["query"]]).spans
    partial = build_graph(spans)
    assert partial.graph["missing_traces"] == {two_traces.ingest_trace}
    assert "msg:D1:1@1" not in partial
    result = SpanReadResult()
    result.add(spans)
    assert missing_linked_traces(result.spans) == {two_traces.ingest_trace}
    fetched = fetch_linked_traces(result, JaegerQueryClient(jaeger.query_url))
    assert fetched.problems == []
    assert fetched.requested == fetched.received == {two_traces.ingest_trace}
    assert fetched.still_missing == set()
    whole = build_graph(result.spans)
    assert whole.graph["missing_traces"] == set()
    between = operations_between(whole, "msg:D1:1@1", two_traces.answer)
    assert [whole.nodes[n]["trace_id"] for n in between] == [two_traces.ingest_trace] * 2 + [
        two_traces.query_trace] * 2


def test_find_traces_lists_the_service_traces(jaeger: JaegerEndpoints, two_traces: TwoTraces,
                                              jaeger_files: dict[str, Path]) -> None:
    client = JaegerQueryClient(jaeger.query_url)
    traces = client.find_traces(two_traces.ingest_service, limit=5, lookback=600)
    assert [t["traceID"].rjust(32, "0") for t in traces] == [two_traces.ingest_trace]
    assert client.find_traces("memtrace-no-such-service", limit=5, lookback=600) == []


def test_search_finds_the_traces_that_used_a_store(jaeger: JaegerEndpoints, two_traces: TwoTraces,
                                                   jaeger_files: dict[str, Path]) -> None:
    client = JaegerQueryClient(jaeger.query_url)
    assert isinstance(client, TraceSearch)
    end = time.time_ns()
    window = {"start_unix_nano": end - 600 * 10**9, "end_unix_nano": end}
    ingest = client.search_traces(GenAI.MEMORY_STORE_ID, "s", service=two_traces.ingest_service, limit=5,
                                  **window)
    assert ingest.received == {two_traces.ingest_trace} and not ingest.limited and ingest.problems == []
    assert len(ingest.spans) == two_traces.span_counts[two_traces.ingest_trace]  # whole traces
    query_service = two_traces.ingest_service.replace("ingest", "query")
    query = client.search_traces(GenAI.MEMORY_STORE_ID, "s", service=query_service, limit=1, **window)
    assert query.received == {two_traces.query_trace} and query.limited  # one found, at its limit of one
    other = client.search_traces(GenAI.MEMORY_STORE_ID, "no-such-store", service=query_service, limit=5,
                                 **window)
    assert other.received == set() and other.spans == [] and other.problems == []
    before = client.search_traces(GenAI.MEMORY_STORE_ID, "s", service=two_traces.ingest_service, limit=5,
                                  start_unix_nano=end - 1200 * 10**9, end_unix_nano=end - 600 * 10**9)
    assert before.received == set()  # the window bounds the search


def test_unknown_and_malformed_trace_ids_are_one_line_problems(jaeger: JaegerEndpoints,
                                                               two_traces: TwoTraces,
                                                               jaeger_files: dict[str, Path]) -> None:
    unknown = "0123456789abcdef0123456789abcdef"
    client = JaegerQueryClient(jaeger.query_url)
    result = client.fetch_traces([unknown, "not-hex/../x", two_traces.query_trace])
    problems = sorted(str(p) for p in result.problems)
    assert len(problems) == 2 and all("\n" not in p for p in problems)
    assert unknown in problems[0] and "HTTP 404" in problems[0]
    assert "not 1-32 hex digits" in problems[1]
    assert {s.trace_id for s in result.spans} == {two_traces.query_trace}  # the rest is still read
    assert result.received == {two_traces.query_trace}
    with pytest.raises(JaegerQueryError, match="HTTP 404"):
        client.fetch_trace(unknown)


def test_refused_connection_is_one_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: the connection is refused
        with pytest.raises(JaegerQueryError, match=r"cannot connect") as error:
            JaegerQueryClient(f"http://127.0.0.1:{port}", timeout=2.0).fetch_trace("ab" * 16)
    assert "\n" not in str(error.value)


def test_silent_server_times_out() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)  # accepts the connection, never answers
        with pytest.raises(JaegerQueryError, match=r"no complete answer within 0.3 s"):
            JaegerQueryClient(f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=0.3).fetch_trace("ab" * 16)


class _TextHandler(http.server.BaseHTTPRequestHandler):
    body = b"<html>not a trace</html>"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass


@pytest.fixture
def html_server() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _TextHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="html-server", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_non_json_answer_is_one_clear_error(html_server: str) -> None:
    with pytest.raises(JaegerQueryError, match="response is not JSON"):
        JaegerQueryClient(html_server).fetch_trace("ab" * 16)
    result = JaegerQueryClient(html_server).fetch_traces(["ab" * 16])
    assert len(result.problems) == 1 and "not JSON" in result.problems[0].message
    assert result.received == set() and result.spans == []


def test_only_http_urls_are_accepted() -> None:
    with pytest.raises(ValueError, match="not an http"):
        JaegerQueryClient("file:///etc/passwd")


def test_cli_fetches_linked_traces_from_jaeger(jaeger: JaegerEndpoints, jaeger_files: dict[str, Path],
                                               two_traces: TwoTraces) -> None:
    # A user holds only the question's trace; the ingestion that wrote the memory is in Jaeger.
    from click.testing import CliRunner

    from memtrace_otel.cli import main

    runner = CliRunner()
    alone = json.loads(runner.invoke(main, ["inspect", "--json", str(jaeger_files["query"])]).stdout)
    assert alone["missing_traces"] == [two_traces.ingest_trace]
    outcome = runner.invoke(main, ["inspect", "--json", "--jaeger", jaeger.query_url,
                                   str(jaeger_files["query"])])
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.stdout)["missing_traces"] == []
    assert "fetched 1 of 1 linked trace(s)" in outcome.stderr
    analyzed = runner.invoke(main, ["analyze", "--json", str(jaeger_files["query"])],
                             env={"MEMTRACE_JAEGER_URL": jaeger.query_url})
    (failure,) = json.loads(analyzed.stdout)["failures"]
    assert (failure["error_type"], failure["operation_name"]) == ("UpdateError", "update")
    assert failure["trace_id"] == two_traces.ingest_trace
    down = runner.invoke(main, ["inspect", "--jaeger", "http://127.0.0.1:9", str(jaeger_files["query"])])
    assert down.exit_code == 3 and "trace not fetched" in down.stderr and "Traceback" not in down.output



def test_jaeger_keeps_kind_scope_status_and_resource(two_traces: TwoTraces,
                                                     jaeger_files: dict[str, Path]) -> None:
    """Every span field Jaeger has a place for comes back as the live span had it."""
    live = {(s.trace_id, s.span_id): s for s in two_traces.live.spans()}
    read = read_span_files(jaeger_files.values()).spans
    assert {(s.trace_id, s.span_id) for s in read} == set(live)
    for span in read:
        want = live[(span.trace_id, span.span_id)]
        fields = ("name", "parent_span_id", "kind", "scope_name", "scope_version", "status_code",
                  "status_message", "service_name", "resource_attributes")
        assert {f: getattr(span, f) for f in fields} == {f: getattr(want, f) for f in fields}, span.name
        assert span.start_time_unix_nano == want.start_time_unix_nano // 1000 * 1000
        scalars = {k: v for k, v in want.attributes.items() if not isinstance(v, list)}
        assert {k: v for k, v in span.attributes.items() if k in scalars} == scalars
        assert [(e.name, e.attributes) for e in span.events] == [(e.name, e.attributes) for e in want.events]
        assert [(k.trace_id, k.span_id) for k in span.links] == [(k.trace_id, k.span_id) for k in want.links]
    assert {s.kind for s in read} >= {"INTERNAL", "CLIENT"}, "not vacuous: two kinds in the scenario"


def test_cli_store_search_finds_the_memory_a_retrieval_missed(jaeger: JaegerEndpoints,
                                                             tmp_path: Path) -> None:
    # The example agent's q5 answer is in session 2, which its search did not return: nothing
    # links the question's trace there, so only a search of Jaeger by memory store finds it.
    import sys

    from click.testing import CliRunner

    from memtrace_otel.cli import main
    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

    examples = str(Path(__file__).resolve().parent.parent / "examples")
    sys.path.insert(0, examples)
    try:
        from jaeger_writeback import ingest
        from offline_memory_agent import QUESTIONS, TinyMemory
    finally:
        sys.path.remove(examples)
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    sent = InMemorySpanExporter()
    service = f"memtrace-agent-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(sent))
    provider.add_span_processor(BatchSpanProcessor(_http_exporter(jaeger), schedule_delay_millis=100))
    agent = TinyMemory(MemoryTracer(provider, capture_content=False), provider.get_tracer("agent"))
    ingest(agent)
    for case_id, question, gold, evidence in QUESTIONS:
        agent.answer(case_id, question, gold, evidence)
    assert provider.force_flush(10_000)
    provider.shutdown()
    spans = sent.get_finished_spans()
    (q5,) = {s.context.trace_id for s in spans if (s.attributes or {}).get(MemTrace.EVALUATION_CASE) == "q5"}
    counts = Counter(f"{s.context.trace_id:032x}" for s in spans)
    for trace_id in counts:
        wait_for_trace(jaeger, trace_id, counts[trace_id])
    question = tmp_path / "q5.jsonl"
    exporter = OTLPJsonLinesSpanExporter(question)
    exporter.export([s for s in spans if s.context.trace_id == q5])
    exporter.shutdown()

    runner = CliRunner()
    linked = runner.invoke(main, ["analyze", "--json", "--jaeger", jaeger.query_url, str(question)])
    searched = runner.invoke(main, ["analyze", "--json", "--jaeger", jaeger.query_url,
                                    "--store-lookback", "600", str(question)])
    (by_links,) = json.loads(linked.stdout)["failures"]
    assert by_links["error_type"] == "ResponseError"
    # One failure: those of the traces the search brought in are not what was asked about.
    (by_search,) = json.loads(searched.stdout)["failures"]
    assert (by_search["error_type"], by_search["operation_name"]) == ("RetrievalError", "agent.search")
    assert "searched 1 memory store(s)" in searched.stderr and "Traceback" not in searched.output
