"""The Tempo client against a small real HTTP server on 127.0.0.1 that answers as Tempo does.

A real Tempo cannot run on these machines (docs/tempo.md says why), so the server answers
in the format of Tempo's HTTP API documentation and code: ``GET /api/v2/traces/<id>`` ->
``{"trace": {"resourceSpans": [...]}}`` (Tempo 2.6+), ``GET /api/traces/<id>`` ->
``{"batches": [...]}``, both in protobuf's JSON mapping (base64 ids, enum names, 64-bit
integers as strings), which is what Tempo's gogo ``jsonpb`` writes. The spans come from the
real SDK, encoded by the real OTLP protobuf encoder. With ``MEMTRACE_TEMPO_URL`` (query) and
``MEMTRACE_TEMPO_OTLP`` (OTLP/HTTP ingest) set, the last test runs against a real Tempo.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.cli import main
from memtrace_otel.collector.serve import ServeConfig, build_server
from memtrace_otel.config import ENV_JAEGER_URL, ENV_TEMPO_URL
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.graph import build_graph
from memtrace_otel.semconv import GenAI
from memtrace_otel.spans import SpanReadResult, TraceBackend, fetch_linked_traces, read_span_files
from memtrace_otel.spans.backend import BackendFetch, TraceSearch
from memtrace_otel.spans.tempo_query import TempoAPI, TempoQueryClient, TempoQueryError

from graph_compare import assert_same_graph
from loopback_http import LoopbackServers, one_problem, send_answer
from scenario import run_pipeline

A, B, C = "a1" * 16, "b2" * 16, "c3" * 16
_MUX_NOT_FOUND = b"404 page not found\n"  # what Tempo's router answers for a route it lacks


# --- the spans: a real SDK pipeline, as Tempo would store and answer them -------------------------

@dataclass
class Pipeline:
    spans: list[ReadableSpan]
    all_file: Path
    """Every span, written by the project's OTLP/JSON file exporter."""
    questions_file: Path
    """Only the question traces: what a user holds when the failure is reported."""
    stored: dict[str, list[dict[str, Any]]]
    """Trace id -> its ``resourceSpans`` as Tempo answers them."""
    ingest: str
    maintenance: str
    questions: set[str]


def tempo_resource_spans(spans: list[ReadableSpan]) -> list[dict[str, Any]]:
    """``spans`` in the JSON Tempo answers: OTLP protobuf in protobuf's JSON mapping."""
    resource_spans = MessageToDict(encode_spans(spans))["resourceSpans"]
    for resource in resource_spans:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                span.setdefault("status", {})  # jsonpb writes the (nullable) status even when empty
    return resource_spans


def _write(path: Path, spans: list[ReadableSpan]) -> Path:
    exporter = OTLPJsonLinesSpanExporter(path)
    exporter.export(spans)
    exporter.shutdown()
    return path


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "memtrace-tempo-test"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    run_pipeline(provider)
    provider.shutdown()
    spans = list(memory.get_finished_spans())
    roots = {span.name: _trace_of(span) for span in spans if span.parent is None}
    by_trace: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_trace.setdefault(_trace_of(span), []).append(span)
    questions = {trace for name, trace in roots.items() if name.startswith("question")}
    folder = tmp_path_factory.mktemp("tempo")
    question_spans = [s for s in spans if _trace_of(s) in questions]
    return Pipeline(spans, _write(folder / "all.jsonl", spans),
                    _write(folder / "questions.jsonl", question_spans),
                    {trace: tempo_resource_spans(group) for trace, group in by_trace.items()},
                    roots["ingestion"], roots["maintenance"], questions)


def _trace_of(span: ReadableSpan) -> str:
    return f"{span.context.trace_id:032x}"


# --- a Tempo on 127.0.0.1 ------------------------------------------------------------------------

