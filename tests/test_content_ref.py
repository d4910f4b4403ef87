"""Contents by reference (issue 12): upload through fsspec, references on spans, resolution when read.

Real parts throughout: the SDK pipeline and the project's OTLP/JSON file exporter, a local
directory and fsspec's in-memory filesystem as stores, the CLI through click's runner.
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace as SimpleSpanRecord
from typing import Any

import fsspec
import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.cli import main
from memtrace_otel.collector.serve import ServeConfig
from memtrace_otel.config import ENV_CONTENT_STORE, ENV_CONTENT_UPLOAD_BASE_PATH, ENV_GENAI_UPLOAD_BASE_PATH
from memtrace_otel.content import (
    ContentResolver,
    ContentStoreError,
    ContentUploader,
    externalize_contents,
    open_store,
)
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.graph.build import build_graph
from memtrace_otel.semconv import GenAI, MemTrace
from memtrace_otel.spans import read_span_files
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.wire import content_hash

from scenario import run_pipeline

TEXTS = ("I moved to Lisbon", "I have a cat named Tom", "User moved to Porto", "Where did the user move?")
"""Texts of the scenario (tests/scenario.py) that must never be in an exported span without capture."""


@pytest.fixture(params=["local", "memory"])
def store_url(request, tmp_path) -> Iterator[str]:
    if request.param == "local":
        yield str(tmp_path / "contents")
        return
    url = f"memory://memtrace-test-{uuid.uuid4().hex}"
    yield url
    fs, root = fsspec.url_to_fs(url)
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture(autouse=True)
def _no_upload_env(monkeypatch):
    for name in (ENV_CONTENT_UPLOAD_BASE_PATH, ENV_GENAI_UPLOAD_BASE_PATH, ENV_CONTENT_STORE):
        monkeypatch.delenv(name, raising=False)


def _export(tmp_path: Path, monkeypatch, store_url: str, *,
            capture: bool = False) -> tuple[Path, MemoryTracer]:
    """The scenario through the SDK into an OTLP/JSON file, uploading to ``store_url`` (set by env)."""
    monkeypatch.setenv(ENV_CONTENT_UPLOAD_BASE_PATH, store_url)
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    mt = run_pipeline(provider, capture_content=capture)
    assert mt.shutdown(10_000)
    provider.shutdown()
    return path, mt


def _stored(store_url: str) -> list[str]:
    fs, root = fsspec.url_to_fs(store_url)
    return [p for p in fs.find(root)]


def test_no_content_in_exported_spans_with_upload_on_and_capture_off(tmp_path, monkeypatch,
                                                                      store_url) -> None:
    path, mt = _export(tmp_path, monkeypatch, store_url)
    exported = path.read_text(encoding="utf-8")
    assert MemTrace.CONTENT_REF in exported and MemTrace.EVALUATION_TEXTS_REF in exported
    for text in (*TEXTS, "Lisbon", "Porto"):
        assert text not in exported, f"{text!r} left the process on a span"
    assert MemTrace.VARIABLE_CONTENTS not in exported
    store = open_store(store_url)
    assert store.read(content_hash("I moved to Lisbon")) == "I moved to Lisbon"
    assert mt.uploader is not None and mt.uploader.dropped == mt.uploader.failed == 0


def test_each_text_is_stored_once(tmp_path, monkeypatch, store_url) -> None:
    _export(tmp_path, monkeypatch, store_url)
    first = sorted(_stored(store_url))
    assert len(first) == len(set(first)) > 5
    # A second run writes the same texts: nothing new is stored, every write is skipped.
    (tmp_path / "again").mkdir()
    _, mt = _export(tmp_path / "again", monkeypatch, store_url)
    assert sorted(_stored(store_url)) == first
    assert mt.uploader.stored == 0 and mt.uploader.skipped > 0


def test_references_resolve_to_the_graph_captured_content_gives(tmp_path, monkeypatch, store_url) -> None:
    path, _ = _export(tmp_path, monkeypatch, store_url)
    spans = read_span_files([path]).spans
    resolver = ContentResolver(store_url)
    resolved = build_graph(spans, content_by_hash=resolver.get)
    bare = build_graph(spans)
    assert resolved.nodes["msg:D1:1@1"]["content"] == "I moved to Lisbon"
    assert bare.nodes["msg:D1:1@1"]["content"] is None
    failed = [n for n, d in resolved.nodes(data=True) if d.get("passed") is False]
    assert [resolved.nodes[n]["gold"] for n in failed] == ["Lisbon"]
    assert resolved.nodes[failed[0]]["question"] == "Where did the user move?"
    assert resolver.messages() == [] and resolver.found > 0

    captured_path = tmp_path / "captured"
    captured_path.mkdir()
    captured, _ = _export(captured_path, monkeypatch, store_url, capture=True)
    with_content = build_graph(read_span_files([captured]).spans)
    for node, data in with_content.nodes(data=True):
        if data["type"] == "variable":
            assert resolved.nodes[node]["content"] == data["content"], node


def test_cli_reads_the_store_from_the_option_and_the_environment(tmp_path, monkeypatch) -> None:
    store = str(tmp_path / "contents")
    path, _ = _export(tmp_path, monkeypatch, store)
    without = CliRunner().invoke(main, ["graph", str(path)])
    assert without.exit_code == 0 and "I moved to Lisbon" not in without.stdout
    given = CliRunner().invoke(main, ["graph", str(path), "--content-store", store])
    assert given.exit_code == 0, given.output
    nodes = {n["id"]: n for n in json.loads(given.stdout)["nodes"]}
    assert nodes["msg:D1:1@1"]["content"] == "I moved to Lisbon"
    monkeypatch.setenv(ENV_CONTENT_STORE, store)
    analyzed = CliRunner().invoke(main, ["analyze", "--json", str(path)])
    assert analyzed.exit_code == 0, analyzed.output
    (failure,) = json.loads(analyzed.stdout)["failures"]
    assert failure["gold"] == "Lisbon" and failure["question"] == "Where did the user move?"


def test_report_shows_content_only_from_the_store(tmp_path, monkeypatch) -> None:
    store = str(tmp_path / "contents")
    path, _ = _export(tmp_path, monkeypatch, store)
    pages = {}
    for name, extra in (("without", []), ("with", ["--content-store", store])):
        out = tmp_path / f"{name}.html"
        result = CliRunner().invoke(main, ["report", str(path), "--out", str(out), *extra])
        assert result.exit_code == 0, result.output
        pages[name] = out.read_text(encoding="utf-8")
    assert "I moved to Lisbon" in pages["with"]
    assert "I moved to Lisbon" not in pages["without"]
    bad = CliRunner().invoke(main, ["report", str(path), "--out", str(tmp_path / "x.html"),
                                    "--content-store", "nosuch-protocol://x"])
    assert bad.exit_code == 2 and "--content-store" in bad.output


def test_a_missing_store_is_one_line_and_analysis_goes_on(tmp_path, monkeypatch) -> None:
    store = str(tmp_path / "contents")
    path, _ = _export(tmp_path, monkeypatch, store)
    shutil.rmtree(store)
    outcome = CliRunner().invoke(main, ["analyze", "--json", str(path), "--content-store", store])
    assert outcome.exit_code == 3, outcome.output
    lines = [line for line in outcome.stderr.splitlines() if "content store" in line]
    assert len(lines) == 1 and "cannot be read" in lines[0], outcome.stderr
    (failure,) = json.loads(outcome.stdout)["failures"]
    assert failure["gold"] is None and failure["operation"] is not None


def test_a_store_that_vanishes_mid_analysis(tmp_path, monkeypatch, store_url, caplog) -> None:
    path, _ = _export(tmp_path, monkeypatch, store_url)
    spans = read_span_files([path]).spans
    resolver = ContentResolver(store_url)
    fs, root = fsspec.url_to_fs(store_url)
    calls = []

    def lookup(digest: str) -> str | None:
        calls.append(digest)
        if len(calls) == 3:  # the store goes away while the graph is being filled
            fs.rm(root, recursive=True)
        return resolver.get(digest)

    with caplog.at_level(logging.WARNING, logger="memtrace_otel.content"):
        G = build_graph(spans, content_by_hash=lookup)
    contents = [d["content"] for _, d in G.nodes(data=True) if d["type"] == "variable"]
    assert len(calls) > 5 and any(contents) and None in contents
    assert resolver.unavailable and resolver.found == 2
    (line,) = resolver.messages()
    assert "cannot be read" in line and resolver.url in line
    assert [r.getMessage() for r in caplog.records] == [line]
    assert resolver.get("0123456789abcdef") is None and resolver.missing == 0  # given up: no more reads


@pytest.mark.parametrize("bad", ["nope://somewhere", "   "])
def test_a_bad_store_url_is_a_clear_error(tmp_path, bad) -> None:
    spans = tmp_path / "s.jsonl"
    spans.write_text("")
    outcome = CliRunner().invoke(main, ["graph", str(spans), "--content-store", bad])
    assert outcome.exit_code == 2 and "--content-store" in outcome.stderr, outcome.output
    assert "Traceback" not in outcome.output
    with pytest.raises(ValueError, match="content store"):
        MemoryTracer(TracerProvider(), upload_base_path=bad)
    with pytest.raises(ContentStoreError):
        open_store(bad)
    with pytest.raises(ValueError, match="content store"):
        ServeConfig(content_store=bad).validate()


def test_a_bad_environment_value_warns_and_uploads_nothing(monkeypatch, caplog) -> None:
    monkeypatch.setenv(ENV_GENAI_UPLOAD_BASE_PATH, "nope://x")
    with caplog.at_level(logging.WARNING):
        mt = MemoryTracer(TracerProvider())
    assert mt.uploader is None and "content upload stays off" in caplog.text


def test_the_genai_upload_base_path_is_honoured(monkeypatch, store_url) -> None:
    monkeypatch.setenv(ENV_GENAI_UPLOAD_BASE_PATH, store_url)
    mt = MemoryTracer(TracerProvider())
    assert mt.content_ref == open_store(store_url).url
    mt.shutdown()


def test_references_are_carried_as_documented(store_url) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    mt = MemoryTracer(provider, capture_content=False, upload_base_path=store_url)
    with mt.operation("ingest", Category.INGEST) as op:
        op.write("msg:1", "hello", kind=VariableKind.MESSAGE)
    with mt.operation("judge", Category.EVALUATION) as op:
        op.record_evaluation(False, question="why?", gold="because")
    mt.shutdown()
    ingest, judge = (s.attributes for s in memory.get_finished_spans())
    assert ingest[MemTrace.CONTENT_REF] == judge[MemTrace.CONTENT_REF] == open_store(store_url).url
    assert list(judge[MemTrace.EVALUATION_TEXTS_REF]) == [f"question {content_hash('why?')}",
                                                          f"gold {content_hash('because')}"]
    assert MemTrace.EVALUATION_QUESTION not in judge and MemTrace.VARIABLE_CONTENTS not in ingest


def test_force_flush_and_shutdown_drain_within_one_deadline(store_url, caplog) -> None:
    store = open_store(store_url)
    # A worker that would sleep for a minute: only flush and shutdown can make it write.
    uploader = ContentUploader(store, batch_size=10_000, schedule_delay_millis=60_000)
    texts = [f"text {i}" for i in range(50)]
    for text in texts:
        uploader.submit(content_hash(text), text)
    assert uploader.force_flush(10_000)
    assert all(store.exists(content_hash(t)) for t in texts) and uploader.stored == 50
    later = [f"later {i}" for i in range(20)]
    for text in later:
        uploader.submit(content_hash(text), text)
    assert uploader.shutdown(10_000)
    assert all(store.exists(content_hash(t)) for t in later)
    with caplog.at_level(logging.WARNING):
        assert uploader.shutdown() is True  # idempotent: warns, does nothing
        uploader.submit(content_hash("after"), "after")
    assert "twice" in caplog.text and uploader.dropped == 1 and not store.exists(content_hash("after"))


def test_overload_drops_are_counted_and_warned_once(store_url, caplog) -> None:
    uploader = ContentUploader(open_store(store_url), max_queue_size=3, batch_size=100,
                               schedule_delay_millis=60_000)
    with caplog.at_level(logging.WARNING, logger="memtrace_otel.content"):
        for i in range(10):
            uploader.submit(content_hash(str(i)), str(i))
    assert uploader.dropped == 7
    assert sum("queue full" in r.getMessage() for r in caplog.records) == 1
    assert uploader.shutdown(10_000) and uploader.stored == 3


def test_externalize_contents_moves_captured_contents_into_a_store(tmp_path, monkeypatch, store_url) -> None:
    path, _ = _export(tmp_path, monkeypatch, str(tmp_path / "unused"), capture=True)
    captured = read_span_files([path]).spans
    with_content = build_graph(captured)
    spans = externalize_contents(read_span_files([path]).spans, store_url)
    assert not any(MemTrace.VARIABLE_CONTENTS in s.attributes or MemTrace.EVALUATION_GOLD in s.attributes
                   for s in spans)
    resolved = build_graph(spans, content_by_hash=ContentResolver(store_url).get)
    for node, data in with_content.nodes(data=True):
        for key in ("content", "question", "gold", "prediction", "explanation"):
            assert resolved.nodes[node].get(key) == data.get(key), (node, key)


def _packed_spans() -> list[SpanRecord]:
    """A packed mem0 ``add`` (a message, an extraction, a search of memory, a write, an update) and a
    packed ``search`` cut in parts, as the instrumentor writes them with content capture (limit 1000)."""
    def text(t: str) -> list[Any]:
        return [len(t), content_hash(t), t]

    message, prompt, response, lines = "I moved to Lisbon", "Extract facts: I moved to Lisbon", "- Lisbon", \
        "User lives in Lisbon"
    add = [1, ["model", "openai", 1000, None], [["msg:D1:1", text(message)]], [
        ["llm", ["mem0.add.extract", "extraction", "mem0.facts", False], 101, 102, text(prompt),
         text(response), 1, text(lines), None],
        ["search", 103, 104, 5, None, [["r0", None, None, "User lived in Porto", 0.9]], None],
        ["write", 105, 106, None, [["r1", lines, content_hash(lines)]], 1, None],
        ["update", 107, 108, "r0", None, None, 2, "User moved from Porto",
         content_hash("User moved from Porto"), None]]]
    query, context = "Where did the user move?", "User lives in Lisbon"
    digest = content_hash(query)
    search = json.dumps([1, [1000, None], [f"query:{digest}", len(query), digest, query],
                         [f"context:mem0-user_id=u-{digest}", 1, len(context),
                          content_hash(context), context],
                         [["r1", "mem0:r1@1", f"00-{'a' * 32}-{'1' * 16}-01", lines, 0.5]]])
    return [
        SpanRecord("a" * 32, "1" * 16, "upsert_memory", start_time_unix_nano=100, end_time_unix_nano=109,
                   attributes={MemTrace.OPERATION_NAME: "mem0.add", MemTrace.OPERATION_CATEGORY: "ingest",
                               "gen_ai.operation.name": "upsert_memory", MemTrace.MEM0_ADD: json.dumps(add),
                               GenAI.MEMORY_RECORDS: json.dumps([{"content": lines}])}),
        SpanRecord("b" * 32, "2" * 16, "search_memory", start_time_unix_nano=200, end_time_unix_nano=201,
                   attributes={MemTrace.OPERATION_NAME: "mem0.search",
                               MemTrace.OPERATION_CATEGORY: "retrieval",
                               "gen_ai.operation.name": "search_memory", GenAI.MEMORY_QUERY_TEXT: query,
                               MemTrace.MEM0_SEARCH: search[:60], f"{MemTrace.MEM0_SEARCH}.1": search[60:120],
                               f"{MemTrace.MEM0_SEARCH}.2": search[120:]}),
    ]


def test_externalize_contents_moves_the_texts_of_packed_mem0_spans(store_url) -> None:
    texts = ("I moved to Lisbon", "Lisbon", "Porto", "Where did the user move?")
    with_content = build_graph(_packed_spans())
    spans = externalize_contents(_packed_spans(), store_url)
    for span in spans:
        assert not any(t in str(v) for t in texts for v in span.attributes.values()), span.attributes
    add, search = spans
    # Re-encoded as an uploader without capture writes them: the header names the store; the search
    # keeps its parts, of the length the limit cut them to.
    url = open_store(store_url).url
    assert json.loads(add.attributes[MemTrace.MEM0_ADD])[1] == ["model", "openai", None, url]
    parts = [search.attributes[MemTrace.MEM0_SEARCH], *(v for k, v in search.attributes.items()
                                                       if k.startswith(f"{MemTrace.MEM0_SEARCH}."))]
    assert len(parts) > 1 and {len(p) for p in parts[:-1]} == {60}
    assert json.loads("".join(parts))[1] == [None, url]
    resolved = build_graph(spans, content_by_hash=ContentResolver(store_url).get)
    assert not resolved.graph["problems"] and set(resolved.edges) == set(with_content.edges)
    contents = {n: d.get("content") for n, d in with_content.nodes(data=True)}
    assert sum(1 for c in contents.values() if c) >= 6  # the message, prompt, response, lines, records, query
    assert {n: d.get("content") for n, d in resolved.nodes(data=True)} == contents
    # Without the store the texts are gone from the graph.
    assert not any(d.get("content") for _, d in build_graph(spans).nodes(data=True))


@pytest.mark.parametrize("value", ['[1, [500, null], ["query:ab", 5, "ab", "Lisbon"]',  # cut JSON
                                   '[99, "Lisbon"]',                                      # another format
                                   '[1, [500, null], 7, ["context:x", 1, 6, "cd", "Lisbon"], [[1]]]'])
def test_externalize_contents_drops_a_packed_value_it_cannot_read(store_url, value: str) -> None:
    # A value the reader cannot decode may still hold captured text: making spans private wins over
    # keeping it for the graph builder's problem report.
    span = SimpleSpanRecord(attributes={MemTrace.MEM0_SEARCH: value[:20],
                                        f"{MemTrace.MEM0_SEARCH}.1": value[20:], "other": "kept"})
    (out,) = externalize_contents([span], store_url)
    assert out.attributes == {"other": "kept"}
