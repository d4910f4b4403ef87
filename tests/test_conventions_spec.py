"""The spans memtrace emits, checked against the GenAI conventions' own YAML.

The excerpt of ``model/gen-ai/spans.yaml`` and ``registry.yaml`` in ``tests/fixtures/semconv-genai/``
(source URLs and commits in their headers; never fetched at test time) says, for the memory-client,
retrieval and inference spans, the span name, the span kind, each attribute's requirement level and
each attribute's type. A realistic run (``tests/scenario.py``: creates, an update, deletes of one and of
several records, memory searches, a retrieval from a remote store, a chat step, a failing operation),
with content capture off and on, must follow them: required keys present, conditionally required ones
exactly when their condition holds, opt-in ones only with capture, every GenAI key of the type the
registry gives, and no GenAI key the span's definition does not list unless ``docs/conventions.md``
names it as the project's own use.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML: in the test environment through [semantic] (tokenizers -> huggingface_hub)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.graph import build_graph
from memtrace_otel.semconv import GENAI_CALL_OPERATIONS, MEMORY_OPERATIONS, GenAI, GenAIOperation
from memtrace_otel.spans.model import record_from_readable

from graph_compare import assert_same_graph
from scenario import run_more, run_pipeline

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "semconv-genai"
MEMORY, RETRIEVAL, INFERENCE = "gen_ai.memory.client", "gen_ai.retrieval.client", "gen_ai.inference.client"

PROJECT_USE: dict[str, frozenset[str]] = {
    # docs/conventions.md, "Attributes" (source column) and "Known differences": why each is there.
    MEMORY: frozenset({GenAI.REQUEST_MODEL, GenAI.RESPONSE_MODEL, GenAI.USAGE_INPUT_TOKENS,
                       GenAI.USAGE_OUTPUT_TOKENS, GenAI.DATA_SOURCE_ID, GenAI.RETRIEVAL_TOP_K}),
    RETRIEVAL: frozenset({GenAI.MEMORY_STORE_ID, GenAI.MEMORY_RECORD_COUNT}),
    INFERENCE: frozenset({GenAI.MEMORY_STORE_ID}),
}
"""GenAI keys memtrace writes on a span whose definition does not list them (project use, documented)."""


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((FIXTURES / name).read_text(encoding="utf-8"))


def spec_spans() -> dict[str, dict[str, Any]]:
    """Span type -> {"kind", "name", "attributes": {key: requirement level}}, ref_groups expanded."""
    document = _load("spans.yaml")
    groups = {g["id"]: g["attributes"] for g in document["attribute_groups"]}

    def refs(attributes: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for attribute in attributes:
            if "ref_group" in attribute:
                yield from refs(groups[attribute["ref_group"]])
            else:
                yield attribute

    spans = {}
    for span in document["spans"]:
        levels: dict[str, Any] = {}
        for attribute in refs(span["attributes"]):
            if "requirement_level" in attribute:  # a later ref without a level keeps the earlier one
                levels[attribute["ref"]] = attribute["requirement_level"]
            else:
                levels.setdefault(attribute["ref"], "recommended")
        spans[span["type"]] = {"kind": span["kind"], "name": span["name"]["note"], "attributes": levels}
    return spans


def registry_types() -> dict[str, Any]:
    return {a["key"]: a["type"] for a in _load("registry.yaml")["attributes"]}


def level(requirement: Any) -> str:
    """``required``, ``recommended``, ``opt_in`` or ``conditionally_required``."""
    return requirement if isinstance(requirement, str) else next(iter(requirement))


def of_type(value: Any, declared: Any) -> bool:
    if isinstance(declared, dict):  # an enum: the registry's members (open enums allow others)
        return isinstance(value, str) and value in {m["value"] for m in declared["members"]}
    if declared == "string":
        return isinstance(value, str)
    if declared == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if declared == "double":
        return isinstance(value, float)
    if declared == "boolean":
        return isinstance(value, bool)
    if declared == "any":  # structured, or a JSON string on spans where the SDK takes no structure
        return not isinstance(value, str) or _is_json(value)
    raise AssertionError(f"type {declared!r} not handled by this test")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def span_type(span: ReadableSpan) -> str | None:
    operation = (span.attributes or {}).get(GenAI.OPERATION_NAME)
    if operation in MEMORY_OPERATIONS:
        return MEMORY
    if operation == GenAIOperation.RETRIEVAL:
        return RETRIEVAL
    if operation in GENAI_CALL_OPERATIONS:
        return INFERENCE
    return None


def expected_name(kind: str, attributes: dict[str, Any]) -> str:
    """The name the span definition's note gives, the unknown parts left out."""
    operation = attributes[GenAI.OPERATION_NAME]
    suffix = {MEMORY: None, RETRIEVAL: attributes.get(GenAI.DATA_SOURCE_ID),
              INFERENCE: attributes.get(GenAI.REQUEST_MODEL)}[kind]
    return f"{operation} {suffix}" if suffix else operation