@dataclass
class FakeTempo:
    """Answers trace-by-id requests as Tempo does; records what it was asked."""

    stored: dict[str, list[dict[str, Any]]]
    has_v2: bool = True
    """Tempo 2.6+ (``/api/v2/traces``); before, that route is a plain 404."""
    v2_not_found_404: bool = False
    """How v2 says "not found": an empty trace (the querier's answer) or HTTP 404."""
    respond: Callable[[Any], None] | None = None
    asked: Counter[str] = field(default_factory=Counter)
    accept: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    hung_up: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def answer(self, handler: Any) -> None:
        route, _, trace_id = handler.path.rpartition("/")
        found = self.stored.get(trace_id)
        if route == "/api/v2/traces" and self.has_v2:
            if found is not None:
                _json(handler, 200, {"trace": {"resourceSpans": found},
                                     "metrics": {"inspectedBytes": "4096"}})
            elif self.v2_not_found_404:
                send_answer(handler, 404, b"")
            else:
                _json(handler, 200, {"trace": {}, "metrics": {"inspectedBytes": "0"}})
        elif route == "/api/traces" and found is not None:
            _json(handler, 200, {"batches": found})
        elif route == "/api/traces":
            send_answer(handler, 404, b"")  # the v1 query-frontend's "not found": no body
        else:
            send_answer(handler, 404, _MUX_NOT_FOUND, "text/plain; charset=utf-8")


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        tempo: FakeTempo = self.server.tempo  # type: ignore[attr-defined]
        tempo.asked[self.path] += 1
        tempo.accept.add(self.headers.get("Accept", ""))
        (tempo.respond or tempo.answer)(self)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass


def _json(handler: Any, status: int, document: Any) -> None:
    send_answer(handler, status, json.dumps(document).encode())


@pytest.fixture
def tempo() -> Iterator[Callable[..., FakeTempo]]:
    servers = LoopbackServers("test-tempo")

    def start(stored: dict[str, list[dict[str, Any]]] | None = None, **options: Any) -> FakeTempo:
        state = FakeTempo(stored or {}, **options)
        state.url = servers.start(_Handler, "tempo", state)
        return state

    yield start
    servers.close()


# --- the search (a TraceQL query names the traces, then each is fetched) -------------------------

def _searching(server_box: list[FakeTempo], found: list[dict[str, Any]], asked: list[dict[str, list[str]]]
               ) -> Callable[[Any], None]:
    def respond(handler: Any) -> None:
        if handler.path.startswith("/api/search?"):
            asked.append(urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query))
            _json(handler, 200, {"traces": found, "metrics": {"inspectedTraces": 12}})
        else:
            server_box[0].answer(handler)
    return respond


def test_search_asks_traceql_then_fetches_the_traces_found(tempo: Any, pipeline: Pipeline) -> None:
    box: list[FakeTempo] = []
    asked: list[dict[str, list[str]]] = []
    found = [{"traceID": pipeline.ingest.lstrip("0"), "rootServiceName": "memtrace-tempo-test"},
             {"traceID": pipeline.maintenance}, {"traceID": "not-hex"}]
    box.append(tempo(pipeline.stored, respond=_searching(box, found, asked)))
    client = TempoQueryClient(box[0].url)
    assert isinstance(client, TraceSearch)
    fetch = client.search_traces(GenAI.MEMORY_STORE_ID, 'my "s"', service="memtrace-tempo-test",
                                 start_unix_nano=1_700_000_000_500_000_000,
                                 end_unix_nano=1_700_000_600_200_000_000, limit=3)
    assert fetch.received == {pipeline.ingest, pipeline.maintenance} and fetch.limited
    assert {s.trace_id for s in fetch.spans} == fetch.received
    (problem,) = fetch.problems
    assert "not-hex" in str(problem) and "\n" not in str(problem)
    (query,) = asked
    assert query["q"] == ['{ resource.service.name = "memtrace-tempo-test" && '
                          'span.gen_ai.memory.store.id = "my \\"s\\"" }']
    # Tempo's window is in whole seconds: widened outwards, never narrowed.
    assert (query["start"], query["end"], query["limit"]) == (["1700000000"], ["1700000601"], ["3"])


