"""The mem0 overhead benchmark's SDK floor emits the span memtrace's ``add`` makes, and no memtrace code.

``benchmarks/performance/mem0_floor.py`` measures what the OpenTelemetry SDK alone charges for a
traced ``Memory.add``: it records memtrace's spans on a run of the benchmark's calls and replays
them, call by call, from a second and minimal instrumentation of the same methods. Its figures mean
something only while the replayed span is memtrace's span, so this runs two ``add`` calls (the
second finds the first's record: a link) and a ``search`` with memtrace, then the same calls on a
fresh store with the floor, and compares each finished span field by field (name, kind, attributes,
stage events with their joined values, links with their attributes, status), with content capture
off and on. It also checks the floor's claim to run no memtrace code (a profiler over the call, which
is shown to see memtrace's own wrappers), and that a call memtrace makes more than one span for is
refused rather than replayed in part.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mem0_app import USER, config, scope
from mem0_script import add_replies
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.instrument.mem0 import Mem0Instrumentor
from memtrace_otel.semconv import MemTrace, MemTraceEvent

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "performance"))
import mem0_floor

_FACTS = ("Moved to Lisbon in March", "Has a dog called Pepper")


@pytest.fixture(autouse=True)
def _stage_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read the spans of the stage-event shape (``MEMTRACE_MEM0_PACKED=false``); the packed
    ``add``, the default, is compared with it by ``test_mem0_packed.py`` (the same graph and verdicts)."""
    monkeypatch.setenv("MEMTRACE_MEM0_PACKED", "false")


def _calls(memory: Any, server: Any, run: Any) -> None:
    """Two adds (the second's search stage reads the first's record) and a search, each through ``run``."""
    for fact in _FACTS:
        server.enqueue(*add_replies([fact]))
        run("add", lambda fact=fact: memory.add(f"Note: {fact}.", user_id=USER))
    scoped = scope(user_id=USER)  # here: mem0_app asks memtrace which mem0 generation this is
    run("search", lambda: memory.search("Where did the user move?", **scoped))


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _memtrace_run(server: Any, data: Path) -> tuple[dict[str, list[dict[str, Any]]], list[list[str]]]:
    """memtrace on the calls: the recorded payloads, and the memtrace functions each call ran."""
    from mem0 import Memory

    provider, _ = _provider()
    capture = mem0_floor.Capture()
    provider.add_span_processor(capture)
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=provider)
    frames: list[list[str]] = []
    try:
        memory = Memory.from_config(config(server.base_url, str(data)))

        def run(method: str, call: Any) -> None:
            capture.begin(method)
            frames.append(mem0_floor.frames_from(call, "memtrace_otel"))

        _calls(memory, server, run)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    return capture.payloads(), frames


