"""The mem0 instrumentor in process, against the real mem0ai of this venv (offline).

Spans of ``add`` / ``update`` / ``delete`` / ``search`` and their lineage, the record
metadata, errors, ``AsyncMemory``, and ``uninstrument`` restoring the library exactly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from typing import Any

import pytest
from mem0_app import USER, config, scope
from mem0_script import add_replies, decision
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from memtrace_otel.graph import build_graph
from memtrace_otel.instrument.mem0 import MESSAGE_IDS_KEY, Mem0Instrumentor, context_name, mem0_generation
from memtrace_otel.semconv import (
    STAGE_LIST_SEPARATOR,
    GenAI,
    MemTrace,
    MemTraceEvent,
    MemTraceStage,
    RecordMetadata,
)
from memtrace_otel.spans import record_from_readable


@pytest.fixture(autouse=True)
def _stage_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read the spans of the stage-event shape and the generic ``search``
    (``MEMTRACE_MEM0_PACKED=false``); the packed ``add`` and ``search``, the default, are compared with
    them by ``test_mem0_packed.py`` (the same graph and verdicts)."""
    monkeypatch.setenv("MEMTRACE_MEM0_PACKED", "false")


def spans_by_name(exporter: InMemorySpanExporter) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.attributes.get(MemTrace.OPERATION_NAME, span.name), []).append(span)
    return found


def add_fact(memory: Any, server: Any, fact: str, text: str) -> str:
    server.enqueue(*add_replies([fact]))
    return memory.add(text, user_id=USER)["results"][0]["id"]


def stages_of(span: Any) -> dict[str, list[dict[str, Any]]]:
    """The ``memtrace.stage`` events of a span, by operation name; the lineage lists the event
    carries as one string (``MemTraceStage.JOINED``) as the tuples an array attribute would be."""
    found: dict[str, list[dict[str, Any]]] = {}
    for event in span.events:
        if event.name == MemTraceEvent.STAGE:
            attributes = {k: tuple(v.split(STAGE_LIST_SEPARATOR))
                          if k in MemTraceStage.JOINED and isinstance(v, str) else v
                          for k, v in event.attributes.items()}
            found.setdefault(event.attributes[MemTrace.OPERATION_NAME], []).append(attributes)
    return found


def test_stage_events_carry_their_lineage_lists_joined(instrumented: Any, memory: Any, llm_server: Any,
                                                       span_exporter: InMemorySpanExporter) -> None:
    add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    (add,) = spans_by_name(span_exporter)["mem0.add"]
    events = [e for e in add.events if e.name == MemTraceEvent.STAGE]
    extract = next(e for e in events if e.attributes[MemTrace.OPERATION_NAME] == "mem0.add.extract")
    assert extract.attributes[MemTrace.STEP_NAMES] == "prompt\nresponse\nparse"
    # Every lineage list of every stage is one string (no id of this run holds a newline).
    assert all(isinstance(e.attributes[k], str) for e in events for k in MemTraceStage.JOINED
               if k in e.attributes)


def test_add_traces_the_pipeline_as_children(instrumented: Any, memory: Any, llm_server: Any,
                                             span_exporter: InMemorySpanExporter) -> None:
    record = add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    spans = spans_by_name(span_exporter)
    (add,) = spans["mem0.add"]
    assert add.name == "upsert_memory"  # the GenAI conventions' {gen_ai.operation.name}
    assert add.attributes[GenAI.OPERATION_NAME] == "upsert_memory"
    assert add.attributes[GenAI.MEMORY_RECORD_COUNT] == 1
    # One span: the internal stages, and the record it created, are events of add (even from mem0's
    # worker thread), each with its own id and lineage.
    assert set(spans) == {"mem0.add"}
    stages = stages_of(add)
    (create,) = stages["mem0.create"]
    assert create[MemTrace.OUTPUTS] == (f"mem0:{record}@1",)
    assert (create[GenAI.OPERATION_NAME], create[GenAI.MEMORY_RECORD_ID]) == ("create_memory", record)
    expected = {"mem0.add.extract", "mem0.add.search", "mem0.create"}
    assert set(stages) == (expected | {"mem0.add.decide"} if mem0_generation() == 1 else expected)
    ids = [s[MemTraceStage.ID] for found in stages.values() for s in found]
    assert len(set(ids)) == len(ids) and all(len(i) == 16 and i != f"{add.context.span_id:016x}" for i in ids)
    (extract,) = stages["mem0.add.extract"]
    assert extract[MemTrace.OPERATION_CATEGORY] == "extraction"
    assert list(extract[MemTrace.STEP_NAMES]) == ["prompt", "response", "parse"]
    facts = next(v for v in extract[MemTrace.OUTPUTS] if "facts" in v)
    assert facts.startswith(f"mem0.facts:{extract[MemTraceStage.ID]}@")  # named by the stage, not the span
    # prompt -> response -> facts; 1.x decides from the facts, 2.x stores them directly
    reader = stages["mem0.add.decide"][0] if mem0_generation() == 1 else create
    assert facts in reader[MemTrace.INPUTS]
    G = build_graph(record_from_readable(s) for s in span_exporter.get_finished_spans())
    node = f"op:{add.context.trace_id:032x}:{extract[MemTraceStage.ID]}"
    assert G.nodes[node]["stage_of"] == f"{add.context.span_id:016x}"
    assert [s["name"] for s in G.nodes[node]["steps"]] == ["prompt", "response", "parse"]
    assert G.has_edge(node, facts) and G.nodes[node]["category"] == "extraction"
    # The write is the operation node its span made: named as the conventions name that span.
    writer = f"op:{add.context.trace_id:032x}:{create[MemTraceStage.ID]}"
    assert G.has_edge(writer, f"mem0:{record}@1") and G.nodes[writer]["span_name"] == "create_memory"
    assert G.nodes[writer]["stage_of"] == f"{add.context.span_id:016x}"


