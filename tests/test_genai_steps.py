"""Model calls inside memory operations: nesting, graph steps, content capture, attribution.

Real parts only: the real ``openai`` client, the real ``opentelemetry-instrumentation-openai-v2``
instrumentor and SDK pipeline (InMemorySpanExporter), and the local OpenAI-compatible server
(tests/openai_server.py) standing in for the model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator

import networkx as nx
import openai
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.attribution.base import Attribution, Engine, FailureCase, create_engine
from memtrace_otel.cli import common, main
from memtrace_otel.config import ENV_CAPTURE_CONTENT
from memtrace_otel.exporters.otlp_json_file import OTLPJsonLinesSpanExporter
from memtrace_otel.graph import build_graph
from memtrace_otel.graph.genai_steps import is_step, step_variables, steps_of
from memtrace_otel.graph.query import failed_evaluations, producer_of
from memtrace_otel.semconv import ErrorType, GenAI
from memtrace_otel.spans.model import SpanRecord, record_from_readable

from openai_server import Reply, ScriptedOpenAIServer

instrumentation = pytest.importorskip("opentelemetry.instrumentation.openai_v2")

MESSAGE = "[8 May 2023] Caroline: I went to the LGBTQ support group on 7 May 2023. It was powerful."
SECRET = "LGBTQ support group"


Pipeline = tuple[TracerProvider, InMemorySpanExporter]


@pytest.fixture
def instrumented(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], Pipeline]]:
    """``instrumented(capture)``: a provider with the openai-v2 instrumentor on it.

    The instrumentor decides content capture when it is instrumented, from the GenAI
    environment variable, as the application's would.
    """
    made: list[tuple[object, TracerProvider]] = []

    def make(capture: bool) -> Pipeline:
        if capture:
            monkeypatch.setenv(ENV_CAPTURE_CONTENT, "span_only")
        else:
            monkeypatch.delenv(ENV_CAPTURE_CONTENT, raising=False)
        exporter, provider = InMemorySpanExporter(), TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrumentor = instrumentation.OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        made.append((instrumentor, provider))
        return provider, exporter

    yield make
    for instrumentor, provider in made:
        instrumentor.uninstrument()  # type: ignore[attr-defined]
        provider.shutdown()


def _records(exporter: InMemorySpanExporter) -> list[SpanRecord]:
    # Reversed: children end first anyway; the graph must not depend on the order spans arrive in.
    return [record_from_readable(span) for span in reversed(exporter.get_finished_spans())]


def _by_scope(exporter: InMemorySpanExporter, scope: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == scope]


def _extract(tracer: MemoryTracer, client: openai.OpenAI, prompt_of=lambda text: f"Extract facts:\n{text}"):
    """One extraction: read a message, embed it, ask the model, write the parsed facts as units."""
    with tracer.operation("mem0.extract", Category.EXTRACTION) as op:
        message = op.read("msg:D1:3", content=MESSAGE, kind=VariableKind.MESSAGE)
        client.embeddings.create(model="embedder", input=MESSAGE)
        reply = client.chat.completions.create(model="m", messages=[
            {"role": "system", "content": "You extract facts."},
            {"role": "user", "content": prompt_of(MESSAGE)}])
        facts = json.loads(reply.choices[0].message.content or "{}").get("facts", [])
        units = [op.write(f"mem:{i}", fact, kind=VariableKind.MEMORY_UNIT) for i, fact in enumerate(facts)]
    return op, message, units


# -- nesting ------------------------------------------------------------------------------------

def test_sync_calls_are_children_of_the_memory_operation(instrumented) -> None:
    provider, exporter = instrumented(False)
    with ScriptedOpenAIServer([Reply.json({"facts": ["x"]})]) as server:
        op, _, _ = _extract(MemoryTracer(provider), openai.OpenAI(base_url=server.base_url, api_key="k"))
    parent = op.span.get_span_context()
    calls = [s for s in exporter.get_finished_spans() if GenAI.OPERATION_NAME in (s.attributes or {})]
    assert sorted(s.attributes[GenAI.OPERATION_NAME] for s in calls) == ["chat", "embeddings"]
    for span in calls:
        assert span.parent is not None and span.parent.span_id == parent.span_id
        assert span.context.trace_id == parent.trace_id


def test_async_calls_are_children_of_the_memory_operation(instrumented) -> None:
    provider, exporter = instrumented(False)
    tracer = MemoryTracer(provider)

    async def extract(client: openai.AsyncOpenAI, name: str, started: asyncio.Event,
                      other: asyncio.Event) -> tuple[str, int]:
        async with tracer.operation(f"extract {name}", Category.EXTRACTION) as op:
            started.set()
            await other.wait()  # both operations are open at once, in two tasks
            await client.embeddings.create(model=f"m-{name}", input=name)
            await client.chat.completions.create(model=f"m-{name}",
                                                 messages=[{"role": "user", "content": name}])
            return f"m-{name}", op.span.get_span_context().span_id

    async def run(base_url: str) -> dict[str, int]:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="k")
        a, b = asyncio.Event(), asyncio.Event()
        return dict(await asyncio.gather(extract(client, "a", a, b), extract(client, "b", b, a)))

    with ScriptedOpenAIServer([Reply.text("a"), Reply.text("b")]) as server:
        parents = asyncio.run(run(server.base_url))
    calls = [s for s in exporter.get_finished_spans() if GenAI.OPERATION_NAME in (s.attributes or {})]
    assert len(calls) == 4
    for span in calls:
        assert span.parent is not None
        assert span.parent.span_id == parents[span.attributes[GenAI.REQUEST_MODEL]]


# -- graph shape --------------------------------------------------------------------------------

def test_graph_has_prompt_response_facts_steps(instrumented) -> None:
    provider, exporter = instrumented(True)
    reply = {"facts": ["Caroline went to the LGBTQ support group on 7 May 2023"]}
    with ScriptedOpenAIServer([Reply.json(reply)]) as server:
        op, _, units = _extract(MemoryTracer(provider), openai.OpenAI(base_url=server.base_url, api_key="k"))
    G = build_graph(_records(exporter))
    assert G.graph["problems"] == []
    parent = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
    embed, chat = steps_of(G, parent)
    assert [G.nodes[s]["gen_ai_operation"] for s in (embed, chat)] == ["embeddings", "chat"]
    for index, step in enumerate((embed, chat)):
        data = G.nodes[step]
        assert is_step(G, step) and data["parent_operation"] == parent and data["step_index"] == index
        assert data["category"] == Category.LLM_CALL and data["order"] > G.nodes[parent]["order"]
    prompt, response = step_variables(G, chat)
    assert SECRET in G.nodes[prompt]["content"] and G.nodes[prompt]["kind"] == VariableKind.PROMPT
    assert json.loads(G.nodes[response]["content"]) == reply
    assert G.nodes[chat]["input_tokens"] > 0 and G.nodes[chat]["model"] == "m"
    # prompt -> raw response -> parsed facts; the operation still writes the facts
    assert nx.has_path(G, prompt, units[0].id) and nx.has_path(G, parent, chat)
    assert [G.edges[response, u.id]["role"] for u in units] == ["derived"]
    assert producer_of(G, units[0].id) == parent
    assert [v for v in G.successors(step_variables(G, embed)[1])] == []  # vectors are not facts


def test_with_capture_off_no_content_leaves_the_process_but_steps_exist(instrumented) -> None:
    provider, exporter = instrumented(False)
    with ScriptedOpenAIServer([Reply.json({"facts": [f"Caroline went to the {SECRET}"]})]) as server:
        op, _, _ = _extract(MemoryTracer(provider), openai.OpenAI(base_url=server.base_url, api_key="k"))
    exported = json.dumps([[dict(s.attributes or {}), [(e.name, dict(e.attributes or {})) for e in s.events]]
                           for s in exporter.get_finished_spans()])
    assert SECRET not in exported and GenAI.INPUT_MESSAGES not in exported
    G = build_graph(_records(exporter))
    parent = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
    steps = steps_of(G, parent)
    assert len(steps) == 2
    for step in steps:
        assert not G.nodes[step]["content_captured"] and G.nodes[step]["input_tokens"] > 0
        for variable in step_variables(G, step):
            assert G.nodes[variable]["content"] is None and G.nodes[variable]["size"] == 0


# -- malformed input ----------------------------------------------------------------------------

def _call_span(**attributes: object) -> list[SpanRecord]:
    op = SpanRecord("a" * 32, "b" * 16, "extract", start_time_unix_nano=1, source="f.jsonl:1",
                    attributes={"memtrace.operation.category": "extraction", "memtrace.outputs": ["fact@1"]})
    middle = SpanRecord("a" * 32, "d" * 16, "http", parent_span_id="b" * 16, start_time_unix_nano=2)
    call = SpanRecord("a" * 32, "c" * 16, "chat m", parent_span_id="d" * 16, start_time_unix_nano=3,
                      source="f.jsonl:2", attributes={"gen_ai.operation.name": "chat", **attributes})
    return [call, middle, op]  # the call first: order of arrival does not matter


GOOD = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hello"}]}])


@pytest.mark.parametrize(("key", "value", "says"), [
    (GenAI.INPUT_MESSAGES, 7, "is an int, not a JSON string"),
    (GenAI.INPUT_MESSAGES, "[{not json", "is not valid JSON"),
    (GenAI.OUTPUT_MESSAGES, '{"role": "assistant"}', "is a JSON dict, not a list"),
    (GenAI.INPUT_MESSAGES, json.dumps([1, {"role": "user", "parts": [{"type": "text", "content": "hello"}]}]),
     "has 1 of 2 element(s) that are not messages"),
    (GenAI.USAGE_INPUT_TOKENS, "12", "not a finite number"),
    (GenAI.REQUEST_MODEL, ["m"], "not a string"),
])
def test_a_malformed_genai_value_is_one_problem_and_the_rest_is_kept(key, value, says) -> None:
    G = build_graph(_call_span(**{key: value, GenAI.OUTPUT_MESSAGES: GOOD} if key != GenAI.OUTPUT_MESSAGES
                               else {key: value}))
    (problem,) = G.graph["problems"]
    assert problem.where == "f.jsonl:2" and f"span {'c' * 16}: {key} " in problem.message
    assert says in problem.message
    (step,) = steps_of(G, f"op:{'a' * 32}:{'b' * 16}")
    prompt, response = step_variables(G, step)
    if key == GenAI.INPUT_MESSAGES and "2 element" in says:
        assert G.nodes[prompt]["content"] == "user: hello"
    assert G.edges[response, "fact@1"]["role"] == "derived"


def test_older_event_forms_are_read() -> None:
    from memtrace_otel.spans.model import SpanEvent

    spans = _call_span()
    spans[0].events = [
        SpanEvent("gen_ai.content.prompt", 3,
                  {"gen_ai.prompt": json.dumps([{"role": "user", "content": "hi"}])}),
        SpanEvent("gen_ai.content.completion", 4, {"gen_ai.completion": json.dumps(
            [{"index": 0, "message": {"role": "assistant", "content": "facts: none"}}])}),
    ]
    G = build_graph(spans)
    prompt, response = step_variables(G, f"op:{'a' * 32}:{'c' * 16}")
    assert (G.nodes[prompt]["content"], G.nodes[response]["content"]) == ("user: hi", "facts: none")


_KEYS = st.sampled_from(["role", "parts", "type", "content", "message", "x"])
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
                     max_leaves=12)
_VALUES = st.one_of(_JSON.map(json.dumps), st.text(max_size=30), st.integers(), st.lists(st.text(max_size=3)))


@settings(max_examples=150, deadline=None)
@given(value=_VALUES)
def test_fuzzed_messages_never_raise_and_give_at_most_one_problem_per_key(value) -> None:
    G = build_graph(_call_span(**{GenAI.INPUT_MESSAGES: value, GenAI.OUTPUT_MESSAGES: value}))
    assert len(G.graph["problems"]) <= 2
    assert len(steps_of(G, f"op:{'a' * 32}:{'b' * 16}")) == 1


# -- attribution --------------------------------------------------------------------------------

def _failing_question(tracer: MemoryTracer, units: list) -> None:
    with tracer.operation("search", Category.RETRIEVAL) as op:
        for unit in units:
            op.read(unit)
        context = op.write("context:q1", "\n".join(u.content for u in units), kind=VariableKind.CONTEXT)
    with tracer.operation("generate", Category.GENERATION) as op:
        op.read(context)
        answer = op.write("answer:q1", "I don't know", kind=VariableKind.ANSWER)
    with tracer.operation("judge", Category.EVALUATION) as op:
        op.read(answer)
        op.record_evaluation(False, question="When did Caroline go to the LGBTQ support group?",
                             prediction="I don't know", gold="7 May 2023", evidence=["D1:3"], answer=answer)


@pytest.mark.parametrize(("prompt_of", "why"), [
    (lambda text: f"Extract only hobbies, never dates:\n{text}",
     "its prompt held the information and its response"),
    (lambda text: f"Extract facts:\n{text[:30]}", "no prompt held the information"),
], ids=["bad-instructions", "truncated-message"])
def test_an_extraction_fault_from_a_bad_prompt_points_at_the_step(instrumented, monkeypatch, tmp_path,
                                                                   prompt_of, why) -> None:
    provider, exporter = instrumented(True)
    tracer = MemoryTracer(provider)
    with ScriptedOpenAIServer([Reply.json({"facts": ["Caroline likes support groups"]})]) as server:
        op, _, units = _extract(tracer, openai.OpenAI(base_url=server.base_url, api_key="k"), prompt_of)
        assert ("7 May 2023" in server.requests[0]["messages"][1]["content"]) == why.startswith("its prompt")
    _failing_question(tracer, units)
    G = build_graph(_records(exporter))
    (evaluation,) = failed_evaluations(G)
    verdict = create_engine("lineage").attribute(G, FailureCase.from_graph(G, evaluation))
    chat = next(s for s in steps_of(G, verdict.operation or "") if G.nodes[s]["gen_ai_operation"] == "chat")
    assert verdict.error_type is ErrorType.EXTRACTION and verdict.span_id == f"{op.span_context.span_id:016x}"
    assert verdict.step == chat and verdict.step_span_id == G.nodes[chat]["span_id"]
    assert why in verdict.explanation
    # the CLI shows it, and --json carries it
    path = tmp_path / "spans.jsonl"
    file_exporter = OTLPJsonLinesSpanExporter(str(path))
    file_exporter.export(exporter.get_finished_spans())
    file_exporter.shutdown()
    result = CliRunner().invoke(main, ["analyze", "--json", str(path)])
    (row,) = json.loads(result.stdout)["failures"]
    assert (row["step"], row["step_span_id"]) == (chat, verdict.step_span_id)
    monkeypatch.setattr(common.stdout, "_width", 400)
    table = CliRunner().invoke(main, ["analyze", str(path)]).stdout
    assert f"step {verdict.step_name} (span {verdict.step_span_id})" in table


class _BlamesTheStep(Engine):
    """An engine that blames a model call itself: the verdict moves to the call's operation."""

    name = "blames-step"

    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        step = next(n for n in G if G.nodes[n].get("parent_operation"))
        result.blame(G, step)


def test_a_verdict_on_a_step_moves_to_its_operation_and_keeps_the_step() -> None:
    spans = _call_span(**{GenAI.INPUT_MESSAGES: GOOD})
    G = build_graph(spans)
    verdict = _BlamesTheStep().attribute(G, FailureCase(evaluation="op:none"))
    assert verdict.operation == f"op:{'a' * 32}:{'b' * 16}" and verdict.error_type is ErrorType.EXTRACTION
    assert verdict.step == f"op:{'a' * 32}:{'c' * 16}" and verdict.step_span_id == "c" * 16