@pytest.mark.parametrize("content", [False, True], ids=["content-off", "content-on"])
def test_floor_replays_memtrace_spans(content: bool, llm_server: Any, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from mem0 import Memory

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", str(content).lower())
    recorded, memtrace_frames = _memtrace_run(llm_server, tmp_path / "memtrace")
    assert all(memtrace_frames), "the profiler must see memtrace's wrappers on memtrace's path"
    path = tmp_path / "spans.json"
    mem0_floor.save(recorded, str(path))
    payloads = mem0_floor.load(str(path))
    adds = payloads["add"]
    assert [len(p["events"]) for p in adds] == [len(adds[0]["events"])] * 2 and adds[0]["events"]
    assert {e["name"] for p in adds for e in p["events"]} == {MemTraceEvent.STAGE}
    assert adds[1]["links"], "the second add reads the first's record: its span links the writer"
    assert any(MemTrace.VARIABLE_CONTENTS in e["attributes"] for e in adds[0]["events"]) is content

    provider, exporter = _provider()
    floor = mem0_floor.FloorInstrumentor(payloads)
    floor.instrument(tracer_provider=provider)
    try:
        memory = Memory.from_config(config(llm_server.base_url, str(tmp_path / "floor")))
        emitted: list[tuple[str, list[dict[str, Any]], list[str]]] = []

        def run(method: str, call: Any) -> None:
            before = len(exporter.get_finished_spans())
            frames = mem0_floor.frames_from(call, "memtrace_otel")
            spans = exporter.get_finished_spans()[before:]
            emitted.append((method, [mem0_floor.payload_of(s) for s in spans], frames))

        _calls(memory, llm_server, run)
        with suppress_instrumentation():  # the benchmark's untraced call: passes straight through
            llm_server.enqueue(*add_replies(["Likes tea"]))
            memory.add("I like tea.", user_id=USER)
        suppressed = len(exporter.get_finished_spans()) - sum(len(spans) for _, spans, _ in emitted)
    finally:
        floor.uninstrument()
        provider.shutdown()

    assert suppressed == 0
    assert [frames for _, _, frames in emitted] == [[], [], []], "no memtrace code on the floor's path"
    replayed = {"add": [s for m, spans, _ in emitted if m == "add" for s in spans],
                "search": [s for m, spans, _ in emitted if m == "search" for s in spans]}
    # Field by field, through JSON as the benchmark hands them over (tuples and lists alike).
    assert json.loads(json.dumps(replayed)) == payloads


def test_capture_refuses_a_call_with_more_spans(tracer_provider: TracerProvider) -> None:
    capture = mem0_floor.Capture()
    tracer_provider.add_span_processor(capture)
    tracer = tracer_provider.get_tracer("test")
    capture.begin("add")
    with tracer.start_as_current_span("upsert_memory"), tracer.start_as_current_span("mem0.add.extract"):
        pass
    with pytest.raises(SystemExit, match=r"Memory.add made 2 spans \(mem0.add.extract, upsert_memory\)"):
        capture.payloads()


def test_load_names_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "spans.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit, match=r"spans\.json holds no recorded spans by method"):
        mem0_floor.load(str(bad))
    with pytest.raises(SystemExit, match="cannot read the recorded payloads"):
        mem0_floor.load(str(tmp_path / "absent.json"))


def test_packed_floor_carries_the_events_and_links_in_attributes(llm_server: Any, tmp_path: Path) -> None:
    """The packed shape (issue 28's "internal steps as attributes of one span") drops no stage and no
    writer: each event's attributes and each link's ids and attributes come back from the strings, and
    the SDK emits the packed span as given (no events, no links, every attribute whole)."""
    recorded, _ = _memtrace_run(llm_server, tmp_path / "memtrace")
    payloads = json.loads(json.dumps(recorded))  # as the benchmark loads them
    packed = mem0_floor.packed_all(payloads)
    assert sorted(packed) == sorted(payloads)
    for method, spans in payloads.items():
        assert len(packed[method]) == len(spans)
        for original, flat in zip(spans, packed[method], strict=True):
            assert flat["events"] == [] and flat["links"] == []
            assert {k: flat["attributes"][k] for k in original["attributes"]} == original["attributes"]
            events = [(k.rsplit(".", 1)[0], json.loads(v)) for k, v in flat["attributes"].items()
                      if k not in original["attributes"] and k != mem0_floor.PACKED_LINKS]
            assert events == [(e["name"], e["attributes"]) for e in original["events"]]
            links = json.loads(flat["attributes"].get(mem0_floor.PACKED_LINKS, "[]"))
            assert links == [[link["trace_id"], link["span_id"], link["attributes"]]
                             for link in original["links"]]
    second = packed["add"][1]
    assert mem0_floor.PACKED_LINKS in second["attributes"], "the second add's link to the first's writer"

    provider, exporter = _provider()
    emit = mem0_floor._wrapper(provider.get_tracer("test"), iter([mem0_floor.Emission.of(second)]))
    emit(lambda: None, None, (), {})
    provider.shutdown()
    (span,) = exporter.get_finished_spans()
    assert not span.events and not span.links
    assert json.loads(json.dumps(dict(span.attributes or {}))) == second["attributes"]
