from __future__ import annotations

import asyncio
import json
import logging
import threading

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from memtrace_otel import Category, MemoryTracer, VariableKind, current_operation
from memtrace_otel.config import ENV_CAPTURE_CONTENT, content_capture_from_env
from memtrace_otel.instrument import RetrievedRecord
from memtrace_otel.semconv import CONTENT_KEYS, GenAI, GenAIEvent, GenAIOperation, MemTrace, MemTraceLink
from memtrace_otel.wire import content_hash, parse_descriptor


def _by_name(exporter: InMemorySpanExporter) -> dict[str, object]:
    return {s.attributes.get(MemTrace.OPERATION_NAME, s.name): s for s in exporter.get_finished_spans()
            if MemTrace.OPERATION_CATEGORY in s.attributes}


def test_operation_records_lineage_and_link(tracer_provider, span_exporter, no_content_env) -> None:
    mt = MemoryTracer(tracer_provider)
    with mt.operation("ingest", Category.INGEST) as op:
        message = op.write("msg:D1:1", "I live in Paris", kind=VariableKind.MESSAGE)
        producer = op.span_context
    with mt.operation("extract", Category.EXTRACTION) as op:
        op.read(message)
        op.read("instructions", content="extract facts", kind="prompt")
        fact = op.write("mem:1", "lives in Paris", kind=VariableKind.MEMORY_UNIT)
    spans = _by_name(span_exporter)
    extract = spans["extract"]
    assert list(extract.attributes[MemTrace.INPUTS]) == ["msg:D1:1@1", "instructions@1"]
    assert list(extract.attributes[MemTrace.OUTPUTS]) == [fact.id] == ["mem:1@1"]
    assert extract.attributes[MemTrace.OPERATION_CATEGORY] == "extraction"
    # The external input (no producer) and the output are described here; the message was
    # described by its producer. Content capture is off by default: kinds, sizes and hashes only.
    assert list(extract.attributes[MemTrace.VARIABLES]) == [
        f"prompt 13 {content_hash('extract facts')} instructions@1",
        f"memory_unit 14 {content_hash('lives in Paris')} mem:1@1",
    ]
    assert MemTrace.VARIABLE_CONTENTS not in extract.attributes
    (link,) = extract.links
    assert link.context.span_id == producer.span_id
    assert link.attributes[MemTraceLink.VARIABLE] == "msg:D1:1@1"
    # ... but the in-process content store keeps what never leaves the process.
    assert mt.contents.get("mem:1@1") == "lives in Paris"


def test_content_capture_from_env_and_truncation(tracer_provider, span_exporter, monkeypatch) -> None:
    monkeypatch.setenv(ENV_CAPTURE_CONTENT, "true")
    mt = MemoryTracer(tracer_provider, content_max_chars=5)
    with mt.operation("w", Category.OTHER) as op:
        op.write("x", "0123456789")
    (span,) = span_exporter.get_finished_spans()
    assert list(span.attributes[MemTrace.VARIABLE_CONTENTS]) == ["01234"]
    assert parse_descriptor(span.attributes[MemTrace.VARIABLES][0])[2] == 10


def test_a_switch_from_the_environment_warns_once_on_a_value_it_does_not_know(monkeypatch, caplog) -> None:
    from memtrace_otel.instrument.mem0.stages import stage_spans_default

    monkeypatch.setenv("MEMTRACE_MEM0_STAGE_SPANS", " ON")
    assert stage_spans_default() is True
    monkeypatch.setenv("MEMTRACE_MEM0_STAGE_SPANS", "off")
    assert stage_spans_default() is False
    monkeypatch.setenv("MEMTRACE_MEM0_STAGE_SPANS", "ture")
    with caplog.at_level(logging.WARNING):
        assert stage_spans_default() is False
        assert stage_spans_default() is False
    warned = [r.getMessage() for r in caplog.records if "MEMTRACE_MEM0_STAGE_SPANS" in r.getMessage()]
    assert len(warned) == 1 and "'ture'" in warned[0]


