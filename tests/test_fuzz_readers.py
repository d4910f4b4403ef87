"""Fuzzing the readers: mutated span files, random bytes (plain and gzip) and random Jaeger answers
from a real local server. Whatever comes in, no exception escapes, every problem is a
:class:`Problem` naming where, and every span that was not touched is still read as it was."""

from __future__ import annotations

import atexit
import gzip
import http.server
import json
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.spans import Problem, SpanReadResult, read_span_files
from memtrace_otel.spans.jaeger_query import JaegerQueryClient

from scenario import run_pipeline

_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
_WORK = Path(tempfile.mkdtemp(prefix="memtrace-fuzz-"))  # one directory for all examples, removed at exit
atexit.register(shutil.rmtree, _WORK, True)


def _good_documents() -> list[dict[str, Any]]:
    path = _WORK / "good.jsonl"
    provider = TracerProvider(resource=Resource.create({"service.name": "fuzz", "fuzz.level": 3}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    run_pipeline(provider)
    provider.shutdown()
    return [json.loads(line) for line in path.read_text().splitlines()]


GOOD = _good_documents()
BASELINE = {(s.trace_id, s.span_id): s for s in read_span_files([_WORK / "good.jsonl"]).spans}

scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
           | st.sampled_from(["7", "-3", "²", "1e3", "NaN", "true", "ab" * 16]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=12), inner, max_size=3), max_leaves=8)
_ANY_VALUE_FIELDS = ["stringValue", "intValue", "boolValue", "doubleValue", "arrayValue", "kvlistValue",
                     "bytesValue", "int_value", "nonsense"]
any_values = json_values | st.dictionaries(st.sampled_from(_ANY_VALUE_FIELDS), json_values, max_size=2)


