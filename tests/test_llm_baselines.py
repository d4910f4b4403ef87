"""``llm-all-at-once`` and ``flat-log`` through the real openai client against the scripted server."""

from __future__ import annotations

from typing import Any

import pytest
from test_llm_graphs import (
    DATED_MESSAGE,
    GOLD,
    PREDICTION,
    QUESTION,
    deletion_loss,
    first_case,
    many_questions,
    op_named,
    traced_graph,
)

from memtrace_otel.attribution import Engine, ErrorType, FailureCase, create_engine
from memtrace_otel.attribution.llm_baselines import parse_error_type
from memtrace_otel.attribution.render import OperationIndex
from memtrace_otel.graph.query import failed_evaluations
from memtrace_otel.llm_client import MalformedOutput

from openai_server import OraclePolicy, Reply, ScriptedOpenAIServer

ENGINES = ["llm-all-at-once", "flat-log"]


def engine_for(name: str, server: ScriptedOpenAIServer, **options: Any) -> Engine:
    options.setdefault("retry_delay", 0)
    options.setdefault("timeout", 10)
    return create_engine(name, base_url=server.base_url, **options)


def prompt_of(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"])


@pytest.mark.parametrize("name", ENGINES)
def test_prompt_carries_the_case_and_the_operations(name: str) -> None:
    G = traced_graph(deletion_loss)
    forget = OperationIndex(G).alias(op_named(G, "forget"))
    verdict = {"operation": forget, "error_type": "DeletionError", "explanation": "deleted the date",
               "confidence": 0.7}
    with ScriptedOpenAIServer([Reply.text(f"```json\n{Reply.json(verdict).content}\n```",
                                          usage=(500, 40))]) as server:
        result = engine_for(name, server).attribute(G, first_case(G))
        request = server.requests[0]
    prompt = prompt_of(request)
    for expected in (QUESTION, GOLD, PREDICTION, forget, "Caroline adopted Max in May 2023",
                     DATED_MESSAGE, "DeletionError", '"operation"'):
        assert expected in prompt
    assert ("mem:1@1" in prompt) is (name == "llm-all-at-once")  # only the compacted trace has edges
    assert request["response_format"] == {"type": "json_object"} and "tools" not in request
    assert result.failure_reason is None and result.engine == name
    assert result.operation_name == "forget" and result.error_type is ErrorType.DELETION
    assert result.explanation == "deleted the date" and result.confidence == 0.7
    assert (result.input_tokens, result.output_tokens) == (500, 40)
    assert result.evidence_path[:2] == ["msg:D1:1@1", op_named(G, "extract")]


@pytest.mark.parametrize("name", ENGINES)
def test_malformed_then_good_is_retried_and_both_are_charged(name: str) -> None:
    G = traced_graph(deletion_loss)
    good = {"operation": "op0", "error_type": "extraction", "explanation": "x"}
    script = [Reply.text("{broken", usage=(100, 5)), Reply.json(good, usage=(130, 6))]
    with ScriptedOpenAIServer(script) as server:
        result = engine_for(name, server).attribute(G, first_case(G))
        retry = server.requests[1]["messages"]
    assert result.failure_reason is None and result.error_type is ErrorType.EXTRACTION
    assert result.tokens == 241
    assert retry[-2]["content"] == "{broken" and "no JSON object" in retry[-1]["content"]


@pytest.mark.parametrize("bad, reason", [
    (Reply.json({"operation": "op42", "error_type": "UpdateError"}), "unknown operation id 'op42'"),
    (Reply.json({"operation": "op0", "error_type": "Cosmic"}), "unknown error type 'Cosmic'"),
    (Reply.refuse("not allowed"), "the model refused: not allowed"),
    (Reply.text('{"operation": "op0", error_type: }'), "bad JSON"),
])
def test_repeated_malformed_output_fails_the_case(bad: Reply, reason: str) -> None:
    G = traced_graph(deletion_loss)
    with ScriptedOpenAIServer([bad] * 3) as server:
        result = engine_for("llm-all-at-once", server, attempts=3).attribute(G, first_case(G))
        assert len(server.requests) == 3
    assert result.operation is None
    assert (result.failure_reason or "").startswith(f"malformed model output after 3 attempts: {reason}")


def test_evaluation_operations_cannot_be_blamed() -> None:
    G = traced_graph(deletion_loss)
    judge = OperationIndex(G).alias(op_named(G, "judge q1"))
    blame_judge = Reply.json({"operation": judge, "error_type": "ResponseError"})
    with ScriptedOpenAIServer([blame_judge] * 3) as server:
        result = engine_for("flat-log", server).attribute(G, first_case(G))
    assert result.failure_reason is not None and "unknown operation id" in result.failure_reason


def test_a_prompt_too_big_for_the_budget_is_not_sent() -> None:
    G = traced_graph(deletion_loss)
    with ScriptedOpenAIServer([]) as server:
        result = engine_for("llm-all-at-once", server, token_budget=300).attribute(G, first_case(G))
        assert server.requests == []
    assert result.failure_reason == "token budget exhausted" and result.tokens == 0


def test_the_trace_shrinks_to_fit_the_budget() -> None:
    G = traced_graph(many_questions)
    case = first_case(G)
    with ScriptedOpenAIServer([Reply.json({"operation": "op0", "error_type": "ExtractionError"})]) as server:
        roomy = engine_for("flat-log", server, token_budget=50_000).attribute(G, case)
        big = len(prompt_of(server.requests[0]))
    with ScriptedOpenAIServer([Reply.json({"operation": "op0", "error_type": "ExtractionError"})]) as server:
        tight = engine_for("flat-log", server, token_budget=1030).attribute(G, case)
        small = len(prompt_of(server.requests[0]))
    assert roomy.failure_reason is None and tight.failure_reason is None
    assert small < big and tight.tokens <= 1030


def test_timeout_and_batch_going_on() -> None:
    G = traced_graph(many_questions)
    cases = [FailureCase.from_graph(G, e) for e in failed_evaluations(G)]
    oracle = OraclePolicy({c.question: ("op0", "ExtractionError") for c in cases})

    def script(body: dict[str, Any]) -> Reply:
        if "Where did Melanie" in prompt_of(body):
            return Reply.text("late", delay=30)
        return oracle(body)

    with ScriptedOpenAIServer(script) as server:
        engine = engine_for("llm-all-at-once", server, timeout=0.2, attempts=2)
        results = [engine.attribute(G, case) for case in cases]
    assert [r.failure_reason for r in results] == [None, "timeout after 0.2s (2 attempts)", None]
    assert results[0].error_type is ErrorType.EXTRACTION and results[2].operation is not None


@pytest.mark.parametrize("text, expected", [
    ("RetrievalError", ErrorType.RETRIEVAL), ("update error", ErrorType.UPDATE),
    ("DELETION", ErrorType.DELETION), ("response_error", ErrorType.RESPONSE),
])
def test_parse_error_type(text: str, expected: ErrorType) -> None:
    assert parse_error_type(text) is expected


@pytest.mark.parametrize("text", [None, 3, "", "Errors"])
def test_parse_error_type_rejects(text: object) -> None:
    with pytest.raises(MalformedOutput):
        parse_error_type(text)