def test_invalid_capture_value_warns_once_and_means_no_content(monkeypatch, caplog) -> None:
    monkeypatch.setenv(ENV_CAPTURE_CONTENT, "maybe-later")
    with caplog.at_level(logging.WARNING):
        assert content_capture_from_env().value == "no_content"
        assert content_capture_from_env().value == "no_content"
    assert sum(ENV_CAPTURE_CONTENT in r.getMessage() for r in caplog.records) <= 1


def test_update_and_delete_make_versions(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider, capture_content=True)
    with mt.operation("add", Category.EXTRACTION, gen_ai_operation="create_memory", store_id="s1") as op:
        unit = op.write("mem:a", "likes tea", kind=VariableKind.MEMORY_UNIT)
    with mt.operation("upd", Category.UPDATE, gen_ai_operation="update_memory", store_id="s1") as op:
        newer = op.update(unit, "likes coffee")
    with mt.operation("del", Category.DELETION, gen_ai_operation="delete_memory", store_id="s1") as op:
        gone = op.delete(newer)
    assert (newer.id, gone.id, gone.deleted) == ("mem:a@2", "mem:a@3", True)
    spans = _by_name(span_exporter)
    assert spans["upd"].name == "update_memory"  # the GenAI conventions' {gen_ai.operation.name}
    assert spans["upd"].kind == trace.SpanKind.CLIENT
    assert spans["upd"].attributes[GenAI.OPERATION_NAME] == "update_memory"
    assert list(spans["upd"].attributes[MemTrace.INPUTS]) == ["mem:a@1"]
    assert list(spans["del"].attributes[MemTrace.DELETED]) == ["mem:a@3"]


def test_exception_marks_error_and_is_reraised(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider)
    with pytest.raises(KeyError), mt.operation("boom", Category.RETRIEVAL) as op:
        op.write("ctx", "partial")
        raise KeyError("missing index")
    (span,) = span_exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[GenAI.ERROR_TYPE] == "KeyError"
    assert list(span.attributes[MemTrace.OUTPUTS]) == ["ctx@1"]
    assert current_operation() is None


def test_evaluation_records_verdict_and_genai_event(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider, capture_content=True)
    with mt.operation("judge", Category.EVALUATION) as op:
        answer = op.read("answer:q1", content="Rome", kind="answer")
        op.record_evaluation(False, score=0.0, question="Where?", prediction="Rome", gold="Paris",
                             evidence=["D1:1"], answer=answer, case_id="q1")
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes[MemTrace.EVALUATION_PASSED] is False
    assert span.attributes[MemTrace.EVALUATION_GOLD] == "Paris"
    assert list(span.attributes[MemTrace.EVALUATION_EVIDENCE]) == ["D1:1"]
    assert span.attributes[MemTrace.EVALUATION_ANSWER] == "answer:q1@1"
    (event,) = [e for e in span.events if e.name == GenAIEvent.EVALUATION_RESULT]
    assert event.attributes[GenAI.EVALUATION_SCORE_LABEL] == "fail"
    assert event.attributes[GenAI.EVALUATION_SCORE_VALUE] == 0.0


def test_evaluation_without_capture_keeps_text_off_the_span(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider, capture_content=False)
    with mt.operation("judge", Category.EVALUATION) as op:
        op.record_evaluation(False, question="Where?", gold="Paris", explanation="wrong city")
    (span,) = span_exporter.get_finished_spans()
    assert MemTrace.EVALUATION_GOLD not in span.attributes
    assert all(GenAI.EVALUATION_EXPLANATION not in e.attributes for e in span.events)


def test_record_metadata_carries_lineage_across_traces(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider)
    tracer = tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("ingestion trace"), mt.operation("store", Category.EXTRACTION) as op:
        unit = op.write("mem:k", "a fact", kind=VariableKind.MEMORY_UNIT)
        metadata = op.lineage_metadata(unit, {"user_id": "u1"})
        writer = op.span_context
    fresh = MemoryTracer(tracer_provider)  # another process knows nothing but the record
    with tracer.start_as_current_span("query trace"), fresh.operation("search", Category.RETRIEVAL) as op:
        read = op.read_record(metadata, content="a fact")
        reader = op.span_context
    assert metadata["user_id"] == "u1" and read.id == "mem:k@1"
    assert reader.trace_id != writer.trace_id
    (search,) = [s for s in span_exporter.get_finished_spans() if s.name == "search"]
    assert search.links[0].context.trace_id == writer.trace_id
    assert search.links[0].context.span_id == writer.span_id