def test_a_search_tempo_does_not_understand_is_one_problem(tempo: Any, pipeline: Pipeline) -> None:
    server = tempo(pipeline.stored, respond=lambda handler: _json(handler, 200, {"error": "bad query"}))
    fetch = TempoQueryClient(server.url).search_traces(GenAI.MEMORY_STORE_ID, "s", service="svc",
                                                       start_unix_nano=0, end_unix_nano=10**18, limit=5)
    one_problem(fetch, "/api/search", "not a Tempo search answer")
    assert not fetch.limited


# --- the reader ----------------------------------------------------------------------------------

# The answer Tempo's documentation shows for `curl http://localhost:3200/api/v2/traces/5b8e...`
# (docs/sources/tempo/api_docs/pushing-spans-with-http.md), as it is printed there.
_DOCUMENTED = ('{"trace": {"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":'
               '{"stringValue":"my.service"}}]},"scopeSpans":[{"scope":{"name":"my.library","version":"1.0.0"},'
               '"spans":[{"traceId":"W47/95gDgQPSabYzgT/HAA==","spanId":"7uGbfsPBsQA=","name":"I am a span!",'
               '"kind":"SPAN_KIND_SERVER","startTimeUnixNano":"1689969302000000000","endTimeUnixNano":'
               '"1689970000000000000","attributes":[{"key":"my.span.attr","value":'
               '{"stringValue":"some value"}}],"status":{}}]}]}]}}')


def test_the_answer_in_tempos_documentation_is_read(tempo: Any) -> None:
    server = tempo(respond=lambda handler: send_answer(handler, 200, _DOCUMENTED.encode()))
    client = TempoQueryClient(server.url)
    assert isinstance(client, TraceBackend)
    fetch = client.fetch_traces(["5B8EFFF798038103D269B633813FC700"])
    assert fetch.problems == [] and fetch.received == {"5b8efff798038103d269b633813fc700"}
    (span,) = fetch.spans
    assert (span.span_id, span.name, span.kind, span.service_name) == \
        ("eee19b7ec3c1b100", "I am a span!", "SERVER", "my.service")
    assert span.start_time_unix_nano == 1689969302000000000
    assert span.attributes == {"my.span.attr": "some value"}
    assert (span.scope_name, span.scope_version) == ("my.library", "1.0.0")
    assert server.asked == {"/api/v2/traces/5b8efff798038103d269b633813fc700": 1}
    assert server.accept == {"application/json"} and client.api is TempoAPI.V2


def test_traces_fetched_from_tempo_give_the_graph_the_file_gives(tempo: Any, pipeline: Pipeline) -> None:
    server = tempo(pipeline.stored)
    result = read_span_files([pipeline.questions_file])
    fetched = fetch_linked_traces(result, TempoQueryClient(server.url))
    assert fetched.problems == [] and fetched.still_missing == set()
    assert fetched.received == fetched.requested == {pipeline.ingest, pipeline.maintenance}
    whole = read_span_files([pipeline.all_file])
    assert {(s.trace_id, s.span_id) for s in result.spans} == {(s.trace_id, s.span_id) for s in whole.spans}
    assert_same_graph(build_graph(result.spans), build_graph(whole.spans))
    assert set(server.asked.values()) == {1}


def test_a_tempo_before_2_6_is_asked_by_the_v1_route_and_remembered(tempo: Any, pipeline: Pipeline) -> None:
    server = tempo(pipeline.stored, has_v2=False)
    client = TempoQueryClient(server.url)
    first = client.fetch_traces([pipeline.ingest])
    assert first.problems == [] and first.received == {pipeline.ingest}
    assert client.api is TempoAPI.V1
    second = client.fetch_traces([pipeline.maintenance])
    assert second.received == {pipeline.maintenance}
    assert server.asked == {f"/api/v2/traces/{pipeline.ingest}": 1, f"/api/traces/{pipeline.ingest}": 1,
                            f"/api/traces/{pipeline.maintenance}": 1}
    same = client.fetch_traces([pipeline.maintenance, pipeline.ingest]).spans
    assert sorted(s.span_id for s in same) == sorted(s.span_id for s in [*first.spans, *second.spans])