def test_stage_spans_switch_keeps_the_older_shape(tracer_provider: Any, memory: Any, llm_server: Any,
                                                  span_exporter: InMemorySpanExporter,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMTRACE_MEM0_STAGE_SPANS", "true")
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    finally:
        instrumentor.uninstrument()
    spans = spans_by_name(span_exporter)
    (add,) = spans["mem0.add"]
    expected = {"mem0.add.extract", "mem0.add.search", "mem0.create"}
    if mem0_generation() == 1:
        expected.add("mem0.add.decide")
    assert expected <= set(spans) and not stages_of(add)
    for name in expected:  # every step of the pipeline is a child of add, even in mem0's worker thread
        assert all(s.parent is not None and s.parent.span_id == add.context.span_id for s in spans[name])


def test_record_metadata_carries_the_writer(instrumented: Any, memory: Any, llm_server: Any,
                                             span_exporter: InMemorySpanExporter) -> None:
    record = add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    (add,) = spans_by_name(span_exporter)["mem0.add"]
    (create,) = stages_of(add)["mem0.create"]
    metadata = memory.get(record)["metadata"]
    assert metadata[RecordMetadata.VARIABLE] == f"mem0:{record}@1"
    # The record names the span its write is an event of; the graph makes the write its writer.
    assert metadata[RecordMetadata.TRACEPARENT].split("-")[2] == f"{add.context.span_id:016x}"
    G = build_graph(record_from_readable(s) for s in span_exporter.get_finished_spans())
    assert list(G.predecessors(f"mem0:{record}@1")) == [
        f"op:{add.context.trace_id:032x}:{create[MemTraceStage.ID]}"]


def test_update_then_delete_are_versions(instrumented: Any, memory: Any, llm_server: Any,
                                         span_exporter: InMemorySpanExporter) -> None:
    record = add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    memory.update(record, "Moved to Porto")
    updated = memory.get(record)["metadata"][RecordMetadata.VARIABLE]
    memory.delete(record)
    spans = spans_by_name(span_exporter)
    (update,), (delete,) = spans["mem0.update"], spans["mem0.delete"]
    assert update.name == "update_memory"
    assert update.attributes[GenAI.MEMORY_RECORD_ID] == record
    assert update.attributes[MemTrace.INPUTS] == (f"mem0:{record}@1",)
    assert update.attributes[MemTrace.OUTPUTS] == (f"mem0:{record}@2",) == (updated,)
    assert delete.attributes[MemTrace.DELETED] == (f"mem0:{record}@3",)
    assert [link.context.span_id for link in delete.links] == [update.context.span_id]
    G = build_graph(record_from_readable(s) for s in span_exporter.get_finished_spans())
    versions = [f"mem0:{record}@{v}" for v in (1, 2, 3)]
    assert G.has_edge(versions[0], versions[1]) and G.has_edge(versions[1], versions[2])


@pytest.mark.skipif("mem0_generation() != 1", reason="1.x only: the LLM decides UPDATE/DELETE inside add")
def test_v1_scripted_decisions_change_records_inside_add(instrumented: Any, memory: Any, llm_server: Any,
                                                         span_exporter: InMemorySpanExporter) -> None:
    record = add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    llm_server.enqueue(*add_replies(["Moved to Porto"], [decision("UPDATE", "Moved to Porto", "0")]))
    memory.add("Actually I moved to Porto.", user_id=USER)
    spans = spans_by_name(span_exporter)
    assert "mem0.update" not in spans  # an event of the add that decided it
    (update,) = stages_of(spans["mem0.add"][-1])["mem0.update"]
    decide = stages_of(spans["mem0.add"][-1])["mem0.add.decide"][-1]
    decisions = next(v for v in decide[MemTrace.OUTPUTS] if v.startswith("mem0.decisions"))
    assert set(update[MemTrace.INPUTS]) == {decisions, f"mem0:{record}@1"}
    assert update[MemTrace.OUTPUTS] == (f"mem0:{record}@2",)
    assert (update[GenAI.OPERATION_NAME], update[GenAI.MEMORY_RECORD_ID]) == ("update_memory", record)
    assert f"mem0:{record}@1" in decide[MemTrace.INPUTS]  # the existing memory it was shown
    # The add span links the record's writer (the first add) once (the decision, the search and the
    # update all read it).
    links = [link.context.span_id for link in spans["mem0.add"][-1].links]
    assert links.count(spans["mem0.add"][0].context.span_id) == 1


def test_search_links_to_the_writer_and_records_scores(instrumented: Any, memory: Any, llm_server: Any,
                                                       span_exporter: InMemorySpanExporter) -> None:
    record = add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    found = memory.search("Where did the user move?", **scope(user_id=USER))["results"]
    (search,) = spans_by_name(span_exporter)["mem0.search"]
    (add,) = spans_by_name(span_exporter)["mem0.add"]  # its create_memory event wrote the record
    assert [r["id"] for r in found] == [record]
    assert search.name == "search_memory"
    # A search does not apply to the record it found: no record id (the conventions keep it for a
    # create, update or delete of one record), the count instead.
    assert GenAI.MEMORY_RECORD_ID not in search.attributes
    assert search.attributes[GenAI.MEMORY_RECORD_COUNT] == 1
    assert [link.context.span_id for link in search.links] == [add.context.span_id]


def test_errors_mark_the_span_and_reraise(instrumented: Any, memory: Any,
                                          span_exporter: InMemorySpanExporter) -> None:
    with pytest.raises(Exception) as raised:
        memory.update("00000000-0000-0000-0000-000000000000", "nothing")
    (update,) = spans_by_name(span_exporter)["mem0.update"]
    assert update.status.status_code is StatusCode.ERROR
    assert update.attributes[GenAI.ERROR_TYPE] == type(raised.value).__qualname__


def test_async_memory_shares_the_lifecycle(instrumented: Any, llm_server: Any, tmp_path: Any,
                                           span_exporter: InMemorySpanExporter) -> None:
    from mem0 import AsyncMemory

    async def run() -> str:
        memory = await AsyncMemory.from_config(config(llm_server.base_url, str(tmp_path))) \
            if asyncio.iscoroutinefunction(AsyncMemory.from_config) \
            else AsyncMemory.from_config(config(llm_server.base_url, str(tmp_path)))
        llm_server.enqueue(*add_replies(["Moved to Lisbon"]))
        added = await memory.add("I moved to Lisbon.", user_id=USER)
        await memory.search("Where did the user move?", **scope(user_id=USER))
        return added["results"][0]["id"]

    record = asyncio.run(run())
    spans = spans_by_name(span_exporter)
    (add,) = spans["mem0.add"]
    (create,) = stages_of(add)["mem0.create"]
    assert create[MemTrace.OUTPUTS] == (f"mem0:{record}@1",)
    assert spans["mem0.search"][0].attributes[GenAI.MEMORY_RECORD_COUNT] == 1


def _patched_state(memory: Any) -> dict[str, Any]:
    """Every attribute the instrumentor may patch, as the classes hold them (by identity: a
    wrapt wrapper compares equal to what it wraps)."""
    from mem0.memory import main

    state: dict[str, Any] = {"submit": id(concurrent.futures.ThreadPoolExecutor.__dict__["submit"])}
    for cls in (main.Memory, main.AsyncMemory, type(memory.vector_store), type(memory.llm)):
        state.update({f"{cls.__qualname__}.{k}": id(v) for k, v in cls.__dict__.items() if callable(v)})
        state[f"{cls.__qualname__}.keys"] = sorted(cls.__dict__)
    return state


def test_uninstrument_restores_exactly_and_reinstruments(tracer_provider: Any, memory: Any, llm_server: Any,
                                                         span_exporter: InMemorySpanExporter) -> None:
    before = _patched_state(memory)
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")  # installs the store/LLM hooks
    assert _patched_state(memory) != before
    instrumentor.uninstrument()
    assert _patched_state(memory) == before
    span_exporter.clear()
    add_fact(memory, llm_server, "Has a dog", "I have a dog.")
    assert span_exporter.get_finished_spans() == ()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        add_fact(memory, llm_server, "Likes jazz", "I like jazz.")
        assert "mem0.add" in spans_by_name(span_exporter)
    finally:
        instrumentor.uninstrument()
    assert _patched_state(memory) == before


def test_suppressed_instrumentation_makes_no_span(instrumented: Any, memory: Any, llm_server: Any,
                                                  span_exporter: InMemorySpanExporter) -> None:
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    with suppress_instrumentation():
        record = add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
        memory.search("Where?", **scope(user_id=USER))
    assert span_exporter.get_finished_spans() == ()
    assert not memory.get(record).get("metadata")  # no lineage written either


def test_reads_and_delete_all(instrumented: Any, memory: Any, llm_server: Any,
                              span_exporter: InMemorySpanExporter) -> None:
    first = add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    second = add_fact(memory, llm_server, "Has a dog called Pepper", "I have a dog called Pepper.")
    memory.get(first)
    listed = memory.get_all(**scope(user_id=USER))["results"]
    history = memory.history(first)
    memory.delete_all(user_id=USER)
    spans = spans_by_name(span_exporter)
    assert spans["mem0.get"][0].attributes[MemTrace.INPUTS] == (f"mem0:{first}@1",)
    assert set(spans["mem0.get_all"][0].attributes[MemTrace.INPUTS]) == {f"mem0:{r['id']}@1" for r in listed}
    assert spans["mem0.history"][0].attributes[GenAI.MEMORY_RECORD_COUNT] == len(history)
    (delete_all,) = spans["mem0.delete_all"]
    deletes = [s for s in spans["mem0.delete"] if s.parent.span_id == delete_all.context.span_id]
    assert sorted(d.attributes[MemTrace.DELETED][0] for d in deletes) == sorted(
        [f"mem0:{first}@2", f"mem0:{second}@2"])
    # delete_all removes what its filters select, not the store: not a delete_memory span (which the
    # conventions read as "delete all" without a record id); each removal is one, with its record id.
    assert GenAI.OPERATION_NAME not in delete_all.attributes and delete_all.kind is SpanKind.INTERNAL
    assert sorted(d.attributes[GenAI.MEMORY_RECORD_ID] for d in deletes) == sorted([first, second])
    assert {d.name for d in deletes} == {"delete_memory"}


def test_content_capture_puts_query_and_records_on_search(
    monkeypatch: pytest.MonkeyPatch, tracer_provider: Any, memory: Any, llm_server: Any,
    span_exporter: InMemorySpanExporter,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)  # capture is decided here, once
    try:
        record = add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
        memory.search("Where did the user move?", **scope(user_id=USER))
    finally:
        instrumentor.uninstrument()
    spans = spans_by_name(span_exporter)
    (search,) = spans["mem0.search"]
    assert search.attributes[GenAI.MEMORY_QUERY_TEXT] == "Where did the user move?"
    (item,) = json.loads(search.attributes[GenAI.MEMORY_RECORDS])
    assert (item["id"], item["content"]) == (record, "Moved to Lisbon") and isinstance(item["score"], float)
    # The records a create and an upsert stored: the same id the search returns, so a reader of the
    # GenAI keys alone can tie the search to the create (the opt-in attribute covers both).
    (add,) = spans["mem0.add"]
    (create,) = stages_of(add)["mem0.create"]  # the create_memory stage event of the add
    for stored in (create, add.attributes):
        records = json.loads(stored[GenAI.MEMORY_RECORDS])
        assert records == [{"id": record, "content": "Moved to Lisbon"}]
    assert create[GenAI.MEMORY_RECORD_ID] == record


def test_content_is_off_by_default(no_content_env: None, instrumented: Any, memory: Any, llm_server: Any,
                                   span_exporter: InMemorySpanExporter) -> None:
    add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    memory.search("Where did the user move?", **scope(user_id=USER))
    keys = {k for s in span_exporter.get_finished_spans() for k in s.attributes}
    assert not keys & {GenAI.MEMORY_QUERY_TEXT, GenAI.MEMORY_RECORDS, MemTrace.VARIABLE_CONTENTS}


def test_app_message_ids_name_the_message_variables(instrumented: Any, memory: Any, llm_server: Any,
                                                    span_exporter: InMemorySpanExporter) -> None:
    llm_server.enqueue(*add_replies(["Moved to Lisbon"]))
    memory.add([{"role": "user", "content": "I moved to Lisbon."}], user_id=USER,
               metadata={MESSAGE_IDS_KEY: ["D3:5"]})
    llm_server.enqueue(*add_replies(["Has a dog"]))
    memory.add("I have a dog.", user_id=USER, metadata={MESSAGE_IDS_KEY: ["a", "b"]})  # wrong length: ignored
    first, second = spans_by_name(span_exporter)["mem0.add"]
    assert first.attributes[MemTrace.OUTPUTS] == ("msg:D3:5@1",)
    (hashed,) = second.attributes[MemTrace.OUTPUTS]
    assert hashed.startswith("msg:mem0-")
    # the evidence id the app records is the message variable the graph holds
    graph = build_graph([record_from_readable(s) for s in span_exporter.get_finished_spans()])
    assert "msg:D3:5@1" in graph


def test_each_search_scope_writes_its_own_context(instrumented: Any, memory: Any, llm_server: Any,
                                                  span_exporter: InMemorySpanExporter) -> None:
    add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    question = "Where did the user move?"
    memory.search(question, **scope(user_id=USER))
    memory.search(question, **scope(user_id="bob"))
    searches = spans_by_name(span_exporter)["mem0.search"]
    contexts = [next(v for v in s.attributes[MemTrace.OUTPUTS] if v.startswith("context:")) for s in searches]
    assert contexts == [f"{context_name(question, user_id=user)}@1" for user in (USER, "bob")]
    assert context_name(question, user_id=USER) != context_name(question)


def test_a_remote_store_is_the_server(memory: Any) -> None:
    """``server.address`` / ``server.port`` come from mem0's own vector-store configuration: set for a
    remote qdrant (host and port, or a URL), absent for the local one the other tests use."""
    from types import SimpleNamespace

    from mem0.configs.base import MemoryConfig

    from memtrace_otel.instrument.mem0.lifecycle import server_of

    def configured(**store: Any) -> Any:
        store = {"collection_name": "memories", "embedding_model_dims": 8, **store}
        return SimpleNamespace(config=MemoryConfig(vector_store={"provider": "qdrant", "config": store}))

    assert server_of(configured(host="qdrant.internal", port=6333)) == ("qdrant.internal", 6333)
    assert server_of(configured(url="https://vectors.example.com:7000", api_key="k")) == (
        "vectors.example.com", 7000)
    assert server_of(memory) == (None, None)


def test_stage_variables_stay_out_of_the_registry(instrumented: Any, memory: Any, llm_server: Any,
                                                  span_exporter: InMemorySpanExporter) -> None:
    # A stage's prompt, response and parsed lines are named by its stage id: version 1, never written
    # again, so the version registry (bounded, for names written again) does not keep them.
    record = add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    (add,) = spans_by_name(span_exporter)["mem0.add"]
    own = [v for stage in stages_of(add).values() for event in stage
           for v in event.get(MemTrace.OUTPUTS, ()) if not v.startswith(("mem0:", "msg:"))]
    assert own and all(v.endswith("@1") for v in own)
    registry = instrumented.memory_tracer.registry
    assert all(registry.latest(v.rsplit("@", 1)[0]) is None for v in own)
    assert registry.latest(f"mem0:{record}").id == f"mem0:{record}@1"


def test_add_without_inference_writes_each_record_from_its_message(
        instrumented: Any, memory: Any, span_exporter: InMemorySpanExporter) -> None:
    messages = [{"role": "user", "content": "I moved to Lisbon."},
                {"role": "user", "content": "I have a dog called Pepper."}]
    memory.add(messages, user_id=USER, infer=False)
    (add,) = spans_by_name(span_exporter)["mem0.add"]
    creates = stages_of(add)["mem0.create"]
    assert len(creates) == 2
    # Each record's write stage reads the one message its text is, not both (CreateSpec.begin's rule).
    read = [create[MemTrace.INPUTS] for create in creates]
    assert all(len(inputs) == 1 for inputs in read) and read[0] != read[1]
    assert {create[GenAI.MEMORY_RECORD_ID] for create in creates} == {
        r["id"] for r in memory.get_all(**scope(user_id=USER))["results"]}


def test_create_memory_outside_an_add_keeps_its_own_span(instrumented: Any, memory: Any,
                                                         span_exporter: InMemorySpanExporter) -> None:
    # Inside an add, _create_memory passes through and its insert is the add's write stage (flat.FlatWrite
    # tells a one-record create by its arguments); called on its own, it is an operation of its own.
    record_id = memory._create_memory("Lives in Porto", {}, {"user_id": USER})
    (create,) = spans_by_name(span_exporter)["mem0.create"]
    assert "mem0.add" not in spans_by_name(span_exporter) and not stages_of(create)
    assert create.attributes[GenAI.OPERATION_NAME] == "create_memory"
    assert create.attributes[GenAI.MEMORY_RECORD_ID] == record_id
    assert list(create.attributes[MemTrace.OUTPUTS]) == [f"mem0:{record_id}@1"]
    metadata = memory.get(record_id)["metadata"] or {}
    assert metadata.get(RecordMetadata.VARIABLE) == f"mem0:{record_id}@1"
    assert f"{create.context.span_id:016x}" in metadata.get(RecordMetadata.TRACEPARENT, "")


def _own_descriptors(span: Any) -> dict[str, tuple[str, str, str]]:
    """The descriptors of the variables an LLM stage of ``span`` writes under its stage id: id -> (kind,
    size, hash), from the joined ``memtrace.variables`` of its stage events."""
    found = {}
    for name, events in stages_of(span).items():
        if name not in ("mem0.add.extract", "mem0.add.decide"):
            continue
        for event in events:
            stage_id = event[MemTraceStage.ID]
            for descriptor in event[MemTrace.VARIABLES]:
                kind, size, digest, variable_id = descriptor.split(" ", 3)
                if stage_id in variable_id:
                    found[variable_id] = (kind, size, digest)
    return found


def test_own_variables_carry_no_hash_when_nothing_reads_one(no_content_env: None, instrumented: Any,
                                                            memory: Any, llm_server: Any,
                                                            span_exporter: InMemorySpanExporter) -> None:
    # Content capture off, no store by reference: a hash of the prompt, response or parsed lines
    # would be read by nothing (docs/conventions.md, "Stages as events"); kind and size stay.
    add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    (add,) = spans_by_name(span_exporter)["mem0.add"]
    own = _own_descriptors(add)
    kinds = sorted(kind for kind, _, _ in own.values())
    stages = 2 if mem0_generation() == 1 else 1
    assert kinds == sorted(["prompt", "response", "facts"] * stages), own
    assert all(digest == "" and int(size) > 0 for _, size, digest in own.values()), own
    # The message the add wrote has none either (nothing compares a message's hash), its kind and size
    # kept; the record it wrote keeps its hash (a retrieval's results are compared by it).
    (message,) = add.attributes[MemTrace.VARIABLES]
    message_kind, message_size, digest, message_id = message.split(" ", 3)
    assert (message_kind, int(message_size), digest) == ("message", len("I moved to Lisbon."), ""), message
    others = [d for e in stages_of(add).values() for s in e for d in s.get(MemTrace.VARIABLES, ())
              if d.split(" ", 3)[3] not in own]
    assert others and all(len(d.split(" ", 3)[2]) == 16 and d.startswith("memory_unit ") for d in others), \
        others
    # The graph reads the empty hash as none, the kind and size as written.
    graph = build_graph(record_from_readable(s) for s in span_exporter.get_finished_spans())
    for variable_id, (kind, size, _) in {**own, message_id: (message_kind, message_size, "")}.items():
        data = graph.nodes[variable_id]
        assert (data["kind"], data["size"], data["hash"]) == (kind, int(size), ""), data


def test_own_variables_are_hashed_when_stored_by_reference(llm_server: Any, tmp_path: Any,
                                                           span_exporter: InMemorySpanExporter,
                                                           tracer_provider: Any) -> None:
    # With a store by reference the hash is the text's address: each own variable is hashed and
    # uploaded, and resolves back to its text from the store.
    from mem0 import Memory

    from memtrace_otel import MemoryTracer
    from memtrace_otel.content import open_store
    from memtrace_otel.wire import content_hash

    tracer = MemoryTracer(tracer_provider, capture_content=False, upload_base_path=str(tmp_path / "store"))
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, memory_tracer=tracer)
    memory = Memory.from_config(config(llm_server.base_url, str(tmp_path / "mem0")))
    try:
        add_fact(memory, llm_server, "Moved to Lisbon", "I moved to Lisbon.")
    finally:
        instrumentor.uninstrument()
        getattr(memory, "close", lambda: None)()
    assert tracer.force_flush()
    (add,) = spans_by_name(span_exporter)["mem0.add"]
    own = _own_descriptors(add)
    assert own and all(len(digest) == 16 for _, _, digest in own.values()), own
    store = open_store(str(tmp_path / "store"))
    for variable_id, (kind, size, digest) in own.items():
        text = store.read(digest)
        assert content_hash(text) == digest and len(text) == int(size), (variable_id, kind)
    assert any(kind == "prompt" and "Lisbon" in store.read(digest) for kind, _, digest in own.values())
    # The message too: hashed, and its text in the store under that hash.
    (message,) = add.attributes[MemTrace.VARIABLES]
    kind, size, digest, _ = message.split(" ", 3)
    assert kind == "message" and store.read(digest) == "I moved to Lisbon.", message