def test_one_link_per_producer_span_however_many_records_it_wrote(tracer_provider, span_exporter) -> None:
    # The SDK keeps 128 links per span and drops the oldest (the best-ranked records): links must
    # count writers, not records, so a big search over one ingestion keeps its lineage.
    mt = MemoryTracer(tracer_provider)
    records = []
    for writer in ("ingest-a", "ingest-b"):
        with mt.operation(writer, Category.EXTRACTION) as op:
            for i in range(150):
                unit = op.write(f"mem:{writer}:{i}", f"fact {i}", kind=VariableKind.MEMORY_UNIT)
                records.append(op.lineage_metadata(unit, {}))
    reader = MemoryTracer(tracer_provider)
    with reader.operation("search", Category.RETRIEVAL) as op:
        for metadata in records:
            op.read_record(metadata)
    spans = {s.name: s for s in span_exporter.get_finished_spans()}
    search = spans["search"]
    assert len(search.attributes[MemTrace.INPUTS]) == 300
    assert {link.context.span_id for link in search.links} == {
        spans["ingest-a"].context.span_id, spans["ingest-b"].context.span_id}
    assert len(search.links) == 2 and search.dropped_links == 0
    assert [link.attributes[MemTraceLink.VARIABLE] for link in search.links] == [
        "mem:ingest-a:0@1", "mem:ingest-b:0@1"]


def test_read_record_without_lineage_needs_a_name(tracer_provider) -> None:
    mt = MemoryTracer(tracer_provider)
    with mt.operation("search", Category.RETRIEVAL) as op:
        with pytest.raises(ValueError, match="no memtrace lineage"):
            op.read_record({"other": 1})
        assert op.read_record({}, name="legacy", content="x").id == "legacy@1"


def test_non_recording_tracing_is_cheap_and_harmless() -> None:
    mt = MemoryTracer(trace.NoOpTracerProvider())
    with mt.operation("x", Category.EXTRACTION) as op:
        variable = op.write("mem:z", "content")
        op.record_evaluation(True)
        assert not op.span.is_recording()
    assert variable.producer is None
    assert len(mt.contents) == 0


def test_decorator_sync_and_async_parents(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider)

    @mt.traced("inner", Category.RETRIEVAL)
    def inner() -> str:
        op = current_operation()
        assert op is not None and op.name == "inner"
        return "ok"

    @mt.traced("outer_async", Category.GENERATION)
    async def outer(n: int) -> list[str]:
        return [inner() for _ in range(n)]

    async def many() -> list[list[str]]:
        return await asyncio.gather(*(outer(2) for _ in range(3)))

    assert asyncio.run(many()) == [["ok", "ok"]] * 3
    spans = span_exporter.get_finished_spans()
    outers = {s.context.span_id for s in spans if s.name == "outer_async"}
    inners = [s for s in spans if s.name == "inner"]
    assert len(outers) == 3 and len(inners) == 6
    for span in inners:
        assert span.parent.span_id in outers
    # each outer has exactly its own two children: tasks did not leak context into each other
    children = [s.parent.span_id for s in inners]
    assert all(children.count(parent) == 2 for parent in outers)