def test_traces_tempo_lacks_are_counted_on_one_line(tempo: Any, pipeline: Pipeline) -> None:
    server = tempo(pipeline.stored)
    fetch = TempoQueryClient(server.url).fetch_traces([A, pipeline.ingest, B, C])
    assert fetch.received == {pipeline.ingest}
    (problem,) = fetch.problems
    assert f"3 traces not fetched ({A}, {B}, {C}): not found (empty answer)" in str(problem)
    assert not any(path.startswith("/api/traces") for path in server.asked)  # v2 answered: no v1 retry


def test_a_404_from_v2_is_asked_again_of_v1_until_the_route_is_known(tempo: Any, pipeline: Pipeline) -> None:
    server = tempo(pipeline.stored, v2_not_found_404=True)
    client = TempoQueryClient(server.url)
    text = one_problem(client.fetch_traces([A]), A,
                        "not found (HTTP 404 from /api/v2/traces and /api/traces")
    assert "not Tempo's HTTP API" in text and server.asked[f"/api/traces/{A}"] == 1
    assert client.api is None  # neither route proved itself
    fetch = client.fetch_traces([pipeline.ingest, B])
    assert fetch.received == {pipeline.ingest} and client.api is TempoAPI.V2
    (problem,) = fetch.problems
    assert str(problem).endswith(f"/api/v2/traces/{B}: trace not fetched: not found (HTTP 404)")
    assert f"/api/traces/{B}" not in server.asked  # v2 answered in the same round: a 404 is "not found"
    one_problem(client.fetch_traces([C]), "not found (HTTP 404)")
    assert f"/api/traces/{C}" not in server.asked


def test_a_partial_trace_is_kept_with_one_line_saying_so(tempo: Any, pipeline: Pipeline) -> None:
    message = "Trace exceeds maximum size of 10 bytes, a partial trace is returned"
    answer = {"trace": {"resourceSpans": pipeline.stored[pipeline.ingest]}, "status": "PARTIAL",
              "message": message}
    server = tempo(respond=lambda handler: _json(handler, 200, answer))
    fetch = TempoQueryClient(server.url).fetch_traces([pipeline.ingest])
    assert fetch.received == {pipeline.ingest}
    assert len(fetch.spans) == len([s for s in pipeline.spans if _trace_of(s) == pipeline.ingest])
    (problem,) = fetch.problems
    assert f"Tempo answered part of the trace only: {message}" in str(problem)


def test_ids_are_normalised_and_bad_ones_are_one_line_each(tempo: Any, pipeline: Pipeline) -> None:
    server = tempo(pipeline.stored)
    short = pipeline.ingest.lstrip("0") or pipeline.ingest
    fetch = TempoQueryClient(server.url).fetch_traces([short.upper(), pipeline.ingest, "not hex", "0" * 32])
    assert fetch.received == {pipeline.ingest}
    assert server.asked == {f"/api/v2/traces/{pipeline.ingest}": 1}
    messages = sorted(p.message for p in fetch.problems)
    assert len(messages) == 2 and "not 1-32 hex digits" in messages[0] and "all zeros" in messages[1]


def test_spans_of_other_traces_in_an_answer_are_left_out(tempo: Any, pipeline: Pipeline) -> None:
    both = [*pipeline.stored[pipeline.ingest], *pipeline.stored[pipeline.maintenance]]
    server = tempo(respond=lambda handler: _json(handler, 200, {"trace": {"resourceSpans": both}}))
    fetch = TempoQueryClient(server.url).fetch_traces([pipeline.ingest])
    assert {s.trace_id for s in fetch.spans} == {pipeline.ingest}
    (problem,) = fetch.problems
    assert "span(s) of other traces; ignored" in str(problem)