def test_the_record_less_variants_leave_out_what_they_say(no_content_env: None, instrumented: Any,
                                                          memory: Any, llm_server: Any,
                                                          span_exporter: InMemorySpanExporter) -> None:
    # benchmarks/performance/mem0_record_less.py measures what leaving each thing out saves: a variant
    # that left nothing out would measure zero and say "no saving". Each must change what an add records.
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "performance"))
    import mem0_record_less as record_less

    calls = iter(range(100))

    def recorded(variant: str | None) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
        span_exporter.clear()
        undo = record_less._apply(record_less.VARIANTS[variant][0]()) if variant else []
        n = next(calls)  # facts of their own: mem0 2.x stores no memory twice
        try:
            add_fact(memory, llm_server, f"Moved to city {n}", f"I moved to city {n}.")
            add_fact(memory, llm_server, f"Has {n} dogs", f"I have {n} dogs.")  # its search finds the first
        finally:
            record_less._apply(undo)
        add = spans_by_name(span_exporter)["mem0.add"][-1]
        return add, stages_of(add)

    as_is, stages = recorded(None)
    llm = [e for name in ("mem0.add.extract", "mem0.add.decide") for e in stages.get(name, [])]
    assert llm and stages["mem0.add.search"] and all(GenAI.REQUEST_MODEL in e for e in llm)
    assert all(digest == "" for _, _, digest in _own_descriptors(as_is).values())

    add, _ = recorded("own-hash")
    assert all(len(digest) == 16 for _, _, digest in _own_descriptors(add).values())
    add, _ = recorded("no-prompt-text")
    assert all(size == "0" for kind, size, _ in _own_descriptors(add).values() if kind == "prompt")
    _, found = recorded("no-llm-genai")
    assert not any(GenAI.REQUEST_MODEL in e for name in ("mem0.add.extract", "mem0.add.decide")
                   for e in found.get(name, []))
    _, found = recorded("no-events")
    assert not found
    _, found = recorded("no-llm-search-stages")
    assert found and not {"mem0.add.extract", "mem0.add.decide", "mem0.add.search"} & set(found)
    if mem0_generation() == 1:  # the decision reads the records the search found, unless left out
        records = {i for e in stages["mem0.add.search"] for i in e[MemTrace.INPUTS] if i.startswith("mem0:")}
        assert records and records <= set(stages["mem0.add.decide"][0][MemTrace.INPUTS])
        _, found = recorded("no-reread")
        assert not records & set(found["mem0.add.decide"][0][MemTrace.INPUTS])