def _spans(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [span for rs in document["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


def _read(name: str, data: bytes) -> SpanReadResult:
    path = _WORK / name
    path.write_bytes(data)
    result = read_span_files([path])
    assert all(isinstance(p, Problem) and p.where.startswith(str(path)) and "\n" not in str(p)
               for p in result.problems)
    return result


def _lines(documents: list[Any]) -> bytes:
    return "".join(json.dumps(d, allow_nan=False) + "\n" for d in documents).encode()


def _mutated(data: st.DataObject, owner: str) -> tuple[list[Any], tuple[str, str], str]:
    """A copy of the good documents with one value of one span replaced by anything, and what was hit."""
    documents = json.loads(json.dumps(GOOD))
    line = data.draw(st.integers(0, len(documents) - 1))
    span = data.draw(st.sampled_from(_spans(documents[line])))
    target = (span["traceId"], span["spanId"])
    if owner == "attribute" and span.get("attributes"):
        entry = data.draw(st.sampled_from(span["attributes"]))
        entry["value"] = data.draw(any_values)
        return documents, target, owner
    if owner == "event" and span.get("events"):
        event = data.draw(st.sampled_from(span["events"]))
        event[data.draw(st.sampled_from(["name", "timeUnixNano", "attributes"]))] = data.draw(json_values)
        return documents, target, owner
    field = data.draw(st.sampled_from(["kind", "status", "name", "startTimeUnixNano", "links",
                                       "parentSpanId", "attributes", "events"]))
    span[field] = data.draw(json_values)
    return documents, target, field


@settings(max_examples=700, **_SETTINGS)
@given(data=st.data(), owner=st.sampled_from(["attribute", "event", "field"]))
def test_any_value_of_one_span_leaves_the_others_as_they_were(data: st.DataObject, owner: str) -> None:
    documents, target, hit = _mutated(data, owner)
    result = _read("mutated.jsonl", _lines(documents))
    read = {(s.trace_id, s.span_id): s for s in result.spans}
    for key, span in BASELINE.items():
        if key != target:
            assert read[key].attributes == span.attributes and read[key].kind == span.kind, key
    if hit in ("attribute", "event", "kind", "status", "links", "attributes", "events"):
        assert target in read  # what the graph does not need never costs the span


@settings(max_examples=500, **_SETTINGS)
@given(data=st.binary(max_size=300), compress=st.booleans(), cut=st.integers(0, 400))
def test_random_bytes_plain_or_gzip_or_cut(data: bytes, compress: bool, cut: int) -> None:
    if compress:
        data = gzip.compress(data)[:cut] if cut < 50 else gzip.compress(data)
    _read("random.jsonl.gz" if compress else "random.json", data)


@settings(max_examples=500, **_SETTINGS)
@given(cut=st.integers(0, 20_000), junk=st.binary(max_size=40), member=st.booleans())
def test_good_files_cut_and_spliced(cut: int, junk: bytes, member: bool) -> None:
    text = _lines(GOOD)
    spliced = text[:cut] + junk + text[cut:cut + 2000]
    data = gzip.compress(text)[: cut // 4] if member else spliced
    result = _read("spliced.jsonl", data)
    whole = text[:cut].count(b"\n") if not member else 0
    assert len(result.spans) >= sum(len(_spans(d)) for d in GOOD[:max(whole - 1, 0)])


_JAEGER_KEYS = ["data", "traceID", "spanID", "spans", "processes", "operationName", "references", "tags",
                "logs", "startTime", "duration", "processID", "errors", "type", "key", "value"]
jaeger_values = st.recursive(scalars | st.just("a1" * 16), lambda inner: st.lists(inner, max_size=3)
                             | st.dictionaries(st.sampled_from(_JAEGER_KEYS), inner, max_size=4),
                             max_leaves=12)


class _Answers(http.server.BaseHTTPRequestHandler):
    answer: tuple[int, bytes] = (200, b"{}")

    def do_GET(self) -> None:
        status, body = type(self).answer
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def answering() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fuzz-jaeger", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@settings(max_examples=400, **_SETTINGS)
@given(status=st.sampled_from([200, 200, 200, 404, 500, 502]),
       body=jaeger_values.map(lambda v: json.dumps(v, allow_nan=False).encode()) | st.binary(max_size=100))
def test_any_jaeger_answer(answering: str, status: int, body: bytes) -> None:
    _Answers.answer = (status, body)
    trace_id = "a1" * 16
    fetch = JaegerQueryClient(answering, timeout=5, deadline=10).fetch_traces([trace_id])
    assert all(isinstance(p, Problem) and "\n" not in str(p) for p in fetch.problems)
    assert fetch.received <= {trace_id} and all(s.trace_id == trace_id for s in fetch.spans)
    assert (fetch.received == {trace_id}) == bool(fetch.spans)
    assert fetch.received or fetch.problems  # nothing received is always said


# -- smartcomment / MemTraceBench graphs (spans/smartcomment.py) ---------------------------------

_SMARTCOMMENT = json.loads((Path(__file__).parent / "fixtures" / "smartcomment" / "toymem-alice.json")
                           .read_text(encoding="utf-8"))
_SMARTCOMMENT_BASELINE = read_span_files(
    [Path(__file__).parent / "fixtures" / "smartcomment" / "toymem-alice.json"]).spans


@settings(max_examples=400, **_SETTINGS)
@given(data=st.data(), section=st.sampled_from(["nodes", "edges", "operations", "sessions", "annotations"]))
def test_any_value_in_a_smartcomment_graph(data: st.DataObject, section: str) -> None:
    """One value anywhere in one record of a graph replaced by anything (or the whole record, or the
    section): the reader never raises, says each problem in one line naming the file, and still reads
    spans from the rest of the graph."""
    document = json.loads(json.dumps(_SMARTCOMMENT))
    records = document["data"][section]
    how = data.draw(st.sampled_from(["value", "record", "section"]))
    if how == "section" or not records:
        document["data"][section] = data.draw(json_values)
    else:
        index = data.draw(st.integers(0, len(records) - 1))
        if how == "record":
            records[index] = data.draw(json_values)
        else:
            key = data.draw(st.sampled_from(sorted(records[index]) or ["x"]))
            records[index][key] = data.draw(json_values)
    result = _read("smartcomment.json", json.dumps(document, allow_nan=False).encode())
    if section != "sessions" and how != "section":
        assert result.spans, result.problems  # one bad record does not lose the graph
    # At most one stand-in evaluation span per annotation whose own evaluation can no longer be found,
    # and the trace root those stand-ins share.
    assert len(result.spans) <= len(_SMARTCOMMENT_BASELINE) + len(_SMARTCOMMENT["data"]["annotations"]) + 1