@pytest.mark.parametrize(("respond", "words"), [
    (lambda h: send_answer(h, 500, b"rpc error: code = Unavailable desc = no queriers", "text/plain"),
     ("HTTP 500", "no queriers")),
    (lambda h: send_answer(h, 400, b"invalid trace id", "text/plain"), ("HTTP 400", "invalid trace id")),
    (lambda h: send_answer(h, 200, b"{" * 100_000), ("response is not JSON",)),
    (lambda h: send_answer(h, 200, b"<html>Grafana</html>", "text/html"), ("response is not JSON",)),
    (lambda h: _json(h, 200, {"data": []}), ("not a Tempo trace-by-id answer",)),
    (lambda h: _json(h, 200, [1, 2]), ("not a Tempo trace-by-id answer",)),
    (lambda h: _json(h, 200, {"trace": 5}), ("'trace' is not an object",)),
    (lambda h: _json(h, 200, {"trace": {"resourceSpans": 5}}), ("answer not understood", "no resourceSpans")),
    (lambda h: _json(h, 200, {"trace": {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "zz", "spanId": "7uGbfsPBsQA=", "name": "x"}]}]}]}}), ("answer not understood", "'x'")),
    (lambda h: _json(h, 200, {"batches": "x"}), ("answer not understood",)),
])
def test_a_bad_answer_is_one_line_and_nothing_received(tempo: Any, respond: Any,
                                                       words: tuple[str, ...]) -> None:
    server = tempo(respond=respond)
    one_problem(TempoQueryClient(server.url).fetch_traces([A]), A, "trace not fetched", *words)


def test_a_hanging_tempo_is_cut_off_at_the_deadline(tempo: Any) -> None:
    server = tempo(respond=lambda handler: handler.server.tempo.stop.wait(60))  # accepts, never answers
    fetch = TempoQueryClient(server.url, timeout=30, deadline=0.5, concurrency=2).fetch_traces([A, B, C])
    one_problem(fetch, "3 traces not fetched", "no answer within the overall deadline of 0.5 s")


def test_the_v1_retry_shares_the_deadline(tempo: Any) -> None:
    def v2_missing_v1_hangs(handler: Any) -> None:
        if handler.path.startswith("/api/v2/"):
            send_answer(handler, 404, _MUX_NOT_FOUND, "text/plain")
        else:
            handler.server.tempo.stop.wait(60)

    server = tempo(respond=v2_missing_v1_hangs)
    fetch = TempoQueryClient(server.url, timeout=30, deadline=0.5).fetch_traces([A])
    one_problem(fetch, "no answer within the overall deadline of 0.5 s")
    assert server.asked == {f"/api/v2/traces/{A}": 1, f"/api/traces/{A}": 1}


def test_a_dripping_tempo_is_cut_off_at_the_request_timeout(tempo: Any) -> None:
    def drip(handler: Any) -> None:
        state = handler.server.tempo
        try:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 20:
                handler.wfile.write(bytes([byte]))
                if state.stop.wait(0.1):
                    return
        except OSError:
            state.hung_up.set()

    server = tempo(respond=drip)
    fetch = TempoQueryClient(server.url, timeout=0.5).fetch_traces([A])
    one_problem(fetch, "no complete answer within 0.5 s")
    assert server.hung_up.wait(30), "the client never hung up on the dripping server"


def test_fetch_trace_gives_a_span_file(tempo: Any, pipeline: Pipeline, tmp_path: Path) -> None:
    server = tempo(pipeline.stored)
    client = TempoQueryClient(server.url)
    saved = tmp_path / "ingest.json"
    saved.write_text(json.dumps(client.fetch_trace(pipeline.ingest)), encoding="utf-8")
    from_file = read_span_files([saved])
    assert from_file.problems == []
    assert sorted(s.span_id for s in from_file.spans) == sorted(
        f"{s.context.span_id:016x}" for s in pipeline.spans if _trace_of(s) == pipeline.ingest)
    with pytest.raises(TempoQueryError, match="HTTP 404"):
        TempoQueryClient(tempo(pipeline.stored, has_v2=False).url).fetch_trace(A)
    with pytest.raises(ValueError, match="hex digits"):
        client.fetch_trace("xyz")


