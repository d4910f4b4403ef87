"""The mem0 instrumentor's parts that need no mem0: class hooks, lineage read from payloads.

mem0 itself is tested in tests/mem0 (one virtualenv per mem0ai generation, run by
test_mem0_generations.py); these run in the project's own environment, with small
hand-written store and LLM classes of the shape mem0 uses.
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import MemoryTracer
from memtrace_otel.instrument.mem0 import Mem0Instrumentor, packed
from memtrace_otel.instrument.mem0.hooks import StoreHooks
from memtrace_otel.instrument.mem0.methods import result_items
from memtrace_otel.instrument.mem0.pipeline import parse_json_object, prompt_text
from memtrace_otel.instrument.mem0.scope import stored_variable
from memtrace_otel.instrument.mem0.v1 import llm_call_specs


class BaseStore:
    def insert(self, vectors: list[Any], payloads: list[dict[str, Any]] | None = None,
               ids: list[str] | None = None) -> str:
        self.payloads = payloads
        return "inserted"

    def get(self, vector_id: str) -> None:
        return None


class LocalStore(BaseStore):
    """Inherits ``insert`` and ``get`` (their hooks must be deleted again, not left behind)."""

    def search(self, query: str, vectors: list[float], limit: int = 5, filters: Any = None) -> list[Any]:
        return []


class Llm:
    def generate_response(self, messages: list[dict[str, str]], response_format: Any = None) -> str:
        return '{"facts": []}'


class FakeMemory:
    collection_name = "memories"

    def __init__(self) -> None:
        self.vector_store, self.llm = LocalStore(), Llm()


def test_hooks_restore_own_and_inherited_methods_exactly(tracer_provider: TracerProvider) -> None:
    own = {name: LocalStore.__dict__[name] for name in ("search",)}
    hooks = StoreHooks(MemoryTracer(tracer_provider), llm_call_specs())
    hooks.ensure(FakeMemory())
    assert {"insert", "get", "search"} <= set(LocalStore.__dict__)
    hooks.ensure(FakeMemory())  # once per class
    hooks.remove()
    assert "insert" not in LocalStore.__dict__ and "get" not in LocalStore.__dict__
    assert LocalStore.__dict__["search"] is own["search"]
    assert "generate_response" in Llm.__dict__ and Llm.generate_response.__name__ == "generate_response"
    assert not hasattr(Llm.__dict__["generate_response"], "__wrapped__")


def test_hooks_pass_through_outside_a_traced_call(tracer_provider: TracerProvider,
                                                  span_exporter: InMemorySpanExporter) -> None:
    hooks = StoreHooks(MemoryTracer(tracer_provider), llm_call_specs())
    memory = FakeMemory()
    hooks.ensure(memory)
    try:
        payloads = [{"data": "Lives in Lisbon"}]
        assert memory.vector_store.insert([[0.0]], payloads=payloads, ids=["r1"]) == "inserted"
        assert payloads == [{"data": "Lives in Lisbon"}]  # no lineage written: nothing traced it
        assert memory.llm.generate_response([{"role": "user", "content": "x"}]) == '{"facts": []}'
        assert span_exporter.get_finished_spans() == ()
    finally:
        hooks.remove()


@pytest.mark.parametrize("payload", [
    None, {}, {"memtrace_variable": 7}, {"memtrace_variable": "mem0:r1@-1"}, {"memtrace_variable": "mem0:r1"},
    {"memtrace_variable": "mem0:r1@2", "memtrace_traceparent": "garbage", "data": 3},
])
def test_malformed_lineage_in_a_payload_falls_back(payload: Any) -> None:
    found = stored_variable(None, "r1", payload)
    if isinstance(found, str):
        assert found == "mem0:r1"
    else:  # a well-formed id with a broken traceparent: the version, without a producer
        assert (found.id, found.producer, found.content) == ("mem0:r1@2", None, None)


def test_instrument_without_mem0_does_nothing(tracer_provider: TracerProvider) -> None:
    try:
        importlib.metadata.version("mem0ai")
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        pytest.skip("mem0ai is installed here: tests/mem0 covers it")
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)  # the dependency check declines, logged
    assert instrumentor.memory_tracer is None
    instrumentor.uninstrument()


class _Record:
    def __init__(self, record_id: Any, payload: Any) -> None:
        self.id, self.payload = record_id, payload


class _NoId:
    def __init__(self) -> None:
        self.payload = {"memtrace_variable": "mem0:x@1"}


class _NoPayload:
    id = "r9"


def test_packed_search_reads_each_record_as_one_by_one() -> None:
    """The packed ``add``'s search stage reads its records' lineage in one comprehension; a record of another
    shape (no id, no payload, a payload that is not a dict) reads as the one-by-one reading reads it."""
    traceparent = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    lineage = {"memtrace_variable": "mem0:r1@2", "memtrace_traceparent": traceparent}
    dicts = [_Record("r1", lineage), _Record(7, {"data": "x"})]  # mem0's: every payload a dict
    plain = [*dicts, _Record("r3", None), _Record("r4", "text")]
    odd = [*plain, _NoId(), _NoPayload()]
    for records in (dicts, plain, odd):
        assert packed._lineage(records) == [packed._captured(r)[:3] for r in records]
    assert packed._lineage(plain)[:2] == [("r1", "mem0:r1@2", traceparent), ("7", None, None)]
    assert packed._lineage(odd)[-2:] == [("None", "mem0:x@1", None), ("r9", None, None)]
    assert packed._lineage(()) == []
    assert packed._lineage(dicts) == [("r1", "mem0:r1@2", traceparent), ("7", None, None)]


class _Message(dict[str, Any]):
    """A prompt message that is a ``dict`` subclass (read one by one, as any ``Mapping``)."""


@pytest.mark.parametrize("messages", [
    [{"role": "system", "content": "You extract facts."}, {"role": "user", "content": "I live in Lisbon"}],
    [{"role": "user", "content": 3}, {"role": "user"}],
    [{"role": "user", "content": "one"}],
    [],
    [_Message(content="a"), {"content": "bc"}, "not a message"],
])
def test_packed_prompt_size_is_the_joined_prompts_length(messages: list[Any]) -> None:
    """The packed ``add`` records an LLM stage's prompt by the length of ``pipeline.prompt_text`` of its
    messages without joining them."""
    traceparent = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    # Content capture and upload off whatever the environment says (a test earlier in the run may set it).
    tracer = MemoryTracer(TracerProvider(), capture_content=False, upload_base_path="")
    add = packed.PackedAdd(object(), traceparent, tracer)
    assert add.plain
    assert packed._prompt(add, messages) == len(prompt_text(messages))


@pytest.mark.parametrize("response", [
    '{"facts": ["a"]}', ' {"facts": ["a"]} \n', '{"facts": ["a"]} and more }', '{"a": 1} {"b": 2}',
    '```json\n{"facts": ["a"]}\n```', '{not json}', '{"text": "tab\there"}', '[{"a": 1}]', "", "{",
])
def test_parse_json_object_whole_or_cut(response: str) -> None:
    """A response that is a JSON object whole is parsed as is; any other is cut from its first ``{`` to its
    last ``}``, as mem0 reads it: the same object either way."""
    text = response.strip()
    start, end = text.find("{"), text.rfind("}")
    try:
        expected = json.loads(text[start:end + 1], strict=False) if 0 <= start < end else {}
    except ValueError:
        expected = {}
    assert parse_json_object(response) == (expected if isinstance(expected, dict) else {})


def test_result_items_keeps_mappings_only() -> None:
    """mem0's result items: all plain dicts, or mixed, the non-mappings left out."""
    items = [{"id": "1", "event": "ADD"}, {"id": "2", "event": "NONE"}]
    assert result_items({"results": items}) == items
    assert result_items(items) == items
    assert result_items([*items, "x", _Message(id="3")]) == [*items, {"id": "3"}]
    assert result_items({"id": "1"}) == [{"id": "1"}]
    assert result_items(None) == []


def test_packed_search_with_content_reads_text_and_score() -> None:
    """With content capture the search stage keeps each record's text and score besides its lineage: a text
    that is not a string, or a score that is not a number, reads as ``None``."""
    lineage = {"memtrace_variable": "mem0:r1@2", "data": "Alice moved to Paris"}
    scored = _Record("r1", lineage)
    scored.score = 0.75  # type: ignore[attr-defined]
    odd = _Record("r2", {"data": 3})
    odd.score = "0.3"  # type: ignore[attr-defined]
    assert packed._captured(scored) == ("r1", "mem0:r1@2", None, "Alice moved to Paris", 0.75)
    assert packed._captured(odd) == ("r2", None, None, None, None)
    assert packed._captured(_NoPayload()) == ("r9", None, None, None, None)