def test_threads_keep_their_own_current_operation(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider)
    both_open = threading.Barrier(2)
    errors: list[str] = []

    def worker(name: str) -> None:
        with mt.operation(name, Category.OTHER):
            both_open.wait(timeout=10)  # both operations are open at once
            with mt.operation(f"{name}.child", Category.OTHER):
                current = current_operation()
                if current is None or current.name != f"{name}.child":
                    errors.append(name)

    threads = [threading.Thread(target=worker, args=(f"t{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    spans = {s.name: s for s in span_exporter.get_finished_spans()}
    for i in range(2):
        assert spans[f"t{i}.child"].parent.span_id == spans[f"t{i}"].context.span_id


def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        MemoryTracer(TracerProvider(), content_max_chars=0)


def test_concurrent_writes_of_one_name_get_distinct_versions(tracer_provider) -> None:
    mt = MemoryTracer(tracer_provider)
    start = threading.Barrier(4)
    ids: list[str] = []
    lock = threading.Lock()

    def writer() -> None:
        start.wait(timeout=10)
        for _ in range(200):
            with mt.operation("w", Category.UPDATE) as op:
                written = op.write("mem:shared", "x").id
            with lock:
                ids.append(written)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ids) == len(set(ids)) == 800
    assert mt.registry.latest("mem:shared").version == 800


def test_in_process_graph_sees_contents_and_verdicts_that_spans_do_not_carry(no_content_env) -> None:
    # Content capture off: exported spans stay private, but attribution in this process
    # (GraphSpanExporter fed by the tracer's content store) sees what memories and verdicts say.
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from memtrace_otel.exporters import GraphSpanExporter
    from memtrace_otel.graph import failed_evaluations

    provider = TracerProvider()
    mt = MemoryTracer(provider)
    private, in_process = GraphSpanExporter(), GraphSpanExporter(content=mt.contents.get)
    provider.add_span_processor(SimpleSpanProcessor(private))
    provider.add_span_processor(SimpleSpanProcessor(in_process))
    with mt.operation("store", Category.EXTRACTION) as op:
        op.write("mem:1", "User lives in Porto", kind=VariableKind.MEMORY_UNIT)
    with mt.operation("judge", Category.EVALUATION) as op:
        op.record_evaluation(False, question="Where?", prediction="Porto", gold="Lisbon")
    for G, expected in ((private.graph(), None), (in_process.graph(), "Lisbon")):
        (failed,) = failed_evaluations(G)
        assert G.nodes[failed]["gold"] == expected
    assert private.graph().nodes["mem:1@1"]["content"] is None
    assert in_process.graph().nodes["mem:1@1"]["content"] == "User lives in Porto"


def test_every_operation_span_carries_its_name(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider)
    with mt.operation("extract", Category.EXTRACTION):
        pass
    with mt.operation("mem0.add", Category.EXTRACTION, gen_ai_operation=GenAIOperation.CREATE_MEMORY):
        pass
    with mt.operation("judge", Category.EVALUATION, span_name="evaluate q1"):
        pass
    names = {s.name: s.attributes[MemTrace.OPERATION_NAME] for s in span_exporter.get_finished_spans()}
    assert names == {"extract": "extract", "create_memory": "mem0.add", "evaluate q1": "judge"}


def test_retrieval_llm_call_and_record_attributes(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider, capture_content=False)
    with mt.operation("search", Category.RETRIEVAL, gen_ai_operation=GenAIOperation.SEARCH_MEMORY,
                      store_id="s1", provider="mem0") as op:
        query = op.read("query:q1", content="Where does the user live?", kind=VariableKind.QUERY)
        hits = [op.read(f"mem:{n}", content=f"fact {n}", kind=VariableKind.MEMORY_UNIT) for n in range(3)]
        op.record_retrieval([RetrievedRecord(h, score=1.0 - n / 10) for n, h in enumerate(hits)],
                            query=query, top_k=5, data_source_id="vectors")
        op.record_llm_call(model="m1", provider="openai", input_tokens=10, output_tokens=2)
        op.record_llm_call(model="m1", input_tokens=5, output_tokens=1, response_model="m1-2024")
    with mt.operation("delete", Category.DELETION, gen_ai_operation=GenAIOperation.DELETE_MEMORY,
                      record_id="mem:0") as op:
        op.delete(hits[0])
        op.record_memory(count=1)
    search, delete = span_exporter.get_finished_spans()
    expected = {GenAI.MEMORY_RECORD_COUNT: 3, GenAI.RETRIEVAL_TOP_K: 5, GenAI.DATA_SOURCE_ID: "vectors",
                GenAI.REQUEST_MODEL: "m1", GenAI.RESPONSE_MODEL: "m1-2024", GenAI.USAGE_INPUT_TOKENS: 15,
                GenAI.USAGE_OUTPUT_TOKENS: 3, GenAI.PROVIDER_NAME: "mem0"}  # tokens summed; mem0 kept
    assert {k: search.attributes.get(k) for k in expected} == expected
    assert GenAI.MEMORY_RECORD_ID not in search.attributes  # three records came back, not one
    assert not CONTENT_KEYS & set(search.attributes)  # capture is off
    assert delete.attributes[GenAI.MEMORY_RECORD_ID] == "mem:0"
    assert delete.attributes[GenAI.MEMORY_RECORD_COUNT] == 1


def test_retrieval_content_goes_on_the_span_only_with_capture(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider, capture_content=True, content_max_chars=8)
    with mt.operation("rag", Category.RETRIEVAL, gen_ai_operation=GenAIOperation.RETRIEVAL) as op:
        doc = op.read("doc:1", content="Lisbon is sunny all year", kind=VariableKind.CONTEXT)
        op.record_retrieval([doc], query="Which city is sunny?")
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes[GenAI.RETRIEVAL_QUERY_TEXT] == "Which ci"  # truncated, retrieval keys
    assert json.loads(span.attributes[GenAI.RETRIEVAL_DOCUMENTS]) == [{"id": "doc:1", "content": "Lisbon i"}]
    # A retrieval does not apply to the record it returned: the id is in the documents, not record.id.
    assert GenAI.MEMORY_RECORD_ID not in span.attributes
    assert GenAI.MEMORY_RECORDS not in span.attributes and GenAI.MEMORY_QUERY_TEXT not in span.attributes


def test_record_methods_on_a_non_recording_span_do_nothing() -> None:
    mt = MemoryTracer(trace.NoOpTracerProvider(), capture_content=True)
    with mt.operation("x", Category.RETRIEVAL) as op:
        op.record_retrieval([op.read("doc:1", content="d")], query="q", top_k=1)
        op.record_llm_call(model="m", input_tokens=1)
        op.record_memory(record_id="r", count=1)
        assert not op.span.is_recording()


def test_interleaved_tasks_keep_their_own_operation_and_lineage(tracer_provider, span_exporter) -> None:
    # Each task opens an operation and awaits inside it while the others run theirs: the
    # current operation, the parent of a child operation and the lineage must stay per task.
    mt = MemoryTracer(tracer_provider)
    tasks, errors = 4, []

    async def task(n: int, opened: list[asyncio.Event], go: asyncio.Event) -> None:
        with mt.operation(f"root{n}", Category.OTHER) as root:
            opened[n].set()
            await go.wait()  # every task's root is open now
            for step in range(3):
                await asyncio.sleep(0)  # let the other tasks run in between
                if current_operation() is not root:
                    errors.append(f"task {n} step {step} sees {getattr(current_operation(), 'name', None)}")
                with mt.operation(f"child{n}", Category.OTHER) as child:
                    await asyncio.sleep(0)
                    child.read(f"in:{n}:{step}", content=f"input of {n}")
                    await asyncio.sleep(0)
                    child.write(f"out:{n}", f"output {step} of {n}")
            root.write(f"root-out:{n}", "done")

    async def main() -> None:
        opened, go = [asyncio.Event() for _ in range(tasks)], asyncio.Event()
        running = [asyncio.create_task(task(n, opened, go)) for n in range(tasks)]
        for event in opened:
            await event.wait()
        go.set()
        await asyncio.gather(*running)

    asyncio.run(main())
    assert not errors
    spans = span_exporter.get_finished_spans()
    roots = {s.attributes[MemTrace.OPERATION_NAME]: s for s in spans if s.name.startswith("root")}
    for s in (s for s in spans if s.name.startswith("child")):
        n = s.name.removeprefix("child")
        assert s.parent.span_id == roots[f"root{n}"].context.span_id
        ((read,), (wrote,)) = s.attributes[MemTrace.INPUTS], s.attributes[MemTrace.OUTPUTS]
        assert read.startswith(f"in:{n}:") and wrote.startswith(f"out:{n}@")
    for n in range(tasks):
        assert list(roots[f"root{n}"].attributes[MemTrace.OUTPUTS]) == [f"root-out:{n}@1"]
        assert roots[f"root{n}"].parent is None