@pytest.mark.parametrize("url", ["", "ftp://host", "http://", "http://host:99999", "http://ho st",
                                 "http://host/?q=1", "file:///etc/passwd", "http://host\n"])
def test_a_bad_base_url_is_a_clear_value_error(url: str) -> None:
    with pytest.raises(ValueError, match="Tempo query URL") as error:
        TempoQueryClient(url)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("arguments", [{"timeout": 0}, {"deadline": -1}, {"concurrency": 0},
                                       {"timeout": float("nan")}, {"concurrency": 1.5}, {"deadline": True}])
def test_bad_bounds_are_value_errors(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        TempoQueryClient("http://127.0.0.1:3200", **arguments)


# --- the CLI -------------------------------------------------------------------------------------

@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv(ENV_JAEGER_URL, raising=False)
    monkeypatch.delenv(ENV_TEMPO_URL, raising=False)
    return CliRunner()


def test_analyze_with_tempo_finds_the_cause_in_an_earlier_trace(tempo: Any, pipeline: Pipeline,
                                                                runner: CliRunner) -> None:
    questions = str(pipeline.questions_file)
    alone = runner.invoke(main, ["analyze", "--json", questions])
    assert alone.exit_code == 3 and "--tempo URL" in alone.stderr
    server = tempo(pipeline.stored)
    outcome = runner.invoke(main, ["analyze", "--json", "--tempo", server.url, questions])
    assert outcome.exit_code == 0, outcome.output
    assert f"fetched 2 of 2 linked trace(s) from {server.url}" in outcome.stderr
    (failure,) = json.loads(outcome.stdout)["failures"]
    assert (failure["error_type"], failure["operation_name"]) == ("UpdateError", "update")
    assert failure["trace_id"] == pipeline.maintenance
    whole = json.loads(runner.invoke(main, ["analyze", "--json", str(pipeline.all_file)]).stdout)["failures"]
    untimed = [{k: v for k, v in row.items() if k != "seconds"} for row in (*whole, failure)]
    assert untimed[0] == untimed[1]  # the same verdict as from a file holding every trace


def test_graph_with_tempo_from_the_environment(tempo: Any, pipeline: Pipeline, runner: CliRunner) -> None:
    server = tempo(pipeline.stored)
    fetched = runner.invoke(main, ["graph", str(pipeline.questions_file)], env={ENV_TEMPO_URL: server.url})
    whole = runner.invoke(main, ["graph", str(pipeline.all_file)])
    assert fetched.exit_code == whole.exit_code == 0, fetched.output
    nodes = {node["id"]: node for node in json.loads(fetched.stdout)["nodes"]}
    assert nodes and set(nodes) == {node["id"] for node in json.loads(whole.stdout)["nodes"]}


def test_tempo_and_jaeger_together_are_one_usage_error(pipeline: Pipeline, runner: CliRunner) -> None:
    file = str(pipeline.questions_file)
    for command in (["analyze", file], ["graph", file], ["serve"]):
        both = runner.invoke(main, [*command, "--jaeger", "http://127.0.0.1:16686", "--tempo",
                                    "http://127.0.0.1:3200"])
        assert both.exit_code == 2, both.output
        assert "--jaeger and --tempo are mutually exclusive" in both.output
        assert "Traceback" not in both.output
    from_env = runner.invoke(main, ["analyze", file, "--tempo", "http://127.0.0.1:3200"],
                             env={ENV_JAEGER_URL: "http://127.0.0.1:16686"})
    assert from_env.exit_code == 2 and f"--jaeger (from {ENV_JAEGER_URL}) and --tempo" in from_env.output
    bad = runner.invoke(main, ["analyze", file, "--tempo", "ftp://tempo"])
    assert bad.exit_code == 2 and "Tempo query URL" in bad.output and "--tempo" in bad.output


def test_a_tempo_that_is_down_leaves_the_input_incomplete(pipeline: Pipeline, runner: CliRunner) -> None:
    down = runner.invoke(main, ["analyze", "--tempo", "http://127.0.0.1:9", str(pipeline.questions_file)])
    assert down.exit_code == 3 and "cannot connect" in down.stderr and "Traceback" not in down.output


def test_serve_is_wired_to_tempo_without_binding() -> None:
    server = build_server(ServeConfig(grpc_port=None, http_port=0, settle_seconds=0.5,
                                      tempo_url="http://127.0.0.1:3200"))
    assert isinstance(server.service.backend, TempoQueryClient)
    assert server.service.backend.name == "Tempo http://127.0.0.1:3200"
    server.service.stop(1)


def test_serve_fetches_the_linked_traces_from_tempo(tempo: Any, pipeline: Pipeline, tmp_path: Path) -> None:
    server = tempo(pipeline.stored)
    memtrace = Path(sys.executable).with_name("memtrace")
    env = {k: v for k, v in os.environ.items() if k not in (ENV_JAEGER_URL, ENV_TEMPO_URL)}
    command = [str(memtrace), "serve", "--grpc-port", "-1", "--http-port", "0", "--settle", "60",
               "--tempo", server.url]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                               env={**env, "COLUMNS": "200"}, cwd=tmp_path)
    try:
        port = _listening_port(process)
        exporter = HttpExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", session=_local_session())
        # Only the question traces reach serve (as through a load-balancing collector): the memory
        # they read was written in traces it has to fetch from Tempo.
        sent = [s for s in pipeline.spans if _trace_of(s) in pipeline.questions]
        assert exporter.export(sent).name == "SUCCESS"
        exporter.shutdown()
        process.send_signal(signal.SIGTERM)  # long before the traces settle: the drain judges them
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "UpdateError at update" in err, err
    assert server.asked[f"/api/v2/traces/{pipeline.maintenance}"] == 1