def _emitted(capture: bool) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = run_pipeline(provider, capture_content=capture)
    run_more(mt, provider)
    provider.shutdown()
    return list(exporter.get_finished_spans())


def test_the_fixture_says_what_the_spec_says() -> None:
    """The excerpt parses into the three span definitions with the levels the spec gives them."""
    spans = spec_spans()
    assert set(spans) == {MEMORY, RETRIEVAL, INFERENCE}
    memory = spans[MEMORY]["attributes"]
    assert level(memory[GenAI.OPERATION_NAME]) == "required"
    assert level(memory[GenAI.MEMORY_RECORD_ID]) == "conditionally_required"
    assert level(memory[GenAI.MEMORY_RECORDS]) == level(memory[GenAI.MEMORY_QUERY_TEXT]) == "opt_in"
    assert level(memory[GenAI.SERVER_PORT]) == "conditionally_required"
    assert level(spans[INFERENCE]["attributes"][GenAI.PROVIDER_NAME]) == "required"
    assert "`{gen_ai.operation.name}`" in spans[MEMORY]["name"]
    assert "`{gen_ai.operation.name} {gen_ai.request.model}`" in spans[INFERENCE]["name"]
    assert "`{gen_ai.operation.name} {gen_ai.data_source.id}`" in spans[RETRIEVAL]["name"]
    assert registry_types()[GenAI.MEMORY_RECORD_COUNT] == "int"


@pytest.mark.parametrize("capture", [False, True], ids=["content-off", "content-on"])
def test_emitted_spans_follow_the_spec(capture: bool) -> None:
    spans, types = spec_spans(), registry_types()
    checked: dict[str, int] = {}
    for span in _emitted(capture):
        kind = span_type(span)
        if kind is None:
            continue
        checked[kind] = checked.get(kind, 0) + 1
        attributes, spec = dict(span.attributes or {}), spans[kind]
        where = f"{span.name!r} ({kind})"
        assert span.kind is SpanKind.CLIENT and spec["kind"] == "client", where
        assert span.name == expected_name(kind, attributes), where
        for key, requirement in spec["attributes"].items():
            if level(requirement) == "required":
                assert key in attributes, f"{where}: required {key} missing"
            if level(requirement) == "opt_in" and not capture:
                assert key not in attributes, f"{where}: opt-in {key} without content capture"
        # Conditionally required: each condition, as the spec words it.
        assert (GenAI.ERROR_TYPE in attributes) == (span.status.status_code is StatusCode.ERROR), where
        if GenAI.SERVER_PORT in attributes:
            assert GenAI.SERVER_ADDRESS in attributes, f"{where}: server.port without server.address"
        for key, value in attributes.items():
            if not key.startswith(("gen_ai.", "server.", "error.")):
                continue
            assert key in spec["attributes"] or key in PROJECT_USE[kind], f"{where}: {key} is not the span's"
            assert key in types, f"{key} missing from the vendored registry excerpt"
            assert of_type(value, types[key]), f"{where}: {key}={value!r} is not {types[key]}"
    assert checked.get(MEMORY, 0) >= 8 and checked.get(RETRIEVAL) == 1 and checked.get(INFERENCE) == 1