def test_the_remainder_variants_leave_out_what_they_say(no_content_env: None, instrumented: Any,
                                                        memory: Any, llm_server: Any,
                                                        span_exporter: InMemorySpanExporter) -> None:
    # mem0_record_less.py --base no-llm-search-stages: each variant, on top of the LLM and search
    # stages off, takes one part of what an add still records (a part left in would measure zero).
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "performance"))
    import mem0_record_less as record_less

    calls = iter(range(100))

    def recorded(variant: str | None) -> tuple[list[Any], dict[str, list[dict[str, Any]]], dict[str, Any]]:
        span_exporter.clear()
        patches = record_less.VARIANTS["no-llm-search-stages"][0]()
        undo = record_less._apply(patches + (record_less.VARIANTS[variant][0]() if variant else []))
        n = next(calls)  # a fact of its own: mem0 2.x stores no memory twice
        try:
            record = add_fact(memory, llm_server, f"Moved to town {n}", f"I moved to town {n}.")
        finally:
            record_less._apply(list(reversed(undo)))
        adds = spans_by_name(span_exporter).get("mem0.add", [])
        others = [s for s in span_exporter.get_finished_spans() if s not in adds]
        return others, stages_of(adds[-1]) if adds else {}, dict(adds[-1].attributes if adds else {}) | {
            "metadata": memory.get(record)["metadata"] or {}}

    others, stages, add = recorded(None)
    assert not others and set(stages) == {"mem0.create"} and stages["mem0.create"][0][MemTrace.OUTPUTS]
    assert add["metadata"].get(RecordMetadata.VARIABLE) and add[GenAI.OPERATION_NAME] == "upsert_memory"
    assert add[GenAI.MEMORY_RECORD_COUNT] == 1 and add.get(MemTrace.OUTPUTS)  # its message variable

    _, stages, add = recorded("no-lineage")
    assert stages["mem0.create"] and RecordMetadata.VARIABLE not in add["metadata"]
    _, stages, _ = recorded("no-records")
    assert stages["mem0.create"] and not stages["mem0.create"][0].get(MemTrace.OUTPUTS)
    _, stages, add = recorded("no-write-stage")
    assert not stages and RecordMetadata.VARIABLE not in add["metadata"]
    _, _, add = recorded("no-message")
    assert not add.get(MemTrace.OUTPUTS)
    _, _, add = recorded("no-add-end")
    assert GenAI.MEMORY_RECORD_COUNT not in add
    _, _, add = recorded("no-add-genai")
    assert GenAI.OPERATION_NAME not in add and add[MemTrace.OPERATION_NAME] == "mem0.add"
    for variant in ("no-scoped-writes", "no-context", "no-scope"):  # no write stage, no span of its own
        others, stages, add = recorded(variant)
        assert not others and not stages and add[MemTrace.OPERATION_NAME] == "mem0.add", variant
    others, stages, add = recorded("no-add-call")
    assert not others and not stages and MemTrace.OPERATION_NAME not in add