def _listening_port(process: subprocess.Popen[str]) -> int:
    import re

    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"Http 127\.0\.0\.1:(\d+)", line)
        if found:
            return int(found.group(1))
    raise AssertionError(f"memtrace serve did not start (exit {process.wait()})")


def _local_session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # no *_proxy setting may route a loopback export elsewhere
    return session


# --- a real Tempo, when one is given --------------------------------------------------------------

_REAL_POLL_SECONDS = 60.0


def test_a_real_tempo_gives_back_what_was_sent(pipeline: Pipeline) -> None:
    query, ingest = os.environ.get("MEMTRACE_TEMPO_URL"), os.environ.get("MEMTRACE_TEMPO_OTLP")
    if not (query and ingest):
        pytest.skip("no real Tempo: set MEMTRACE_TEMPO_URL (its HTTP API, e.g. http://127.0.0.1:3200) and "
                    "MEMTRACE_TEMPO_OTLP (its OTLP/HTTP receiver, e.g. http://127.0.0.1:4318) to run this")
    endpoint = ingest.rstrip("/") + ("" if ingest.rstrip("/").endswith("/v1/traces") else "/v1/traces")
    exporter = HttpExporter(endpoint=endpoint, timeout=10, session=_local_session())
    assert exporter.export(pipeline.spans).name == "SUCCESS"
    exporter.shutdown()
    client = TempoQueryClient(query)
    wanted = {pipeline.ingest, pipeline.maintenance} | pipeline.questions
    fetch, deadline = BackendFetch(), time.monotonic() + _REAL_POLL_SECONDS
    while time.monotonic() < deadline:  # Tempo makes spans queryable asynchronously
        fetch = client.fetch_traces(sorted(wanted))
        if len(fetch.spans) >= len(pipeline.spans):
            break
        time.sleep(1.0)
    assert fetch.received == wanted, fetch.problems
    assert len(fetch.spans) == len(pipeline.spans), fetch.problems
    result = SpanReadResult()
    result.add(fetch.spans)
    assert_same_graph(build_graph(result.spans), build_graph(read_span_files([pipeline.all_file]).spans))