def test_record_ids_only_where_the_spec_means_them() -> None:
    """``gen_ai.memory.record.id`` "when the operation applies to a specific memory record": on a
    create, update or delete of one record, never on a search; a delete of several records carries
    their count, so it does not read as the spec's "delete all"."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in _emitted(capture=False):
        attributes = dict(span.attributes or {})
        by_name.setdefault(attributes.get("memtrace.operation.name", ""), []).append(attributes)
    for name in ("extract", "update", "delete"):
        assert all(GenAI.MEMORY_RECORD_ID in a for a in by_name[name]), name
    assert by_name["search"] and all(GenAI.MEMORY_RECORD_ID not in a for a in by_name["search"])
    assert all(a[GenAI.MEMORY_RECORD_COUNT] == 1 for a in by_name["search"])
    (forget,) = by_name["forget"]
    assert (forget[GenAI.OPERATION_NAME], forget.get(GenAI.MEMORY_RECORD_ID)) == ("delete_memory", None)
    assert forget[GenAI.MEMORY_RECORD_COUNT] == 2


def test_stored_records_go_on_creates_and_updates_with_capture(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider, capture_content=True)
    with mt.operation("add", Category.EXTRACTION, gen_ai_operation="create_memory", store_id="s") as op:
        unit = op.write("mem:a", "likes tea", kind=VariableKind.MEMORY_UNIT)
    with mt.operation("upd", Category.UPDATE, gen_ai_operation="update_memory", store_id="s") as op:
        op.update(unit, "likes coffee")
    with mt.operation("del", Category.DELETION, gen_ai_operation="delete_memory", store_id="s") as op:
        op.delete("mem:a")
    spans = {s.attributes["memtrace.operation.name"]: s for s in span_exporter.get_finished_spans()}
    assert json.loads(spans["add"].attributes[GenAI.MEMORY_RECORDS]) == [
        {"id": "mem:a", "content": "likes tea"}]
    assert json.loads(spans["upd"].attributes[GenAI.MEMORY_RECORDS]) == [
        {"id": "mem:a", "content": "likes coffee"}]
    assert GenAI.MEMORY_RECORDS not in spans["del"].attributes  # a delete stores nothing


def test_a_chat_step_is_named_after_its_model(tracer_provider, span_exporter) -> None:
    mt = MemoryTracer(tracer_provider)
    with mt.operation("answer", Category.GENERATION, gen_ai_operation="chat") as op:
        op.record_llm_call(model="gpt-4o-mini", provider="openai")
        op.record_llm_call(model="gpt-4o")  # a second call does not rename the span again
    with mt.operation("offline", Category.GENERATION, gen_ai_operation="chat"):
        pass  # no model called: the name is the operation alone
    with mt.operation("given", Category.GENERATION, gen_ai_operation="chat", model="m1", provider="p"):
        pass
    with mt.operation("mine", Category.GENERATION, gen_ai_operation="chat", span_name="my step") as op:
        op.record_llm_call(model="gpt-4o-mini", provider="openai")
    names = [s.name for s in span_exporter.get_finished_spans()]
    assert names == ["chat gpt-4o-mini", "chat", "chat m1", "my step"]


def test_the_graph_keys_on_attributes_not_span_names() -> None:
    """Renaming spans (as the conventions' names did) changes no node, edge or category of the graph:
    the builder reads ``memtrace.*`` and ``gen_ai.operation.name``, and keeps the name only as
    ``span_name`` to show it."""
    records = [record_from_readable(span) for span in _emitted(capture=True)]
    renamed = [replace(r, name=f"renamed {i}") for i, r in enumerate(records)]
    G, H = build_graph(records), build_graph(renamed)
    assert {n: d["span_name"] for n, d in H.nodes(data=True) if "span_name" in d} != {
        n: d["span_name"] for n, d in G.nodes(data=True) if "span_name" in d}
    for graph in (G, H):
        for _, data in graph.nodes(data=True):
            data.pop("span_name", None)
    assert_same_graph(G, H)
    assert G.number_of_nodes() > 30