def _record_less() -> Any:
    """benchmarks/performance/mem0_record_less.py, whose variants are the instrumentor's code before."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "performance"))
    import mem0_record_less

    return mem0_record_less


def _two_stores(llm_server: Any, tmp_path: Any) -> list[Any]:
    """Two mem0 `Memory`s on collections of their own: a span template shared across stores would name
    the wrong one."""
    from mem0 import Memory

    memories = []
    for collection in ("alpha", "beta"):
        settings = config(llm_server.base_url, str(tmp_path / collection))
        settings["vector_store"]["config"]["collection_name"] = collection
        memories.append(Memory.from_config(settings))
    return memories


def _close_all(memories: list[Any]) -> None:
    for memory in memories:
        close = getattr(memory, "close", None)
        if callable(close):
            close()


def test_the_add_span_from_its_template_is_the_generic_one(no_content_env: None, instrumented: Any,
                                                            llm_server: Any, tmp_path: Any,
                                                            span_exporter: InMemorySpanExporter) -> None:
    # AddSpec starts each add from a template per (tracer, GenAI operation, store, server) and sets its
    # count and outcome with the lineage (Operation._closing); mem0_record_less.py's generic-add is the
    # code before. Two stores and both infer values: a template shared across any of them would name
    # the wrong store or operation.
    record_less = _record_less()
    memories = _two_stores(llm_server, tmp_path)
    calls = iter(range(100))

    def add_span(memory: Any, infer: bool, generic: bool) -> Any:
        span_exporter.clear()
        undo = record_less._apply(record_less.VARIANTS["generic-add"][0]() if generic else [])
        n = next(calls)  # a fact of its own: mem0 2.x stores no memory twice
        try:
            if infer:
                llm_server.enqueue(*add_replies([f"Moved to town {n}"]))
            memory.add(f"I moved to town {n}.", user_id=USER, infer=infer)
        finally:
            record_less._apply(list(reversed(undo)))
        (add,) = spans_by_name(span_exporter)["mem0.add"]
        return add

    def shape(span: Any) -> tuple[Any, ...]:
        attributes = dict(span.attributes)
        # The message and record ids differ between two adds (their texts do): their number does not.
        ids = {k: len(attributes.pop(k, ())) for k in (MemTrace.OUTPUTS, MemTrace.VARIABLES)}
        return span.name, span.kind, list(span.attributes), attributes, ids, [e.name for e in span.events]

    for memory in memories * 2:  # the second time round, from the templates made the first
        for infer in (True, False):
            lean, generic = add_span(memory, infer, False), add_span(memory, infer, True)
            assert shape(lean) == shape(generic)
            assert lean.attributes[GenAI.MEMORY_STORE_ID] == memory.config.vector_store.config.collection_name
            assert lean.attributes[GenAI.OPERATION_NAME] == ("upsert_memory" if infer else "create_memory")
            assert lean.attributes[GenAI.MEMORY_RECORD_COUNT] == 1
    _close_all(memories)


def test_the_search_span_from_its_template_is_the_generic_one(no_content_env: None, instrumented: Any,
                                                               llm_server: Any, tmp_path: Any,
                                                               span_exporter: InMemorySpanExporter) -> None:
    # SearchSpec starts each search from a template per (tracer, GenAI operation, record id, store, server),
    # as AddSpec does; mem0_record_less.py's generic-search is the code before. Two stores, two scopes and
    # both of each twice: a template shared across stores would name the wrong one.
    record_less = _record_less()
    memories = _two_stores(llm_server, tmp_path)
    for memory in memories:
        collection = memory.config.vector_store.config.collection_name
        for user in (USER, "bob"):
            llm_server.enqueue(*add_replies([f"{user} moved to {collection}"]))
            memory.add(f"I moved to {collection}.", user_id=user)

    def search_span(memory: Any, user: str, generic: bool) -> Any:
        span_exporter.clear()
        undo = record_less._apply(record_less.VARIANTS["generic-search"][0]() if generic else [])
        try:
            memory.search("Where did the user move?", **scope(user_id=user))
        finally:
            record_less._apply(list(reversed(undo)))
        (search,) = spans_by_name(span_exporter)["mem0.search"]
        return search

    def shape(span: Any) -> tuple[Any, ...]:
        attributes = dict(span.attributes)
        # The context a search writes is one version further each time: its id's version differs.
        versioned = {k: [v.rsplit("@", 1)[0] for v in attributes.pop(k, ())]
                     for k in (MemTrace.OUTPUTS, MemTrace.VARIABLES)}
        links = [(link.context, dict(link.attributes or {})) for link in span.links]
        return (span.name, span.kind, list(span.attributes), attributes, versioned, links,
                [e.name for e in span.events], span.status.status_code)

    for memory in memories * 2:  # the second time round, from the templates made the first
        for user in (USER, "bob"):
            lean, generic = search_span(memory, user, False), search_span(memory, user, True)
            assert shape(lean) == shape(generic)
            assert lean.attributes[GenAI.MEMORY_STORE_ID] == memory.config.vector_store.config.collection_name
            assert lean.attributes[GenAI.OPERATION_NAME] == "search_memory"
            assert lean.links  # the record its add wrote, linked
    _close_all(memories)
