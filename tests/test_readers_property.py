"""Property tests: the readers and the graph builder survive any mangling of real span files."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.graph import build_graph
from memtrace_otel.spans import read_span_files

from scenario import run_pipeline

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")


def _good_text() -> str:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "spans.jsonl"
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
        run_pipeline(provider)
        provider.shutdown()
        return path.read_text()


GOOD = _good_text()
GOOD_DOCS = [json.loads(line) for line in GOOD.splitlines()]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=10), children, max_size=4)),
    max_leaves=12,
)


def _paths(document: object, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += _paths(value, (*prefix, index))
    return found


def _replace(document: object, path: tuple, value: object) -> object:
    if not path:
        return value
    head, *rest = path
    copy = list(document) if isinstance(document, list) else dict(document)
    copy[head] = _replace(copy[head], tuple(rest), value)
    return copy


def _check(text: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "mangled.jsonl"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        result = read_span_files([path])
        for span in result.spans:
            assert _HEX32.match(span.trace_id) and _HEX16.match(span.span_id)
            assert span.parent_span_id == "" or _HEX16.match(span.parent_span_id)
        for problem in result.problems:
            assert problem.where.startswith(str(path))
        build_graph(result.spans)  # must not raise either


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_field_replaced_by_any_json(data) -> None:
    index = data.draw(st.integers(0, len(GOOD_DOCS) - 1))
    document = GOOD_DOCS[index]
    path = data.draw(st.sampled_from(_paths(document)))
    mangled = _replace(document, path, data.draw(json_values))
    lines = GOOD.splitlines()
    lines[index] = json.dumps(mangled)
    _check("\n".join(lines) + "\n")


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(0, len(GOOD)), junk=st.text(max_size=30))
def test_truncation_and_junk_anywhere(cut, junk) -> None:
    _check(GOOD[:cut] + junk + GOOD[cut:cut + 500])


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text(text) -> None:
    _check(text)


JAEGER = {"data": [{"traceID": "ab" * 16, "processes": {"p1": {"serviceName": "svc", "tags": []}}, "spans": [
    {"traceID": "ab" * 16, "spanID": "cd" * 8, "operationName": "search", "processID": "p1",
     "startTime": 1_700_000_000_000_000, "duration": 5,
     "references": [{"refType": "CHILD_OF", "traceID": "ab" * 16, "spanID": "12" * 8}],
     "tags": [{"key": "memtrace.operation.category", "type": "string", "value": "retrieval"},
              {"key": "memtrace.inputs", "type": "string", "value": '["mem:1@1"]'},
              {"key": "memtrace.input.sizes", "type": "string", "value": "[4]"},
              {"key": "n", "type": "int64", "value": 3}],
     "logs": [{"timestamp": 1_700_000_000_000_001, "fields": [
         {"key": "event", "type": "string", "value": "memtrace.step"}]}]}]}]}


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_jaeger_document_with_any_field_replaced(data) -> None:
    path = data.draw(st.sampled_from(_paths(JAEGER)))
    _check(json.dumps(_replace(JAEGER, path, data.draw(json_values)), indent=1))
